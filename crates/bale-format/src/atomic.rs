//! Atomic file creation: write under a temporary name, then rename into place.
//!
//! A commit never replaces a file it finds under the final name: bale creates
//! files, and removes one only where a command's rules allow it (its own
//! output under `--force`). [`AtomicFile::commit_replacing`] is for the few
//! files a command owns and rewrites (a staging folder's marker).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{FormatError, Result};
use crate::files::rename_noreplace;

/// Prefix of every temporary file bale writes; `bale` tools ignore and clean up such files.
pub const TEMP_PREFIX: &str = ".bale-tmp-";

/// The part of a local temporary name after `.bale-tmp-<pid>-`, the shape
/// every temporary file and folder bale makes in a directory has; `None`
/// for any other name (`.bale-tmp-notes` is not bale's).
pub fn temp_name_rest(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(TEMP_PREFIX)?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    rest[digits..].strip_prefix('-')
}

/// What the mark of a `bale pack --append` run (`.bale-tmp-<pid>-run`,
/// in the dataset from before its first shard lands until its manifest is
/// written) holds. A run killed in between leaves it beside the old
/// manifest: the files of bale's shard names that manifest does not list
/// are then that run's leftovers, which the next append or `--force`
/// removes (and `bale verify` reports as warnings, not problems).
pub const APPEND_MARK: &[u8] = b"append\n";

/// Whether `dir` holds the mark of an append ([`APPEND_MARK`]) of any
/// process. A directory that cannot be listed holds none.
pub fn has_append_mark(dir: &Path) -> bool {
    let Ok(entries) = fs::read_dir(dir) else {
        return false;
    };
    entries.filter_map(Result::ok).any(|e| {
        e.file_name()
            .to_str()
            .and_then(temp_name_rest)
            .is_some_and(|rest| rest == "run")
            && e.file_type().is_ok_and(|t| t.is_file())
            && crate::files::read_capped(&e.path(), 64, "run mark").is_ok_and(|b| b == APPEND_MARK)
    })
}

/// The longest file name (bytes) of the file systems bale writes to.
const NAME_MAX: usize = 255;

/// A file being written under a temporary name in its final directory.
///
/// [`AtomicFile::commit`] flushes it to disk and renames it into place. Dropped
/// without a commit, the temporary file is removed: a reader never sees a
/// half-written file under the final name.
#[derive(Debug)]
pub struct AtomicFile {
    file: Option<File>,
    tmp: PathBuf,
    dest: PathBuf,
}

impl AtomicFile {
    /// Creates the temporary file for `dest` (in `dest`'s directory).
    ///
    /// # Errors
    /// I/O errors creating the file, naming it.
    pub fn create(dest: impl Into<PathBuf>) -> Result<Self> {
        let dest = dest.into();
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut tmp_name = format!("{TEMP_PREFIX}{}-{name}", std::process::id());
        if tmp_name.len() > NAME_MAX {
            // A name near the file system's limit: the prefix would push it
            // over, so the temporary file is named by a hash of the name.
            tmp_name = format!(
                "{TEMP_PREFIX}{}-{:016x}",
                std::process::id(),
                crate::hash::xxh3_64(name.as_bytes())
            );
        }
        let tmp = dest.with_file_name(tmp_name);
        // A new file, never one reached through a symlink planted under the
        // temporary name; a stale temporary file of an earlier process with
        // this pid is ours to replace.
        let open = || {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)
        };
        let file = match open() {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                fs::remove_file(&tmp).map_err(|e| FormatError::io(&tmp, e))?;
                open()
            }
            r => r,
        }
        .map_err(|e| FormatError::io(&tmp, e))?;
        Ok(Self {
            file: Some(file),
            tmp,
            dest,
        })
    }

    /// The final path.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// The temporary path being written.
    pub fn tmp_path(&self) -> &Path {
        &self.tmp
    }

    /// The open file.
    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("file present until commit")
    }

    /// Syncs the data, renames the file into place and syncs the directory.
    /// A file already at the destination is left as it is, and the commit fails.
    ///
    /// # Errors
    /// [`FormatError::Exists`] when the destination exists; I/O errors,
    /// naming the file. The temporary file is removed.
    pub fn commit(self) -> Result<()> {
        self.commit_with(false)
    }

    /// As [`AtomicFile::commit`], but replaces a file at the destination.
    ///
    /// # Errors
    /// I/O errors, naming the file; the temporary file is removed.
    pub fn commit_replacing(self) -> Result<()> {
        self.commit_with(true)
    }

    fn commit_with(mut self, replace: bool) -> Result<()> {
        let file = self.file.take().expect("file present until commit");
        let scratch = is_scratch(&self.dest);
        let synced = if scratch { Ok(()) } else { file.sync_all() };
        drop(file);
        let result = synced
            .map_err(|e| FormatError::io(&self.tmp, e))
            .and_then(|()| {
                let renamed = if replace {
                    fs::rename(&self.tmp, &self.dest)
                } else {
                    rename_noreplace(&self.tmp, &self.dest)
                };
                renamed.map_err(|e| {
                    if e.kind() == io::ErrorKind::AlreadyExists {
                        FormatError::Exists {
                            path: self.dest.clone(),
                        }
                    } else {
                        FormatError::io(&self.dest, e)
                    }
                })
            });
        if result.is_err() {
            let _ = fs::remove_file(&self.tmp);
            return result;
        }
        if !scratch {
            sync_dir(&self.dest);
        }
        Ok(())
    }
}

/// Directories whose files need not reach the disk (see [`mark_scratch`]).
static SCRATCH: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Marks `dir` as scratch for this process: files committed under it are
/// renamed into place without `fsync`. For a spool whose files are copied
/// elsewhere and then removed (the local spool of a pack to object storage,
/// where the upload is what makes the dataset durable); never for an output.
pub fn mark_scratch(dir: &Path) {
    SCRATCH
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(dir.to_path_buf());
}

fn is_scratch(path: &Path) -> bool {
    let dirs = SCRATCH.lock().unwrap_or_else(|p| p.into_inner());
    !dirs.is_empty() && dirs.iter().any(|d| path.starts_with(d))
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file().write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file().flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Syncs the directory holding `path` so a rename in it is durable (best effort).
pub fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// Writes `bytes` to the new file `dest` atomically.
///
/// # Errors
/// [`FormatError::Exists`] when `dest` exists; I/O errors, naming the file.
pub fn write_atomic(dest: impl Into<PathBuf>, bytes: &[u8]) -> Result<()> {
    let mut f = AtomicFile::create(dest)?;
    let tmp = f.tmp_path().to_path_buf();
    f.write_all(bytes).map_err(|e| FormatError::io(tmp, e))?;
    f.commit()
}

/// Writes `bytes` to `dest` atomically, replacing a file there.
///
/// # Errors
/// I/O errors, naming the file.
pub fn replace_atomic(dest: impl Into<PathBuf>, bytes: &[u8]) -> Result<()> {
    let mut f = AtomicFile::create(dest)?;
    let tmp = f.tmp_path().to_path_buf();
    f.write_all(bytes).map_err(|e| FormatError::io(tmp, e))?;
    f.commit_replacing()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_near_the_limit_is_written_through_a_temporary_name_that_fits() {
        let dir = tempfile::tempdir().unwrap();
        let name = "k".repeat(NAME_MAX - 4) + ".txt";
        let dest = dir.path().join(&name);
        write_atomic(&dest, b"whole").unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"whole");
        replace_atomic(&dest, b"again").unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"again");
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left");
    }
}
