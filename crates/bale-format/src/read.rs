//! Random access: one positioned read per sample, guided by the index.

use crate::read_at::ReadAt;
use std::cell::RefCell;
use std::path::{Path, PathBuf};

use crate::error::{FormatError, Result};
use crate::index::{
    Compression, MemberEntry, SampleEntry, ShardIndex, ZSTD_DICT_FRAME_MAGIC, ZSTD_DICT_MAX,
    checksum, zstd_dict_ok,
};

/// The bytes of one sample as stored in the tar stream (headers included),
/// and where they start, so members can be sliced out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleBuf {
    /// The sample's uncompressed tar bytes.
    pub data: Vec<u8>,
    /// Offset of `data[0]` in the uncompressed tar stream.
    pub tar_offset: u64,
}

impl SampleBuf {
    /// The data of member `m` (which must belong to this sample).
    ///
    /// Returns an empty slice if `m` lies outside the buffer, which cannot
    /// happen for a member of this sample in a validated index.
    pub fn member(&self, m: &MemberEntry<'_>) -> &[u8] {
        let start = m.offset.saturating_sub(self.tar_offset) as usize;
        let end = start.saturating_add(m.size as usize);
        self.data.get(start..end).unwrap_or_default()
    }
}

/// Reads `len` bytes at `offset` with one positioned read (no seek state:
/// safe to call from many threads on one `File`).
///
/// # Errors
/// I/O errors and short files, naming `path` and the offset.
pub fn read_exact_at<R: ReadAt + ?Sized>(
    file: &R,
    path: &Path,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>> {
    let mut buf = vec![
        0u8;
        usize::try_from(len).map_err(|_| FormatError::Limit {
            path: path.to_path_buf(),
            what: format!("a read of {len} bytes does not fit in memory"),
        })?
    ];
    read_exact_into(file, path, offset, &mut buf)?;
    Ok(buf)
}

/// Fills `buf` from `offset` of `file` with one positioned read.
///
/// # Errors
/// I/O errors and short files, naming `path` and the offset.
pub fn read_exact_into<R: ReadAt + ?Sized>(
    file: &R,
    path: &Path,
    offset: u64,
    buf: &mut [u8],
) -> Result<()> {
    file.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            FormatError::Truncated {
                path: path.to_path_buf(),
                what: "sample data",
                needed: offset + buf.len() as u64,
                len: file.len_hint().unwrap_or(offset),
            }
        } else {
            FormatError::io_at(path, offset, e)
        }
    })
}

/// The zstd dictionary a `.tar.zst` shard holds in a skippable frame at
/// offset 0 (see [`crate::index::ZSTD_DICT_FRAME_MAGIC`]), or `None` when
/// its first frame is something else: another frame, or a skippable frame
/// of that magic whose length or content cannot be a bale dictionary (a
/// foreign `.tar.zst` may start with one; `zstd -d` skips it, and so does
/// bale). A bale shard whose dictionary frame is damaged then has none:
/// `verify` reports it against the index's, and its frames fail to decode.
///
/// # Errors
/// I/O errors, naming `path` and the offset.
pub fn read_shard_zstd_dict<R: ReadAt + ?Sized>(file: &R, path: &Path) -> Result<Option<Vec<u8>>> {
    let mut head = [0u8; 8];
    match file.read_exact_at(&mut head, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(FormatError::io_at(path, 0, e)),
    }
    let magic = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    if magic != ZSTD_DICT_FRAME_MAGIC {
        return Ok(None);
    }
    let len = u64::from(u32::from_le_bytes([head[4], head[5], head[6], head[7]]));
    if len > ZSTD_DICT_MAX as u64 {
        return Ok(None);
    }
    let dict = read_exact_at(file, path, 8, len)?;
    Ok(zstd_dict_ok(&dict).then_some(dict))
}

thread_local! {
    static DCTX: RefCell<Option<zstd::zstd_safe::DCtx<'static>>> = const { RefCell::new(None) };
}

/// Decompresses one zstd frame of a `.tar.zst` shard into exactly `tar_len`
/// bytes. `dict` is the shard's dictionary ([`crate::ShardIndex::zstd_dict`]),
/// empty when it has none; a raw-content dictionary is referenced, not copied.
///
/// # Errors
/// A frame that does not decompress to `tar_len` bytes, naming `path` and `file_offset`.
pub fn decompress_frame(
    path: &Path,
    file_offset: u64,
    frame: &[u8],
    tar_len: u64,
    dict: &[u8],
) -> Result<Vec<u8>> {
    // A zstd block takes at least 3 bytes and decompresses to at most 128 KiB:
    // a size beyond that bound comes from a corrupt index, and is refused
    // before the output buffer is allocated.
    let bound = (frame.len() as u64 / 3 + 1).saturating_mul(128 << 10);
    if tar_len > bound {
        return Err(FormatError::corrupt(
            path,
            file_offset,
            format!(
                "the index says a zstd frame of {} bytes decompresses to {tar_len} bytes, more than it can",
                frame.len()
            ),
        ));
    }
    let cap = usize::try_from(tar_len).unwrap_or(usize::MAX);
    let mut out = Vec::with_capacity(cap);
    let res = DCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        let d = slot.get_or_insert_with(zstd::zstd_safe::DCtx::create);
        d.decompress_using_dict(&mut out, frame, dict)
            .map_err(|code| std::io::Error::other(zstd::zstd_safe::get_error_name(code)))
    });
    match res {
        Ok(n) if n as u64 == tar_len => Ok(out),
        Ok(n) => Err(FormatError::corrupt(
            path,
            file_offset,
            format!("zstd frame decompresses to {n} bytes, the index says {tar_len}"),
        )),
        Err(e) => Err(FormatError::corrupt(
            path,
            file_offset,
            format!("bad zstd frame: {e}"),
        )),
    }
}

/// Reads sample `e` of a shard with one positioned read (decompressing its
/// frame for `.tar.zst`). Samples of a scattered index (HDF5 shards) have no
/// byte range: read their members with [`read_member`].
///
/// # Errors
/// I/O errors, truncation, bad frames, naming the shard and offset; an HDF5
/// shard (its samples are not one range).
pub fn read_sample<R: ReadAt + ?Sized>(
    file: &R,
    path: &Path,
    index: &ShardIndex,
    e: &SampleEntry,
) -> Result<SampleBuf> {
    let data = match index.compression() {
        Compression::None => read_exact_at(file, path, e.file_offset, e.file_len)?,
        Compression::Zstd => {
            let raw = read_exact_at(file, path, e.file_offset, e.file_len)?;
            decompress_frame(path, e.file_offset, &raw, e.tar_len, index.zstd_dict())?
        }
        Compression::H5 => {
            return Err(FormatError::Limit {
                path: path.to_path_buf(),
                what: "the samples of an HDF5 shard are read member by member, not as one range"
                    .into(),
            });
        }
    };
    Ok(SampleBuf {
        data,
        tar_offset: e.tar_offset,
    })
}

/// Reads one member of a scattered index (HDF5 shard) at its absolute
/// offset, with one positioned read.
///
/// # Errors
/// I/O errors and truncation, naming the shard and offset.
pub fn read_member<R: ReadAt + ?Sized>(
    file: &R,
    path: &Path,
    m: &MemberEntry<'_>,
) -> Result<Vec<u8>> {
    read_exact_at(file, path, m.offset, m.size)
}

/// Checks a member's bytes against the checksum in the index.
///
/// # Errors
/// [`FormatError::ChecksumMismatch`] naming the shard, key, member and offset.
pub fn verify_member(path: &Path, key: &str, m: &MemberEntry<'_>, data: &[u8]) -> Result<()> {
    let actual = checksum(data);
    if actual != m.checksum || data.len() as u64 != m.size {
        return Err(FormatError::ChecksumMismatch {
            path: path.to_path_buf(),
            location: format!(
                " for key {key:?} member {:?} at tar offset {}",
                m.ext, m.offset
            ),
            expected: m.checksum,
            actual,
        });
    }
    Ok(())
}

/// A shard file opened for random access, with its index. The shard may be
/// a URL (read through the storage layer, see [`crate::read_at::open`]).
pub struct ShardReader {
    file: Box<dyn ReadAt>,
    path: PathBuf,
    index: ShardIndex,
}

impl std::fmt::Debug for ShardReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardReader")
            .field("path", &self.path)
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// One sample read by [`ShardReader::read`]: its key and members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedSample {
    /// The key.
    pub key: String,
    /// `(extension, bytes)` for each member, in shard order.
    pub members: Vec<(String, Vec<u8>)>,
}

impl OwnedSample {
    /// The bytes of the member with extension `ext`.
    pub fn get(&self, ext: &str) -> Option<&[u8]> {
        self.members
            .iter()
            .find(|(e, _)| e == ext)
            .map(|(_, d)| d.as_slice())
    }
}

impl ShardReader {
    /// Opens a shard and its index, and checks that they belong together
    /// (the shard's length is the one the index records).
    ///
    /// # Errors
    /// As [`ShardIndex::open`]; I/O errors; a shard whose length disagrees with its index.
    pub fn open(shard: impl AsRef<Path>, index: impl AsRef<Path>) -> Result<Self> {
        let path = shard.as_ref().to_path_buf();
        let index = ShardIndex::open(index)?;
        let (file, len) = crate::read_at::open(&path)?;
        if len != index.shard_len() {
            return Err(FormatError::Truncated {
                path,
                what: "the shard the index describes",
                needed: index.shard_len(),
                len,
            });
        }
        Ok(Self { file, path, index })
    }

    /// The shard's index.
    pub fn index(&self) -> &ShardIndex {
        &self.index
    }

    /// The shard file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the shard holds no sample.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The raw bytes of sample `i` (one positioned read).
    ///
    /// # Errors
    /// As [`read_sample`]; `i` out of range; a scattered index (its samples
    /// are no byte range: use [`ShardReader::read`]).
    pub fn read_raw(&self, i: usize) -> Result<SampleBuf> {
        if i >= self.index.len() {
            return Err(FormatError::Limit {
                path: self.path.clone(),
                what: format!("sample {i} out of range ({} samples)", self.index.len()),
            });
        }
        if self.index.is_scattered() {
            return Err(FormatError::Limit {
                path: self.path.clone(),
                what: "the samples of a scattered index (layout 1.1) are read member by member, not as one range"
                    .into(),
            });
        }
        read_sample(&self.file, &self.path, &self.index, &self.index.sample(i))
    }

    /// Sample `i`, its members copied out; with `verify`, every member's checksum is checked.
    ///
    /// # Errors
    /// As [`ShardReader::read_raw`], and checksum mismatches naming key and member.
    pub fn read(&self, i: usize, verify: bool) -> Result<OwnedSample> {
        if self.index.is_scattered() {
            return self.read_scattered(i, verify);
        }
        let buf = self.read_raw(i)?;
        let key = self.index.key(i);
        let mut members = Vec::with_capacity(self.index.sample(i).member_count as usize);
        for m in self.index.members(i) {
            let data = buf.member(&m);
            if verify && self.index.has_checksums() {
                verify_member(&self.path, key, &m, data)?;
            }
            members.push((m.ext.to_owned(), data.to_vec()));
        }
        Ok(OwnedSample {
            key: key.to_owned(),
            members,
        })
    }

    fn read_scattered(&self, i: usize, verify: bool) -> Result<OwnedSample> {
        if i >= self.index.len() {
            return Err(FormatError::Limit {
                path: self.path.clone(),
                what: format!("sample {i} out of range ({} samples)", self.index.len()),
            });
        }
        let key = self.index.key(i);
        let mut members = Vec::with_capacity(self.index.sample(i).member_count as usize);
        for m in self.index.members(i) {
            let data = read_member(&self.file, &self.path, &m)?;
            if verify && self.index.has_checksums() {
                verify_member(&self.path, key, &m, &data)?;
            }
            members.push((m.ext.to_owned(), data));
        }
        Ok(OwnedSample {
            key: key.to_owned(),
            members,
        })
    }
}
