//! Writing shards: [`ShardWriter`] streams samples into a tar or `.tar.zst`
//! and builds the shard's index as it goes; [`ShardFileWriter`] does so into
//! files under temporary names and renames shard and index into place.

use std::collections::{BTreeMap, HashSet};
use std::io::{self, IoSlice, Read, Write};
use std::path::{Path, PathBuf};

use crate::hash::{Hashed, Xxh3, xxh3_64};
use zstd::stream::raw::Operation;

use crate::atomic::AtomicFile;
use crate::error::{FormatError, Result};
use crate::index::{Compression, IndexBuilder, ZSTD_DICT_FRAME_MAGIC, ZSTD_DICT_MAX, zstd_dict_ok};
use crate::manifest::{FieldStats, ShardEntry};
use crate::name::{validate_key, validate_written_ext};
use crate::tar::{BLOCK, encode_member_header, padded};

/// Default zstd level for `.tar.zst` shards.
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// One member handed to [`ShardWriter::write_sample`].
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    /// Extension: the member is stored as `<key>.<ext>`.
    pub ext: &'a str,
    /// The member's bytes.
    pub data: &'a [u8],
}

struct Current {
    key: String,
    file_offset: u64,
    tar_offset: u64,
    members: Vec<(String, u64, u64, u64)>,
}

/// What a finished shard holds.
#[derive(Debug, Clone)]
pub struct ShardSummary {
    /// Number of samples.
    pub samples: u64,
    /// Number of members.
    pub members: u64,
    /// Bytes written to the shard file.
    pub shard_bytes: u64,
    /// Bytes of the uncompressed tar stream (equal to `shard_bytes` for plain tar).
    pub tar_bytes: u64,
    /// xxh3-64 of the shard file's bytes.
    pub shard_checksum: u64,
    /// Member count and bytes per extension.
    pub fields: BTreeMap<String, FieldStats>,
}

struct Sink<W> {
    out: W,
    path: PathBuf,
    pos: u64,
    hasher: Xxh3,
}

impl<W: Write> Sink<W> {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| FormatError::io_at(&self.path, self.pos, e))?;
        self.hasher.update(bytes);
        self.pos += bytes.len() as u64;
        Ok(())
    }
}

/// A whole sample encoded ahead of time as the tar bytes its members take
/// (header(s), data, padding), with each member's checksum: built on any
/// thread, written by [`ShardWriter::add_encoded_sample`] with one copy of
/// its bytes into the shard. The shard and index are the same as when the
/// members are added one by one with [`ShardWriter::add_member`].
///
/// ```
/// use bale_format::{Compression, EncodedSample, Member, ShardWriter};
/// let mut s = EncodedSample::new("0001", 0).unwrap();
/// s.add_member("txt", b"hello").unwrap();
/// let mut a = ShardWriter::new(Vec::new(), "a.tar", Compression::None, 0).unwrap();
/// a.add_encoded_sample(&s).unwrap();
/// let mut b = ShardWriter::new(Vec::new(), "b.tar", Compression::None, 0).unwrap();
/// b.write_sample("0001", &[Member { ext: "txt", data: b"hello" }]).unwrap();
/// assert_eq!(a.finish().unwrap().0, b.finish().unwrap().0);
/// ```
#[derive(Debug, Clone)]
pub struct EncodedSample {
    key: String,
    bytes: Vec<u8>,
    /// Extension, data offset in `bytes`, size, xxh3.
    members: Vec<(String, u64, u64, u64)>,
}

impl EncodedSample {
    /// Starts sample `key`, with room for `capacity` bytes of tar stream.
    ///
    /// # Errors
    /// An invalid key.
    pub fn new(key: &str, capacity: usize) -> Result<Self> {
        validate_key(key)?;
        Ok(Self {
            key: key.to_owned(),
            bytes: Vec::with_capacity(capacity),
            members: Vec::with_capacity(2),
        })
    }

    /// The sample's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether no member was added.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Bytes the sample takes in the (uncompressed) tar stream.
    pub fn tar_len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The members: extension and bytes, in the order added.
    pub fn members(&self) -> impl Iterator<Item = (&str, &[u8])> {
        self.members.iter().map(|(ext, off, size, _)| {
            let off = *off as usize;
            (ext.as_str(), &self.bytes[off..off + *size as usize])
        })
    }

    fn header(&mut self, ext: &str, size: u64) -> Result<()> {
        validate_written_ext(ext)?;
        if self.members.iter().any(|m| m.0 == ext) {
            return Err(FormatError::InvalidName {
                name: format!("{}.{ext}", self.key),
                reason: "two members of one sample share an extension",
            });
        }
        let mut name = String::with_capacity(self.key.len() + 1 + ext.len());
        name.push_str(&self.key);
        name.push('.');
        name.push_str(ext);
        encode_member_header(&name, size, &mut self.bytes);
        Ok(())
    }

    fn member_done(&mut self, ext: &str, start: usize) {
        let size = (self.bytes.len() - start) as u64;
        let sum = xxh3_64(&self.bytes[start..]);
        self.bytes.resize(start + padded(size) as usize, 0);
        self.members.push((ext.to_owned(), start as u64, size, sum));
    }

    /// Adds a member held in memory.
    ///
    /// # Errors
    /// An invalid extension, or one the sample already has.
    pub fn add_member(&mut self, ext: &str, data: &[u8]) -> Result<()> {
        self.header(ext, data.len() as u64)?;
        let start = self.bytes.len();
        self.bytes.extend_from_slice(data);
        self.member_done(ext, start);
        Ok(())
    }

    /// Adds a member of `size` bytes that `fill` appends, in place, to the
    /// vector it is given (which holds the bytes encoded so far: `fill` must
    /// only append, for example with `Read::read_to_end`), so that a file's
    /// bytes are read straight into the sample.
    ///
    /// # Errors
    /// An invalid or repeated extension; what `fill` returns; and, when
    /// `fill` appended other than `size` bytes, [`FormatError::Limit`]. After
    /// an error the sample must be discarded.
    pub fn add_member_with<E: From<FormatError>>(
        &mut self,
        ext: &str,
        size: u64,
        fill: impl FnOnce(&mut Vec<u8>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        self.header(ext, size)?;
        let start = self.bytes.len();
        fill(&mut self.bytes)?;
        let got = self.bytes.len().saturating_sub(start) as u64;
        if self.bytes.len() < start || got != size {
            return Err(FormatError::Limit {
                path: PathBuf::from(format!("{}.{ext}", self.key)),
                what: format!("member filled with {got} bytes instead of {size}"),
            }
            .into());
        }
        self.member_done(ext, start);
        Ok(())
    }
}

/// Streams samples into a WebDataset-style tar (or `.tar.zst`) and builds its index.
///
/// Headers are deterministic (docs/format.md); the output depends only on
/// the samples and the options. End with [`ShardWriter::finish`], which
/// writes the end-of-archive blocks and returns the index: a writer dropped
/// without `finish` leaves an unterminated shard and no index.
///
/// ```
/// use bale_format::{Compression, Member, ShardIndex, ShardWriter};
/// let mut w = ShardWriter::new(Vec::new(), "mem.tar", Compression::None, 0).unwrap();
/// w.write_sample("0001", &[Member { ext: "txt", data: b"hello" }]).unwrap();
/// let (tar, index, summary) = w.finish().unwrap();
/// let index = ShardIndex::from_bytes(index, "mem.idx").unwrap();
/// assert_eq!(index.key(0), "0001");
/// assert_eq!(summary.shard_bytes as usize, tar.len());
/// ```
pub struct ShardWriter<W: Write> {
    sink: Sink<W>,
    path: PathBuf,
    compression: Compression,
    zenc: Option<zstd::stream::raw::Encoder<'static>>,
    zlevel: i32,
    /// `.tar.zst` only: the start of the tar stream held back (not yet
    /// compressed) until it becomes the shard's dictionary: the first
    /// [`ZSTD_DICT_MAX`] bytes, or the first sample when it is shorter.
    dict_pending: Option<Vec<u8>>,
    /// End of the dictionary's frame (0 without one): the first sample's
    /// frame starts there, though the sample began before it was written.
    dict_end: u64,
    zbuf: Vec<u8>,
    tar_pos: u64,
    index: IndexBuilder,
    keys: KeySet,
    cur: Option<Current>,
    scratch: Vec<u8>,
    fields: BTreeMap<String, FieldStats>,
    members: u64,
}

impl<W: Write> std::fmt::Debug for ShardWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardWriter")
            .field("path", &self.path)
            .field("compression", &self.compression)
            .field("samples", &self.index.len())
            .finish_non_exhaustive()
    }
}

impl<W: Write> ShardWriter<W> {
    /// Starts a shard on `out`. `path` names it in errors; `zstd_level` is
    /// used for [`Compression::Zstd`] (1-22; 0 means the default, 3).
    ///
    /// # Errors
    /// A bad zstd level; [`Compression::H5`] (see [`crate::h5::H5ShardWriter`]).
    pub fn new(
        out: W,
        path: impl Into<PathBuf>,
        compression: Compression,
        zstd_level: i32,
    ) -> Result<Self> {
        let path = path.into();
        let mut zlevel = 0;
        let zenc = match compression {
            Compression::None => None,
            Compression::H5 => {
                return Err(FormatError::Limit {
                    path,
                    what: "a tar shard writer cannot write an HDF5 shard (use h5::H5ShardWriter)"
                        .into(),
                });
            }
            Compression::Zstd => {
                let level = if zstd_level == 0 {
                    DEFAULT_ZSTD_LEVEL
                } else {
                    zstd_level
                };
                if !(1..=22).contains(&level) {
                    return Err(FormatError::Limit {
                        path,
                        what: format!("zstd level {level} is outside 1..=22"),
                    });
                }
                zlevel = level;
                Some(
                    zstd::stream::raw::Encoder::new(level)
                        .map_err(|e| FormatError::io(&path, e))?,
                )
            }
        };
        Ok(Self {
            sink: Sink {
                out,
                path: path.clone(),
                pos: 0,
                hasher: Xxh3::new(),
            },
            compression,
            dict_pending: zenc.as_ref().map(|_| Vec::new()),
            dict_end: 0,
            zenc,
            zlevel,
            zbuf: vec![0; 1 << 17],
            tar_pos: 0,
            index: IndexBuilder::new(compression),
            keys: KeySet::default(),
            cur: None,
            scratch: Vec::with_capacity(4096),
            fields: BTreeMap::new(),
            members: 0,
            path,
        })
    }

    /// Number of samples written so far.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no sample was written.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Bytes written to the output so far (compressed bytes for `.tar.zst`).
    pub fn bytes_written(&self) -> u64 {
        self.sink.pos
    }

    /// The output, for what the writer does not do itself (such as starting
    /// the disk writeback of what was written so far). Writing through it
    /// corrupts the shard.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.sink.out
    }

    fn emit(&mut self, bytes: &[u8]) -> Result<()> {
        self.tar_pos += bytes.len() as u64;
        if let Some(pending) = self.dict_pending.as_mut() {
            let room = ZSTD_DICT_MAX - pending.len();
            if bytes.len() < room {
                pending.extend_from_slice(bytes);
                return Ok(());
            }
            pending.extend_from_slice(&bytes[..room]);
            self.start_dict(true)?;
            return self.compress(&bytes[room..]);
        }
        self.compress(bytes)
    }

    /// Ends the holding back of the stream's start: with `use_dict` (and a
    /// start long enough), writes it as the dictionary's skippable frame at
    /// offset 0 and compresses every frame with it from here on; then
    /// compresses what was held back.
    fn start_dict(&mut self, use_dict: bool) -> Result<()> {
        let Some(pending) = self.dict_pending.take() else {
            return Ok(());
        };
        if use_dict && zstd_dict_ok(&pending) {
            debug_assert_eq!(self.sink.pos, 0, "the dictionary frame opens the shard");
            self.sink.write(&ZSTD_DICT_FRAME_MAGIC.to_le_bytes())?;
            self.sink.write(&(pending.len() as u32).to_le_bytes())?;
            self.sink.write(&pending)?;
            let enc = zstd::stream::raw::Encoder::with_dictionary(self.zlevel, &pending)
                .map_err(|e| FormatError::io(&self.path, e))?;
            self.zenc = Some(enc);
            self.index.set_zstd_dict(&pending);
            self.dict_end = self.sink.pos;
        }
        self.compress(&pending)
    }

    fn compress(&mut self, bytes: &[u8]) -> Result<()> {
        let Some(enc) = self.zenc.as_mut() else {
            return self.sink.write(bytes);
        };
        let mut input = bytes;
        while !input.is_empty() {
            let st = enc
                .run_on_buffers(input, &mut self.zbuf)
                .map_err(|e| FormatError::io(&self.path, e))?;
            input = &input[st.bytes_read..];
            self.sink.write(&self.zbuf[..st.bytes_written])?;
        }
        Ok(())
    }

    fn end_frame(&mut self) -> Result<()> {
        // The first sample (shorter than the dictionary's most) is the dictionary.
        self.start_dict(true)?;
        let Some(enc) = self.zenc.as_mut() else {
            return Ok(());
        };
        loop {
            let mut out = zstd::stream::raw::OutBuffer::around(&mut self.zbuf[..]);
            let remaining = enc
                .finish(&mut out, true)
                .map_err(|e| FormatError::io(&self.path, e))?;
            let n = out.pos();
            self.sink.write(&self.zbuf[..n])?;
            if remaining == 0 {
                break;
            }
        }
        enc.reinit().map_err(|e| FormatError::io(&self.path, e))
    }

    /// Starts a sample. Add its members with [`ShardWriter::add_member`] or
    /// [`ShardWriter::add_member_from`], then call [`ShardWriter::end_sample`].
    ///
    /// # Errors
    /// An invalid key, a key already in this shard, or a sample still open.
    pub fn begin_sample(&mut self, key: &str) -> Result<()> {
        check_new_sample(&self.path, self.cur.is_some(), &mut self.keys, key)?;
        self.cur = Some(Current {
            key: key.to_owned(),
            file_offset: self.sink.pos,
            tar_offset: self.tar_pos,
            members: Vec::new(),
        });
        Ok(())
    }

    fn member_header(&mut self, ext: &str, size: u64) -> Result<()> {
        validate_written_ext(ext)?;
        let cur = self.cur.as_ref().ok_or_else(|| FormatError::Limit {
            path: self.path.clone(),
            what: format!("member .{ext} added outside a sample"),
        })?;
        if cur.members.iter().any(|m| m.0 == ext) {
            return Err(FormatError::InvalidName {
                name: format!("{}.{ext}", cur.key),
                reason: "two members of one sample share an extension",
            });
        }
        let name = format!("{}.{ext}", cur.key);
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        encode_member_header(&name, size, &mut scratch);
        let r = self.emit(&scratch);
        self.scratch = scratch;
        r
    }

    fn member_done(&mut self, ext: &str, data_offset: u64, size: u64, sum: u64) -> Result<()> {
        let pad = (padded(size) - size) as usize;
        if pad > 0 {
            self.emit(&[0u8; BLOCK as usize][..pad])?;
        }
        self.field_stats(ext, size);
        if let Some(cur) = self.cur.as_mut() {
            cur.members.push((ext.to_owned(), data_offset, size, sum));
        }
        Ok(())
    }

    /// Adds a member held in memory to the open sample.
    ///
    /// # Errors
    /// An invalid or repeated extension, no open sample, or an I/O error.
    pub fn add_member(&mut self, ext: &str, data: &[u8]) -> Result<()> {
        self.member_header(ext, data.len() as u64)?;
        let offset = self.tar_pos;
        self.emit(data)?;
        self.member_done(ext, offset, data.len() as u64, xxh3_64(data))
    }

    /// Adds a member held in memory whose checksum was computed beforehand
    /// (on another thread, say): the same bytes and index as
    /// [`ShardWriter::add_member`], without hashing the member here.
    ///
    /// # Errors
    /// As [`ShardWriter::add_member`].
    pub fn add_hashed_member(&mut self, ext: &str, data: &Hashed) -> Result<()> {
        let bytes = data.bytes();
        debug_assert_eq!(data.xxh3(), xxh3_64(bytes), "Hashed keeps its checksum");
        self.member_header(ext, bytes.len() as u64)?;
        let offset = self.tar_pos;
        self.emit(bytes)?;
        self.member_done(ext, offset, bytes.len() as u64, data.xxh3())
    }

    /// Adds a member streamed from `src` (for members too large to hold in
    /// memory).
    ///
    /// # Errors
    /// As [`ShardWriter::add_member`]; and when the reader ends before
    /// `src.size` bytes (the source shrank), an error naming `src.path`. The
    /// shard is then unusable and must be discarded.
    pub fn add_member_from(&mut self, ext: &str, src: MemberSource<'_>) -> Result<()> {
        let MemberSource {
            size,
            reader,
            path: source,
        } = src;
        self.member_header(ext, size)?;
        let offset = self.tar_pos;
        let mut hasher = Xxh3::new();
        copy_exact(reader, size, source, |chunk| {
            hasher.update(chunk);
            self.emit(chunk)
        })?;
        self.member_done(ext, offset, size, hasher.digest())
    }

    /// Ends the open sample: records it in the index (and, for `.tar.zst`,
    /// ends its zstd frame).
    ///
    /// # Errors
    /// No open sample, a sample without members, or an I/O error.
    pub fn end_sample(&mut self) -> Result<()> {
        let cur = (self.cur.take()).ok_or_else(|| FormatError::no_open_sample(&self.path))?;
        if cur.members.is_empty() {
            return Err(FormatError::empty_sample(cur.key));
        }
        self.end_frame()?;
        let members: Vec<(&str, u64, u64, u64)> = cur
            .members
            .iter()
            .map(|(e, o, s, c)| (e.as_str(), *o, *s, *c))
            .collect();
        let file_offset = cur.file_offset.max(self.dict_end);
        self.index.push_sample(
            &cur.key,
            file_offset,
            self.sink.pos - file_offset,
            cur.tar_offset,
            self.tar_pos - cur.tar_offset,
            &members,
        );
        self.check_index_limits()
    }

    /// Writes a sample encoded beforehand (see [`EncodedSample`]): the same
    /// shard bytes and index entries as adding its members one by one.
    ///
    /// # Errors
    /// A sample still open, a sample without members, a key already in this
    /// shard (nothing is written then), or an I/O error.
    pub fn add_encoded_sample(&mut self, sample: &EncodedSample) -> Result<()> {
        let key = sample.key.as_str();
        if sample.members.is_empty() {
            return Err(FormatError::InvalidName {
                name: key.to_owned(),
                reason: "a sample needs at least one member",
            });
        }
        check_new_sample(&self.path, self.cur.is_some(), &mut self.keys, key)?;
        let file_offset = self.sink.pos;
        let tar_offset = self.tar_pos;
        self.emit(&sample.bytes)?;
        self.end_frame()?;
        let file_offset = file_offset.max(self.dict_end);
        for (ext, _, size, _) in &sample.members {
            self.field_stats(ext, *size);
        }
        let members: Vec<(&str, u64, u64, u64)> = sample
            .members
            .iter()
            .map(|(e, o, s, c)| (e.as_str(), tar_offset + o, *s, *c))
            .collect();
        self.index.push_sample(
            key,
            file_offset,
            self.sink.pos - file_offset,
            tar_offset,
            self.tar_pos - tar_offset,
            &members,
        );
        self.check_index_limits()
    }

    fn field_stats(&mut self, ext: &str, size: u64) {
        let stats = match self.fields.get_mut(ext) {
            Some(s) => s,
            None => self.fields.entry(ext.to_owned()).or_default(),
        };
        stats.count += 1;
        stats.bytes += size;
        self.members += 1;
    }

    fn check_index_limits(&self) -> Result<()> {
        if self.index.over_limits() {
            return Err(FormatError::Limit {
                path: self.path.clone(),
                what: "shard exceeds the index's limits (2^32-1 samples, members or key bytes)"
                    .into(),
            });
        }
        Ok(())
    }

    /// Writes a whole sample: its members in the order given.
    ///
    /// # Errors
    /// As [`ShardWriter::begin_sample`] and [`ShardWriter::add_member`]. An
    /// invalid name (key, extension, a repeated extension, no member) is
    /// refused before anything is written: the writer stays usable.
    pub fn write_sample(&mut self, key: &str, members: &[Member<'_>]) -> Result<()> {
        // Check every name first, so that a refused sample leaves nothing
        // behind: no bytes written, no sample left open, its key still free.
        check_sample_names(key, members)?;
        self.begin_sample(key)?;
        for m in members {
            self.add_member(m.ext, m.data)?;
        }
        self.end_sample()
    }

    /// Writes the end-of-archive blocks (their own zstd frame when compressed),
    /// flushes, and returns the output, the serialized index and a summary.
    ///
    /// # Errors
    /// A sample still open, or an I/O error.
    pub fn finish(mut self) -> Result<(W, Vec<u8>, ShardSummary)> {
        if let Some(cur) = &self.cur {
            return Err(FormatError::Limit {
                path: self.path.clone(),
                what: format!("finish with sample {:?} still open", cur.key),
            });
        }
        // A shard without samples has no dictionary.
        self.start_dict(false)?;
        self.emit(&[0u8; 2 * BLOCK as usize])?;
        self.end_frame()?;
        self.sink
            .out
            .flush()
            .map_err(|e| FormatError::io_at(&self.path, self.sink.pos, e))?;
        let index = self.index.to_bytes(self.sink.pos, self.tar_pos);
        let summary = ShardSummary {
            samples: self.index.len() as u64,
            members: self.members,
            shard_bytes: self.sink.pos,
            tar_bytes: self.tar_pos,
            shard_checksum: self.sink.hasher.digest(),
            fields: self.fields,
        };
        Ok((self.sink.out, index, summary))
    }
}

/// The file name of shard number `n`: `<prefix>-<n:06>.<tar|tar.zst|h5>`.
pub fn shard_file_name(prefix: &str, n: u64, compression: Compression) -> String {
    format!("{prefix}-{n:06}.{}", compression.extension())
}

/// The index file name for a shard file name: its extension replaced by `.idx`.
pub fn index_file_name(shard_file: &str) -> String {
    let stem = shard_file
        .strip_suffix(".tar.zst")
        .or_else(|| shard_file.strip_suffix(".tar"))
        .or_else(|| shard_file.strip_suffix(".h5"))
        .unwrap_or(shard_file);
    format!("{stem}.idx")
}

/// Capacity of a [`ShardBuf`]'s buffer.
const SHARD_BUF: usize = 1 << 20;
/// Writes of at least this many bytes skip a [`ShardBuf`]'s buffer.
const DIRECT_WRITE: usize = 32 << 10;

/// The buffered output of a [`ShardFileWriter`]: small writes (headers,
/// padding, small members) are gathered in a 1 MiB buffer; a large write
/// goes to the file in one `writev` together with what is buffered, without
/// being copied into the buffer first. The file receives the same bytes in
/// the same order either way.
///
/// The writes are not aligned to 2 MiB of the file on purpose. Writes that
/// each covered a whole aligned 2 MiB had Linux 6.18 cache the shard in
/// 2 MiB pages, and a fresh process's first pass of warm random reads then
/// ran 1.2x faster (1.09-1.35x; fewer page faults). But packing the
/// 20,000-JPEG tree then took 3.9-6.7 s against 1.6-1.7 s, alternating four
/// times each with the output removed before each run, and writes of 2 MiB
/// pages were the slow ones with `dd` too (docs/benchmarks.md, "2 MiB writes").
#[derive(Debug)]
pub struct ShardBuf {
    file: AtomicFile,
    buf: Vec<u8>,
}

impl ShardBuf {
    fn new(file: AtomicFile) -> Self {
        Self {
            file,
            buf: Vec::with_capacity(SHARD_BUF),
        }
    }

    /// Bytes written to the buffer but not yet to the file.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The file, for what the writer does not do itself (such as starting
    /// the disk writeback of what reached it). Writing through it corrupts
    /// the shard.
    pub fn get_mut(&mut self) -> &mut AtomicFile {
        &mut self.file
    }

    /// Writes the buffer, then `data`, to the file in as few `writev` calls as the kernel allows.
    fn write_through(&mut self, data: &[u8]) -> io::Result<()> {
        let mut slices = [IoSlice::new(&self.buf), IoSlice::new(data)];
        let mut left = &mut slices[..];
        IoSlice::advance_slices(&mut left, 0);
        let file = self.file.file();
        while !left.is_empty() {
            match file.write_vectored(left) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut left, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.buf.clear();
        Ok(())
    }

    /// Flushes the buffer and returns the file.
    fn into_inner(mut self) -> io::Result<AtomicFile> {
        self.write_through(&[])?;
        Ok(self.file)
    }
}

impl Write for ShardBuf {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if data.len() >= DIRECT_WRITE || self.buf.len() + data.len() > SHARD_BUF {
            self.write_through(data)?;
        } else {
            self.buf.extend_from_slice(data);
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.write_through(&[])
    }
}

/// Writes a shard and its index into a directory, atomically.
///
/// Both files are written under temporary names; [`ShardFileWriter::finish`]
/// syncs and renames them into place and returns the manifest entry. Dropped
/// unfinished, it removes its temporary files.
#[derive(Debug)]
pub struct ShardFileWriter {
    writer: ShardWriter<ShardBuf>,
    dir: PathBuf,
    file_name: String,
}

impl ShardFileWriter {
    /// Starts shard `file_name` (for example from [`shard_file_name`]) in `dir`.
    ///
    /// # Errors
    /// I/O errors creating the temporary file; a bad zstd level.
    pub fn create(
        dir: &Path,
        file_name: &str,
        compression: Compression,
        zstd_level: i32,
    ) -> Result<Self> {
        let dest = dir.join(file_name);
        let file = AtomicFile::create(&dest)?;
        let writer = ShardWriter::new(ShardBuf::new(file), dest, compression, zstd_level)?;
        Ok(Self {
            writer,
            dir: dir.to_path_buf(),
            file_name: file_name.to_owned(),
        })
    }

    /// The shard writer, to add samples.
    pub fn writer(&mut self) -> &mut ShardWriter<ShardBuf> {
        &mut self.writer
    }

    /// Finishes the shard, writes its index, renames both into place and
    /// returns the shard's manifest entry.
    ///
    /// # Errors
    /// I/O errors, naming the file; nothing is left under the final names.
    pub fn finish(self) -> Result<ShardEntry> {
        let path = self.dir.join(&self.file_name);
        let compression = self.writer.compression;
        let (buf, index, summary) = self.writer.finish()?;
        let file = buf.into_inner().map_err(|e| FormatError::io(&path, e))?;
        let index_name = index_file_name(&self.file_name);
        commit_with_index(file, &self.dir.join(&index_name), &index)?;
        Ok(ShardEntry {
            file: self.file_name,
            index: index_name,
            samples: summary.samples,
            members: summary.members,
            bytes: summary.shard_bytes,
            tar_bytes: summary.tar_bytes,
            compression,
            index_xxh3: crate::manifest::hex64(u64::from_le_bytes(
                index[index.len() - 8..].try_into().unwrap_or_default(),
            )),
            shard_xxh3: Some(crate::manifest::hex64(summary.shard_checksum)),
            fields: summary.fields,
        })
    }
}

/// Whether `name` is a file bale writes into a dataset directory: the
/// manifest, a temporary file, or a shard or index of exactly the shape
/// [`shard_file_name`] gives: `shard-NNNNNN` or
/// `part-IIII-of-CCCC-shard-NNNNNN` (at least six and four digits), then
/// `.tar`, `.tar.zst`, `.h5` or `.idx`. `--force` removes no other name, so
/// `shard-notes.idx` or `part-of-thesis.tar` is never taken for bale's.
pub fn is_bale_file_name(name: &str) -> bool {
    name == crate::MANIFEST_NAME
        || name.starts_with(crate::atomic::TEMP_PREFIX)
        || is_shard_shape(name)
}

/// `shard-NNNNNN` / `part-IIII-of-CCCC-shard-NNNNNN` with a shard or index
/// extension ([`is_bale_file_name`]).
fn is_shard_shape(name: &str) -> bool {
    /// `s` starts with at least `min` ASCII digits: the rest after them.
    fn digits(s: &str, min: usize) -> Option<&str> {
        let n = s.bytes().take_while(u8::is_ascii_digit).count();
        (n >= min).then(|| &s[n..])
    }
    let Some(stem) = [".tar.zst", ".tar", ".h5", ".idx"]
        .iter()
        .find_map(|ext| name.strip_suffix(ext))
    else {
        return false;
    };
    let shard = match stem.strip_prefix("part-") {
        Some(rest) => {
            let shard = digits(rest, 4)
                .and_then(|r| r.strip_prefix("-of-"))
                .and_then(|r| digits(r, 4))
                .and_then(|r| r.strip_prefix('-'));
            let Some(shard) = shard else {
                return false;
            };
            shard
        }
        None => stem,
    };
    shard
        .strip_prefix("shard-")
        .and_then(|n| digits(n, 6))
        .is_some_and(str::is_empty)
}

/// A member's bytes streamed from a reader: `size` bytes from `reader`,
/// which `path` names in errors.
pub struct MemberSource<'a> {
    /// Bytes to take.
    pub size: u64,
    /// Where they come from.
    pub reader: &'a mut dyn std::io::Read,
    /// The file the reader reads, for errors.
    pub path: &'a Path,
}

impl std::fmt::Debug for MemberSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberSource")
            .field("size", &self.size)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Puts a finished shard (written under a temporary name) and its index in
/// place: the index is written, the shard renamed into place first (an index
/// never names a shard that is not there), then the index; if the index
/// cannot be put in place, the shard goes too.
pub(crate) fn commit_with_index(shard: AtomicFile, index_path: &Path, index: &[u8]) -> Result<()> {
    let shard_path = shard.dest().to_path_buf();
    let mut idx_file = AtomicFile::create(index_path)?;
    idx_file
        .write_all(&crate::index::index_file_bytes(index))
        .map_err(|e| FormatError::io(index_path, e))?;
    shard.commit()?;
    if let Err(e) = idx_file.commit() {
        let _ = std::fs::remove_file(&shard_path);
        return Err(e);
    }
    Ok(())
}

/// The keys a shard writer has taken, to refuse one taken twice. While they
/// come in increasing order (as `bale pack` writes them unless shuffled) a
/// new key is compared with the last one only, and all are kept in one
/// string; the first key out of order moves them into a hash set.
#[derive(Debug, Default)]
pub(crate) struct KeySet {
    /// The keys in order, back to back (while no set is made).
    text: String,
    /// Where each key of `text` ends.
    ends: Vec<usize>,
    set: Option<HashSet<String>>,
}

impl KeySet {
    /// Adds `key`: false when it was there already.
    pub(crate) fn insert(&mut self, key: &str) -> bool {
        if let Some(set) = &mut self.set {
            return set.insert(key.to_owned());
        }
        let start = self.ends.len().checked_sub(2).map_or(0, |i| self.ends[i]);
        let last = self.ends.last().map(|&end| &self.text[start..end]);
        if last.is_none_or(|last| key > last) {
            self.text.push_str(key);
            self.ends.push(self.text.len());
            return true;
        }
        let mut set = HashSet::with_capacity(self.ends.len() + 1);
        let mut at = 0;
        for &end in &self.ends {
            set.insert(self.text[at..end].to_owned());
            at = end;
        }
        self.text = String::new();
        self.ends = Vec::new();
        let new = set.insert(key.to_owned());
        self.set = Some(set);
        new
    }
}

/// The checks that start a sample in a shard writer (tar or HDF5): a valid
/// key, no sample still `open`, and a key new to the shard (recorded in
/// `keys`). `path` names the shard in errors.
pub(crate) fn check_new_sample(
    path: &Path,
    open: bool,
    keys: &mut KeySet,
    key: &str,
) -> Result<()> {
    validate_key(key)?;
    if open {
        return Err(FormatError::Limit {
            path: path.to_path_buf(),
            what: format!("sample {key:?} begun while another sample is open"),
        });
    }
    if !keys.insert(key) {
        return Err(FormatError::DuplicateKey {
            path: path.to_path_buf(),
            key: key.to_owned(),
        });
    }
    Ok(())
}

/// Checks a whole sample's names before any of it is written: a valid key,
/// at least one member, valid extensions, no extension twice.
///
/// # Errors
/// [`FormatError::InvalidName`] (or the key and extension checks' errors).
pub(crate) fn check_sample_names(key: &str, members: &[Member<'_>]) -> Result<()> {
    validate_key(key)?;
    if members.is_empty() {
        return Err(FormatError::InvalidName {
            name: key.to_owned(),
            reason: "a sample needs at least one member",
        });
    }
    for (i, m) in members.iter().enumerate() {
        validate_written_ext(m.ext)?;
        if members[..i].iter().any(|p| p.ext == m.ext) {
            return Err(FormatError::InvalidName {
                name: format!("{key}.{}", m.ext),
                reason: "two members of one sample share an extension",
            });
        }
    }
    Ok(())
}

/// Streams exactly `size` bytes from `reader` (the file `source`) to `sink`,
/// in chunks of at most 1 MiB.
///
/// # Errors
/// A read error, or a reader that ends before `size` bytes ("file shrank"),
/// each naming `source` and how far it got; whatever `sink` returns.
pub(crate) fn copy_exact(
    reader: &mut dyn Read,
    size: u64,
    source: &Path,
    mut sink: impl FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let mut buf = vec![0u8; (1 << 20).min(size.max(1) as usize)];
    let mut left = size;
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = match reader.read(&mut buf[..want]) {
            Ok(0) => {
                return Err(FormatError::Io {
                    path: source.to_path_buf(),
                    source: io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "file shrank while being read: {} of {size} bytes",
                            size - left
                        ),
                    ),
                });
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(FormatError::io_at(source, size - left, e)),
        };
        sink(&buf[..n])?;
        left -= n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn only_the_names_bale_writes_are_bale_names() {
        // Every name the writers give is one, whatever the compression.
        for c in [Compression::None, Compression::Zstd, Compression::H5] {
            for prefix in [
                "shard",
                "part-0003-of-0016-shard",
                "part-12345-of-20000-shard",
            ] {
                for n in [0, 7, 999_999, 1_000_000] {
                    let shard = shard_file_name(prefix, n, c);
                    assert!(is_bale_file_name(&shard), "{shard}");
                    assert!(is_bale_file_name(&index_file_name(&shard)), "{shard}");
                }
            }
        }
        for ok in ["bale.json", ".bale-tmp-12-shard-000000.tar"] {
            assert!(is_bale_file_name(ok), "{ok}");
        }
        // A user's files that merely start or end like them are not.
        for user in [
            "shard-notes.idx",
            "shard-map.h5",
            "shard-x.tar",
            "shard-.tar",
            "shard-00001.tar",
            "shard-000001.tar.bak",
            "shard-000001.txt",
            "shard-000001a.tar",
            "Shard-000000.tar",
            "part-final.tar.zst",
            "part-of-thesis.tar",
            "part-1.idx",
            "part-0001-of-0002.tar",
            "part-001-of-0002-shard-000000.tar",
            "part-0001-of-0002-shard-00000.tar",
            "part-0001-of-0002-shard-000000-x.tar",
            "xshard-000000.tar",
            "bale.json.bak",
        ] {
            assert!(!is_bale_file_name(user), "{user}");
        }
    }

    #[test]
    fn key_set_finds_every_repeat_in_order_or_out_of_it() {
        // A naive list of taken keys is the oracle.
        let mut next = crate::test_rng(0x9E37_79B9_7F4A_7C15);
        for run in 0..200 {
            let mut set = KeySet::default();
            let mut taken: Vec<String> = Vec::new();
            // Runs start in increasing order (some stay so), then draw from
            // a small alphabet so repeats and prefixes come often.
            let sorted = (next() % 20) as usize;
            for i in 0..60 {
                let key = if i < sorted {
                    format!("k{run}/{i:03}")
                } else {
                    let len = 1 + next() % 3;
                    (0..len)
                        .map(|_| ["a", "b", "ab", "/"][(next() % 4) as usize])
                        .collect()
                };
                let new = !taken.contains(&key);
                assert_eq!(set.insert(&key), new, "run {run}, key {i} {key:?}");
                if new {
                    taken.push(key);
                }
            }
        }
        let mut set = KeySet::default();
        assert!(set.insert("a") && set.insert("b") && !set.insert("b"));
        assert!(!set.insert("a") && set.insert("ab") && !set.insert("ab"));
    }

    /// Members of every size class: below and above the direct-write size,
    /// and above the whole buffer.
    fn members() -> Vec<(String, Vec<u8>)> {
        [
            0usize,
            1,
            511,
            512,
            5000,
            DIRECT_WRITE - 1,
            DIRECT_WRITE,
            200_000,
            SHARD_BUF + 3,
        ]
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let data = (0..n).map(|b| (b * 31 + i) as u8).collect();
            (format!("{i:04}"), data)
        })
        .collect()
    }

    /// The file writer (its own buffering, large members written through)
    /// with precomputed checksums, and samples encoded ahead, write the same
    /// shard and index as the in-memory writer hashing every member itself.
    #[test]
    fn hashed_members_through_the_file_buffer_give_the_same_shard_and_index() {
        for compression in [Compression::None, Compression::Zstd] {
            let mut mem = ShardWriter::new(Vec::new(), "mem.tar", compression, 0).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let name = shard_file_name("shard", 0, compression);
            let mut file = ShardFileWriter::create(dir.path(), &name, compression, 0).unwrap();
            for (key, data) in members() {
                mem.write_sample(
                    &key,
                    &[
                        Member {
                            ext: "bin",
                            data: &data,
                        },
                        Member {
                            ext: "txt",
                            data: b"x",
                        },
                    ],
                )
                .unwrap();
                let w = file.writer();
                w.begin_sample(&key).unwrap();
                w.add_hashed_member("bin", &Hashed::new(data.clone()))
                    .unwrap();
                w.add_member("txt", b"x").unwrap();
                w.end_sample().unwrap();
            }
            let (tar, index, summary) = mem.finish().unwrap();
            let entry = file.finish().unwrap();
            // The same samples encoded ahead (data read in place or copied).
            let mut enc = ShardWriter::new(Vec::new(), "enc.tar", compression, 0).unwrap();
            for (i, (key, data)) in members().into_iter().enumerate() {
                let mut s = EncodedSample::new(&key, 0).unwrap();
                if i % 2 == 0 {
                    s.add_member("bin", &data).unwrap();
                } else {
                    s.add_member_with::<FormatError>("bin", data.len() as u64, |v| {
                        v.extend_from_slice(&data);
                        Ok(())
                    })
                    .unwrap();
                }
                s.add_member("txt", b"x").unwrap();
                let got: Vec<(&str, &[u8])> = s.members().collect();
                assert_eq!(got, [("bin", &data[..]), ("txt", &b"x"[..])]);
                enc.add_encoded_sample(&s).unwrap();
                let dup = enc.add_encoded_sample(&s).unwrap_err();
                assert!(matches!(dup, FormatError::DuplicateKey { .. }), "{dup}");
            }
            let (enc_tar, enc_index, _) = enc.finish().unwrap();
            assert_eq!(enc_tar, tar, "{compression:?}");
            assert_eq!(enc_index, index, "{compression:?}");
            assert_eq!(fs::read(dir.path().join(&entry.file)).unwrap(), tar);
            // The index file holds the index in its stored form (compressed
            // for .tar.zst).
            let stored = fs::read(dir.path().join(&entry.index)).unwrap();
            assert_eq!(stored, &*crate::index::index_file_bytes(&index));
            assert_eq!(
                stored[..4] == [0x28, 0xB5, 0x2F, 0xFD],
                compression == Compression::Zstd
            );
            assert_eq!(entry.bytes, summary.shard_bytes);
            assert_eq!(
                entry.shard_xxh3,
                Some(crate::manifest::hex64(summary.shard_checksum))
            );
        }
    }

    #[test]
    fn encoded_member_of_the_wrong_size_or_name_is_an_error() {
        let mut s = EncodedSample::new("k", 0).unwrap();
        let e = s
            .add_member_with::<FormatError>("bin", 4, |v| {
                v.extend_from_slice(b"abc");
                Ok(())
            })
            .unwrap_err();
        assert!(e.to_string().contains("3 bytes instead of 4"), "{e}");
        let mut s = EncodedSample::new("k", 0).unwrap();
        s.add_member("a", b"1").unwrap();
        assert!(s.add_member("a", b"2").is_err());
        assert!(s.add_member("bad/ext", b"2").is_err());
        assert!(EncodedSample::new("", 0).is_err());
        let empty = EncodedSample::new("e", 0).unwrap();
        let mut w = ShardWriter::new(Vec::new(), "e.tar", Compression::None, 0).unwrap();
        assert!(w.add_encoded_sample(&empty).is_err());
        assert_eq!(w.bytes_written(), 0);
    }
}
