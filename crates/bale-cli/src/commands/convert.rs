//! `bale convert`: a dataset to another form (tar, tar.zst, h5, dir).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bale_pack::{ConvertFormat, ConvertOptions, ConvertProgress, Destination, convert, is_remote};
use indicatif::ProgressBar;

use crate::args::convert::{ConvertArgs, ConvertFormatArg};
use crate::commands::pack::install_ctrlc;
use crate::progress;

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
    let storage = || args.storage.options();
    let flags = (args.force, args.append);
    let mut dest =
        match Destination::open_convert(&args.source, &args.output, flags, &cancel, &storage) {
            Ok(d) => d,
            Err(f) => return super::failed(f),
        };
    let opts = ConvertOptions {
        format,
        shard_size: args.shard_size,
        shard_samples: args.shard_samples,
        force: dest.engine_force(),
        allow_duplicate_keys: args.allow_duplicate_keys,
        append: args.append,
        onto: dest.take_base(),
    };
    let bar = Bar {
        quiet: args.out.quiet,
        bar: std::sync::OnceLock::new(),
    };
    let result = convert(&args.source, dest.dir(), &opts, &bar, &cancel);
    if let Some(b) = bar.bar.get() {
        b.finish_and_clear();
    }
    let s = match dest.finish(result) {
        Ok(s) => s,
        Err(f) => return super::failed(f),
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
