//! How bale opens the files it reads and guards the directories it writes.
//!
//! - [`open_regular`] opens a file that must be a regular file: without
//!   blocking on a FIFO, and refusing devices, FIFOs and sockets by what the
//!   opened descriptor is (so a file swapped after a check cannot slip in).
//! - [`read_capped`] reads such a file whole, refusing one larger than a cap.
//! - [`DirLock`] is an exclusive `flock` on a directory: every command that
//!   writes a dataset holds one on its output, and a second writer fails at
//!   once. The kernel releases it when the process ends, however it ends.
//! - [`FileId`] names a file by device and inode, to tell whether two paths
//!   reach the same file (an output that is also an input).
//!
//! docs/reliability.md lists the promises these hold.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{FormatError, Result};
use crate::regular::clear_nonblock;
pub use crate::regular::{kind_of, open_regular};

/// Reads the regular file at `path` whole, refusing one larger than `cap`
/// bytes (also one that grows past it while being read); `what` names the
/// file's role in the error (`"manifest"`).
///
/// # Errors
/// As [`open_regular`]; [`FormatError::Limit`] when the file is larger than `cap`.
pub fn read_capped(path: &Path, cap: u64, what: &str) -> Result<Vec<u8>> {
    if crate::read_at::is_url(path) {
        let (src, len) = crate::read_at::open(path)?;
        if len > cap {
            return Err(FormatError::Limit {
                path: path.to_path_buf(),
                what: format!(
                    "{len} bytes is larger than any {what} bale writes (at most {cap} bytes)"
                ),
            });
        }
        let mut bytes = vec![0u8; len as usize];
        src.read_exact_at(&mut bytes, 0)
            .map_err(|e| FormatError::io(path, e))?;
        return Ok(bytes);
    }
    let file = open_regular(path)?;
    let len = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
    let too_large = |len: u64| FormatError::Limit {
        path: path.to_path_buf(),
        what: format!("{len} bytes is larger than any {what} bale writes (at most {cap} bytes)"),
    };
    if len > cap {
        return Err(too_large(len));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| FormatError::io(path, e))?;
    if bytes.len() as u64 > cap {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// A file's identity: device and inode. Two paths with equal ids reach the
/// same file (through symlinks, hard links or `..`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The id of a file from its metadata.
    pub fn of_meta(meta: &Metadata) -> Self {
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }

    /// The id of the file `path` reaches (following symlinks), or `None`
    /// when it cannot be stat'ed.
    pub fn of(path: &Path) -> Option<Self> {
        std::fs::metadata(path).ok().map(|m| Self::of_meta(&m))
    }
}

/// An exclusive lock on a directory (`flock` on the directory itself, so no
/// lock file is left behind), released when dropped or when the process
/// ends, however it ends.
#[derive(Debug)]
pub struct DirLock {
    _dir: File,
}

impl DirLock {
    /// Locks `dir`, failing at once if another process holds the lock.
    ///
    /// # Errors
    /// [`FormatError::Locked`] when another process holds it; I/O errors.
    pub fn try_lock(dir: &Path) -> Result<Self> {
        let file = File::open(dir).map_err(|e| FormatError::io(dir, e))?;
        if flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            return Ok(DirLock { _dir: file });
        }
        Err(FormatError::Locked {
            dir: dir.to_path_buf(),
        })
    }

    /// Locks `dir`, waiting for another holder to release it; `waiting` is
    /// called once if the lock is held at first.
    ///
    /// # Errors
    /// I/O errors.
    pub fn lock_waiting(dir: &Path, waiting: impl FnOnce()) -> Result<Self> {
        let file = File::open(dir).map_err(|e| FormatError::io(dir, e))?;
        if !flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            waiting();
            if !flock(&file, libc::LOCK_EX)? {
                return Err(FormatError::io(
                    dir,
                    io::Error::other("the lock was not granted"),
                ));
            }
        }
        Ok(DirLock { _dir: file })
    }
}

/// `flock(fd, op)`: `Ok(false)` when a non-blocking request finds the lock held.
fn flock(file: &File, op: libc::c_int) -> Result<bool> {
    loop {
        // SAFETY: flock on a descriptor `file` owns.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(false),
            _ => return Err(FormatError::io(PathBuf::from("<lock>"), e)),
        }
    }
}

/// Renames `from` to `to` unless `to` exists (then the error kind is
/// `AlreadyExists` and nothing changes). Atomic where the file system
/// supports `RENAME_NOREPLACE` (ext4, xfs, btrfs, tmpfs); elsewhere the
/// check and the rename are two steps, which the output's [`DirLock`]
/// keeps other bale commands out of.
///
/// # Errors
/// The OS error.
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let f = CString::new(from.as_os_str().as_bytes())?;
        let t = CString::new(to.as_os_str().as_bytes())?;
        // The system call, not glibc's wrapper (glibc 2.28 on): the wheel
        // links against glibc 2.17. A kernel without it (before 3.15) says
        // ENOSYS, a file system without RENAME_NOREPLACE EINVAL: both take
        // the two-step path below.
        // SAFETY: two valid NUL-terminated paths, relative to the current
        // directory, each argument of the type the kernel takes.
        let r = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                f.as_ptr(),
                libc::AT_FDCWD,
                t.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) {
            return Err(e);
        }
    }
    if std::fs::symlink_metadata(to).is_ok() {
        return Err(io::Error::from(io::ErrorKind::AlreadyExists));
    }
    std::fs::rename(from, to)
}

/// The path, relative to an output directory, of member `ext` of sample
/// `key` written as a file (`bale get -o`, `bale convert --format dir`):
/// plain components only, never absolute or `..`.
///
/// # Errors
/// [`FormatError::InvalidName`] for a key or extension that would escape
/// the directory.
pub fn member_path(key: &str, ext: &str) -> Result<PathBuf> {
    let name = format!("{key}.{ext}");
    let escape = |reason| {
        Err(FormatError::InvalidName {
            name: name.clone(),
            reason,
        })
    };
    if crate::validate_key(key).is_err() {
        return escape(
            "the key would escape the output directory (absolute, `..`, or not a plain relative path)",
        );
    }
    if crate::name::validate_ext(ext).is_err() {
        return escape("the extension would escape the output directory");
    }
    let path = PathBuf::from(&name);
    if !path
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)))
    {
        return escape("the key would escape the output directory");
    }
    Ok(path)
}

/// Creates the directories of the relative path `rel` under `root`, one
/// component at a time, refusing any that exists as something other than a
/// real directory (a symlink above all): nothing written below can land
/// outside `root`.
///
/// # Errors
/// [`FormatError::InTheWay`] naming the component; I/O errors.
pub fn create_parents(root: &Path, rel: &Path) -> Result<()> {
    let mut at = root.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for c in &parts[..parts.len().saturating_sub(1)] {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(m) => {
                return Err(FormatError::InTheWay {
                    path: at,
                    kind: kind_of(&m),
                });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir(&at).map_err(|e| FormatError::io(&at, e))?;
            }
            Err(e) => return Err(FormatError::io(&at, e)),
        }
    }
    Ok(())
}

/// Creates the file `path` for writing, never through a symlink at its last
/// component. An existing file is an error, unless `replace`, which
/// truncates it.
///
/// # Errors
/// [`FormatError::Exists`]; [`FormatError::InTheWay`] for a symlink; I/O errors.
pub fn create_file(path: &Path, replace: bool) -> Result<File> {
    let mut o = OpenOptions::new();
    // O_NONBLOCK: an existing FIFO without a reader fails (ENXIO) instead
    // of blocking; it changes nothing for a regular file.
    o.write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK);
    if replace {
        // No O_TRUNC: only a regular file, checked below, is cut.
        o.create(true);
    } else {
        o.create_new(true);
    }
    let not_regular = |meta: &Metadata| FormatError::InTheWay {
        path: path.to_path_buf(),
        kind: kind_of(meta),
    };
    let file = o.open(path).map_err(|e| match e.kind() {
        io::ErrorKind::AlreadyExists => FormatError::Exists {
            path: path.to_path_buf(),
        },
        _ if e.raw_os_error() == Some(libc::ELOOP) => FormatError::InTheWay {
            path: path.to_path_buf(),
            kind: "a symlink",
        },
        _ => match std::fs::symlink_metadata(path) {
            Ok(meta) if !meta.is_file() => not_regular(&meta),
            _ => FormatError::io(path, e),
        },
    })?;
    let meta = file.metadata().map_err(|e| FormatError::io(path, e))?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    clear_nonblock(&file);
    file.set_len(0).map_err(|e| FormatError::io(path, e))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_and_devices_are_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("shard-000000.tar");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let err = open_regular(&fifo).unwrap_err();
        assert!(
            matches!(err, FormatError::NotRegular { kind: "a FIFO", .. }),
            "{err}"
        );
        let link = d.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let err = read_capped(&link, 1 << 20, "manifest").unwrap_err();
        assert!(err.to_string().contains("a device"), "{err}");
        let err = open_regular(d.path()).unwrap_err();
        assert!(err.to_string().contains("a directory"), "{err}");
    }

    #[test]
    fn read_capped_refuses_large_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m");
        std::fs::write(&p, vec![b'x'; 100]).unwrap();
        assert_eq!(read_capped(&p, 100, "manifest").unwrap().len(), 100);
        let err = read_capped(&p, 99, "manifest").unwrap_err();
        assert!(
            err.to_string().contains("larger than any manifest"),
            "{err}"
        );
    }

    #[test]
    fn a_second_lock_fails_at_once_and_the_first_releases_on_drop() {
        let d = tempfile::tempdir().unwrap();
        let first = DirLock::try_lock(d.path()).unwrap();
        let err = DirLock::try_lock(d.path()).unwrap_err();
        assert!(matches!(err, FormatError::Locked { .. }), "{err}");
        drop(first);
        DirLock::try_lock(d.path()).unwrap();
    }

    #[test]
    fn member_files_never_escape_or_write_through_links() {
        assert_eq!(member_path("a/b", "jpg").unwrap(), PathBuf::from("a/b.jpg"));
        for (k, e) in [
            ("../x", "jpg"),
            ("/etc/passwd", "x"),
            ("a", "b/../../c"),
            ("a/../../b", "x"),
            ("a/./b", "x"),
            ("x", ".."),
        ] {
            assert!(member_path(k, e).is_err(), "{k} {e}");
        }
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("a")).unwrap();
        let err = create_parents(d.path(), Path::new("a/0001.bin")).unwrap_err();
        assert!(
            err.to_string().contains("refusing to write through it"),
            "{err}"
        );
        create_parents(d.path(), Path::new("b/c/0001.bin")).unwrap();
        assert!(d.path().join("b/c").is_dir());
        let f = d.path().join("b/c/0001.bin");
        create_file(&f, false).unwrap();
        assert!(matches!(
            create_file(&f, false),
            Err(FormatError::Exists { .. })
        ));
        create_file(&f, true).unwrap();
        std::os::unix::fs::symlink(outside.path().join("x"), d.path().join("l")).unwrap();
        let err = create_file(&d.path().join("l"), true).unwrap_err();
        assert!(err.to_string().contains("is a symlink"), "{err}");
        assert!(!outside.path().join("x").exists());
        // A FIFO nobody reads, a directory or a device: refused at once, even
        // when replacing (opening the FIFO for writing would block).
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        for (p, kind) in [
            (fifo.as_path(), "a FIFO"),
            (d.path(), "a directory"),
            (Path::new("/dev/null"), "a device"),
        ] {
            let err = create_file(p, true).unwrap_err();
            assert!(err.to_string().contains(kind), "{err}");
        }
        // A regular file replaced is cut to nothing first.
        std::fs::write(&f, b"longer than what follows").unwrap();
        std::io::Write::write_all(&mut create_file(&f, true).unwrap(), b"new").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
    }

    #[test]
    fn rename_noreplace_keeps_an_existing_file() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::write(&a, b"new").unwrap();
        std::fs::write(&b, b"user's").unwrap();
        let e = rename_noreplace(&a, &b).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&b).unwrap(), b"user's");
        std::fs::remove_file(&b).unwrap();
        rename_noreplace(&a, &b).unwrap();
        assert_eq!(std::fs::read(&b).unwrap(), b"new");
    }
}
