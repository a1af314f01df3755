//! Opening a file that must be a regular file ([`open_regular`]), the one
//! step below both [`crate::files`] (which re-exports it) and
//! [`crate::read_at`] (which opens local paths with it).

use std::fs::{File, Metadata, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::error::{FormatError, Result};

/// What a file that is not a regular file is, in words (`"a FIFO"`).
pub fn kind_of(meta: &Metadata) -> &'static str {
    let ft = meta.file_type();
    if ft.is_file() {
        "a regular file"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else if ft.is_symlink() {
        "a symlink"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading, which must be a regular file (a symlink to one
/// is followed). The open does not block on a FIFO, and the type is checked
/// on the opened descriptor.
///
/// # Errors
/// [`FormatError::NotRegular`] for a FIFO, device, socket or directory; I/O
/// errors, naming the file.
pub fn open_regular(path: &Path) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| FormatError::io(path, e))?;
    let meta = file.metadata().map_err(|e| FormatError::io(path, e))?;
    if !meta.is_file() {
        return Err(FormatError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(&meta),
        });
    }
    clear_nonblock(&file);
    Ok(file)
}

/// Clears the `O_NONBLOCK` a regular file was opened with so as not to
/// block on a FIFO: it only mattered for the open (regular files ignore it,
/// some FUSE file systems may not), so a descriptor handed on behaves as
/// usual.
pub(crate) fn clear_nonblock(file: &File) {
    // SAFETY: fcntl on a descriptor `file` owns; a failure leaves the flag,
    // which regular files ignore.
    unsafe {
        let fd = file.as_raw_fd();
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
}
