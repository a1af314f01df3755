//! `bale verify`: runs the checks of `bale_format::verify` over every shard in
//! parallel (rayon), with a progress bar on stderr.
//!
//! Output: each problem on one line of stdout, a summary line on stderr; exit
//! 0 when clean (warnings do not count), 1 when any error was found. With
//! `--json`, one object on stdout:
//!
//! ```json
//! { "ok": false, "dataset": "ds", "level": "full", "decode": false,
//!   "checksums": "present",
//!   "shards_checked": 4, "samples_checked": 1000, "members_checked": 2000,
//!   "bytes_read": 123456, "errors": 1, "warnings": 0,
//!   "problems": [ { "shard": "shard-000001.tar", "key": "cat/0001", "member": "jpg",
//!                   "offset": 1536, "what": "checksum mismatch: ...", "severity": "error" } ] }
//! ```
//!
//! `checksums` is `"present"`, `"absent"` (indexes made by `bale index`
//! without `--checksum`: member bytes cannot be checked, and one warning says
//! so) or `"partial"`, and `null` when no index could be read.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use bale_format::verify::{self, Checksums, Level, NameRules, Problem, ShardReport, Visitor};
use indicatif::{HumanCount, ProgressBar};
use rayon::prelude::*;
use serde::Serialize;

use crate::args::verify::VerifyArgs;
use crate::progress;

/// The `--json` output.
#[derive(Debug, Serialize)]
struct Report<'a> {
    ok: bool,
    dataset: String,
    level: Level,
    decode: bool,
    checksums: Option<Checksums>,
    shards_checked: u64,
    samples_checked: u64,
    members_checked: u64,
    bytes_read: u64,
    errors: u64,
    warnings: u64,
    problems: &'a [Problem],
}

/// Feeds the progress bar and, with `--decode`, decodes image members.
struct CliVisitor {
    pb: ProgressBar,
    decode: bool,
    max_pixels: u64,
    bytes_progress: bool,
}

impl Visitor for CliVisitor {
    fn member(&mut self, _key: &str, ext: &str, data: &[u8]) -> Option<String> {
        if !self.decode || !bale_image::is_image_ext(ext) {
            return None;
        }
        bale_image::decode_check_with(ext, data, self.max_pixels)
            .err()
            .map(|e| format!("image does not decode: {e}"))
    }

    fn progress(&mut self, bytes: u64) {
        if self.bytes_progress {
            self.pb.inc(bytes);
        }
    }
}

/// Runs `bale verify`.
pub fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let dir = args.path.as_path();
    // Shards, indexes and the manifest at a URL are read through the storage layer.
    args.storage.options()?;
    let level = if args.quick {
        Level::Quick
    } else {
        Level::Full
    };
    let (manifest, mut problems) = verify::load_manifest(dir)
        .with_context(|| format!("cannot verify {}", bale_format::shown(dir)))?;
    let mut reports: Vec<ShardReport> = Vec::new();
    if let Some(m) = &manifest {
        problems.extend(verify::check_manifest(dir, m));
        problems.extend(verify::check_keys(dir, m));
        let rules = NameRules::for_manifest(m);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(bale_pack::check_jobs(args.jobs.unwrap_or(0))?)
            .build()
            .context("cannot start the verify threads")?;
        // Full: a byte bar over the shard files; quick: a bar over shards.
        let (pb, bytes_progress) = match level {
            Level::Full => (progress::byte_bar(m.bytes, args.quiet), true),
            Level::Quick => (
                progress::bar(m.shards.len() as u64, "shards", args.quiet),
                false,
            ),
        };
        reports = pool.install(|| {
            m.shards
                .par_iter()
                .map(|entry| {
                    let mut v = CliVisitor {
                        pb: pb.clone(),
                        decode: args.decode,
                        max_pixels: args.max_pixels,
                        bytes_progress,
                    };
                    let r = verify::check_shard_with(dir, entry, level, rules, &mut v);
                    if !bytes_progress {
                        pb.inc(1);
                    }
                    r
                })
                .collect()
        });
        pb.finish_and_clear();
    }
    for r in &reports {
        problems.extend(r.problems.iter().cloned());
    }
    let checksums = reports
        .iter()
        .any(|r| r.member_checksums.is_some())
        .then(|| Checksums::of(&reports));
    problems.extend(verify::checksums_warning(&reports));
    let errors = problems.iter().filter(|p| p.is_error()).count() as u64;
    let warnings = problems.len() as u64 - errors;
    let sum = |f: fn(&ShardReport) -> u64| reports.iter().map(f).sum::<u64>();
    let report = Report {
        ok: errors == 0,
        dataset: dir.display().to_string(),
        level,
        decode: args.decode,
        checksums,
        shards_checked: reports.len() as u64,
        samples_checked: sum(|r| r.samples_checked),
        members_checked: sum(|r| r.members_checked),
        bytes_read: sum(|r| r.bytes_read),
        errors,
        warnings,
        problems: &problems,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        for p in &problems {
            writeln!(out, "{p}")?;
        }
    }
    out.flush()?;
    if !args.quiet {
        eprintln!("{}", summary(dir, &report, start.elapsed().as_secs_f64()));
    }
    if !args.quiet
        && let Some(hint) = manifest.as_ref().and_then(|m| part_hint(m, &problems))
    {
        eprintln!("{hint}");
    }
    Ok(if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What to do when files of a part (`bale pack --part I/N`) are missing:
/// `bale merge` moves a part's files into its output, and a merge that was
/// killed leaves them there, with a journal that a rerun reads.
fn part_hint(
    m: &bale_format::Manifest,
    problems: &[bale_format::verify::Problem],
) -> Option<String> {
    let part = m.created_by.options.get("part")?;
    let (index, count) = (part.get("index")?.as_u64()?, part.get("count")?.as_u64()?);
    let missing = problems.iter().any(|p| p.what.ends_with("is missing"));
    (m.created_by.command == "pack" && missing).then(|| {
        format!(
            "hint: this is part {index} of {count} (`bale pack --part {index}/{count}`); `bale merge` moves a part's files into its output, and a merge that was interrupted leaves them there beside its journal ({}): run the same merge again to put them back, or to finish it",
            bale_pack::JOURNAL_NAME
        )
    })
}

fn summary(dir: &Path, r: &Report<'_>, secs: f64) -> String {
    let what = match r.level {
        Level::Full if r.decode => "full check with image decoding",
        Level::Full => "full check",
        Level::Quick => "quick check",
    };
    let note = match (r.level, r.checksums) {
        (Level::Full, Some(Checksums::Absent)) => "; no member checksums: structure only",
        (Level::Full, Some(Checksums::Partial)) => "; some shards without member checksums",
        _ => "",
    };
    let verdict = if r.ok {
        "ok".to_string()
    } else {
        format!(
            "{} problem{}",
            r.errors,
            if r.errors == 1 { "" } else { "s" }
        )
    };
    let warn = if r.warnings > 0 {
        format!(
            ", {} warning{}",
            r.warnings,
            if r.warnings == 1 { "" } else { "s" }
        )
    } else {
        String::new()
    };
    let samples = if r.samples_checked == 1 {
        "sample"
    } else {
        "samples"
    };
    format!(
        "{}: {verdict}{warn} ({what} of {}, {} {samples}, {} read in {secs:.1}s{note})",
        bale_format::shown(dir),
        crate::units::count(r.shards_checked, "shard"),
        HumanCount(r.samples_checked),
        crate::units::size(r.bytes_read),
    )
}
