//! Byte sources of the scan: positioned reads, one sequential pass (with
//! checksums), or a decompressed frame in memory.

use super::*;

/// Tar bytes by offset. Offsets passed to one source only grow.
pub(super) trait ByteSource {
    /// Reads `buf.len()` bytes at `offset` of the tar stream; the caller has
    /// checked that they lie before the stream's end.
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Reads `size` bytes at `offset` and returns their xxh3.
    fn hash_at(&mut self, offset: u64, size: u64) -> Result<u64>;
}

/// Positioned reads of a plain tar file: headers only, data never touched.
pub(super) struct Pread<'a> {
    pub(super) file: &'a dyn ReadAt,
    pub(super) path: &'a Path,
    pub(super) bytes_read: u64,
}

impl ByteSource for Pread<'_> {
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| FormatError::io_at(self.path, offset, e))?;
        self.bytes_read += buf.len() as u64;
        Ok(())
    }

    fn hash_at(&mut self, offset: u64, size: u64) -> Result<u64> {
        let mut h = Xxh3::new();
        let mut buf = vec![0u8; size.min(1 << 20) as usize];
        let mut done = 0u64;
        while done < size {
            let k = (size - done).min(buf.len() as u64) as usize;
            self.read_at(offset + done, &mut buf[..k])?;
            h.update(&buf[..k]);
            done += k as u64;
        }
        Ok(h.digest())
    }
}

/// Sequential reads of a plain tar file that hash every byte of the file on
/// the way (for `--checksum`): one pass gives member and file checksums. The
/// file is read in large chunks into one buffer; each byte is copied once
/// and hashed from there.
pub(super) struct Sequential<'a> {
    pub(super) file: &'a dyn ReadAt,
    pub(super) path: &'a Path,
    pub(super) buf: Vec<u8>,
    /// File offset of `buf[0]`.
    pub(super) start: u64,
    /// Valid bytes in `buf`.
    pub(super) len: usize,
    pub(super) file_hash: Xxh3,
}

impl<'a> Sequential<'a> {
    pub(super) fn new(file: &'a dyn ReadAt, path: &'a Path, len: u64) -> Self {
        Self {
            file,
            path,
            // A chunk, or the whole file when smaller (plus one byte, to see its end in one read).
            buf: vec![0u8; (len + 1).min(SEQ_BUFFER as u64) as usize],
            start: 0,
            len: 0,
            file_hash: Xxh3::new(),
        }
    }

    /// Reads the next chunk of the file into the buffer; returns false at the end of the file.
    pub(super) fn next_chunk(&mut self) -> Result<bool> {
        self.start += self.len as u64;
        self.len = 0;
        while self.len < self.buf.len() {
            let at = self.start + self.len as u64;
            match self.file.read_at(&mut self.buf[self.len..], at) {
                Ok(0) => break,
                Ok(n) => self.len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(FormatError::io_at(self.path, at, e)),
            }
        }
        self.file_hash.update(&self.buf[..self.len]);
        Ok(self.len > 0)
    }

    /// The buffered bytes from `offset` on (at least one), reading on as needed.
    pub(super) fn at(&mut self, offset: u64) -> Result<&[u8]> {
        debug_assert!(offset >= self.start, "sequential source asked to go back");
        while offset >= self.start + self.len as u64 {
            if !self.next_chunk()? {
                // The caller checked the bounds against the file's length: it shrank.
                return Err(FormatError::io_at(
                    self.path,
                    offset,
                    io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the file shrank while being read",
                    ),
                ));
            }
        }
        Ok(&self.buf[(offset - self.start) as usize..self.len])
    }

    /// Hashes the rest of the file; returns the file's xxh3 and its length.
    pub(super) fn finish(mut self) -> Result<(u64, u64)> {
        while self.next_chunk()? {}
        Ok((self.file_hash.digest(), self.start))
    }
}

impl ByteSource for Sequential<'_> {
    fn read_at(&mut self, offset: u64, out: &mut [u8]) -> Result<()> {
        let mut done = 0;
        while done < out.len() {
            let avail = self.at(offset + done as u64)?;
            let k = avail.len().min(out.len() - done);
            out[done..done + k].copy_from_slice(&avail[..k]);
            done += k;
        }
        Ok(())
    }

    fn hash_at(&mut self, offset: u64, size: u64) -> Result<u64> {
        let mut h = Xxh3::new();
        let mut done = 0u64;
        while done < size {
            let avail = self.at(offset + done)?;
            let k = (avail.len() as u64).min(size - done) as usize;
            h.update(&avail[..k]);
            done += k as u64;
        }
        Ok(h.digest())
    }
}

/// One decompressed zstd frame, starting at `base` in the tar stream.
pub(super) struct Slice {
    pub(super) data: Vec<u8>,
    pub(super) base: u64,
}

impl Slice {
    pub(super) fn range(&self, offset: u64, len: u64) -> &[u8] {
        // The caller checked the bounds against base + data.len().
        let start = (offset - self.base) as usize;
        &self.data[start..start + len as usize]
    }
}

impl ByteSource for Slice {
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        buf.copy_from_slice(self.range(offset, buf.len() as u64));
        Ok(())
    }

    fn hash_at(&mut self, offset: u64, size: u64) -> Result<u64> {
        Ok(crate::index::checksum(self.range(offset, size)))
    }
}
