//! `bale stage` and `bale unstage`: thin over `bale_reader::stage`, which
//! does the copy, the checks, the marker and the removal. This file turns
//! the arguments into options, draws the byte bar, prints messages on stderr
//! and the staged path on stdout, and adds `hint:` lines to the errors.

use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::Instant;

use bale_format::FormatError;
use bale_reader::ReaderError;
use bale_reader::stage::{self, StageErrorKind, StageOptions, StageProgress};
use indicatif::ProgressBar;

use crate::args::stage::{StageArgs, UnstageArgs};
use crate::progress;

/// The engine's progress as a byte bar and messages on stderr.
struct Bar {
    quiet: bool,
    bar: OnceLock<ProgressBar>,
}

impl StageProgress for Bar {
    fn start(&self, bytes: u64) {
        let pb = self
            .bar
            .get_or_init(|| progress::byte_bar(bytes, self.quiet));
        pb.set_length(bytes);
        pb.set_position(0);
    }

    fn bytes(&self, bytes: u64) {
        if let Some(pb) = self.bar.get() {
            pb.inc(bytes);
        }
    }

    fn more(&self, bytes: u64) {
        if let Some(pb) = self.bar.get() {
            pb.inc_length(bytes);
        }
    }

    fn message(&self, text: &str) {
        if self.quiet {
            return;
        }
        match self.bar.get() {
            Some(pb) => pb.suspend(|| eprintln!("{text}")),
            None => eprintln!("{text}"),
        }
    }
}

impl Bar {
    fn finish(&self) {
        if let Some(pb) = self.bar.get() {
            pb.finish_and_clear();
        }
    }
}

/// Runs `bale stage`.
pub fn run(args: StageArgs) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let mut options = StageOptions::default();
    options.to = args.to.clone();
    options.mount = args.mount;
    options.jobs = bale_pack::check_jobs(args.jobs.unwrap_or(0))?;
    options.wait = args.wait;
    options.verify = args.verify;
    options.allow_swap = args.allow_swap;
    options.assume.free = args.assume_free;
    options.assume.mem_available = args.assume_mem;
    options.assume.not_root = args.assume_not_root;
    options.storage = args.storage.options()?;
    let bar = Bar {
        quiet: args.quiet,
        bar: OnceLock::new(),
    };
    let result = stage::stage(&args.path, &options, &bar);
    bar.finish();
    let summary = result.map_err(|e| stage_error(e, &args))?;
    if !summary.reused && !args.quiet {
        let kept = if summary.files_kept > 0 {
            format!(", {} already in place", summary.files_kept)
        } else {
            String::new()
        };
        eprintln!(
            "staged {}: {} copied ({}){kept} in {:.1}s",
            bale_format::shown(&summary.source),
            crate::units::count(summary.files_copied, "file"),
            crate::units::size(summary.bytes_copied),
            start.elapsed().as_secs_f64()
        );
    }
    println!("{}", summary.target.display());
    Ok(ExitCode::SUCCESS)
}

/// Runs `bale unstage`.
pub fn run_unstage(args: UnstageArgs) -> anyhow::Result<ExitCode> {
    let summary = stage::unstage(&args.dir, args.force).map_err(|e| match &e {
        ReaderError::Stage {
            kind: StageErrorKind::ForeignFiles { .. },
            ..
        } => with_hint(e, "move them away, or use --force to delete them too"),
        _ => anyhow::Error::new(e),
    })?;
    if !args.quiet {
        let dir = bale_format::shown(&summary.dir);
        let size = crate::units::size(summary.bytes);
        if summary.kept_mount_point {
            eprintln!(
                "removed the staged copy in {dir} ({size} staged); {dir} is a mount point bale did not make: left in place, still mounted"
            );
        } else if summary.kept_folder {
            eprintln!(
                "{}removed the staged copy in {dir} ({size} staged); {dir} was there before bale staged into it: left in place, empty",
                if summary.unmounted {
                    "unmounted and "
                } else {
                    ""
                },
            );
        } else {
            eprintln!(
                "{}removed {dir} ({size} staged)",
                if summary.unmounted {
                    "unmounted and "
                } else {
                    ""
                },
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The error with a `hint:` line: the message and the hint read as one.
fn with_hint(e: ReaderError, hint: &str) -> anyhow::Error {
    super::Noted {
        error: e,
        note: format!("hint: {hint}"),
    }
    .into()
}

/// A staging error as the CLI prints it: the engine's message, a `hint:`
/// naming the flag or command that helps, and for a run that stopped
/// half-way, how to resume or remove it.
fn stage_error(e: ReaderError, args: &StageArgs) -> anyhow::Error {
    let e = match e {
        ReaderError::StageUnfinished { path, source } => {
            let dir = bale_format::shown(&path);
            return stage_error(*source, args).context(format!(
                "staging into {dir} did not finish; run bale stage again to resume, or bale unstage {dir} to remove it"
            ));
        }
        e => e,
    };
    let hint: Option<String> = match &e {
        ReaderError::Format(FormatError::Locked { .. }) => {
            Some("pass --wait to wait for the other run and reuse its copy".into())
        }
        ReaderError::Stage { kind, path, .. } => match kind {
            StageErrorKind::NotStagingFolder => {
                Some("choose a new or empty directory with --to DIR".into())
            }
            StageErrorKind::NoSpace { .. } => {
                Some("free space there, or choose another target with --to DIR".into())
            }
            StageErrorKind::NoMemory { .. } => Some(
                "free memory (`bale unstage` old copies, stop other jobs), stage to a disk with --to DIR, or pass --allow-swap to copy anyway (what does not fit in RAM then goes to swap)"
                    .into(),
            ),
            StageErrorKind::NeedsRoot { command } => {
                Some(format!("run `{command}`, then run bale stage again"))
            }
            StageErrorKind::MountFailed { command } => Some(format!(
                "run `{command}` yourself, then bale stage without --mount"
            )),
            StageErrorKind::StagedWithoutMount => Some(format!(
                "remove it with `bale unstage {}` first",
                bale_format::shown(path)
            )),
            StageErrorKind::SourceMismatch | StageErrorKind::Damaged => Some(format!(
                "run `bale verify {}`",
                bale_format::shown(&args.path)
            )),
            StageErrorKind::ForeignFiles { .. } => Some(format!(
                "move it away, or remove the staged copy with `bale unstage --force {}` and stage again",
                bale_format::shown(path)
            )),
            _ => None,
        },
        _ => None,
    };
    match hint {
        Some(h) => with_hint(e, &h),
        None => anyhow::Error::new(e),
    }
}
