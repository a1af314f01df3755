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
use bale_pack::{RemoteOutput as RemoteOut, is_remote};

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
    let remote = if is_remote(&args.output) {
        Some(remote_index_output(&args, &shards, &storage, &cancel)?)
    } else {
        None
    };
    let output = remote
        .as_ref()
        .map_or_else(|| args.output.clone(), |r| r.0.dir().to_path_buf());
    let opts = IndexOptions {
        shards,
        output: output.clone(),
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
        force: args.force && remote.is_none(),
        allow_duplicate_keys: args.allow_duplicate_keys,
        jobs: args.jobs.unwrap_or(0),
    };
    let quiet = args.out.quiet || args.out.json;
    let bar = Bar(progress::bar(0, "shards", quiet));
    let result = bale_pack::index(&opts, &bar, &cancel);
    bar.0.finish_and_clear();
    let mut summary = match (result, remote) {
        (Ok(s), None) => s,
        (Ok(mut s), Some((r, prefix))) => {
            let url = r.url().to_owned();
            // The manifest names the tars relative to the prefix, as a
            // dataset in object storage names its objects.
            let path = output.join(bale_format::MANIFEST_NAME);
            let bytes = std::fs::read(&path)?;
            let mut m = bale_format::Manifest::from_slice(&bytes, &path)?;
            for e in &mut m.shards {
                if let Some(rel) = e.file.strip_prefix(&prefix) {
                    e.file = rel.to_owned();
                }
            }
            std::fs::write(&path, m.to_bytes())?;
            if let Err(u) = r.finish() {
                anyhow::bail!("{}", u.output.undo().after(u.error));
            }
            s.output = url;
            s
        }
        (Err(e), Some((r, _))) => {
            anyhow::bail!("{}", r.undo().after(e));
        }
        (Err(e), None) => return Err(with_hint(e)),
    };
    if summary.output.is_empty() {
        summary.output = args.output.display().to_string();
    }
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

/// For `-o URL`: every tar must be an object under that prefix (the manifest
/// names them relative to it); the prefix is taken for the `.idx` objects
/// and `bale.json`, which are all that may be replaced there. Returns the
/// output and the prefix with its trailing `/`.
fn remote_index_output(
    args: &IndexArgs,
    shards: &[std::path::PathBuf],
    storage: &bale_storage::StorageOptions,
    cancel: &Arc<AtomicBool>,
) -> anyhow::Result<(RemoteOut, String)> {
    anyhow::ensure!(
        args.wids_json.is_none() && args.dali_index.is_none() && !args.absolute,
        "--wids-json, --dali-index and --absolute write local paths; index into a local directory for them"
    );
    let out = args
        .output
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("{}: not a UTF-8 URL", bale_format::shown(&args.output)))?;
    let prefix = format!("{}/", out.trim_end_matches('/'));
    let mut names = Vec::new();
    for t in shards {
        let t = t.to_string_lossy();
        let rel = t.strip_prefix(&prefix).filter(|r| !r.is_empty());
        let Some(rel) = rel else {
            anyhow::bail!(
                "{t}: bale index -o {out} indexes tars under that prefix (the manifest names its shards relative to it); \
                 index tars elsewhere into a local directory"
            );
        };
        let base = rel.rsplit('/').next().unwrap_or(rel);
        names.push(bale_format::index_file_name(base));
    }
    names.push(bale_format::MANIFEST_NAME.to_owned());
    let r = RemoteOut::open(
        &args.output,
        storage,
        args.force,
        cancel.clone(),
        Some(&names),
        shards
            .iter()
            .map(|t| t.to_string_lossy().into_owned())
            .collect(),
    )?;
    Ok((r, prefix))
}
