//! One MDS shard or LitData chunk, read front to back: the sample count,
//! the offset table, then each sample's bytes.

use std::io::{BufReader, Read};
use std::path::PathBuf;

use super::{MAX_SAMPLE_BYTES, MAX_SHARD_SAMPLES, ShardSpec};
use crate::error::{FormatError, Result};

/// Bytes read ahead of a sample of unknown real length: a size field can
/// claim far more than the file holds, so buffers grow with the data read.
const GROW: u64 = 8 << 20;

/// The end of a LitData chunk that carries its rows again as an Arrow IPC
/// file: `<IPC file> <its length: u32 LE> "LDARW01\0"`. LitData writes it
/// for samples that are flat dicts of strings and numbers.
const ARROW_FOOTER_MAGIC: &[u8; 8] = b"LDARW01\0";

/// The length of the Arrow footer `tail` (a chunk's last 12 bytes) ends,
/// magic and length field included; `None` when it ends none.
fn arrow_footer(tail: &[u8]) -> Option<u64> {
    let (len, magic) = tail.split_last_chunk::<8>()?;
    let (_, len) = len.split_last_chunk::<4>()?;
    (magic == ARROW_FOOTER_MAGIC).then(|| u64::from(u32::from_le_bytes(*len)) + 12)
}

pub(crate) struct ShardStream<R> {
    r: R,
    path: PathBuf,
    /// Position in the (decompressed) shard.
    pos: u64,
    /// Its length: the file's, or for a compressed shard what `index.json` records.
    len: u64,
    zstd: bool,
    offsets: Vec<u32>,
    next: usize,
}

/// Opens the shard `spec` names and reads its header.
pub(crate) fn open(spec: &ShardSpec) -> Result<ShardStream<Box<dyn Read>>> {
    let path = &spec.path;
    let file = crate::files::open_regular(path)?;
    let file_len = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
    let (reader, len, footer): (Box<dyn Read>, u64, _) = if spec.zstd {
        let Some(raw) = spec.raw_bytes else {
            return Err(FormatError::Unsupported {
                path: path.clone(),
                what: "index.json does not record the decompressed size of this shard".into(),
            });
        };
        let d = zstd::stream::read::Decoder::new(file).map_err(|e| FormatError::io(path, e))?;
        // LitData does not compress a chunk that ends with an Arrow footer.
        (Box::new(d), raw, None)
    } else {
        if let Some(raw) = spec.raw_bytes.filter(|r| *r != file_len) {
            return Err(FormatError::Corrupt {
                path: path.clone(),
                offset: file_len.min(raw),
                what: format!("index.json records {raw} bytes, the file has {file_len}"),
            });
        }
        let footer = if spec.has_config || file_len < 12 {
            None
        } else {
            use std::os::unix::fs::FileExt;
            let mut tail = [0u8; 12];
            let at = file_len - 12;
            file.read_exact_at(&mut tail, at)
                .map_err(|e| FormatError::io_at(path, at, e))?;
            arrow_footer(&tail)
        };
        (
            Box::new(BufReader::with_capacity(1 << 20, file)),
            file_len,
            footer,
        )
    };
    ShardStream::start(reader, path.clone(), len, spec, footer)
}

/// A shard held in memory (the fuzz target and tests).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn from_bytes<'a>(spec: &ShardSpec, bytes: &'a [u8]) -> Result<ShardStream<&'a [u8]>> {
    // The bytes stand for the shard as decompressed.
    let spec = ShardSpec {
        zstd: false,
        ..spec.clone()
    };
    let footer = if spec.has_config {
        None
    } else {
        bytes.last_chunk::<12>().and_then(|t| arrow_footer(t))
    };
    ShardStream::start(bytes, spec.path.clone(), bytes.len() as u64, &spec, footer)
}

impl<R: Read> ShardStream<R> {
    /// `footer`: the length of the Arrow footer the shard ends with, if any.
    fn start(r: R, path: PathBuf, len: u64, spec: &ShardSpec, footer: Option<u64>) -> Result<Self> {
        let mut s = ShardStream {
            r,
            path,
            pos: 0,
            len,
            zstd: spec.zstd,
            offsets: Vec::new(),
            next: 0,
        };
        let n = u64::from(s.u32("the sample count")?);
        if n != spec.samples {
            return Err(s.corrupt(
                0,
                format!(
                    "the shard holds {n} samples, index.json records {}",
                    spec.samples
                ),
            ));
        }
        if n > MAX_SHARD_SAMPLES {
            return Err(FormatError::Limit {
                path: s.path.clone(),
                what: format!("{n} samples in one shard (bale reads at most {MAX_SHARD_SAMPLES})"),
            });
        }
        let table_end = 4 * (n + 2);
        if table_end > s.len {
            return Err(FormatError::Truncated {
                path: s.path.clone(),
                what: "the offset table",
                needed: table_end,
                len: s.len,
            });
        }
        s.offsets.reserve_exact(n as usize + 1);
        for _ in 0..=n {
            let o = s.u32("the offset table")?;
            s.offsets.push(o);
        }
        let first = u64::from(s.offsets[0]);
        let bad_start = if spec.has_config {
            first < table_end
        } else {
            first != table_end
        };
        if bad_start {
            return Err(s.corrupt(
                4,
                format!("the first sample starts at {first}, the offset table ends at {table_end}"),
            ));
        }
        for (i, w) in s.offsets.windows(2).enumerate() {
            if w[1] < w[0] {
                return Err(s.corrupt(
                    8 + 4 * i as u64,
                    format!(
                        "offset of sample {} ({}) is below the one before ({})",
                        i + 1,
                        w[1],
                        w[0]
                    ),
                ));
            }
        }
        let last = u64::from(s.offsets[n as usize]);
        if footer.is_some_and(|f| last.checked_add(f) == Some(s.len)) {
            if n > 0 && last == first {
                return Err(FormatError::Unsupported {
                    path: s.path.clone(),
                    what: format!(
                        "its {n} samples are empty: LitData stored the rows only in the Arrow \
                         IPC file at offset {last} (as it does for dicts of strings and numbers), \
                         which bale convert does not read; it converts the samples LitData \
                         serialises itself (images, arrays, bytes)"
                    ),
                });
            }
            // The rows again, after the samples: left out.
            s.len = last;
        }
        if last != s.len {
            return Err(s.corrupt(
                4 + 4 * n,
                format!("the samples end at {last}, the shard has {} bytes", s.len),
            ));
        }
        // The config JSON (MDS), which the index already told us.
        s.skip(first - table_end)?;
        Ok(s)
    }

    fn corrupt(&self, offset: u64, what: String) -> FormatError {
        FormatError::Corrupt {
            path: self.path.clone(),
            offset,
            what,
        }
    }

    fn truncated(&self, what: &'static str, needed: u64) -> FormatError {
        FormatError::Truncated {
            path: self.path.clone(),
            what,
            needed,
            len: self.pos,
        }
    }

    fn u32(&mut self, what: &'static str) -> Result<u32> {
        let mut b = [0u8; 4];
        self.fill(&mut b, what)?;
        Ok(u32::from_le_bytes(b))
    }

    fn fill(&mut self, buf: &mut [u8], what: &'static str) -> Result<()> {
        let needed = self.pos + buf.len() as u64;
        if needed > self.len {
            return Err(self.truncated(what, needed));
        }
        match self.r.read_exact(buf) {
            Ok(()) => {
                self.pos = needed;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                Err(self.truncated(what, needed))
            }
            Err(e) => Err(FormatError::io_at(&self.path, self.pos, e)),
        }
    }

    fn read_vec(&mut self, n: u64, what: &'static str) -> Result<Vec<u8>> {
        let needed = self.pos + n;
        if needed > self.len {
            return Err(self.truncated(what, needed));
        }
        let mut out = Vec::with_capacity(n.min(GROW) as usize);
        let got = (&mut self.r)
            .take(n)
            .read_to_end(&mut out)
            .map_err(|e| FormatError::io_at(&self.path, self.pos, e))?;
        if got as u64 != n {
            self.pos += got as u64;
            return Err(self.truncated(what, needed));
        }
        self.pos = needed;
        Ok(out)
    }

    fn skip(&mut self, n: u64) -> Result<()> {
        let needed = self.pos + n;
        let got = std::io::copy(&mut (&mut self.r).take(n), &mut std::io::sink())
            .map_err(|e| FormatError::io_at(&self.path, self.pos, e))?;
        if got != n {
            self.pos += got;
            return Err(self.truncated("the shard's config", needed));
        }
        self.pos = needed;
        Ok(())
    }

    /// The next sample's offset in the shard and bytes.
    pub fn next_sample(&mut self) -> Result<(u64, Vec<u8>)> {
        let i = self.next;
        let (start, end) = (self.offsets[i], self.offsets[i + 1]);
        self.next += 1;
        let offset = self.pos;
        debug_assert_eq!(offset, u64::from(start));
        let size = u64::from(end - start);
        if size > MAX_SAMPLE_BYTES {
            return Err(FormatError::Unsupported {
                path: self.path.clone(),
                what: format!(
                    "sample {i} (at offset {offset}) takes {size} bytes; bale converts samples of \
                     at most {MAX_SAMPLE_BYTES} bytes (256 MiB), each held whole while it is split"
                ),
            });
        }
        let bytes = self.read_vec(size, "a sample")?;
        Ok((offset, bytes))
    }

    /// Checks that nothing follows the last sample (a compressed shard
    /// decompresses to exactly the size `index.json` records).
    pub fn finish(mut self) -> Result<()> {
        if self.zstd {
            let mut extra = [0u8; 1];
            let more = self
                .r
                .read(&mut extra)
                .map_err(|e| FormatError::io_at(&self.path, self.pos, e))?;
            if more != 0 {
                return Err(self.corrupt(
                    self.pos,
                    format!(
                        "the shard decompresses to more than the {} bytes index.json records",
                        self.len
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl<R> std::fmt::Debug for ShardStream<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardStream")
            .field("path", &self.path)
            .field("pos", &self.pos)
            .finish_non_exhaustive()
    }
}
