//! `bale convert`: a dataset to another form (tar, tar.zst, h5, dir).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::anyhow;
use bale_pack::{ConvertFormat, ConvertOptions, ConvertProgress, PackError, convert};
use indicatif::ProgressBar;

use crate::args::convert::{ConvertArgs, ConvertFormatArg};
use crate::commands::pack::{EXIT_INTERRUPTED, install_ctrlc};
use crate::commands::pack::{is_cancel, open_remote};
use crate::progress;
use bale_pack::is_remote;

/// A byte bar over the member bytes to copy.
struct Bar {
    quiet: bool,
    bar: std::sync::OnceLock<ProgressBar>,
}

impl ConvertProgress for Bar {
    fn start(&self, _samples: u64, bytes: u64) {
        let _ = self.bar.set(progress::byte_bar(bytes, self.quiet));
    }
    fn sample_written(&self, samples: u64, bytes: u64) {
        if let Some(b) = self.bar.get() {
            b.set_position(bytes);
            if samples.is_multiple_of(256) {
                b.set_message(format!("{samples} samples"));
            }
        }
    }
}

/// Runs `bale convert`.
pub fn run(args: ConvertArgs) -> anyhow::Result<ExitCode> {
    super::notices(args.out.quiet);
    let format = match args.format {
        ConvertFormatArg::Tar => ConvertFormat::Tar,
        ConvertFormatArg::TarZst => {
            if !(1..=22).contains(&args.level) {
                anyhow::bail!("--level {}: expected 1-22", args.level);
            }
            ConvertFormat::TarZst(args.level)
        }
        ConvertFormatArg::H5 => ConvertFormat::H5,
        ConvertFormatArg::Dir => ConvertFormat::Dir,
    };
    let cancel = Arc::new(AtomicBool::new(false));
    install_ctrlc(&cancel);
    anyhow::ensure!(
        !matches!(format, ConvertFormat::Dir) || !is_remote(&args.output),
        "--format dir writes a tree of loose files; bale writes datasets (tar or .h5 shards) to object storage"
    );
    anyhow::ensure!(
        !is_remote(&args.source),
        "{}: bale convert reads a local dataset; copy it here first (`bale stage {} --to DIR`), then convert DIR",
        bale_format::shown(&args.source),
        bale_format::shown(&args.source)
    );
    // A source whose shards are URLs (`bale index` of tars in a bucket)
    // reads them through these options.
    args.storage.options()?;
    // The source is checked before the output is taken: one that cannot be
    // read fails before --force removes anything, and the objects it reads
    // are never removed.
    let inputs = if is_remote(&args.output) {
        bale_pack::convert_inputs(&args.source).map_err(|e| anyhow!("{e}"))?
    } else {
        Vec::new()
    };
    let remote = match open_remote(&args.output, &args.storage, args.force, &cancel, inputs) {
        Err(_) if cancel.load(std::sync::atomic::Ordering::SeqCst) => {
            return Ok(crate::commands::pack::interrupted_opening(&args.output));
        }
        r => r?,
    };
    let out_dir = remote
        .as_ref()
        .map_or_else(|| args.output.clone(), |r| r.dir().to_path_buf());
    let opts = ConvertOptions {
        format,
        shard_size: args.shard_size,
        shard_samples: args.shard_samples,
        force: args.force && remote.is_none(),
        allow_duplicate_keys: args.allow_duplicate_keys,
    };
    let bar = Bar {
        quiet: args.out.quiet,
        bar: std::sync::OnceLock::new(),
    };
    let old = super::OldDataset::before(&args.output, args.force);
    let result = convert(&args.source, &out_dir, &opts, &bar, &cancel);
    if let Some(b) = bar.bar.get() {
        b.finish_and_clear();
    }
    let result = match (result, remote) {
        (r, None) => r,
        (Ok(mut s), Some(r)) => {
            let url = r.url().to_owned();
            if let Err(u) = r.finish() {
                let undone = u.output.undo();
                if cancel.load(std::sync::atomic::Ordering::SeqCst) && is_cancel(&u.error) {
                    eprintln!("error: interrupted: {}", undone.text);
                    return Ok(ExitCode::from(EXIT_INTERRUPTED));
                }
                anyhow::bail!("{}", undone.after(u.error));
            }
            s.output = url.into();
            Ok(s)
        }
        (Err(e), Some(r)) => {
            let undone = r.undo();
            if is_cancel(&e) {
                eprintln!("error: interrupted: {}", undone.text);
                return Ok(ExitCode::from(EXIT_INTERRUPTED));
            }
            anyhow::bail!("{}", undone.after(e));
        }
    };
    let s = match result {
        Ok(s) => s,
        Err(PackError::Cancelled) => {
            eprintln!(
                "error: interrupted: {}",
                old.left(&args.output, "partial files were removed")
            );
            return Ok(ExitCode::from(EXIT_INTERRUPTED));
        }
        Err(e) if e.left_output_untouched() || matches!(e, PackError::Partial { .. }) => {
            return Err(anyhow!("{e}"));
        }
        Err(e) => {
            return Err(anyhow!(
                "{e}\n{}",
                old.left(
                    &args.output,
                    "partial shards and temporary files were removed"
                )
            ));
        }
    };
    args.out.summary(&s, || {
        format!(
            "converted {} ({}, {}) to {} in {}: {}, {}",
            crate::units::count(s.samples, "sample"),
            crate::units::count(s.members, "member"),
            crate::units::size(s.bytes),
            s.format,
            bale_format::shown(&s.output),
            crate::units::count(s.shards, "shard"),
            crate::units::size(s.output_bytes)
        )
    })?;
    Ok(ExitCode::SUCCESS)
}
