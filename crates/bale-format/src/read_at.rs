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

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (**self).read_at(buf, offset)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_exact_at(buf, offset)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for Box<T> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (**self).read_at(buf, offset)
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
