//! Staging: a checked copy of a dataset on fast local storage (RAM-backed
//! tmpfs by default), and its removal.
//!
//! [`stage`] copies a dataset into a staging folder and returns where;
//! [`unstage`] removes such a copy. A staging folder is recognised by its
//! marker, [`MARKER`] (`.bale-stage.json`), written before anything else:
//! the source, the xxh3 of its manifest, whether bale mounted the folder,
//! and the files the copy holds. The manifest is copied last, byte for byte:
//! a folder with a marker and no manifest is a half-finished copy, which the
//! next [`stage`] resumes and which no reader takes for a dataset. A tmpfs
//! bale mounts has `bale-stage` for its source, so it is bale's before the
//! marker exists: a run killed in between leaves one that the next
//! [`stage`] fills and [`unstage`] unmounts.
//!
//! ```
//! use bale_reader::stage::{self, StageOptions};
//! # let dir = tempfile::tempdir()?;
//! # let src = dir.path().join("ds");
//! # std::fs::create_dir(&src)?;
//! # bale_reader::testing::TestDataset::new(100, 4).write(&src)?;
//! let mut options = StageOptions::default();
//! options.to = Some(dir.path().join("staged"));
//! # options.assume.free = Some(1 << 40);
//! # options.assume.mem_available = Some(1 << 40);
//! let summary = stage::stage(&src, &options, &())?;
//! assert_eq!(summary.files_copied, 8);
//! let ds = bale_reader::Dataset::open(&summary.target)?;
//! assert_eq!(ds.len(), 100);
//!
//! // Again: the complete copy is checked and reused.
//! assert!(stage::stage(&src, &options, &())?.reused);
//! stage::unstage(&summary.target, false)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Checks, in order
//!
//! 1. The manifest: a regular file of bounded size; every file it names
//!    inside the dataset directory, once; sizes that add up within 64 bits.
//! 2. The target: new, empty, or a staging folder (its marker), locked
//!    exclusively ([`DirLock`]): another run on it makes [`stage`] fail at
//!    once, or wait with [`StageOptions::wait`].
//! 3. A complete copy of the same manifest is checked (sizes; every staged
//!    index's counts, checksum and shard length; with
//!    [`StageOptions::verify`], every shard's bytes) and reused; one that
//!    fails is resumed.
//! 4. The source files, before anything is copied: indexes opened with their
//!    counts compared first, then their checksum and the shard length they
//!    describe; shards regular files of the recorded length.
//! 5. Memory (`MemAvailable`) when the copy goes to RAM, and free space on
//!    the target (`statvfs`): both must exceed the bytes still to copy by
//!    5% + 64 MiB.
//!
//! # Security
//!
//! Only regular files are read (a FIFO, device or socket named by the
//! manifest is refused without blocking), and never more bytes than the
//! manifest records. A file in the staging folder that bale did not write is
//! never replaced ([`stage`]) nor deleted ([`unstage`] without `force`).
//!
//! [`DirLock`]: bale_format::files::DirLock

mod capacity;
mod copy;
mod marker;
mod plan;
mod sys;
mod unstage;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

use bale_format::atomic::{TEMP_PREFIX, write_atomic};
use bale_format::files::{DirLock, FileId};
use bale_format::hex64;
use bale_format::shown;
use bale_format::verify::NameRules;
use bale_format::{FormatError, MANIFEST_NAME, Manifest, checksum};

pub use crate::error::StageErrorKind;
pub use marker::MARKER;
pub use sys::is_ram_backed;
pub(crate) use sys::mem_available;
pub use unstage::{UnstageSummary, unstage};

use crate::error::{ReaderError, Result};
use copy::{Ctx, Outcome};
use marker::Marker;
use plan::{Plan, What};

/// Where staged copies go by default: `<DEFAULT_ROOT>/<name>-<hash>`, or
/// `<DEFAULT_ROOT>-<uid>/<name>-<hash>` when another user has
/// `DEFAULT_ROOT` ([`default_root`]).
pub const DEFAULT_ROOT: &str = "/dev/shm/bale";

/// The folder default copies go in: [`DEFAULT_ROOT`], or on a machine
/// shared by several users, where another user (root included) made it
/// first, `DEFAULT_ROOT-<uid>` (`/dev/shm/bale-1000`): theirs is neither
/// this user's to write in nor safe to copy into.
pub fn default_root() -> PathBuf {
    // SAFETY: geteuid has no preconditions and cannot fail.
    root_for(Path::new(DEFAULT_ROOT), unsafe { libc::geteuid() })
}

/// `base`, or `base-<me>` when another user than `me` has put a folder or a
/// symlink at `base`. A symlink or an unsafe folder of `me`'s own stays
/// `base`, for [`refuse_unsafe_place`] to refuse with its reason.
fn root_for(base: &Path, me: u32) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    match fs::symlink_metadata(base) {
        Ok(m) if m.uid() != me && (m.is_dir() || m.file_type().is_symlink()) => {
            let mut own = base.as_os_str().to_owned();
            own.push(format!("-{me}"));
            PathBuf::from(own)
        }
        _ => base.to_path_buf(),
    }
}

/// How [`stage`] copies; `StageOptions::default()` gives the defaults each
/// field documents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StageOptions {
    /// Where to put the copy. Default `None`: [`DEFAULT_ROOT`]`/<name>-<the
    /// first 12 hex digits of the manifest's xxh3>`, so the same dataset
    /// version always lands in the same place.
    pub to: Option<PathBuf>,
    /// Mount a tmpfs of the needed size at the target when it is not
    /// RAM-backed (needs root), with `huge=within_size` where the kernel has
    /// transparent huge pages, so that the shards are kept in 2 MiB pages.
    /// Default `false`.
    pub mount: bool,
    /// Files copied at once. Default 0: 4, or the number of cores if fewer.
    pub jobs: usize,
    /// When another run holds the target's lock, wait for it, then reuse
    /// (or resume) its copy. Default `false`: fail at once, naming the target.
    pub wait: bool,
    /// When a complete copy is reused, also hash every staged shard (against
    /// `shard_xxh3`, or member by member when the manifest records none).
    /// Default `false`: sizes and indexes are checked. Copies are always
    /// checked as they are made.
    pub verify: bool,
    /// Copy to RAM even when available memory is short of the copy and its
    /// margin. Default `false`. A tmpfs copy larger than free RAM silently
    /// goes to swap, and reads from it run at the swap device's speed.
    pub allow_swap: bool,
    /// Figures to use instead of asking the system. Default: ask.
    pub assume: Assume,
    /// Options for a dataset in object storage (a URL source), on top of
    /// the standard environment. Default none.
    pub storage: bale_storage::StorageOptions,
}

/// Figures [`stage`] uses instead of asking the system (for tests, and to
/// rehearse a run). `Assume::default()` asks for each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Assume {
    /// Bytes free on the target's file system. Default `None`: `statvfs`.
    pub free: Option<u64>,
    /// Available memory; when set, the memory check applies even to a
    /// target that is not RAM-backed. Default `None`: `MemAvailable`, and
    /// only for RAM-backed targets.
    pub mem_available: Option<u64>,
    /// Behave as when not running as root. Default `false`.
    pub not_root: bool,
}

/// Receives what [`stage`] does as it goes. Every method has an empty
/// default; `()` is the receiver that ignores everything. Methods are called
/// from the copy threads, hence `Sync`.
pub trait StageProgress: Sync {
    /// Reading starts: `bytes` to copy or check in all. May be called again
    /// (a reused copy that fails its check is then resumed).
    fn start(&self, bytes: u64) {
        let _ = bytes;
    }

    /// `bytes` more were copied or checked.
    fn bytes(&self, bytes: u64) {
        let _ = bytes;
    }

    /// The total grows by `bytes`: a file in place failed its check and is
    /// copied again.
    fn more(&self, bytes: u64) {
        let _ = bytes;
    }

    /// A message for the user: what was decided (reusing, resuming,
    /// mounting) or is awaited (another run's lock).
    fn message(&self, text: &str) {
        let _ = text;
    }
}

impl StageProgress for () {}

/// What [`stage`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StageSummary {
    /// The staged copy: a dataset directory.
    pub target: PathBuf,
    /// The dataset copied (its canonical path).
    pub source: PathBuf,
    /// Shards and indexes copied (the manifest is not counted).
    pub files_copied: u64,
    /// Their bytes.
    pub bytes_copied: u64,
    /// Shards and indexes already in place that passed their check.
    pub files_kept: u64,
    /// Their bytes.
    pub bytes_kept: u64,
    /// Whether a complete copy of the same manifest was found, checked and
    /// reused (then nothing was copied).
    pub reused: bool,
    /// Whether this run mounted a tmpfs at the target.
    pub mounted: bool,
}

fn io_error(path: &Path, source: std::io::Error) -> ReaderError {
    FormatError::Io {
        path: path.to_path_buf(),
        source,
    }
    .into()
}

/// Copies the dataset in `src` to a staging folder (see the [module
/// docs](self)) and returns what it did; the copy is a dataset at
/// [`StageSummary::target`].
///
/// # Errors
/// [`ReaderError::Stage`] for each refusal ([`StageErrorKind`] says which),
/// [`FormatError::Locked`] (as [`ReaderError::Format`]) when another run
/// holds the target and `wait` is off, the manifest's own errors, I/O
/// errors. An error after the marker was written is
/// [`ReaderError::StageUnfinished`]: the next run resumes the copy. A
/// refusal before it leaves nothing behind.
pub fn stage(
    src: &Path,
    options: &StageOptions,
    progress: &dyn StageProgress,
) -> Result<StageSummary> {
    let src = if bale_storage::is_url(src) {
        // Every file of the source is read through the storage layer.
        bale_storage::install_url_opener(&options.storage);
        src.to_path_buf()
    } else {
        fs::canonicalize(src).map_err(|e| io_error(src, e))?
    };
    let manifest_bytes = Manifest::read_bytes(&src)?;
    let manifest = Manifest::from_slice(&manifest_bytes, &Manifest::path_in(&src))?;
    let hash = hex64(checksum(&manifest_bytes));
    let target = match &options.to {
        Some(t) => std::path::absolute(t).map_err(|e| io_error(t, e))?,
        None => {
            let name = src
                .file_name()
                .map_or_else(|| "dataset".into(), |n| n.to_string_lossy().into_owned());
            default_root().join(format!("{name}-{}", &hash[..12]))
        }
    };
    refuse_nested(&src, &normalized(&target), &target)?;
    let default = options.to.is_none();
    if default {
        make_default_root(target.parent().unwrap_or(&target))?;
        refuse_unsafe_place(&target)?;
    }
    let mut plan = Plan::new(&src, &manifest, manifest_bytes.len() as u64)?;

    let (lock, made) = lock_target(&target, options.wait, progress)?;
    let created = !made.is_empty();
    let mut wrote_marker = false;
    let result = (if default {
        settle_default_target(&target, created)
    } else {
        fs::canonicalize(&target).map_err(|e| io_error(&target, e))
    })
    .and_then(|canonical| refuse_nested(&src, &canonical, &target))
    .and_then(|()| {
        let run = Run {
            src: &src,
            target: &target,
            created,
            manifest: &manifest,
            manifest_bytes: &manifest_bytes,
            hash: &hash,
            options,
            progress,
        };
        run.stage(&mut plan, lock, &mut wrote_marker)
    });
    match result {
        Ok(s) => Ok(s),
        Err(e) if wrote_marker => Err(ReaderError::StageUnfinished {
            path: target,
            source: Box::new(e),
        }),
        Err(e) => {
            // A refusal before anything was written leaves no empty folder
            // behind, nor the parents it created for it.
            for d in made.iter().rev() {
                if fs::remove_dir(d).is_err() {
                    break;
                }
            }
            Err(e)
        }
    }
}

/// `path` with `.` and `..` resolved by name (symlinks are checked later, on
/// the canonical path).
fn normalized(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// Why `--mount` mounts nothing at `target` (RAM-backed or not, as `ram`
/// says; `found` its staging marker; `ours` whether it is a tmpfs bale
/// mounted, as [`sys::is_bale_tmpfs`] says), or None when a tmpfs of bale's
/// own there would give the copy what `--mount` is for: 2 MiB pages.
fn no_mount_needed(
    target: &Path,
    ram: bool,
    ours: bool,
    found: Option<&Marker>,
) -> Option<&'static str> {
    if ours || found.is_some_and(|m| m.mounted) && sys::is_mount_point(target) {
        Some("is a tmpfs bale mounted already")
    } else if ram && sys::tmpfs_gives_huge_pages(target) {
        Some("is on a tmpfs that keeps files in 2 MiB pages already")
    } else if ram && !sys::tmpfs_has_huge_pages() {
        Some("is RAM-backed already, and this kernel has no 2 MiB pages for tmpfs")
    } else {
        None
    }
}

/// Makes the default root ([`default_root`]) when it is missing,
/// `rwxr-xr-x` whatever the umask, and refuses it when it is not safe
/// ([`refuse_unsafe_place`]).
fn make_default_root(root: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match fs::create_dir(root) {
        Ok(()) => fs::set_permissions(root, fs::Permissions::from_mode(0o755))
            .map_err(|e| io_error(root, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        // No /dev/shm: lock_target says so, naming the target.
        Err(_) => {}
    }
    refuse_unsafe_place(root)
}

/// Once the default target is locked: the folder this run made gets
/// `rwxr-xr-x` whatever the umask, and the place is checked again, now that
/// it exists: neither it nor the default root may have been swapped for a
/// symlink meanwhile (the copy must land in `/dev/shm`'s own folder).
/// Returns the target's canonical path.
fn settle_default_target(target: &Path, created: bool) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if created {
        fs::set_permissions(target, fs::Permissions::from_mode(0o755))
            .map_err(|e| io_error(target, e))?;
    }
    let root = target.parent().unwrap_or(target);
    refuse_unsafe_place(root)?;
    refuse_unsafe_place(target)?;
    let shm = root.parent().unwrap_or(root);
    let want = fs::canonicalize(shm)
        .map_err(|e| io_error(shm, e))?
        .join(target.strip_prefix(shm).unwrap_or(target));
    let got = fs::canonicalize(target).map_err(|e| io_error(target, e))?;
    if got != want {
        return Err(ReaderError::Stage {
            path: target.to_path_buf(),
            what: format!(
                "refusing to stage into {}: it leads to {}, not where it says",
                shown(target),
                shown(&got)
            ),
            kind: StageErrorKind::NotStagingFolder,
        });
    }
    Ok(got)
}

/// Refuses the default place of a copy ([`default_root`] or the folder in
/// it) when another user could have put it there or could change it: a
/// symlink (the copy would land where it points, maybe on a disk), a folder
/// of another user (root aside), or one every user may write to without
/// the sticky bit. `/dev/shm` is shared by every user of the machine, and
/// the default path is known in advance. Absent is fine: the run makes it.
fn refuse_unsafe_place(path: &Path) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error(path, e)),
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mode = meta.permissions().mode();
    let why = if meta.file_type().is_symlink() {
        Some("it is a symlink, so another user could redirect the copy; remove it".to_owned())
    } else if !meta.is_dir() {
        None // lock_target says it is not a directory
    } else if meta.uid() != me && meta.uid() != 0 {
        Some(format!(
            "it belongs to another user (uid {}), who could change the copy; only they or \
             root can remove it",
            meta.uid()
        ))
    } else if mode & 0o002 != 0 && mode & 0o1000 == 0 {
        Some(
            "every user may write to it and it lacks the sticky bit, so another user could \
             redirect or change the copy; `chmod o-w` or remove it"
                .to_owned(),
        )
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(why) => Err(ReaderError::Stage {
            path: path.to_path_buf(),
            what: format!(
                "refusing to stage into {}: {why}, or stage elsewhere with --to DIR",
                shown(path)
            ),
            kind: StageErrorKind::NotStagingFolder,
        }),
    }
}

fn refuse_nested(src: &Path, target: &Path, shown_target: &Path) -> Result<()> {
    if target.starts_with(src) || src.starts_with(target) {
        return Err(ReaderError::Stage {
            path: shown_target.to_path_buf(),
            what: format!(
                "cannot stage {} into {}: one contains the other",
                shown(src),
                shown(shown_target)
            ),
            kind: StageErrorKind::Nested,
        });
    }
    Ok(())
}

/// Creates `target` if needed and locks it: at once, or waiting for another
/// run with `wait`. Returns the lock and the folders this call created, the
/// target's parents first and the target last (empty when it was there).
fn lock_target(
    target: &Path,
    wait: bool,
    progress: &dyn StageProgress,
) -> Result<(DirLock, Vec<PathBuf>)> {
    let mut created = Vec::new();
    // The folder can be removed (a refused run cleans up) or mounted over
    // while this run waits: then lock what the path reaches now.
    for _ in 0..16 {
        match fs::metadata(target) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(ReaderError::Stage {
                    path: target.to_path_buf(),
                    what: format!(
                        "{} exists and is not a directory; refusing to write there",
                        shown(target)
                    ),
                    kind: StageErrorKind::NotStagingFolder,
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                create_dirs(target, &mut created)?;
            }
            Err(e) => return Err(io_error(target, e)),
        }
        let before = FileId::of(target);
        let lock = if wait {
            DirLock::lock_waiting(target, || {
                progress.message(&format!(
                    "waiting for another bale stage or unstage of {}",
                    shown(target)
                ));
            })?
        } else {
            DirLock::try_lock(target)?
        };
        if before.is_some() && FileId::of(target) == before {
            return Ok((lock, created));
        }
    }
    Err(io_error(
        target,
        std::io::Error::other("the folder kept changing while bale waited for its lock"),
    ))
}

/// Creates `target` and its missing parents one at a time, adding those it
/// created to `made`, in order. Each is recorded as the path it was made
/// at, so a `..` in `target` never makes an existing folder look created.
/// On an error the folders this call made are removed again.
fn create_dirs(target: &Path, made: &mut Vec<PathBuf>) -> Result<()> {
    let from = made.len();
    let mut at = PathBuf::new();
    for c in target.components() {
        at.push(c);
        if !matches!(c, Component::Normal(_)) {
            continue;
        }
        match fs::create_dir(&at) {
            Ok(()) => made.push(at.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                for d in made.drain(from..).rev() {
                    let _ = fs::remove_dir(d);
                }
                return Err(io_error(&at, e));
            }
        }
    }
    Ok(())
}

/// Whether `dir` holds nothing, or nothing but files named as bale's
/// temporary files when `temp_ok`: on a tmpfs bale mounted, a run killed
/// between its mount and its marker (written to such a file first, then
/// renamed) leaves no more.
pub(super) fn holds_nothing(dir: &Path, temp_ok: bool) -> Result<bool> {
    for e in fs::read_dir(dir).map_err(|e| io_error(dir, e))? {
        let e = e.map_err(|e| io_error(dir, e))?;
        let temp = temp_ok
            && e.file_name()
                .as_encoded_bytes()
                .starts_with(TEMP_PREFIX.as_bytes())
            && e.file_type().is_ok_and(|t| t.is_file());
        if !temp {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Removes temporary files of interrupted copies in `dir` and the directories of `rels`.
fn remove_temp_files(dir: &Path, rels: &[String]) {
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
    dirs.insert(dir.to_path_buf());
    for r in rels.iter().filter(|r| marker::is_plain_relative(r)) {
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

/// Files of the plan that are in the way in `target` and that bale did not
/// write (not listed in the marker found): a file (or something else) under
/// the name, or under one of its folders.
fn foreign_files(target: &Path, plan: &Plan, owned: &BTreeSet<String>) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for p in plan.files.iter().filter(|p| !owned.contains(&p.rel)) {
        let mut at = target.to_path_buf();
        let parts: Vec<_> = Path::new(&p.rel).components().collect();
        for (i, c) in parts.iter().enumerate() {
            at.push(c);
            let last = i + 1 == parts.len();
            match fs::symlink_metadata(&at) {
                Ok(m) if !last && m.is_dir() => continue,
                Ok(_) => found.push(at.clone()),
                Err(_) => {}
            }
            break;
        }
    }
    found
}

/// One staging run, once the target is locked.
struct Run<'a> {
    src: &'a Path,
    target: &'a Path,
    /// Whether this run created the folder (else it was there: the user's,
    /// or a staged copy's).
    created: bool,
    manifest: &'a Manifest,
    manifest_bytes: &'a [u8],
    hash: &'a str,
    options: &'a StageOptions,
    progress: &'a dyn StageProgress,
}

impl Run<'_> {
    fn summary(&self) -> StageSummary {
        StageSummary {
            target: self.target.to_path_buf(),
            source: self.src.to_path_buf(),
            files_copied: 0,
            bytes_copied: 0,
            files_kept: 0,
            bytes_kept: 0,
            reused: false,
            mounted: false,
        }
    }

    fn threads(&self) -> usize {
        match self.options.jobs {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            n => n,
        }
    }

    fn ctx<'b>(&'b self, owned: &'b BTreeSet<String>) -> Ctx<'b> {
        Ctx {
            src: self.src,
            target: self.target,
            manifest: self.manifest,
            owned,
            rules: NameRules::for_manifest(self.manifest),
            progress: self.progress,
            storage: &self.options.storage,
        }
    }

    fn stage(
        &self,
        plan: &mut Plan,
        lock: DirLock,
        wrote_marker: &mut bool,
    ) -> Result<StageSummary> {
        let mut lock = lock;
        let (target, progress) = (self.target, self.progress);
        let found = marker::read(target)?;
        // A tmpfs bale mounted (read once: only this run's mount changes it).
        let ours = sys::is_bale_tmpfs(target);
        let owned: BTreeSet<String> = found
            .as_ref()
            .map(|m| m.owned().into_iter().map(str::to_owned).collect())
            .unwrap_or_default();
        match &found {
            None => {
                if !holds_nothing(target, ours)? {
                    return Err(ReaderError::Stage {
                        path: target.to_path_buf(),
                        what: format!(
                            "{} is not empty and is not a bale staging folder (no {MARKER}); refusing to write into it",
                            shown(target)
                        ),
                        kind: StageErrorKind::NotStagingFolder,
                    });
                }
                remove_temp_files(target, &[]);
            }
            Some(mk) => {
                let staged_manifest = target.join(MANIFEST_NAME);
                let same = mk.manifest_xxh3 == self.hash;
                let complete = same
                    && Manifest::read_bytes(target).ok().as_deref() == Some(self.manifest_bytes);
                let mut failed_check = false;
                if complete {
                    match self.check_complete(plan, &owned) {
                        Ok(()) => {
                            progress.message(&format!(
                                "reusing the complete staged copy of {} at {} (same manifest{})",
                                shown(self.src),
                                shown(target),
                                if self.options.verify {
                                    ", verified"
                                } else {
                                    ""
                                }
                            ));
                            if self.options.mount
                                && let Ok(ram) = is_ram_backed(target)
                                && no_mount_needed(target, ram, ours, Some(mk)).is_none()
                            {
                                progress.message(&format!(
                                    "{} is not a tmpfs of bale's own, so not in 2 MiB pages: `bale unstage` it, then stage again with --mount to have them",
                                    shown(target)
                                ));
                            }
                            return Ok(StageSummary {
                                reused: true,
                                ..self.summary()
                            });
                        }
                        Err(why) => {
                            progress.message(&format!(
                                "the staged copy at {} fails its check ({why}): copying the damaged files again",
                                shown(target)
                            ));
                            failed_check = true;
                        }
                    }
                }
                // Not usable as it is: no reader may take it for a dataset from now on.
                if fs::symlink_metadata(&staged_manifest).is_ok() {
                    fs::remove_file(&staged_manifest).map_err(|e| io_error(&staged_manifest, e))?;
                }
                if !same {
                    progress.message(&format!(
                        "redoing the staged copy at {}: it holds another version of the dataset",
                        shown(target)
                    ));
                    let keep: BTreeSet<&str> = plan.files.iter().map(|p| p.rel.as_str()).collect();
                    for f in owned.iter().filter(|f| !keep.contains(f.as_str())) {
                        let _ = fs::remove_file(target.join(f));
                    }
                } else if !failed_check {
                    progress.message(&format!(
                        "resuming the half-finished staged copy at {}",
                        shown(target)
                    ));
                }
                remove_temp_files(target, &mk.files);
            }
        }
        let foreign = foreign_files(target, plan, &owned);
        if let Some(first) = foreign.first() {
            return Err(ReaderError::Stage {
                path: target.to_path_buf(),
                what: format!(
                    "{} is in the way of the staged copy and bale did not write it{}; refusing to replace it",
                    shown(first),
                    match foreign.len() {
                        1 => String::new(),
                        n => format!(" ({} more such files)", n - 1),
                    }
                ),
                kind: StageErrorKind::ForeignFiles { files: foreign },
            });
        }

        // The source, then space and memory, counting only what is still to copy.
        plan.check_sources(self.src, self.manifest)?;
        let to_copy = plan.to_copy(self.src, target)?;
        let assume = self.options.assume;
        let ram = is_ram_backed(target).map_err(|e| io_error(target, e))?;
        let will_mount = self.options.mount && {
            let why_not = no_mount_needed(target, ram, ours, found.as_ref());
            if let Some(why) = why_not {
                progress.message(&format!("{} {why}: not mounting", shown(target)));
            }
            why_not.is_none()
        };
        if will_mount {
            // The mount's size: the copy and its margin.
            let required = capacity::check(
                self.src,
                target,
                &capacity::Figures {
                    to_copy,
                    free: None,
                    memory: None,
                    allow_swap: true,
                },
            )?;
            if sys::is_mount_point(target) {
                // Someone else's file system: mounting over it would hide it.
                return Err(ReaderError::Stage {
                    path: target.to_path_buf(),
                    what: format!(
                        "{} is a mount point already; bale mounts its tmpfs only on a folder that is not one",
                        shown(target)
                    ),
                    kind: StageErrorKind::NotStagingFolder,
                });
            }
            if found.is_some() {
                // Mounting over it would hide it, and leave it behind.
                return Err(ReaderError::Stage {
                    path: target.to_path_buf(),
                    what: format!(
                        "{} holds a staged copy outside a tmpfs of bale's own; remove it before staging there with a tmpfs mount",
                        shown(target)
                    ),
                    kind: StageErrorKind::StagedWithoutMount,
                });
            }
            if !sys::is_root() || assume.not_root {
                let what = if ram {
                    "is on a tmpfs without 2 MiB pages, and mounting one of bale's own needs root"
                } else {
                    "is not a tmpfs, and mounting one needs root"
                };
                return Err(ReaderError::Stage {
                    path: target.to_path_buf(),
                    what: format!("{} {what}", shown(target)),
                    kind: StageErrorKind::NeedsRoot {
                        command: sys::mount_command(target, required),
                    },
                });
            }
        }
        let memory = if ram || will_mount || assume.mem_available.is_some() {
            Some(match assume.mem_available {
                Some(m) => m,
                None => sys::mem_available()?,
            })
        } else {
            None
        };
        let free = if will_mount {
            None
        } else {
            Some(match assume.free {
                Some(f) => f,
                None => sys::free_bytes(target)?,
            })
        };
        let required = capacity::check(
            self.src,
            target,
            &capacity::Figures {
                to_copy,
                free,
                memory,
                allow_swap: self.options.allow_swap,
            },
        )?;
        let mut mounted_now = false;
        if will_mount {
            sys::mount_tmpfs(target, required)?;
            mounted_now = true;
            progress.message(&format!(
                "mounted a tmpfs of {} at {}",
                sys::tmpfs_size_option(required).trim_start_matches("size="),
                shown(target)
            ));
            // The lock held so far is on the folder under the mount.
            lock = DirLock::try_lock(target).inspect_err(|_| {
                let _ = sys::unmount(target);
            })?;
            // Until the new lock, a `bale unstage` could take the empty
            // tmpfs for one a killed run left, and unmount it: then this
            // lock is on the folder under it, which is no place for the copy.
            if !sys::is_bale_tmpfs(target) {
                return Err(io_error(
                    target,
                    std::io::Error::other(
                        "the tmpfs bale mounted here was unmounted by another run (a bale unstage?) before the copy began; stage again",
                    ),
                ));
            }
        }

        // The marker first, then the files (indexes before shards), then the manifest.
        // A tmpfs of bale's without a marker: a run killed between its mount and its marker.
        let mounted = mounted_now || ours || found.as_ref().is_some_and(|m| m.mounted);
        // A folder that was there before the first stage into it stays
        // after unstage; a restage keeps what the first one found. A tmpfs
        // of bale's without a marker is a killed run's, whose folder it was
        // is not known: bale's, as `unstage` of it takes it.
        let kept = found.as_ref().map_or(!self.created && !ours, |m| m.kept);
        if let Err(e) = marker::write(
            target,
            &Marker {
                kept,
                ..Marker::new(self.src, self.hash.to_owned(), mounted, plan.rels())
            },
        ) {
            // Until the marker says so, nothing would ever unmount it.
            if mounted_now {
                drop(lock);
                let _ = sys::unmount(target);
            }
            return Err(e);
        }
        *wrote_marker = true;
        progress.start(plan.total(self.src)?);
        let ctx = self.ctx(&owned);
        let mut summary = StageSummary {
            mounted: mounted_now,
            ..self.summary()
        };
        for indexes in [true, false] {
            let files: Vec<_> = plan
                .files
                .iter()
                .filter(|p| matches!(p.what, What::Index { .. }) == indexes)
                .collect();
            let outcomes = copy::run_parallel(files.len(), self.threads(), |i| {
                copy::stage_file(&ctx, files[i])
            })?;
            for o in outcomes {
                match o {
                    Outcome::Copied(b) => {
                        summary.files_copied += 1;
                        summary.bytes_copied += b;
                    }
                    Outcome::Kept(b) => {
                        summary.files_kept += 1;
                        summary.bytes_kept += b;
                    }
                }
            }
        }
        write_atomic(target.join(MANIFEST_NAME), self.manifest_bytes)?;
        drop(lock);
        Ok(summary)
    }

    /// Checks a complete staged copy against the manifest: every file's
    /// type and size, every index's counts, checksum and shard length; with
    /// `verify`, every shard's bytes. Returns the first thing wrong.
    fn check_complete(&self, plan: &Plan, owned: &BTreeSet<String>) -> Result<(), String> {
        let ctx = self.ctx(owned);
        if self.options.verify {
            let shard_bytes = plan
                .files
                .iter()
                .filter(|p| matches!(p.what, What::Shard { .. }))
                .try_fold(0u64, |t, p| t.checked_add(p.len))
                .ok_or("the manifest's sizes pass 2^64")?;
            self.progress.start(shard_bytes);
        }
        for indexes in [true, false] {
            let files: Vec<_> = plan
                .files
                .iter()
                .filter(|p| matches!(p.what, What::Index { .. }) == indexes)
                .collect();
            copy::run_parallel(files.len(), self.threads(), |i| {
                copy::check_staged(&ctx, files[i], self.options.verify).map_err(|what| {
                    ReaderError::Stage {
                        path: self.target.join(&files[i].rel),
                        what,
                        kind: StageErrorKind::Damaged,
                    }
                })
            })
            .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
