//! `bale index`: expands the shard patterns, runs [`bale_pack::index`] with
//! a progress bar and Ctrl-C handling, and prints the notes and summary.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bale_format::FormatError;
use bale_format::scan::SplitPolicy;
use bale_pack::{IndexOptions, IndexProgress, IndexSummary, PackError, expand_patterns};
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
    // Tars at URLs are read through the storage layer (headers by ranged GETs).
    args.storage.options()?;
    anyhow::ensure!(
        !bale_storage::is_url(&args.output),
        "{}: bale index writes its output to a local directory; write it there (-o DIR) and upload the .idx files and bale.json (bale.json last)",
        args.output.display()
    );
    super::export_index::precheck(args.dali_index.as_deref(), &args.output)?;
    let shards = expand_patterns(&args.shards)?;
    let opts = IndexOptions {
        shards,
        output: args.output.clone(),
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
        force: args.force,
        jobs: args.jobs.unwrap_or(0),
    };
    let quiet = args.out.quiet || args.out.json;
    let bar = Bar(progress::bar(0, "shards", quiet));
    let cancel = Arc::new(AtomicBool::new(false));
    install_ctrlc(&cancel);
    let result = bale_pack::index(&opts, &bar, &cancel);
    bar.0.finish_and_clear();
    let summary = match result {
        Ok(s) => s,
        Err(e) => return Err(with_hint(e)),
    };
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
        "indexed {} shards into {}: {} samples, {} members, {} of tars in {:.2} s ({}/s, {})",
        summary.shards.len(),
        summary.output,
        summary.samples,
        summary.members,
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

/// The error, with a `hint:` line where there is an obvious way out, and
/// what was left behind.
fn with_hint(e: PackError) -> anyhow::Error {
    let hint = match &e {
        PackError::Format(FormatError::SplitSample { .. }) => {
            "\nhint: --allow-split regroups the key's members into one sample (plain tars; that shard's index \
             is then read member by member), --rename-split indexes each later run as a sample of its own (KEY~2, ...)"
        }
        _ => "",
    };
    anyhow::anyhow!("{e}{hint}\nno manifest was written, and nothing this run wrote is left")
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
            "note: skipped {dirs} directories, links and other non-file entries and {noext} files without an \
             extension (they belong to no sample, as in WebDataset)"
        ));
    }
    if dots > 0 {
        out.push(format!(
            "note: removed a leading \"./\" from {dots} member names (the keys are the names without it)"
        ));
    }
    for e in &s.shards {
        if let Some((tar_key, offset, key)) = &e.first_renamed {
            out.push(format!(
                "note: {}: {} samples renamed because their key reappeared after other samples (first: {:?} at \
                 offset {} is now {:?})",
                e.file, e.renamed, tar_key, offset, key
            ));
        }
        if let Some((key, offset, first)) = &e.first_regrouped {
            out.push(format!(
                "note: {}: {} later runs of keys regrouped into their first run's sample (first: {:?} at offset {} \
                 joined to offset {}); its index is scattered (layout 1.1), so every sample of this shard is read \
                 member by member",
                e.file, e.regrouped, key, offset, first
            ));
        }
        if wids && e.long_names > 0 {
            out.push(format!(
                "warning: {}: {} member names do not fit the 100-byte tar name field; wids reads only that \
                 field and will misread them (bale reads them correctly)",
                e.file, e.long_names
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
