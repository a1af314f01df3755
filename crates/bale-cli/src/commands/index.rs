//! `bale index`: expands the shard patterns, runs [`bale_pack::index`] with
//! a progress bar and Ctrl-C handling, and prints the notes and summary.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bale_format::scan::SplitPolicy;
use bale_pack::{
    Destination, IndexOptions, IndexProgress, IndexSummary, expand_patterns, is_remote,
};
use indicatif::ProgressBar;

use crate::args::index::IndexArgs;
use crate::commands::pack::install_ctrlc;
use crate::progress;

struct Bar(ProgressBar);

impl IndexProgress for Bar {
    fn start(&self, shards: u64) {
        self.0.set_length(shards);
    }
    fn shard_indexed(&self) {
        self.0.inc(1);
    }
}

/// Runs `bale index`.
pub fn run(args: IndexArgs) -> anyhow::Result<ExitCode> {
    super::notices(args.out.quiet);
    // Tars at URLs are read through the storage layer (headers by ranged GETs).
    let storage = args.storage.options()?;
    super::export_index::precheck(args.dali_index.as_deref(), &args.output)?;
    let shards = expand_patterns(&args.shards)?;
    let cancel = Arc::new(AtomicBool::new(false));
    install_ctrlc(&cancel);
    anyhow::ensure!(
        !is_remote(&args.output)
            || (args.wids_json.is_none() && args.dali_index.is_none() && !args.absolute),
        "--wids-json, --dali-index and --absolute write local paths; index into a local directory for them"
    );
    let dest = Destination::open_index(&shards, &args.output, args.force, &cancel, &|| {
        Ok(storage.clone())
    })
    .and_then(|d| d.keeping(args.append))?;
    let opts = IndexOptions {
        shards,
        output: dest.dir().to_path_buf(),
        absolute: args.absolute,
        checksum: args.checksum,
        wids_json: args.wids_json.clone(),
        split: if args.rename_split {
            SplitPolicy::Rename
        } else if args.allow_split {
            SplitPolicy::Regroup
        } else {
            SplitPolicy::Refuse
        },
        force: dest.engine_force(),
        allow_duplicate_keys: args.allow_duplicate_keys,
        append: args.append,
        jobs: args.jobs.unwrap_or(0),
    };
    let quiet = args.out.quiet || args.out.json;
    let bar = Bar(progress::bar(0, "shards", quiet));
    let result = bale_pack::index(&opts, &bar, &cancel);
    bar.0.finish_and_clear();
    // A Ctrl-C is this command's error: it says what the run left.
    let summary = dest.finish(result)?;
    super::export_index::after_write(
        args.dali_index.as_deref(),
        &args.output,
        args.force,
        &args.out,
    )?;
    let mut stdout = std::io::stdout().lock();
    if args.out.json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&summary)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.out.quiet {
        return Ok(ExitCode::SUCCESS);
    }
    let mut err = std::io::stderr().lock();
    for note in notes(&summary, args.wids_json.is_some()) {
        writeln!(err, "{note}")?;
    }
    let rate = summary.bytes as f64 / summary.seconds.max(1e-9);
    writeln!(
        stdout,
        "indexed {} into {}: {}, {}, {} of tars in {:.2} s ({}/s, {})",
        crate::units::count(summary.shards.len(), "shard"),
        summary.output,
        crate::units::count(summary.samples, "sample"),
        crate::units::count(summary.members, "member"),
        crate::units::size(summary.bytes),
        summary.seconds,
        crate::units::size(rate as u64),
        if args.checksum {
            "every byte read and checksummed"
        } else {
            "headers only"
        },
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The notes printed on stderr after a successful run.
fn notes(s: &IndexSummary, wids: bool) -> Vec<String> {
    let mut out = Vec::new();
    let sum = |f: fn(&bale_pack::IndexedShard) -> u64| s.shards.iter().map(f).sum::<u64>();
    let (dirs, noext, dots) = (
        sum(|x| x.skipped_not_files),
        sum(|x| x.skipped_no_extension),
        sum(|x| x.stripped_dot_slash),
    );
    if dirs + noext > 0 {
        out.push(format!(
            "note: skipped {} and {} without an extension (they belong to no sample, as in \
             WebDataset)",
            crate::units::count_irregular(
                dirs,
                "directory, link or other non-file entry",
                "directories, links and other non-file entries"
            ),
            crate::units::count(noext, "file"),
        ));
    }
    if dots > 0 {
        out.push(format!(
            "note: removed a leading \"./\" from {} (the keys are the names without it)",
            crate::units::count(dots, "member name"),
        ));
    }
    for e in &s.shards {
        if let Some((tar_key, offset, key)) = &e.first_renamed {
            out.push(format!(
                "note: {}: {} renamed because their key reappeared after other samples (first: {:?} at \
                 offset {} is now {:?})",
                e.file,
                crate::units::count(e.renamed, "sample"),
                tar_key,
                offset,
                key
            ));
        }
        if let Some((key, offset, first)) = &e.first_regrouped {
            out.push(format!(
                "note: {}: {} of keys regrouped into their first run's sample (first: {:?} at offset {} \
                 joined to offset {}); its index is scattered (layout 1.1), so every sample of this shard is read \
                 member by member",
                e.file,
                crate::units::count(e.regrouped, "later run"),
                key,
                offset,
                first
            ));
        }
        if wids && e.long_names > 0 {
            out.push(format!(
                "warning: {}: {} not fit the 100-byte tar name field; wids reads only that \
                 field and will misread them (bale reads them correctly)",
                e.file,
                crate::units::count_irregular(e.long_names, "member name does", "member names do")
            ));
        }
    }
    if !s.checksums {
        out.push(
            "note: no checksums were recorded (headers only); `bale verify` checks structure but not member \
             bytes; index with --checksum to record them"
                .into(),
        );
    }
    out
}
