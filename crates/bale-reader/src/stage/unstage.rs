//! Removing a staged copy: only a folder with bale's marker, only the files
//! bale wrote there (unless forced), the manifest first and the marker last.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use bale_format::MANIFEST_NAME;
use bale_format::atomic::TEMP_PREFIX;
use bale_format::files::DirLock;
use bale_format::shown;

use super::marker::{self, MARKER};
use super::{io_error, sys};
use crate::error::{ReaderError, Result, StageErrorKind};

/// What [`unstage`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnstageSummary {
    /// The folder removed (its canonical path).
    pub dir: PathBuf,
    /// Files removed (the marker and the manifest included).
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Whether the folder was a tmpfs bale mounted, now unmounted.
    pub unmounted: bool,
    /// Whether the folder is a mount point bale did not make (a tmpfs
    /// mounted by hand for the copy): its files are gone, the folder stays,
    /// still mounted.
    pub kept_mount_point: bool,
    /// Whether the folder was there before bale staged into it (the user's,
    /// given with `--to`): emptied (and unmounted), and left in place.
    pub kept_folder: bool,
}

/// Removes the staged copy in `dir`: a folder [`super::stage`] wrote (it
/// holds the [`MARKER`]); a tmpfs bale mounted there is unmounted, and a
/// mount point bale did not make is emptied but left in place, mounted. Files
/// bale did not write make it refuse, unless `force` (then they go too). An
/// empty tmpfs of bale's without a marker (a stage killed between its mount
/// and its marker) is unmounted.
///
/// # Errors
/// [`ReaderError::Stage`]: [`StageErrorKind::NotStagingFolder`] without a
/// marker, [`StageErrorKind::ForeignFiles`] (listing them) without `force`,
/// [`StageErrorKind::Unmount`]; [`bale_format::FormatError::Locked`] when
/// another run holds the folder; I/O errors.
pub fn unstage(dir: &Path, force: bool) -> Result<UnstageSummary> {
    let dir = fs::canonicalize(dir).map_err(|e| io_error(dir, e))?;
    let not_ours = || ReaderError::Stage {
        path: dir.clone(),
        what: format!(
            "{} is not a bale staging folder (it has no {MARKER}); refusing to delete anything",
            shown(&dir)
        ),
        kind: StageErrorKind::NotStagingFolder,
    };
    if marker::read(&dir)?.is_none() && !sys::is_bale_tmpfs(&dir) {
        return Err(not_ours());
    }
    let lock = DirLock::try_lock(&dir)?;
    // Read again under the lock: another run may have changed it.
    let Some(marker) = marker::read(&dir)? else {
        return unmount_empty(&dir, lock).ok_or_else(not_ours)?;
    };
    let mut known: BTreeSet<PathBuf> = marker.owned().into_iter().map(|f| dir.join(f)).collect();
    known.insert(dir.join(MANIFEST_NAME));
    known.insert(dir.join(MARKER));
    let mut ours = Vec::new();
    let mut unexpected = Vec::new();
    let mut subdirs = Vec::new();
    walk(&dir, &mut |p: &Path, is_dir: bool| {
        let temp = p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(TEMP_PREFIX));
        if is_dir {
            subdirs.push(p.to_path_buf());
        } else if known.contains(p) || temp {
            ours.push(p.to_path_buf());
        } else {
            unexpected.push(p.to_path_buf());
        }
    })?;
    if !unexpected.is_empty() && !force {
        let list: Vec<String> = unexpected
            .iter()
            .take(5)
            .map(|p| shown(p).to_string())
            .collect();
        let more = if unexpected.len() > 5 {
            format!(" and {} more", unexpected.len() - 5)
        } else {
            String::new()
        };
        return Err(ReaderError::Stage {
            path: dir.clone(),
            what: format!(
                "{} holds files bale did not write: {}{more}; refusing to delete them",
                shown(&dir),
                list.join(", ")
            ),
            kind: StageErrorKind::ForeignFiles { files: unexpected },
        });
    }
    let all: Vec<&PathBuf> = ours.iter().chain(&unexpected).collect();
    let bytes: u64 = all
        .iter()
        .filter_map(|p| fs::symlink_metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let files = all.len() as u64;
    let mount_point = sys::is_mount_point(&dir);
    if mount_point && (marker.mounted || sys::is_bale_tmpfs(&dir)) {
        drop(lock); // An open descriptor on the mount would make it busy.
        sys::unmount(&dir)?;
        if !marker.kept {
            let _ = fs::remove_dir(&dir);
        }
        return Ok(UnstageSummary {
            dir,
            files,
            bytes,
            unmounted: true,
            kept_mount_point: false,
            kept_folder: marker.kept,
        });
    }
    // The manifest first (no reader takes a half-deleted copy for a
    // dataset), the marker last (until then the folder is recognisably bale's).
    let rm = |p: &Path| -> Result<()> {
        match fs::remove_file(p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(p, e)),
        }
    };
    rm(&dir.join(MANIFEST_NAME))?;
    for p in &all {
        if p.file_name()
            .is_some_and(|n| n != MARKER && n != MANIFEST_NAME)
            || p.parent() != Some(dir.as_path())
        {
            rm(p)?;
        }
    }
    for d in &subdirs {
        fs::remove_dir(d).map_err(|e| io_error(d, e))?;
    }
    rm(&dir.join(MARKER))?;
    drop(lock);
    // A mount point cannot be removed; one bale did not mount is not bale's
    // to unmount; a folder that was there before the stage is not bale's.
    if !mount_point && !marker.kept {
        fs::remove_dir(&dir).map_err(|e| io_error(&dir, e))?;
    }
    Ok(UnstageSummary {
        dir,
        files,
        bytes,
        unmounted: false,
        kept_mount_point: mount_point,
        kept_folder: marker.kept,
    })
}

/// Unmounts the tmpfs bale mounted at `dir` and removes the folder, when it
/// holds nothing but bale's temporary files: what a run killed between its
/// mount and its marker leaves. None when `dir` is not such a tmpfs, or
/// holds anything else (files without a marker are not bale's to delete).
fn unmount_empty(dir: &Path, lock: DirLock) -> Option<Result<UnstageSummary>> {
    if !sys::is_bale_tmpfs(dir) || !super::holds_nothing(dir, true).ok()? {
        return None;
    }
    drop(lock); // An open descriptor on the mount would make it busy.
    Some(sys::unmount(dir).map(|()| {
        let _ = fs::remove_dir(dir);
        UnstageSummary {
            dir: dir.to_path_buf(),
            files: 0,
            bytes: 0,
            unmounted: true,
            kept_mount_point: false,
            kept_folder: false,
        }
    }))
}

/// Calls `visit` on every entry under `dir`, contents before their folder,
/// without following symlinks.
fn walk(dir: &Path, visit: &mut dyn FnMut(&Path, bool)) -> Result<()> {
    for e in fs::read_dir(dir).map_err(|e| io_error(dir, e))? {
        let e = e.map_err(|e| io_error(dir, e))?;
        let path = e.path();
        let is_dir = e.file_type().map_err(|e| io_error(&path, e))?.is_dir();
        if is_dir {
            walk(&path, visit)?;
        }
        visit(&path, is_dir);
    }
    Ok(())
}
