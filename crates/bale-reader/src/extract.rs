//! Members of a sample written to files (`bale get -o`), defended against
//! names that would escape the directory.
//!
//! The key and extension must be plain relative names (no `..`, no
//! absolute path, as the index already guarantees), every directory on the
//! way is created or checked one component at a time and must not be a
//! symlink, and each file is written under a temporary name beside it
//! (`O_EXCL | O_NOFOLLOW`), then renamed into place: without `force` by a
//! rename that never replaces a file, with it by one that replaces the old
//! file whole (a new file: hard links to the old one keep the old bytes). A
//! write that fails leaves no cut-off file. Every target is checked before
//! any is written, and `force` never replaces a file of the dataset being
//! read (its manifest, a shard or an index, whatever path reaches it).

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use bale_format::atomic::AtomicFile;
use bale_format::files::{self, FileId};
use bale_format::{FormatError, MANIFEST_NAME, Manifest};

use crate::{Dataset, ReaderError, Result};

/// A target `get` refuses to write, and why.
fn refused(what: String) -> ReaderError {
    ReaderError::Refused { what }
}

/// The files of the dataset: its manifest, shards and indexes (those that
/// are local files).
fn dataset_files(ds: &Dataset) -> HashSet<FileId> {
    let dir = ds.dir();
    let mut paths = vec![dir.join(MANIFEST_NAME)];
    for e in &ds.manifest().shards {
        paths.push(Manifest::resolve(dir, &e.file));
        paths.push(Manifest::resolve(dir, &e.index));
    }
    paths.iter().filter_map(|p| FileId::of(p)).collect()
}

/// Where members read from a dataset may be written (`bale get`).
#[derive(Debug)]
pub struct Targets {
    /// `--force`: existing files may be replaced.
    force: bool,
    /// The dataset's own files, never replaced.
    dataset: HashSet<FileId>,
    /// The dataset's directory, for the error.
    dir: PathBuf,
}

impl Targets {
    /// The targets of members of `ds`: with `force`, existing files may be
    /// replaced, never one of the dataset's own (its manifest, a shard or
    /// an index, whatever path reaches it).
    pub fn new(ds: &Dataset, force: bool) -> Self {
        Self {
            force,
            dataset: dataset_files(ds),
            dir: ds.dir().to_path_buf(),
        }
    }

    /// Checks that `path` may be written: it does not exist (or, with
    /// `--force`, is a regular file that is none of the dataset's), and it
    /// is not a symlink.
    pub fn check(&self, path: &Path) -> Result<()> {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return Ok(());
        };
        if meta.file_type().is_symlink() {
            return Err(refused(format!(
                "{} is a symlink; refusing to write through it",
                bale_format::shown(path)
            )));
        }
        if !self.force {
            return Err(refused(format!(
                "{} already exists; use --force to overwrite it",
                bale_format::shown(path)
            )));
        }
        if !meta.is_file() {
            return Err(refused(format!(
                "{} is {}; --force replaces regular files only (write to stdout to feed a pipe)",
                bale_format::shown(path),
                files::kind_of(&meta)
            )));
        }
        if self.dataset.contains(&FileId::of_meta(&meta)) {
            return Err(refused(format!(
                "{} is a file of the dataset {} being read (its manifest, a shard or an index); \
                 refusing to overwrite it, even with --force",
                bale_format::shown(path),
                bale_format::shown(&self.dir)
            )));
        }
        Ok(())
    }

    /// Writes `data` to `path` (checked first) under a temporary name,
    /// then puts it in place ([`commit`]).
    ///
    /// # Errors
    /// What [`Targets::check`] refuses; the write's.
    pub fn write(&self, path: &Path, data: &[u8]) -> Result<()> {
        self.check(path)?;
        commit(staged(path, data)?, self.force)
    }
}

/// `data` written to a temporary file beside `path` (removed if dropped
/// before [`commit`]): a write that fails (a full disk) leaves neither a
/// cut-off file under the name nor an old file cut.
fn staged(path: &Path, data: &[u8]) -> Result<AtomicFile> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(data).map_err(|source| ReaderError::Write {
        path: f.tmp_path().to_path_buf(),
        source,
    })?;
    Ok(f)
}

/// Puts a [`staged`] file in place: by a rename that never replaces a file,
/// or with `force` one that replaces it whole.
fn commit(f: AtomicFile, force: bool) -> Result<()> {
    let path = f.dest().to_path_buf();
    let done = if force {
        f.commit_replacing()
    } else {
        f.commit()
    };
    done.map_err(|e| match e {
        FormatError::Exists { .. } => refused(format!(
            "{} already exists; use --force to overwrite it",
            bale_format::shown(&path)
        )),
        e => e.into(),
    })
}

/// Writes every `(extension, bytes)` of the sample `key` to `<dir>/<key>.<ext>`; returns the files
/// written. Every name and target is checked before any is written
/// ([`Targets::check`]), and directories are created one component at a
/// time, never through a symlink. A write that fails removes the files this
/// run created.
pub fn write_sample(
    members: &[(String, Vec<u8>)],
    key: &str,
    dir: &Path,
    targets: &Targets,
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|source| ReaderError::Create {
        path: dir.to_path_buf(),
        source,
    })?;
    let rels: Vec<PathBuf> = members
        .iter()
        .map(|(ext, _)| files::member_path(key, ext))
        .collect::<std::result::Result<_, _>>()?;
    for rel in &rels {
        files::create_parents(dir, rel)?;
        targets.check(&dir.join(rel))?;
    }
    // Every member is written under a temporary name first: a write that
    // fails changes nothing. Then each takes its name.
    let mut files = Vec::with_capacity(rels.len());
    for ((_, data), rel) in members.iter().zip(&rels) {
        files.push(staged(&dir.join(rel), data)?);
    }
    let mut written = Vec::new();
    let mut created = Vec::new();
    let result = (|| {
        for f in files {
            let path = f.dest().to_path_buf();
            let existed = std::fs::symlink_metadata(&path).is_ok();
            commit(f, targets.force)?;
            if !existed {
                created.push(path.clone());
            }
            written.push(path);
        }
        Ok::<_, ReaderError>(())
    })();
    if let Err(e) = result {
        for p in &created {
            let _ = std::fs::remove_file(p);
        }
        return Err(e);
    }
    Ok(written)
}
