//! `bale stage` and `bale unstage`: a checked copy of a dataset on RAM-backed
//! storage, and its removal.
//!
//! A staging folder is recognized by its marker, `.bale-stage.json`, written
//! before anything else (source path, the manifest's xxh3, whether bale
//! mounted the folder, and the files it will hold). The dataset's manifest is
//! copied last, byte for byte: a folder with a marker but no manifest is a
//! half-finished copy, which the next `bale stage` resumes (files already in
//! place with the right size and checksum are kept) and which a loader never
//! sees as a dataset. Concurrent stage/unstage runs on one folder are
//! serialized with `flock`.
//!
//! Checks, in order: the dataset's manifest; the target is new, empty, or a
//! bale staging folder; memory (`MemAvailable`) when the target is RAM-backed
//! (tmpfs, ramfs, or about to be mounted); free space on the target
//! (`statvfs`). Both must exceed the bytes still to copy by 5% + 64 MiB.

mod sys;

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use bale_format::atomic::{AtomicFile, TEMP_PREFIX, replace_atomic, write_atomic};
use bale_format::hash::Xxh3;
use bale_format::verify::{self, Level};
use bale_format::{MANIFEST_NAME, Manifest, ShardIndex, checksum};
use bale_format::{hex64, parse_hex64};
use indicatif::{HumanBytes, ProgressBar};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::args::stage::{StageArgs, UnstageArgs};
use crate::progress;

/// The marker file of a staging folder.
pub const MARKER: &str = ".bale-stage.json";
/// Where staged copies go by default.
pub const DEFAULT_ROOT: &str = "/dev/shm/bale";
/// The fixed part of the safety margin.
const MARGIN_BYTES: u64 = 64 << 20;
/// Copy buffer.
const COPY_BUF: usize = 256 << 10;

/// The contents of `.bale-stage.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Marker {
    /// Marker format version (1).
    bale_stage: u32,
    /// The dataset that was copied (absolute path).
    source: String,
    /// xxh3 of the source's bale.json bytes, 16 hex digits.
    manifest_xxh3: String,
    /// Whether bale mounted a tmpfs on this folder (then unstage unmounts it).
    mounted: bool,
    /// Files the copy holds besides the manifest, relative to the folder.
    files: Vec<String>,
}

fn read_marker(dir: &Path) -> anyhow::Result<Option<Marker>> {
    let path = dir.join(MARKER);
    match fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b)
            .map(Some)
            .with_context(|| format!("{} is not a valid bale staging marker", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn write_marker(dir: &Path, m: &Marker) -> anyhow::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(m)?;
    bytes.push(b'\n');
    replace_atomic(dir.join(MARKER), &bytes)?;
    Ok(())
}

/// One file to stage.
#[derive(Debug)]
struct Job {
    rel: String,
    size: u64,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// A shard, with the manifest's whole-file checksum when it records one.
    Shard { xxh3: Option<u64> },
    /// An index: its own checksum (the manifest's `index_xxh3`) and the shard length it describes.
    Index { xxh3: u64, shard_len: u64 },
}

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Copied(u64),
    Kept(u64),
}

fn is_plain_relative(p: &str) -> bool {
    let path = Path::new(p);
    !p.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)))
}

fn size_of(path: &Path) -> Option<u64> {
    fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())
}

fn dir_is_empty(dir: &Path) -> anyhow::Result<bool> {
    Ok(fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .next()
        .is_none())
}

/// Removes temporary files of interrupted copies in `dir` and the directories of `rels`.
fn remove_temp_files(dir: &Path, rels: &[String]) {
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
    dirs.insert(dir.to_path_buf());
    for r in rels {
        if let Some(p) = dir.join(r).parent() {
            dirs.insert(p.to_path_buf());
        }
    }
    for d in dirs {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

/// Runs `bale stage`.
pub fn run(args: StageArgs) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let quiet = args.quiet;
    let say = |msg: String| {
        if !quiet {
            eprintln!("{msg}");
        }
    };
    let src = fs::canonicalize(&args.path)
        .with_context(|| format!("cannot open dataset {}", args.path.display()))?;
    let mpath = Manifest::path_in(&src);
    let manifest_bytes = match fs::read(&mpath) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(bale_format::FormatError::Incomplete { dir: src }.into());
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", mpath.display())),
    };
    let manifest = Manifest::from_slice(&manifest_bytes, &mpath)?;
    let hash = hex64(checksum(&manifest_bytes));
    let name = src
        .file_name()
        .map_or_else(|| "dataset".into(), |n| n.to_string_lossy().into_owned());
    let target = match &args.to {
        Some(t) => std::path::absolute(t).with_context(|| format!("bad target {}", t.display()))?,
        None => Path::new(DEFAULT_ROOT).join(format!("{name}-{}", &hash[..12])),
    };
    if target.starts_with(&src) || src.starts_with(&target) {
        bail!(
            "cannot stage {} into {}: one contains the other",
            src.display(),
            target.display()
        );
    }

    // The files to copy.
    let mut jobs = Vec::new();
    for e in &manifest.shards {
        for f in [&e.file, &e.index] {
            if !is_plain_relative(f) {
                bail!(
                    "cannot stage {}: its manifest names {f:?}, a file outside the dataset directory",
                    src.display()
                );
            }
        }
        let index_src = src.join(&e.index);
        let index_size = fs::metadata(&index_src)
            .with_context(|| format!("cannot stat {}", index_src.display()))?
            .len();
        let shard_xxh3 = match &e.shard_xxh3 {
            Some(h) => Some(parse_hex64(h).context("bad shard_xxh3 in the manifest")?),
            None => None,
        };
        jobs.push(Job {
            rel: e.index.clone(),
            size: index_size,
            kind: Kind::Index {
                xxh3: parse_hex64(&e.index_xxh3).context("bad index_xxh3 in the manifest")?,
                shard_len: e.bytes,
            },
        });
        jobs.push(Job {
            rel: e.file.clone(),
            size: e.bytes,
            kind: Kind::Shard { xxh3: shard_xxh3 },
        });
    }
    let rels: Vec<String> = jobs.iter().map(|j| j.rel.clone()).collect();

    // The target: new, empty, or a staging folder of ours.
    let existed = target.exists();
    fs::create_dir_all(&target).with_context(|| format!("cannot create {}", target.display()))?;
    let cleanup_if_new = |target: &Path| {
        if !existed {
            let _ = fs::remove_dir(target);
        }
    };
    let result = (|| -> anyhow::Result<Option<ExitCode>> {
        let mut lock = sys::lock_dir(&target, quiet)?;
        let marker = read_marker(&target)?;
        let mut mounted = marker.as_ref().is_some_and(|m| m.mounted);
        match &marker {
            None => {
                if !dir_is_empty(&target)? {
                    bail!(
                        "{} is not empty and is not a bale staging folder (no {MARKER}); refusing to write into it\nhint: choose a new or empty directory with --to DIR",
                        target.display()
                    );
                }
            }
            Some(mk) => {
                let staged_manifest = fs::read(target.join(MANIFEST_NAME)).ok();
                let complete = mk.manifest_xxh3 == hash
                    && staged_manifest.as_deref() == Some(&manifest_bytes[..])
                    && jobs
                        .iter()
                        .all(|j| size_of(&target.join(&j.rel)) == Some(j.size));
                if complete {
                    say(format!(
                        "reusing the complete staged copy of {} at {} (same manifest)",
                        src.display(),
                        target.display()
                    ));
                    println!("{}", target.display());
                    return Ok(Some(ExitCode::SUCCESS));
                }
                // Not usable as it is: no loader may see it as a dataset from now on.
                if staged_manifest.is_some() {
                    fs::remove_file(target.join(MANIFEST_NAME)).with_context(|| {
                        format!("cannot remove the stale manifest in {}", target.display())
                    })?;
                }
                if mk.manifest_xxh3 == hash {
                    say(format!(
                        "resuming the half-finished staged copy at {}",
                        target.display()
                    ));
                } else {
                    say(format!(
                        "redoing the staged copy at {}: it holds another version of the dataset",
                        target.display()
                    ));
                    let keep: BTreeSet<&String> = rels.iter().collect();
                    for f in &mk.files {
                        if !keep.contains(f) && is_plain_relative(f) {
                            let _ = fs::remove_file(target.join(f));
                        }
                    }
                }
                remove_temp_files(&target, &mk.files);
            }
        }

        // Space and memory, counting only what is still to copy.
        let to_copy: u64 = jobs
            .iter()
            .filter(|j| size_of(&target.join(&j.rel)) != Some(j.size))
            .map(|j| j.size)
            .sum::<u64>()
            + manifest_bytes.len() as u64;
        let required = to_copy + to_copy / 20 + MARGIN_BYTES;
        let ram_target = sys::is_ram_backed(&target)?;
        let will_mount = args.mount && !ram_target;
        if will_mount {
            if marker.is_some() {
                bail!(
                    "{} holds a staged copy on a file system that is not tmpfs; remove it with `bale unstage` before staging there with --mount",
                    target.display()
                );
            }
            if !sys::is_root() || args.assume_not_root {
                bail!(
                    "{} is not a tmpfs, and mounting one needs root\nhint: run `{}`, then run bale stage again",
                    target.display(),
                    sys::mount_command(&target, required)
                );
            }
        } else if args.mount {
            say(format!(
                "{} is already RAM-backed: not mounting",
                target.display()
            ));
        }
        if ram_target || will_mount || args.assume_mem.is_some() {
            let mem = match args.assume_mem {
                Some(m) => m,
                None => sys::mem_available()?,
            };
            if required > mem {
                bail!(
                    "not enough memory to stage {} in RAM: the copy needs {} ({} with a 5% + 64 MiB margin), the machine has {} available (MemAvailable)\nhint: free memory (`bale unstage` old copies, stop other jobs), or stage to a disk with --to DIR",
                    src.display(),
                    HumanBytes(to_copy),
                    HumanBytes(required),
                    HumanBytes(mem)
                );
            }
        }
        if !will_mount {
            let free = match args.assume_free {
                Some(f) => f,
                None => sys::free_bytes(&target)?,
            };
            if required > free {
                bail!(
                    "not enough space on {}: the copy needs {} ({} with a 5% + 64 MiB margin), the file system has {} free\nhint: free space there, or choose another target with --to DIR",
                    target.display(),
                    HumanBytes(to_copy),
                    HumanBytes(required),
                    HumanBytes(free)
                );
            }
        }
        if will_mount {
            sys::mount_tmpfs(&target, required)?;
            mounted = true;
            say(format!(
                "mounted a tmpfs of {} at {}",
                sys::tmpfs_size_option(required).trim_start_matches("size="),
                target.display()
            ));
            drop(lock);
            lock = sys::lock_dir(&target, quiet)?;
        }

        // The marker first, then the files, then the manifest.
        write_marker(
            &target,
            &Marker {
                bale_stage: 1,
                source: src.display().to_string(),
                manifest_xxh3: hash.clone(),
                mounted,
                files: rels.clone(),
            },
        )?;
        let total: u64 = jobs.iter().map(|j| j.size).sum();
        let threads = args.jobs.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(4)
        });
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .build()
            .context("cannot start the copy threads")?;
        let pb = progress::byte_bar(total, quiet);
        let outcomes: Vec<Outcome> = pool.install(|| {
            jobs.par_iter()
                .map(|j| stage_file(&src, &target, j, &pb))
                .collect::<anyhow::Result<_>>()
        })?;
        pb.finish_and_clear();
        // Shards without a whole-file checksum: check every member against the index.
        let rules = verify::NameRules::for_manifest(&manifest);
        for e in manifest.shards.iter().filter(|e| e.shard_xxh3.is_none()) {
            let r = verify::check_shard_with(&target, e, Level::Full, rules, &mut ());
            if let Some(p) = r.problems.iter().find(|p| p.is_error()) {
                bail!(
                    "the staged copy is damaged: {p}\nhint: run `bale verify {}`",
                    src.display()
                );
            }
        }
        write_atomic(target.join(MANIFEST_NAME), &manifest_bytes)?;
        drop(lock);
        let (mut copied, mut copied_bytes, mut kept) = (0u64, 0u64, 0u64);
        for o in outcomes {
            match o {
                Outcome::Copied(b) => {
                    copied += 1;
                    copied_bytes += b;
                }
                Outcome::Kept(_) => kept += 1,
            }
        }
        let kept_text = if kept > 0 {
            format!(", {kept} already in place")
        } else {
            String::new()
        };
        say(format!(
            "staged {}: {copied} files copied ({}){kept_text} in {:.1}s",
            src.display(),
            HumanBytes(copied_bytes),
            start.elapsed().as_secs_f64()
        ));
        println!("{}", target.display());
        Ok(Some(ExitCode::SUCCESS))
    })();
    match result {
        Ok(code) => Ok(code.unwrap_or(ExitCode::SUCCESS)),
        Err(e) => {
            // A refusal before anything was written leaves no empty folder behind.
            if target.join(MARKER).exists() {
                Err(e.context(format!(
                    "staging into {} did not finish; run bale stage again to resume, or bale unstage {} to remove it",
                    target.display(),
                    target.display()
                )))
            } else {
                cleanup_if_new(&target);
                Err(e)
            }
        }
    }
}

/// Hashes a file; `pb` advances with the bytes read.
fn hash_file(path: &Path, pb: &ProgressBar) -> std::io::Result<u64> {
    let mut f = File::open(path)?;
    let mut h = Xxh3::new();
    let mut buf = vec![0u8; COPY_BUF];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(h.digest());
        }
        h.update(&buf[..n]);
        pb.inc(n as u64);
    }
}

/// Whether the staged file at `path` is right: same checksum as the manifest
/// records (a shard without one is checked later, member by member).
fn staged_ok(path: &Path, job: &Job, pb: &ProgressBar) -> bool {
    match job.kind {
        Kind::Shard { xxh3: Some(want) } => hash_file(path, pb).is_ok_and(|h| h == want),
        Kind::Shard { xxh3: None } => {
            pb.inc(job.size);
            true
        }
        Kind::Index { xxh3, shard_len } => {
            pb.inc(job.size);
            ShardIndex::open(path).is_ok_and(|i| i.checksum() == xxh3 && i.shard_len() == shard_len)
        }
    }
}

/// Copies one file into the staging folder under a temporary name, checks
/// it, and renames it into place; keeps a file already there when it checks out.
fn stage_file(src: &Path, target: &Path, job: &Job, pb: &ProgressBar) -> anyhow::Result<Outcome> {
    let from = src.join(&job.rel);
    let dest = target.join(&job.rel);
    if size_of(&dest) == Some(job.size) {
        if staged_ok(&dest, job, pb) {
            return Ok(Outcome::Kept(job.size));
        }
        // Progress counted the check; the copy below counts again.
        pb.inc_length(job.size);
    }
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let mut input = File::open(&from).with_context(|| format!("cannot open {}", from.display()))?;
    let mut out = AtomicFile::create(&dest)?;
    let mut h = Xxh3::new();
    let mut buf = vec![0u8; COPY_BUF];
    let mut n_total = 0u64;
    loop {
        let n = input
            .read(&mut buf)
            .with_context(|| format!("cannot read {} at offset {n_total}", from.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        out.write_all(&buf[..n]).with_context(|| {
            format!(
                "cannot write {} at offset {n_total}",
                out.tmp_path().display()
            )
        })?;
        n_total += n as u64;
        pb.inc(n as u64);
    }
    if n_total != job.size {
        bail!(
            "{} has {n_total} bytes, the manifest records {}: the dataset changed or is damaged\nhint: run `bale verify {}`",
            from.display(),
            job.size,
            src.display()
        );
    }
    match job.kind {
        Kind::Shard { xxh3: Some(want) } => {
            let got = h.digest();
            if got != want {
                bail!(
                    "{} does not match the manifest's checksum (recorded {}, copied bytes hash to {})\nhint: run `bale verify {}`",
                    from.display(),
                    hex64(want),
                    hex64(got),
                    src.display()
                );
            }
        }
        Kind::Shard { xxh3: None } => {}
        Kind::Index { xxh3, shard_len } => {
            out.flush()?;
            let idx = ShardIndex::open(out.tmp_path())
                .with_context(|| format!("the copy of {} is not a valid index", from.display()))?;
            if idx.checksum() != xxh3 || idx.shard_len() != shard_len {
                bail!(
                    "{} does not match the manifest (index checksum {}, recorded {})\nhint: run `bale verify {}`",
                    from.display(),
                    hex64(idx.checksum()),
                    hex64(xxh3),
                    src.display()
                );
            }
        }
    }
    // The staging folder is bale's (its marker says so): a damaged copy is replaced.
    out.commit_replacing()?;
    Ok(Outcome::Copied(n_total))
}

/// Whether `dir` is a mount point (its device differs from its parent's).
fn is_mount_point(dir: &Path) -> bool {
    let Some(parent) = dir.parent() else {
        return true;
    };
    match (fs::metadata(dir), fs::metadata(parent)) {
        (Ok(a), Ok(b)) => a.dev() != b.dev(),
        _ => false,
    }
}

/// Runs `bale unstage`.
pub fn run_unstage(args: UnstageArgs) -> anyhow::Result<ExitCode> {
    let dir = fs::canonicalize(&args.dir)
        .with_context(|| format!("cannot open {}", args.dir.display()))?;
    let Some(marker) = read_marker(&dir)? else {
        bail!(
            "{} is not a bale staging folder (it has no {MARKER}); refusing to delete anything",
            dir.display()
        );
    };
    let lock = sys::lock_dir(&dir, args.quiet)?;
    let mut known: BTreeSet<PathBuf> = marker
        .files
        .iter()
        .filter(|f| is_plain_relative(f))
        .map(|f| dir.join(f))
        .collect();
    known.insert(dir.join(MANIFEST_NAME));
    known.insert(dir.join(MARKER));
    let mut ours = Vec::new();
    let mut unexpected = Vec::new();
    let mut subdirs = Vec::new();
    for e in walkdir::WalkDir::new(&dir)
        .min_depth(1)
        .contents_first(true)
    {
        let e = e.with_context(|| format!("cannot walk {}", dir.display()))?;
        let p = e.path().to_path_buf();
        if e.file_type().is_dir() {
            subdirs.push(p);
        } else if known.contains(&p) || e.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
            ours.push(p);
        } else {
            unexpected.push(p);
        }
    }
    if !unexpected.is_empty() && !args.force {
        let list: Vec<String> = unexpected
            .iter()
            .take(5)
            .map(|p| p.display().to_string())
            .collect();
        let more = if unexpected.len() > 5 {
            format!(" and {} more", unexpected.len() - 5)
        } else {
            String::new()
        };
        bail!(
            "{} holds files bale did not write: {}{more}; refusing to delete them\nhint: move them away, or use --force to delete them too",
            dir.display(),
            list.join(", ")
        );
    }
    let bytes: u64 = ours
        .iter()
        .chain(&unexpected)
        .filter_map(|p| size_of(p))
        .sum();
    if marker.mounted && is_mount_point(&dir) {
        drop(lock); // An open descriptor on the mount would make it busy.
        sys::unmount(&dir)?;
        let _ = fs::remove_dir(&dir);
        if !args.quiet {
            eprintln!(
                "unmounted and removed {} ({} staged)",
                dir.display(),
                HumanBytes(bytes)
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    // The manifest first (no loader takes a half-deleted copy for a dataset), the marker last.
    let rm = |p: &Path| -> anyhow::Result<()> {
        match fs::remove_file(p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("cannot remove {}", p.display())),
        }
    };
    rm(&dir.join(MANIFEST_NAME))?;
    for p in ours.iter().chain(&unexpected) {
        if p.file_name()
            .is_some_and(|n| n != MARKER && n != MANIFEST_NAME)
        {
            rm(p)?;
        }
    }
    for d in &subdirs {
        fs::remove_dir(d).with_context(|| format!("cannot remove {}", d.display()))?;
    }
    rm(&dir.join(MARKER))?;
    drop(lock);
    fs::remove_dir(&dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    if !args.quiet {
        eprintln!("removed {} ({} staged)", dir.display(), HumanBytes(bytes));
    }
    Ok(ExitCode::SUCCESS)
}
