//! Positioned reads from a local file or from an object in a bucket:
//! [`ReadAt`], the one interface the scan (`bale index`) and the checks
//! (`bale verify`) read shards through.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

/// Bytes by position. Implemented for [`File`] (`pread`) and, in
/// `bale-storage`, for objects in a bucket (ranged GETs).
pub trait ReadAt: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; 0 at the end.
    ///
    /// # Errors
    /// I/O errors.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;

    /// The source's length, when it is cheap to know.
    fn len_hint(&self) -> Option<u64> {
        None
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    ///
    /// # Errors
    /// `UnexpectedEof` when the source ends first; I/O errors.
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "failed to fill whole buffer",
                    ));
                }
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, offset)
    }

    fn len_hint(&self) -> Option<u64> {
        self.metadata().ok().map(|m| m.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (**self).read_at(buf, offset)
    }

    fn len_hint(&self) -> Option<u64> {
        (**self).len_hint()
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_exact_at(buf, offset)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for Box<T> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (**self).read_at(buf, offset)
    }

    fn len_hint(&self) -> Option<u64> {
        (**self).len_hint()
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_exact_at(buf, offset)
    }
}

/// A [`Read`] over a [`ReadAt`], from offset 0 on.
#[derive(Debug)]
pub struct SeqRead<R> {
    src: R,
    pos: u64,
}

impl<R: ReadAt> SeqRead<R> {
    /// Reads `src` from its start.
    pub fn new(src: R) -> Self {
        SeqRead { src, pos: 0 }
    }
}

impl<R: ReadAt> Read for SeqRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.src.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Opens a URL for positioned reads: the source and its length.
pub type UrlOpener = dyn Fn(&str) -> io::Result<(Box<dyn ReadAt>, u64)> + Send + Sync;

static OPENER: std::sync::RwLock<Option<std::sync::Arc<UrlOpener>>> = std::sync::RwLock::new(None);

/// Installs the function that opens URLs (`s3://...`) wherever this crate
/// opens a file by path ([`open`]: the scan, the checks, indexes and
/// manifests): the storage layer (`bale-storage`) installs one with the
/// process's storage options. This crate itself reads no network.
pub fn set_url_opener(opener: std::sync::Arc<UrlOpener>) {
    *OPENER.write().unwrap_or_else(|p| p.into_inner()) = Some(opener);
}

/// Whether `p` is written as a URL (`scheme://...`).
pub fn is_url(p: &std::path::Path) -> bool {
    p.to_str().is_some_and(|s| {
        s.split_once("://").is_some_and(|(scheme, _)| {
            let mut c = scheme.chars();
            c.next().is_some_and(|f| f.is_ascii_alphabetic())
                && c.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        })
    })
}

/// Opens `path` for positioned reads, with its length: a local regular
/// file (never blocking on a FIFO), or a URL through the installed opener.
///
/// # Errors
/// As [`crate::files::open_regular`]; for a URL, the opener's errors, or
/// an error saying that no storage layer is installed.
pub fn open(path: &std::path::Path) -> crate::Result<(Box<dyn ReadAt>, u64)> {
    if is_url(path) {
        let opener = OPENER.read().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(opener) = opener else {
            return Err(crate::FormatError::io(
                path,
                io::Error::other(
                    "URLs are read through bale's storage layer, which this program did not set up",
                ),
            ));
        };
        let url = path.to_str().unwrap_or_default();
        return opener(url).map_err(|e| crate::FormatError::io(path, e));
    }
    let file = crate::regular::open_regular(path)?;
    let len = file
        .metadata()
        .map_err(|e| crate::FormatError::io(path, e))?
        .len();
    Ok((Box::new(file), len))
}
