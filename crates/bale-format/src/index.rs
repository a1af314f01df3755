//! The shard index: a binary file per shard that locates every sample and member.
//!
//! Layout (all integers little-endian; see docs/format.md for the normative text):
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | magic `BALEIDX\0` |
//! | 8 | 2 | major version (1) |
//! | 10 | 2 | minor version (0; 1 when bit 2 is set; 2 when bit 4 is set) |
//! | 12 | 4 | flags: bit 0 zstd shard, bit 1 checksums present, bit 2 scattered members, bit 3 HDF5 shard, bit 4 zstd dictionary |
//! | 16 | 8 | sample count S |
//! | 24 | 8 | member count M |
//! | 32 | 8 | string table length L |
//! | 40 | 8 | shard file length |
//! | 48 | 8 | uncompressed tar length |
//! | 56 | 8 | dictionary length D (0 unless bit 4 is set) |
//! | 64 | 48 S | sample records |
//! | | 32 M | member records |
//! | | 16 S | key lookup table, sorted |
//! | | L | string table (keys and extensions, UTF-8) |
//! | | D | the shard's zstd dictionary (index 1.2; also at the shard's start) |
//! | | 8 | xxh3-64 of every byte before it |

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::hash::xxh3_64;

use crate::error::{FormatError, Result};
use crate::name::validate_ext;

/// Magic bytes at the start of every index file.
pub(crate) const INDEX_MAGIC: [u8; 8] = *b"BALEIDX\0";
/// Major version of the index layout this crate writes and reads.
pub(crate) const INDEX_MAJOR: u16 = 1;
/// Minor version of the index layout this crate writes for contiguous
/// samples (tar and `.tar.zst` shards): their indexes stay byte-identical to 1.0.
pub(crate) const INDEX_MINOR: u16 = 0;
/// Minor version written when [`FLAG_SCATTERED`] is set (index layout 1.1).
pub(crate) const INDEX_MINOR_SCATTERED: u16 = 1;
/// Flag: the shard is a `.tar.zst` with one zstd frame per sample.
pub(crate) const FLAG_ZSTD: u32 = 1;
/// Flag: member checksums are present (else the checksum fields are 0 and meaningless).
pub(crate) const FLAG_CHECKSUMS: u32 = 2;
/// Flag (index 1.1): members are scattered. Each member record's `offset` is
/// the absolute offset of its data in the shard file, stored uncompressed and
/// read on its own; sample records' four byte-range fields are 0 and the
/// header's tar length is 0.
pub(crate) const FLAG_SCATTERED: u32 = 4;
/// Flag (index 1.1): the shard is an HDF5 file (docs/format.md); requires [`FLAG_SCATTERED`].
pub(crate) const FLAG_H5: u32 = 8;
/// Flag (index 1.2): the `.tar.zst` shard's frames are compressed with a
/// raw-content zstd dictionary: the first bytes of its tar stream (see
/// [`ZSTD_DICT_MAX`]). The dictionary is stored twice: in the shard, as a
/// skippable frame at offset 0 (so the shard stands alone), and at the end of
/// the index (so a reader needs no extra read).
pub(crate) const FLAG_ZDICT: u32 = 16;
/// Minor version written when [`FLAG_ZDICT`] is set (index layout 1.2).
pub(crate) const INDEX_MINOR_DICT: u16 = 2;
const KNOWN_FLAGS: u32 = FLAG_ZSTD | FLAG_CHECKSUMS | FLAG_SCATTERED | FLAG_H5 | FLAG_ZDICT;
/// The most bytes of a shard's tar stream used as its zstd dictionary.
pub const ZSTD_DICT_MAX: usize = 16 << 10;
/// The fewest: a shard whose dictionary would be shorter has none.
pub const ZSTD_DICT_MIN: usize = 512;
/// Magic of the skippable frame holding a shard's zstd dictionary at offset 0
/// (zstd's skippable range is `0x184D2A50..=0x184D2A5F`).
pub const ZSTD_DICT_FRAME_MAGIC: u32 = 0x184D_2A5B;
/// Magic that starts a structured (trained) zstd dictionary: a raw-content
/// dictionary must not start with it, or zstd would parse it as one.
const ZSTD_STRUCTURED_DICT_MAGIC: [u8; 4] = 0xEC30_A437u32.to_le_bytes();

/// The four bytes that open a zstd frame. An index file that starts with
/// them holds its index compressed, as one frame (see [`index_file_bytes`]).
const ZSTD_FRAME_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
/// A compressed index may decompress to at most this many times its
/// compressed size (plus 64 KiB): real indexes compress 3-10x; a frame that
/// claims more is refused before anything is allocated.
const MAX_INDEX_RATIO: u64 = 256;

/// The bytes an index is stored as in its file: for a `.tar.zst` shard's
/// index (flag bit 0), one zstd frame (level 3, content size recorded), a
/// third of the size for small samples; other indexes as they are, so that
/// they are mapped, not decompressed.
pub fn index_file_bytes(index: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let zstd = index.len() >= HEADER_LEN && u32_at(index, 12) & FLAG_ZSTD != 0;
    if zstd && let Ok(z) = zstd::bulk::compress(index, 3) {
        return std::borrow::Cow::Owned(z);
    }
    std::borrow::Cow::Borrowed(index)
}

/// Whether `bytes` start like a compressed index.
fn is_compressed_index(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && bytes[..4] == ZSTD_FRAME_MAGIC
}

/// Whether `head`, the first 8 bytes of a file (or all of a shorter one),
/// begin one of bale's indexes in either stored form: `BALEIDX\0` or a
/// zstd frame. Tells bale's `.idx` files from others of the same name (a
/// DALI tar index is text) before anything deletes them.
pub fn is_index_head(head: &[u8]) -> bool {
    (head.len() >= 8 && head[..8] == INDEX_MAGIC) || is_compressed_index(head)
}

/// Bytes of an index's fixed tables for `samples` and `members` (header,
/// sample records, lookup table, member records, footer), if they fit a u64.
fn tables_len(samples: u64, members: u64) -> Option<u64> {
    samples
        .checked_mul((SAMPLE_LEN + LOOKUP_LEN) as u64)?
        .checked_add(members.checked_mul(MEMBER_LEN as u64)?)?
        .checked_add((HEADER_LEN + FOOTER_LEN) as u64)
}

/// The checks on a plain index of `len` bytes whose first bytes are `head`,
/// before the whole of it is read into memory, so that what is allocated is
/// bounded by them and not by the file: bale's magic; no longer than `most`
/// (the most an index of the manifest's counts can take) nor than its header
/// gives (a shorter one is refused as truncated once read).
fn check_before_read(head: &[u8], len: u64, most: Option<u64>, path: &Path) -> Result<()> {
    if head.len() < 8 || head[..8] != INDEX_MAGIC {
        return Err(FormatError::BadMagic {
            path: path.to_path_buf(),
            what: "index",
        });
    }
    if let Some(most) = most
        && len > most
    {
        return Err(FormatError::corrupt(
            path,
            0,
            format!("{len} bytes, more than an index of the manifest's counts can take ({most})"),
        ));
    }
    if len >= (HEADER_LEN + FOOTER_LEN) as u64 {
        let expected = described_len(
            u64_at(head, 16),
            u64_at(head, 24),
            u64_at(head, 32),
            u64_at(head, 56),
        );
        if expected.is_none_or(|e| e < len) {
            return Err(FormatError::corrupt(
                path,
                16,
                format!("header counts describe {expected:?} bytes, it holds {len}"),
            ));
        }
    }
    Ok(())
}

/// The length an index header says its file has: the fixed tables for its
/// `samples` and `members`, its `strings` and its zstd dictionary (`dict`).
fn described_len(samples: u64, members: u64, strings: u64, dict: u64) -> Option<u64> {
    tables_len(samples, members)?
        .checked_add(strings)?
        .checked_add(dict)
}

/// The fewest bytes a plain index of `samples` samples and `members`
/// members can take: its fixed tables, with no key, extension or dictionary.
#[must_use]
pub fn index_len_min(samples: u64, members: u64) -> u64 {
    tables_len(samples, members).unwrap_or(u64::MAX)
}

/// The most bytes a (decompressed) index of `samples` samples and `members`
/// members can take: its records, every key and extension at the longest a
/// name may be, a zstd dictionary, and room to spare.
#[must_use]
pub fn index_len_max(samples: u64, members: u64) -> u64 {
    let strings = samples.saturating_add(members).saturating_mul(4096);
    index_len_min(samples, members)
        .saturating_add(strings)
        .saturating_add(ZSTD_DICT_MAX as u64)
        .saturating_add(4096)
}

/// The size a compressed index of `stored` bytes says it decompresses to,
/// from its first bytes `head` (holding the frame header: up to 18 bytes), before
/// anything else is read or allocated. Refused: no recorded size, more than
/// [`MAX_INDEX_RATIO`] times `stored` or than `most` (from the manifest's
/// counts, when known), and a file longer than any zstd frame of that size
/// (so not one index frame: a shard, say, whose first sample starts alike).
fn compressed_index_size(head: &[u8], stored: u64, most: Option<u64>, path: &Path) -> Result<u64> {
    let bad = |what: String| FormatError::corrupt(path, 0, what);
    let size = match zstd::zstd_safe::get_frame_content_size(head) {
        Ok(Some(n)) => n,
        Ok(None) => {
            return Err(bad(
                "compressed index: its zstd frame does not record its size".into(),
            ));
        }
        Err(_) => return Err(bad("compressed index: bad zstd frame header".into())),
    };
    let by_ratio = stored
        .saturating_mul(MAX_INDEX_RATIO)
        .saturating_add(64 << 10);
    if size > by_ratio {
        return Err(bad(format!(
            "compressed index: its zstd frame claims {size} bytes, more than {MAX_INDEX_RATIO}x its {stored} bytes"
        )));
    }
    if let Some(most) = most
        && size > most
    {
        return Err(bad(format!(
            "compressed index: its zstd frame claims {size} bytes, more than an index of the manifest's counts can take ({most})"
        )));
    }
    let bound = usize::try_from(size)
        .map(zstd::zstd_safe::compress_bound)
        .unwrap_or(usize::MAX) as u64;
    if stored > bound.saturating_add(64) {
        return Err(bad(format!(
            "compressed index: {stored} bytes, more than a zstd frame of {size} bytes can take: not one index frame"
        )));
    }
    Ok(size)
}

/// Decompresses a compressed index: exactly one zstd frame that records its
/// content size, within [`compressed_index_size`]'s limits.
fn inflate_index(bytes: &[u8], most: Option<u64>, path: &Path) -> Result<Vec<u8>> {
    let bad = |what: String| FormatError::corrupt(path, 0, what);
    let size = compressed_index_size(bytes, bytes.len() as u64, most, path)?;
    match zstd::zstd_safe::find_frame_compressed_size(bytes) {
        Ok(n) if n == bytes.len() => {}
        _ => {
            return Err(bad("compressed index: not exactly one zstd frame".into()));
        }
    }
    // An allocation that fails is an error naming the file, not an abort.
    let mut out: Vec<u8> = Vec::new();
    usize::try_from(size)
        .ok()
        .and_then(|n| out.try_reserve_exact(n).ok())
        .ok_or_else(|| {
            bad(format!(
                "compressed index: no memory for the {size} bytes it decompresses to"
            ))
        })?;
    zstd::bulk::Decompressor::new()
        .and_then(|mut d| d.decompress_to_buffer(bytes, &mut out))
        .map_err(|e| bad(format!("compressed index: bad zstd frame: {e}")))?;
    if out.len() as u64 != size {
        return Err(bad(format!(
            "compressed index: decompresses to {} bytes, its frame says {size}",
            out.len()
        )));
    }
    Ok(out)
}

/// Whether `dict` can serve as a shard's raw-content zstd dictionary.
pub fn zstd_dict_ok(dict: &[u8]) -> bool {
    (ZSTD_DICT_MIN..=ZSTD_DICT_MAX).contains(&dict.len()) && dict[..4] != ZSTD_STRUCTURED_DICT_MAGIC
}

const HEADER_LEN: usize = 64;
const SAMPLE_LEN: usize = 48;
const MEMBER_LEN: usize = 32;
const LOOKUP_LEN: usize = 16;
const FOOTER_LEN: usize = 8;

/// How a shard's bytes are stored.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// A plain tar file.
    #[default]
    None,
    /// A `.tar.zst`: one zstd frame per sample and one for the end-of-archive blocks.
    Zstd,
    /// An HDF5 file (`.h5`): each field's bytes in one dataset, members read
    /// one at a time at the absolute offsets the index records (index 1.1).
    #[serde(rename = "h5")]
    H5,
}

impl Compression {
    /// The shard file extension: `tar` or `tar.zst`.
    pub fn extension(self) -> &'static str {
        match self {
            Compression::None => "tar",
            Compression::Zstd => "tar.zst",
            Compression::H5 => "h5",
        }
    }

    /// The name used in the manifest: `none` or `zstd`.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zstd => "zstd",
            Compression::H5 => "h5",
        }
    }

    /// Whether the shard is a tar stream (plain or zstd-framed), which
    /// sequential tar readers can stream.
    pub fn is_tar(self) -> bool {
        !matches!(self, Compression::H5)
    }
}

/// The xxh3-64 checksum bale uses for member bytes and files.
pub fn checksum(bytes: &[u8]) -> u64 {
    xxh3_64(bytes)
}

/// Asks the CPU to load the cache line holding `bytes[at]` (a hint: no
/// fault, no wait). `at` lies in `bytes`.
#[inline]
fn prefetch_line(bytes: &[u8], at: usize) {
    debug_assert!(at < bytes.len());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and has no effect on memory; the
    // address lies in a live slice.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            bytes.as_ptr().add(at).cast(),
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, at);
}

/// Asks the CPU to load the cache lines of `bytes` (a hint: no fault, no wait).
pub fn prefetch(bytes: &[u8]) {
    // Every 64-byte line the slice touches, from the one holding its first byte.
    let first = bytes.as_ptr() as usize % 64;
    let mut at = 0;
    while at < bytes.len() {
        prefetch_line(bytes, at);
        at += 64 - if at == 0 { first } else { 0 };
    }
}

/// As [`prefetch`] for the bytes of a sample about to be read at once: one
/// line in two (every 128 bytes), over at most the first 4 KiB. Half as
/// many instructions stall half as often on the CPU's few outstanding
/// misses, and the copy that follows at once finds the rest on its way: a
/// warm random read of a 2 KB sample ran 1.15x faster this way than with
/// every line (docs/benchmarks.md). A sample asked for ahead of time wants
/// every line ([`prefetch`]): nothing fetches the lines between meanwhile.
#[inline]
pub fn prefetch_sample(bytes: &[u8]) {
    for at in (0..bytes.len().min(4096)).step_by(128) {
        prefetch_line(bytes, at);
    }
}

/// Where one sample lies in its shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleEntry {
    /// Offset in the shard file of the bytes to read for this sample: the
    /// first tar header (plain) or the zstd frame (compressed).
    pub file_offset: u64,
    /// Number of bytes to read from `file_offset`.
    pub file_len: u64,
    /// Offset in the uncompressed tar stream of the sample's first header.
    pub tar_offset: u64,
    /// Length in the uncompressed tar stream, headers and padding included.
    pub tar_len: u64,
    /// Index of the sample's first member in the member table.
    pub member_start: u32,
    /// Number of members.
    pub member_count: u32,
    key_off: u32,
    key_len: u32,
}

/// One member of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberEntry<'a> {
    /// The extension: the member is named `<key>.<ext>`.
    pub ext: &'a str,
    /// Offset of the member's data in the uncompressed tar stream.
    pub offset: u64,
    /// Size of the member's data.
    pub size: u64,
    /// xxh3-64 of the member's data (0 when the index has no checksums).
    pub checksum: u64,
}

/// Builds an index in memory while a shard is written.
#[derive(Debug, Default)]
pub struct IndexBuilder {
    samples: Vec<SampleEntry>,
    members: Vec<(u64, u64, u64, u32, u32)>,
    strings: Vec<u8>,
    exts: HashMap<String, (u32, u32)>,
    flags: u32,
    dict: Vec<u8>,
}

impl IndexBuilder {
    /// A new builder for a shard with the given compression, with checksums.
    pub fn new(compression: Compression) -> Self {
        Self::with_checksums(compression, true)
    }

    /// A new builder; `checksums` says whether member checksums will be recorded.
    pub fn with_checksums(compression: Compression, checksums: bool) -> Self {
        let mut flags = match compression {
            Compression::None => 0,
            Compression::Zstd => FLAG_ZSTD,
            Compression::H5 => FLAG_H5 | FLAG_SCATTERED,
        };
        if checksums {
            flags |= FLAG_CHECKSUMS;
        }
        Self {
            flags,
            ..Self::default()
        }
    }

    /// Makes the index scattered (layout 1.1, flag bit 2): each
    /// member's offset is then an absolute offset in the shard file, and the
    /// samples' byte ranges and the tar length passed to
    /// [`IndexBuilder::to_bytes`] must be 0. For plain tars (whose members lie
    /// apart: `bale index --allow-split`) and HDF5 shards; a `.tar.zst` cannot
    /// be scattered (its members are compressed), so this does nothing for one.
    pub fn scattered(mut self) -> Self {
        if self.flags & FLAG_ZSTD == 0 {
            self.flags |= FLAG_SCATTERED;
        }
        self
    }

    /// Records the `.tar.zst` shard's zstd dictionary (index layout 1.2,
    /// flag bit 4); see [`ZSTD_DICT_MAX`]. Ignored for other shards and for a
    /// dictionary [`zstd_dict_ok`] refuses.
    pub fn set_zstd_dict(&mut self, dict: &[u8]) {
        if self.flags & FLAG_ZSTD != 0 && zstd_dict_ok(dict) {
            self.flags |= FLAG_ZDICT;
            self.dict = dict.to_vec();
        }
    }

    /// Whether the index is scattered (see [`IndexBuilder::scattered`]).
    pub fn is_scattered(&self) -> bool {
        self.flags & FLAG_SCATTERED != 0
    }

    /// Number of samples so far.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether no sample was added.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    fn intern(&mut self, s: &str) -> (u32, u32) {
        let off = self.strings.len() as u32;
        self.strings.extend_from_slice(s.as_bytes());
        (off, s.len() as u32)
    }

    /// Adds a sample. `members` gives, for each member, its extension, data
    /// offset and size in the tar stream (for a scattered index: the absolute
    /// offset in the shard file; the four sample ranges must then be 0), and checksum.
    ///
    /// The caller (the shard writer, or an indexer of existing tars) is
    /// responsible for the positions; the builder only records them.
    pub fn push_sample(
        &mut self,
        key: &str,
        file_offset: u64,
        file_len: u64,
        tar_offset: u64,
        tar_len: u64,
        members: &[(&str, u64, u64, u64)],
    ) {
        let (key_off, key_len) = self.intern(key);
        let member_start = self.members.len() as u32;
        for &(ext, offset, size, sum) in members {
            let (eo, el) = match self.exts.get(ext) {
                Some(&v) => v,
                None => {
                    let v = self.intern(ext);
                    self.exts.insert(ext.to_owned(), v);
                    v
                }
            };
            self.members.push((offset, size, sum, eo, el));
        }
        self.samples.push(SampleEntry {
            file_offset,
            file_len,
            tar_offset,
            tar_len,
            member_start,
            member_count: members.len() as u32,
            key_off,
            key_len,
        });
    }

    /// Whether the index will exceed the format's limits (2^32 - 1 samples,
    /// members or string bytes).
    pub fn over_limits(&self) -> bool {
        self.samples.len() >= u32::MAX as usize
            || self.members.len() >= u32::MAX as usize
            || self.strings.len() >= u32::MAX as usize
    }

    /// Serializes the index. `shard_len` is the shard file's length and
    /// `tar_len` the uncompressed tar length (end blocks included).
    pub fn to_bytes(&self, shard_len: u64, tar_len: u64) -> Vec<u8> {
        let s = self.samples.len();
        let m = self.members.len();
        let total = HEADER_LEN
            + SAMPLE_LEN * s
            + MEMBER_LEN * m
            + LOOKUP_LEN * s
            + self.strings.len()
            + self.dict.len()
            + FOOTER_LEN;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&INDEX_MAGIC);
        out.extend_from_slice(&INDEX_MAJOR.to_le_bytes());
        let minor = if self.flags & FLAG_SCATTERED != 0 {
            INDEX_MINOR_SCATTERED
        } else if self.flags & FLAG_ZDICT != 0 {
            INDEX_MINOR_DICT
        } else {
            INDEX_MINOR
        };
        out.extend_from_slice(&minor.to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        for v in [
            s as u64,
            m as u64,
            self.strings.len() as u64,
            shard_len,
            tar_len,
            self.dict.len() as u64,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for e in &self.samples {
            for v in [e.file_offset, e.file_len, e.tar_offset, e.tar_len] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            for v in [e.key_off, e.key_len, e.member_start, e.member_count] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        for &(offset, size, sum, eo, el) in &self.members {
            for v in [offset, size, sum] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&eo.to_le_bytes());
            out.extend_from_slice(&el.to_le_bytes());
        }
        let mut lookup: Vec<(u64, u64)> = self
            .samples
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let key = &self.strings[e.key_off as usize..(e.key_off + e.key_len) as usize];
                (xxh3_64(key), i as u64)
            })
            .collect();
        lookup.sort_unstable();
        for (h, i) in lookup {
            out.extend_from_slice(&h.to_le_bytes());
            out.extend_from_slice(&i.to_le_bytes());
        }
        out.extend_from_slice(&self.strings);
        out.extend_from_slice(&self.dict);
        let sum = xxh3_64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        debug_assert_eq!(out.len(), total);
        out
    }
}

#[derive(Debug)]
enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Bytes {
    /// Drops a mapped index's pages from the process's resident set: they
    /// stay in the page cache, and a later read faults them back in. A hint:
    /// a failure loses nothing.
    fn release(&self) {
        if let Bytes::Mapped(m) = self {
            // SAFETY: the map is read-only and shared, of a file bale never
            // modifies in place: dropping its pages loses no write, and the
            // next read of them sees the same bytes.
            let _ = unsafe { m.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        }
    }

    /// [`Bytes::release`] of the pages that hold bytes `from..to` (the
    /// pages at both ends too, whole).
    fn release_range(&self, from: usize, to: usize) {
        if let Bytes::Mapped(m) = self
            && from < to.min(m.len())
        {
            // SAFETY: as in `release`.
            let _ = unsafe {
                m.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    from,
                    to.min(m.len()) - from,
                )
            };
        }
    }

    /// Faults the pages of bytes `from..to` of a mapped index in at once
    /// (`MADV_POPULATE_READ`, else a read-ahead hint): about 3x faster than
    /// a page fault per 4 KiB. A hint.
    fn populate_range(&self, from: usize, to: usize) {
        if let Bytes::Mapped(m) = self
            && from < to.min(m.len())
        {
            let len = to.min(m.len()) - from;
            #[cfg(target_os = "linux")]
            if m.advise_range(memmap2::Advice::PopulateRead, from, len)
                .is_ok()
            {
                return;
            }
            let _ = m.advise_range(memmap2::Advice::WillNeed, from, len);
        }
    }
}

/// Bytes of a mapped index that a pass over it (its checks at open,
/// `bale verify`'s) holds resident at once: the pages behind it are dropped
/// as it goes, so memory is bounded by this, not by the index's size.
pub const INDEX_WINDOW: usize = 4 << 20;

/// [`INDEX_WINDOW`], or `BALE_INDEX_WINDOW` (bytes, at least 4 KiB) where
/// tests need a small index checked in many windows.
fn index_window() -> usize {
    static WINDOW: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *WINDOW.get_or_init(|| {
        std::env::var("BALE_INDEX_WINDOW")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map_or(INDEX_WINDOW, |n| n.max(4096))
    })
}

/// Whether `bytes` are UTF-8, checked `window` bytes at a time, `done(from,
/// to)` called after each range checked.
fn is_utf8_windowed(bytes: &[u8], window: usize, mut done: impl FnMut(usize, usize)) -> bool {
    let mut at = 0;
    while at < bytes.len() {
        let end = bytes.len().min(at + window.max(4));
        let ok_to = match std::str::from_utf8(&bytes[at..end]) {
            Ok(_) => end,
            // A character cut by the window's end: checked in the next.
            Err(e) if e.error_len().is_none() && end < bytes.len() => at + e.valid_up_to(),
            Err(_) => return false,
        };
        done(at, ok_to);
        at = ok_to;
    }
    true
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A loaded, validated shard index.
///
/// Opening checks the magic, version, length, checksum and every record's
/// bounds once; after that every accessor is infallible and allocation-free.
#[derive(Debug)]
pub struct ShardIndex {
    bytes: Bytes,
    path: PathBuf,
    samples: usize,
    members: usize,
    flags: u32,
    shard_len: u64,
    tar_len: u64,
    members_at: usize,
    lookup_at: usize,
    strings_at: usize,
    dict_at: usize,
    dict_len: usize,
    /// Bytes of the index as stored (compressed or not).
    stored_len: u64,
    checksum: u64,
    /// Samples whose records a pass reads between two releases of the
    /// mapped pages: about [`INDEX_WINDOW`] bytes of the index.
    window_samples: usize,
}

/// An index at `path` holding `held` (samples, members) against the
/// manifest's `recorded`: an error naming the count that differs.
fn counts_match(path: &Path, held: (u64, u64), recorded: (u64, u64)) -> Result<()> {
    for (what, h, r) in [
        ("samples", held.0, recorded.0),
        ("members", held.1, recorded.1),
    ] {
        if h != r {
            return Err(FormatError::IndexMismatch {
                path: path.to_path_buf(),
                what: format!("the index holds {h} {what}, the manifest records {r}"),
            });
        }
    }
    Ok(())
}

#[inline]
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

#[inline]
fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

impl ShardIndex {
    /// Opens an index file by memory-mapping it, and validates it.
    ///
    /// The file must not be truncated or rewritten while it is open (bale
    /// replaces files by renaming, which is safe).
    ///
    /// # Errors
    /// I/O errors, and every structural problem, naming the file and offset.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if crate::read_at::is_url(path) {
            return Self::open_url(path, None);
        }
        let file = crate::files::open_regular(path)?;
        let len = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
        Self::open_file(file, len, path, None, true)
    }

    /// Maps (or, when small or compressed, reads) an opened index file of
    /// `len` bytes and validates it. Its first bytes are read first, on
    /// their own: with `expect`, the manifest's (samples, members), a plain
    /// index's header is held to them, and a compressed one is held to its
    /// frame header's limits (with the most an index of those counts can
    /// take) before the rest is read. Without `map`, a plain index is read
    /// into memory too, once it has passed [`check_before_read`].
    fn open_file(
        mut file: File,
        len: u64,
        path: &Path,
        expect: Option<(u64, u64)>,
        map: bool,
    ) -> Result<Self> {
        let io = |e| FormatError::io(path, e);
        let mut head = [0u8; HEADER_LEN];
        let n = len.min(HEADER_LEN as u64) as usize;
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut head[..n], 0).map_err(io)?;
        let most = expect.map(|(samples, members)| index_len_max(samples, members));
        let compressed = Self::check_head(&head[..n], len, expect, most, path)?;
        if !map && !compressed {
            check_before_read(&head[..n], len, most, path)?;
        }
        if compressed || !map || len < (HEADER_LEN + FOOTER_LEN) as u64 {
            // Small files: read them (mapping an empty file fails on some systems).
            let mut bytes = Vec::new();
            (&mut file).take(len).read_to_end(&mut bytes).map_err(io)?;
            return Self::from_bytes_within(bytes, path.to_path_buf(), most);
        }
        // SAFETY: the map is read-only; bale never modifies an index in place
        // (it writes a new file and renames it), and validation below bounds
        // every later access.
        // Validation reads it window by window, populating each window in one
        // go and dropping it once read: memory is a window, not the index.
        let map = unsafe { memmap2::MmapOptions::new().map(&file) }.map_err(io)?;
        let index = Self::validate(Bytes::Mapped(map), path.to_path_buf(), index_window())?;
        // Checked: what stays resident is what later reads touch, not the
        // whole index (the pages stay in the page cache).
        index.release_pages();
        Ok(index)
    }

    /// The checks on the first bytes `head` (up to [`HEADER_LEN`]) of an
    /// index of `len` bytes, before the rest is read: a compressed index's
    /// frame header within its limits (true: it is compressed); a plain
    /// index's counts against the manifest's (`expect`).
    fn check_head(
        head: &[u8],
        len: u64,
        expect: Option<(u64, u64)>,
        most: Option<u64>,
        path: &Path,
    ) -> Result<bool> {
        if is_compressed_index(head) {
            compressed_index_size(head, len, most, path)?;
            return Ok(true);
        }
        if let Some(recorded) = expect
            && len >= (HEADER_LEN + FOOTER_LEN) as u64
            && head[..8] == INDEX_MAGIC
        {
            counts_match(path, (u64_at(head, 16), u64_at(head, 24)), recorded)?;
        }
        Ok(false)
    }

    /// Opens the index of a shard the manifest records with `samples` samples
    /// and `members` members. The header is read first, on its own: a file
    /// whose counts differ, or whose length is not the one its counts give,
    /// is refused before any table is mapped or read, so a foreign or hostile
    /// file costs one small read.
    ///
    /// # Errors
    /// [`FormatError::IndexMismatch`] when the counts differ from the
    /// manifest's; as [`ShardIndex::open`].
    pub fn open_expecting(path: impl AsRef<Path>, samples: u64, members: u64) -> Result<Self> {
        Self::open_expecting_with(path.as_ref(), samples, members, true)
    }

    /// As [`ShardIndex::open_expecting`], but the file is read into memory,
    /// not mapped: another program truncating it later cannot make a read
    /// of the index raise `SIGBUS`.
    ///
    /// # Errors
    /// As [`ShardIndex::open_expecting`].
    pub fn read_expecting(path: impl AsRef<Path>, samples: u64, members: u64) -> Result<Self> {
        Self::open_expecting_with(path.as_ref(), samples, members, false)
    }

    fn open_expecting_with(path: &Path, samples: u64, members: u64, map: bool) -> Result<Self> {
        if crate::read_at::is_url(path) {
            return Self::open_url(path, Some((samples, members)));
        }
        let file = crate::files::open_regular(path)?;
        let len = file.metadata().map_err(|e| FormatError::io(path, e))?.len();
        let index = Self::open_file(file, len, path, Some((samples, members)), map)?;
        // A compressed index's header is checked once decompressed.
        index.check_counts(samples, members)?;
        Ok(index)
    }

    /// The counts `samples` and `members` of the manifest, against this index's.
    fn check_counts(&self, samples: u64, members: u64) -> Result<()> {
        counts_match(
            &self.path,
            (self.samples as u64, self.members as u64),
            (samples, members),
        )
    }

    /// An index at a URL (through the storage layer, see
    /// [`crate::read_at::open`]): its header is read first and, with
    /// `expect`, compared with the manifest's counts; its length must be the
    /// one its counts give before the rest is read.
    fn open_url(path: &Path, expect: Option<(u64, u64)>) -> Result<Self> {
        let (src, len) = crate::read_at::open(path)?;
        let io = |e| FormatError::io(path, e);
        let mut head = [0u8; HEADER_LEN];
        let n = len.min(HEADER_LEN as u64) as usize;
        if n > 0 {
            src.read_exact_at(&mut head[..n], 0).map_err(io)?;
        }
        let most = expect.map(|(samples, members)| index_len_max(samples, members));
        if !Self::check_head(&head[..n], len, expect, most, path)? {
            check_before_read(&head[..n], len, most, path)?;
        }
        let mut bytes = vec![0u8; len.min(u64::from(u32::MAX) * 4) as usize];
        src.read_exact_at(&mut bytes, 0).map_err(io)?;
        let index = Self::from_bytes_within(bytes, path.to_path_buf(), most)?;
        if let Some((samples, members)) = expect {
            index.check_counts(samples, members)?;
        }
        Ok(index)
    }

    /// Validates an index held in memory; `path` names it in errors.
    ///
    /// # Errors
    /// Every structural problem, naming `path` and the offset.
    pub fn from_bytes(bytes: Vec<u8>, path: impl Into<PathBuf>) -> Result<Self> {
        Self::from_bytes_within(bytes, path.into(), None)
    }

    /// [`Self::from_bytes`], a compressed index held to `most` bytes decompressed.
    fn from_bytes_within(bytes: Vec<u8>, path: PathBuf, most: Option<u64>) -> Result<Self> {
        if is_compressed_index(&bytes) {
            let inflated = inflate_index(&bytes, most, &path)?;
            let mut index = Self::validate(Bytes::Owned(inflated), path, index_window())?;
            index.stored_len = bytes.len() as u64;
            return Ok(index);
        }
        Self::validate(Bytes::Owned(bytes), path, index_window())
    }

    /// Checks `bytes` as an index; a mapped one is read `window` bytes at a
    /// time, each window's pages dropped once read.
    fn validate(bytes: Bytes, path: PathBuf, window: usize) -> Result<Self> {
        let b: &[u8] = &bytes;
        let len = b.len() as u64;
        if b.len() < 8 || b[..8] != INDEX_MAGIC {
            return Err(FormatError::BadMagic {
                path,
                what: "index",
            });
        }
        if b.len() < HEADER_LEN + FOOTER_LEN {
            return Err(FormatError::Truncated {
                path,
                what: "the index header",
                needed: (HEADER_LEN + FOOTER_LEN) as u64,
                len,
            });
        }
        let major = u16::from_le_bytes([b[8], b[9]]);
        let minor = u16::from_le_bytes([b[10], b[11]]);
        if major != INDEX_MAJOR {
            return Err(FormatError::UnsupportedVersion {
                path,
                major: major.into(),
                minor: minor.into(),
                supported: INDEX_MAJOR.into(),
            });
        }
        let flags = u32_at(b, 12);
        if flags & !KNOWN_FLAGS != 0 {
            return Err(FormatError::corrupt(
                path,
                12,
                format!(
                    "unknown index flags {flags:#x} (index version {major}.{minor}; this bale knows flags {KNOWN_FLAGS:#x} of version {INDEX_MAJOR}.{INDEX_MINOR_DICT}): written by a newer bale?"
                ),
            ));
        }
        let scattered = flags & FLAG_SCATTERED != 0;
        let bad_combination = if scattered {
            flags & (FLAG_ZSTD | FLAG_ZDICT) != 0 || minor < INDEX_MINOR_SCATTERED
        } else {
            flags & FLAG_H5 != 0
                || (flags & FLAG_ZDICT != 0 && (flags & FLAG_ZSTD == 0 || minor < INDEX_MINOR_DICT))
        };
        if bad_combination {
            return Err(FormatError::corrupt(
                path,
                12,
                format!(
                    "index flags {flags:#x} are not a valid combination for version {major}.{minor}"
                ),
            ));
        }
        let samples = u64_at(b, 16);
        let members = u64_at(b, 24);
        let strings = u64_at(b, 32);
        let shard_len = u64_at(b, 40);
        let tar_len = u64_at(b, 48);
        let dict = u64_at(b, 56);
        let dict_ok = if flags & FLAG_ZDICT != 0 {
            (ZSTD_DICT_MIN as u64..=ZSTD_DICT_MAX as u64).contains(&dict)
        } else {
            dict == 0
        };
        if !dict_ok {
            return Err(FormatError::corrupt(
                path,
                56,
                format!(
                    "dictionary length {dict} is not valid with flags {flags:#x} (a zstd dictionary holds {ZSTD_DICT_MIN} to {ZSTD_DICT_MAX} bytes)"
                ),
            ));
        }
        let expected = described_len(samples, members, strings, dict);
        if samples > u64::from(u32::MAX)
            || members > u64::from(u32::MAX)
            || strings > u64::from(u32::MAX)
        {
            return Err(FormatError::corrupt(
                path,
                16,
                "record counts exceed the format's limits",
            ));
        }
        match expected {
            Some(e) if e == len => {}
            Some(e) if e > len => {
                return Err(FormatError::Truncated {
                    path,
                    what: "the index tables",
                    needed: e,
                    len,
                });
            }
            _ => {
                return Err(FormatError::corrupt(
                    path,
                    16,
                    format!("header counts describe {expected:?} bytes, the file has {len}"),
                ));
            }
        }
        let body = b.len() - FOOTER_LEN;
        let stored = u64_at(b, body);
        let actual = match &bytes {
            Bytes::Owned(_) => xxh3_64(&b[..body]),
            Bytes::Mapped(_) => {
                let mut h = crate::hash::Xxh3::new();
                let mut at = 0;
                while at < body {
                    let end = body.min(at + window);
                    bytes.populate_range(at, end);
                    h.update(&b[at..end]);
                    bytes.release_range(at, end);
                    at = end;
                }
                h.digest()
            }
        };
        if stored != actual {
            return Err(FormatError::ChecksumMismatch {
                path,
                location: format!(" of the index (footer at offset {body})"),
                expected: stored,
                actual,
            });
        }
        let (samples, members, strings) = (samples as usize, members as usize, strings as usize);
        let members_at = HEADER_LEN + SAMPLE_LEN * samples;
        let lookup_at = members_at + MEMBER_LEN * members;
        let strings_at = lookup_at + LOOKUP_LEN * samples;
        let dict_at = strings_at + strings;
        let dict_len = dict as usize;
        if dict_len > 0 && !zstd_dict_ok(&b[dict_at..dict_at + dict_len]) {
            return Err(FormatError::corrupt(
                path,
                dict_at as u64,
                "the zstd dictionary starts with the magic of a structured dictionary",
            ));
        }
        let per_sample = (b.len() / samples.max(1)).max(1);
        let index = ShardIndex {
            window_samples: (window / per_sample).max(1),
            stored_len: len,
            dict_at,
            dict_len,
            checksum: stored,
            bytes,
            path,
            samples,
            members,
            flags,
            shard_len,
            tar_len,
            members_at,
            lookup_at,
            strings_at,
        };
        index.check_records(strings, window)?;
        Ok(index)
    }

    fn check_records(&self, strings_len: usize, window: usize) -> Result<()> {
        let b: &[u8] = &self.bytes;
        let strings = &b[self.strings_at..self.strings_at + strings_len];
        let utf8 = is_utf8_windowed(strings, window, |from, to| {
            self.bytes
                .release_range(self.strings_at + from, self.strings_at + to);
        });
        let compressed = self.flags & FLAG_ZSTD != 0;
        let scattered = self.flags & FLAG_SCATTERED != 0;
        let bad =
            |at: usize, what: String| Err(FormatError::corrupt(self.path.clone(), at as u64, what));
        // The writers' string tables are UTF-8 throughout: check that once,
        // then only char boundaries per string (else check each string).
        // SAFETY: checked to be UTF-8 just above (window by window).
        let table = utf8.then(|| unsafe { std::str::from_utf8_unchecked(strings) });
        let str_at = |off: u32, len: u32| -> Option<&str> {
            let end = (off as usize).checked_add(len as usize)?;
            match table {
                Some(t) => t.get(off as usize..end),
                None => std::str::from_utf8(strings.get(off as usize..end)?).ok(),
            }
        };
        // Extensions are interned: validate each distinct one once.
        let mut good_exts: Vec<(u32, u32)> = Vec::new();
        let mut next_member = 0u64;
        let mut prev_end = 0u64;
        for i in 0..self.samples {
            self.release_behind(i);
            let at = HEADER_LEN + SAMPLE_LEN * i;
            let e = self.sample_raw(i);
            let Some(key) = str_at(e.key_off, e.key_len) else {
                return bad(
                    at + 32,
                    format!("sample {i}: key outside the string table or not UTF-8"),
                );
            };
            // Key syntax (no `..`, no dot in the base name, ...) is the writers'
            // duty and `verify`'s check; here only what every accessor relies on.
            if key.is_empty() {
                return bad(at + 32, format!("sample {i}: empty key"));
            }
            if u64::from(e.member_start) != next_member || e.member_count == 0 {
                return bad(
                    at + 40,
                    format!("sample {i}: member range does not follow the previous sample's"),
                );
            }
            next_member += u64::from(e.member_count);
            if next_member > self.members as u64 {
                return bad(
                    at + 44,
                    format!("sample {i}: member range past the member table"),
                );
            }
            if scattered {
                if (e.file_offset, e.file_len, e.tar_offset, e.tar_len) != (0, 0, 0, 0) {
                    return bad(
                        at,
                        format!("sample {i}: byte ranges must be 0 in a scattered index"),
                    );
                }
                // `sample_bytes` adds the sizes up.
                let mut sample_bytes = 0u64;
                for j in e.member_start as usize..(e.member_start + e.member_count) as usize {
                    let mat = self.members_at + MEMBER_LEN * j;
                    let (offset, size) = (u64_at(b, mat), u64_at(b, mat + 8));
                    let ext = str_at(u32_at(b, mat + 24), u32_at(b, mat + 28));
                    if ext.is_none_or(|x| validate_ext(x).is_err()) {
                        return bad(
                            mat + 24,
                            format!("member {j}: extension outside the string table or invalid"),
                        );
                    }
                    if offset
                        .checked_add(size)
                        .is_none_or(|end| end > self.shard_len)
                    {
                        return bad(mat, format!("member {j}: data range past the shard's end"));
                    }
                    let Some(sum) = sample_bytes.checked_add(size) else {
                        return bad(
                            mat + 8,
                            format!("sample {i}: member sizes add up past 2^64 bytes"),
                        );
                    };
                    sample_bytes = sum;
                }
                continue;
            }
            let tar_end = e.tar_offset.checked_add(e.tar_len);
            if e.tar_offset < prev_end || tar_end.is_none_or(|end| end > self.tar_len) {
                return bad(
                    at + 16,
                    format!("sample {i}: tar range out of order or past the tar's end"),
                );
            }
            let tar_end = tar_end.unwrap_or_default();
            prev_end = tar_end;
            if e.file_offset
                .checked_add(e.file_len)
                .is_none_or(|end| end > self.shard_len)
            {
                return bad(at, format!("sample {i}: byte range past the shard's end"));
            }
            if !compressed && (e.file_offset != e.tar_offset || e.file_len != e.tar_len) {
                return bad(
                    at,
                    format!("sample {i}: file and tar ranges differ in an uncompressed shard"),
                );
            }
            let mut prev_member_end = e.tar_offset;
            for j in e.member_start as usize..(e.member_start + e.member_count) as usize {
                let mat = self.members_at + MEMBER_LEN * j;
                let offset = u64_at(b, mat);
                let size = u64_at(b, mat + 8);
                let ext_ref = (u32_at(b, mat + 24), u32_at(b, mat + 28));
                if !good_exts.contains(&ext_ref) {
                    let ext = str_at(ext_ref.0, ext_ref.1);
                    if ext.is_none_or(|x| validate_ext(x).is_err()) {
                        return bad(
                            mat + 24,
                            format!("member {j}: extension outside the string table or invalid"),
                        );
                    }
                    if good_exts.len() < 64 {
                        good_exts.push(ext_ref);
                    }
                }
                if offset < prev_member_end
                    || offset.checked_add(size).is_none_or(|end| end > tar_end)
                {
                    return bad(mat, format!("member {j}: data range outside its sample"));
                }
                prev_member_end = offset + size;
            }
        }
        if next_member != self.members as u64 {
            return bad(
                24,
                format!(
                    "{} members in the table, samples use {next_member}",
                    self.members
                ),
            );
        }
        let mut prev = (0u64, 0u64);
        for k in 0..self.samples {
            self.release_behind(k);
            let at = self.lookup_at + LOOKUP_LEN * k;
            let entry = (u64_at(b, at), u64_at(b, at + 8));
            if entry.1 >= self.samples as u64 || (k > 0 && entry <= prev) {
                return bad(
                    at,
                    "key lookup table is unsorted or points past the samples".into(),
                );
            }
            prev = entry;
        }
        Ok(())
    }

    fn sample_raw(&self, i: usize) -> SampleEntry {
        let b: &[u8] = &self.bytes;
        let at = HEADER_LEN + SAMPLE_LEN * i;
        SampleEntry {
            file_offset: u64_at(b, at),
            file_len: u64_at(b, at + 8),
            tar_offset: u64_at(b, at + 16),
            tar_len: u64_at(b, at + 24),
            key_off: u32_at(b, at + 32),
            key_len: u32_at(b, at + 36),
            member_start: u32_at(b, at + 40),
            member_count: u32_at(b, at + 44),
        }
    }

    /// The index file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.samples
    }

    /// Whether the shard holds no sample.
    pub fn is_empty(&self) -> bool {
        self.samples == 0
    }

    /// Total number of members.
    pub fn member_count(&self) -> usize {
        self.members
    }

    /// How the shard is stored.
    pub fn compression(&self) -> Compression {
        if self.flags & FLAG_H5 != 0 {
            Compression::H5
        } else if self.flags & FLAG_ZSTD != 0 {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    /// Whether members are scattered (index 1.1, flag bit 2): each
    /// member's `offset` is an absolute offset in the shard file, and a
    /// sample is read member by member rather than as one byte range.
    pub fn is_scattered(&self) -> bool {
        self.flags & FLAG_SCATTERED != 0
    }

    /// Bytes of sample `i`'s data: its tar range, or for a scattered index
    /// the sum of its members' sizes.
    ///
    /// # Panics
    /// If `i >= self.len()`.
    pub fn sample_bytes(&self, i: usize) -> u64 {
        if self.is_scattered() {
            self.members(i).map(|m| m.size).sum()
        } else {
            self.sample(i).tar_len
        }
    }

    /// Bytes of the index as stored in its file: less than
    /// [`ShardIndex::as_bytes`]'s length when compressed (a `.tar.zst`
    /// shard's index, see [`index_file_bytes`]).
    pub fn stored_len(&self) -> u64 {
        self.stored_len
    }

    /// The shard's zstd dictionary (index 1.2), empty when it has none: pass
    /// it to [`crate::read::decompress_frame`] with every frame of the shard.
    pub fn zstd_dict(&self) -> &[u8] {
        &self.bytes[self.dict_at..self.dict_at + self.dict_len]
    }

    /// Whether member checksums were recorded.
    pub fn has_checksums(&self) -> bool {
        self.flags & FLAG_CHECKSUMS != 0
    }

    /// Length of the shard file the index describes.
    pub fn shard_len(&self) -> u64 {
        self.shard_len
    }

    /// Length of the uncompressed tar stream, end blocks included.
    pub fn tar_len(&self) -> u64 {
        self.tar_len
    }

    /// The index's own checksum (its footer): the manifest records it.
    pub fn checksum(&self) -> u64 {
        self.checksum
    }

    /// Drops a mapped index's pages from this process's resident memory
    /// (`MADV_DONTNEED`): they stay in the page cache, and the next access
    /// faults them back in. Opening does it once the index is checked; a
    /// pass over every sample (`bale stat`, `bale ls`) does it after each
    /// shard, so that its resident memory does not grow with the dataset.
    /// Nothing for an index read into memory.
    pub fn release_pages(&self) {
        self.bytes.release();
    }

    /// In a pass over the samples (or the members) in order, called with
    /// each one's number `i` before reading its records: every window of samples (about
    /// [`INDEX_WINDOW`] bytes of the index) it drops the pages read so far
    /// ([`ShardIndex::release_pages`]), so that the pass holds a window of a
    /// mapped index resident, not the whole of it. `bale verify`'s checks
    /// and the checks at open call it.
    pub fn release_behind(&self, i: usize) {
        if i > 0 && i.is_multiple_of(self.window_samples) {
            self.bytes.release();
        }
    }

    /// The raw bytes of the index file.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Sample `i`'s location.
    ///
    /// # Panics
    /// If `i >= self.len()`.
    pub fn sample(&self, i: usize) -> SampleEntry {
        assert!(
            i < self.samples,
            "sample {i} out of range ({} samples)",
            self.samples
        );
        self.sample_raw(i)
    }

    /// Sample `i`'s key.
    ///
    /// # Panics
    /// If `i >= self.len()`.
    pub fn key(&self, i: usize) -> &str {
        let e = self.sample(i);
        self.str_at(e.key_off, e.key_len)
    }

    fn str_at(&self, off: u32, len: u32) -> &str {
        let s = self.strings_at + off as usize;
        // Validated at open: in bounds and UTF-8.
        std::str::from_utf8(&self.bytes[s..s + len as usize]).unwrap_or_default()
    }

    /// Member `j` of the member table.
    ///
    /// # Panics
    /// If `j >= self.member_count()`.
    pub fn member(&self, j: usize) -> MemberEntry<'_> {
        assert!(
            j < self.members,
            "member {j} out of range ({} members)",
            self.members
        );
        let b: &[u8] = &self.bytes;
        let at = self.members_at + MEMBER_LEN * j;
        MemberEntry {
            offset: u64_at(b, at),
            size: u64_at(b, at + 8),
            checksum: u64_at(b, at + 16),
            ext: self.str_at(u32_at(b, at + 24), u32_at(b, at + 28)),
        }
    }

    /// The members of sample `i`, in shard order.
    ///
    /// # Panics
    /// If `i >= self.len()`.
    pub fn members(&self, i: usize) -> impl ExactSizeIterator<Item = MemberEntry<'_>> + '_ {
        let e = self.sample(i);
        (e.member_start as usize..(e.member_start + e.member_count) as usize)
            .map(move |j| self.member(j))
    }

    /// Asks the CPU to start loading sample `i`'s record into its caches,
    /// without waiting: a batch of random reads issues this for every
    /// sample first, so the cache misses overlap instead of coming one after
    /// another. Then [`ShardIndex::prefetch_key_and_members`]. Out of range:
    /// nothing.
    pub fn prefetch_record(&self, i: usize) {
        if i < self.samples {
            let at = HEADER_LEN + SAMPLE_LEN * i;
            prefetch(&self.bytes[at..at + SAMPLE_LEN]);
        }
    }

    /// As [`ShardIndex::prefetch_record`], for sample `i`'s key and member
    /// records (reading its record, best prefetched first).
    pub fn prefetch_key_and_members(&self, i: usize) {
        if i >= self.samples {
            return;
        }
        let e = self.sample_raw(i);
        let b: &[u8] = &self.bytes;
        let key = self.strings_at + e.key_off as usize;
        if let Some(k) = b.get(key..key + e.key_len as usize) {
            prefetch(k);
        }
        let m = self.members_at + MEMBER_LEN * e.member_start as usize;
        if let Some(m) = b.get(m..m + MEMBER_LEN * e.member_count as usize) {
            prefetch(m);
        }
    }

    /// Finds a sample by key (binary search of the lookup table).
    pub fn find(&self, key: &str) -> Option<usize> {
        let h = xxh3_64(key.as_bytes());
        let b: &[u8] = &self.bytes;
        let entry = |k: usize| {
            let at = self.lookup_at + LOOKUP_LEN * k;
            (u64_at(b, at), u64_at(b, at + 8) as usize)
        };
        // First entry with hash >= h.
        let (mut lo, mut hi) = (0usize, self.samples);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if entry(mid).0 < h {
                lo = mid + 1
            } else {
                hi = mid
            }
        }
        while lo < self.samples {
            let (hash, i) = entry(lo);
            if hash != h {
                break;
            }
            if self.key(i) == key {
                return Some(i);
            }
            lo += 1;
        }
        None
    }

    /// The lookup table: `(xxh3 of the key, sample number)` for every
    /// sample, in ascending order of hash (then as the table stores them).
    pub fn key_hashes(&self) -> impl ExactSizeIterator<Item = (u64, usize)> + '_ {
        let b: &[u8] = &self.bytes;
        (0..self.samples).map(move |k| {
            let at = self.lookup_at + LOOKUP_LEN * k;
            (u64_at(b, at), u64_at(b, at + 8) as usize)
        })
    }
}

/// A key two samples share: the key, and each sample as
/// `(position in the list of indexes, sample number)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateKey {
    /// The key.
    pub key: String,
    /// The first sample that has it.
    pub first: (usize, usize),
    /// Another sample that has it.
    pub second: (usize, usize),
}

/// Finds keys that more than one sample of `indexes` shares (the samples of
/// a dataset, shard by shard), at most `limit` of them, in one merged pass
/// over the indexes' lookup tables, which are sorted by key hash: memory is
/// one cursor per index and the pages of the last 65,536 entries read,
/// whatever the sample count. Keys whose hashes are
/// equal are compared byte for byte, so a hash collision is no duplicate.
pub fn duplicate_keys(indexes: &[&ShardIndex], limit: usize) -> Vec<DuplicateKey> {
    /// Lookup entries read between two releases of the indexes' pages.
    const DUPLICATES_RELEASE_EVERY: usize = 1 << 16;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut found = Vec::new();
    let mut cursors: Vec<_> = indexes.iter().map(|x| x.key_hashes()).collect();
    let mut heap = BinaryHeap::new();
    for (s, c) in cursors.iter_mut().enumerate() {
        if let Some((h, i)) = c.next() {
            heap.push(Reverse((h, s, i)));
        }
    }
    // The samples of the current hash, across indexes.
    let mut run: Vec<(usize, usize)> = Vec::new();
    let mut run_hash = None;
    let check = |run: &mut Vec<(usize, usize)>, found: &mut Vec<DuplicateKey>| {
        for a in 0..run.len() {
            for b in a + 1..run.len() {
                let (ka, kb) = (
                    indexes[run[a].0].key(run[a].1),
                    indexes[run[b].0].key(run[b].1),
                );
                if ka == kb
                    && found.len() < limit
                    && !found.iter().any(|d: &DuplicateKey| d.key == ka)
                {
                    found.push(DuplicateKey {
                        key: ka.to_owned(),
                        first: run[a].min(run[b]),
                        second: run[a].max(run[b]),
                    });
                }
            }
        }
        run.clear();
    };
    let mut popped = 0usize;
    while let Some(Reverse((h, s, i))) = heap.pop() {
        if found.len() >= limit {
            break;
        }
        // The tables' pages behind the cursors: dropped now and then, so that
        // the pass holds a window of each, not every table (16 B a sample).
        popped += 1;
        if popped.is_multiple_of(DUPLICATES_RELEASE_EVERY) {
            indexes.iter().for_each(|x| x.release_pages());
        }
        if run_hash != Some(h) {
            check(&mut run, &mut found);
            run_hash = Some(h);
        }
        run.push((s, i));
        if let Some((h, i)) = cursors[s].next() {
            heap.push(Reverse((h, s, i)));
        }
    }
    check(&mut run, &mut found);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_index() -> Vec<u8> {
        let mut b = IndexBuilder::new(Compression::None);
        b.push_sample(
            "a/0",
            0,
            2048,
            0,
            2048,
            &[("jpg", 512, 10, 1), ("cls", 1536, 1, 2)],
        );
        b.push_sample("a/1", 2048, 1024, 2048, 1024, &[("jpg", 2560, 100, 3)]);
        b.to_bytes(4096, 4096)
    }

    #[test]
    fn round_trip() {
        let idx = ShardIndex::from_bytes(sample_index(), "mem.idx").unwrap();
        assert_eq!(idx.len(), 2);
        assert_eq!(idx.key(0), "a/0");
        assert_eq!(idx.key(1), "a/1");
        let m: Vec<_> = idx
            .members(0)
            .map(|m| (m.ext, m.offset, m.size, m.checksum))
            .collect();
        assert_eq!(m, vec![("jpg", 512, 10, 1), ("cls", 1536, 1, 2)]);
        assert_eq!(idx.find("a/1"), Some(1));
        assert_eq!(idx.find("a/2"), None);
        assert!(idx.has_checksums());
        assert_eq!(idx.compression(), Compression::None);
    }

    #[test]
    fn every_truncation_and_bit_flip_is_an_error() {
        let bytes = sample_index();
        for cut in 0..bytes.len() {
            assert!(
                ShardIndex::from_bytes(bytes[..cut].to_vec(), "x").is_err(),
                "cut {cut}"
            );
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(
                    ShardIndex::from_bytes(b, "x").is_err(),
                    "byte {i} bit {bit}"
                );
            }
        }
    }

    /// An index of `n` samples `k/NNNNN`, one `bin` member each.
    fn many_samples(n: u64) -> Vec<u8> {
        let mut b = IndexBuilder::new(Compression::None);
        for i in 0..n {
            let key = format!("k/{i:05}");
            b.push_sample(
                &key,
                i * 1024,
                1024,
                i * 1024,
                1024,
                &[("bin", i * 1024 + 512, 10, i)],
            );
        }
        b.to_bytes(n * 1024, n * 1024)
    }

    /// `bytes` as a mapped index file, checked `window` bytes at a time.
    fn mapped_in_windows(bytes: &[u8], window: usize) -> Result<ShardIndex> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.idx");
        std::fs::write(&path, bytes).unwrap();
        let file = File::open(&path).unwrap();
        // SAFETY: a file of this test's, unchanged while mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        ShardIndex::validate(Bytes::Mapped(map), path, window)
    }

    /// `bytes` with its footer's checksum made right again.
    fn resummed(mut bytes: Vec<u8>) -> Vec<u8> {
        let body = bytes.len() - FOOTER_LEN;
        let sum = xxh3_64(&bytes[..body]);
        bytes[body..].copy_from_slice(&sum.to_le_bytes());
        bytes
    }

    #[test]
    fn an_index_checked_in_many_windows_finds_what_a_late_window_holds() {
        let bytes = many_samples(2_000);
        for window in [4096, 1000, 7] {
            let idx = mapped_in_windows(&bytes, window).unwrap();
            assert_eq!(idx.len(), 2_000);
            assert_eq!(
                idx.checksum(),
                ShardIndex::from_bytes(bytes.clone(), "m")
                    .unwrap()
                    .checksum()
            );
            assert_eq!(idx.key(1_999), "k/01999");
            assert_eq!(idx.find("k/01234"), Some(1_234));
            // A pass that releases behind it still reads every record.
            let keys = (0..idx.len()).filter(|&i| {
                idx.release_behind(i);
                idx.key(i) == format!("k/{i:05}")
            });
            assert_eq!(keys.count(), 2_000);
        }
        // A byte of a late record: the checksum, hashed window by window.
        let mut flipped = bytes.clone();
        flipped[HEADER_LEN + SAMPLE_LEN * 1_990 + 3] ^= 1;
        let e = mapped_in_windows(&flipped, 4096).unwrap_err();
        assert!(matches!(e, FormatError::ChecksumMismatch { .. }), "{e}");
        // A late sample's member count, with a checksum that agrees.
        let at = HEADER_LEN + SAMPLE_LEN * 1_990 + 44;
        let mut b = bytes.clone();
        b[at..at + 4].copy_from_slice(&0u32.to_le_bytes());
        let e = mapped_in_windows(&resummed(b), 4096).unwrap_err();
        assert!(e.to_string().contains("sample 1990: member range"), "{e}");
        // A late key that is not UTF-8.
        let mut b = bytes.clone();
        let key = b.windows(7).rposition(|w| w == b"k/01995").unwrap();
        b[key + 2] = 0xFF;
        let e = mapped_in_windows(&resummed(b), 4096).unwrap_err();
        assert!(e.to_string().contains("sample 1995: key"), "{e}");
    }

    #[test]
    fn utf8_checked_in_windows_agrees_with_one_check_at_every_window() {
        let text = "a/é-漢字-🦀 b/ü".repeat(5);
        let mut bad = text.clone().into_bytes();
        bad[37] = 0xFF;
        let mut cut = text.clone().into_bytes();
        cut.pop();
        for window in 1..40 {
            let mut covered = 0;
            assert!(is_utf8_windowed(text.as_bytes(), window, |from, to| {
                assert_eq!(from, covered);
                covered = to;
            }));
            assert_eq!(covered, text.len());
            for b in [&bad, &cut] {
                assert_eq!(
                    is_utf8_windowed(b, window, |_, _| {}),
                    std::str::from_utf8(b).is_ok(),
                    "window {window}"
                );
            }
        }
    }

    fn scattered_index() -> Vec<u8> {
        let mut b = IndexBuilder::new(Compression::H5);
        // Members anywhere in the file, in any order.
        b.push_sample(
            "a/0",
            0,
            0,
            0,
            0,
            &[("jpg", 900, 10, 1), ("cls", 100, 1, 2)],
        );
        b.push_sample("a/1", 0, 0, 0, 0, &[("jpg", 910, 0, 3)]);
        b.to_bytes(1000, 0)
    }

    /// Rewrites header fields of an index and fixes its footer.
    fn patched(mut bytes: Vec<u8>, at: usize, value: &[u8]) -> Vec<u8> {
        bytes[at..at + value.len()].copy_from_slice(value);
        let body = bytes.len() - FOOTER_LEN;
        let sum = xxh3_64(&bytes[..body]);
        bytes[body..].copy_from_slice(&sum.to_le_bytes());
        bytes
    }

    /// A `.tar.zst` index with a dictionary of `dict` bytes.
    fn dict_index(dict: &[u8]) -> Vec<u8> {
        let mut b = IndexBuilder::new(Compression::Zstd);
        b.set_zstd_dict(dict);
        let at = 8 + dict.len() as u64;
        b.push_sample("a/0", at, 100, 0, 1024, &[("cls", 512, 1, 1)]);
        b.to_bytes(at + 100 + 20, 2048)
    }

    #[test]
    fn an_index_head_is_bales_magic_or_a_zstd_frame_and_nothing_else() {
        assert!(is_index_head(b"BALEIDX\0"));
        assert!(is_index_head(&[0x28, 0xB5, 0x2F, 0xFD, 0, 0, 0, 0]));
        // DALI's tar index, other text, short and empty files.
        assert!(!is_index_head(b"v1.2 3\njpg"));
        assert!(!is_index_head(b"BALEIDX"));
        assert!(!is_index_head(b"BALEIDX1"));
        assert!(!is_index_head(b""));
    }

    #[test]
    fn zstd_indexes_are_stored_compressed_and_checked() {
        let dict: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let raw = dict_index(&dict);
        let stored = index_file_bytes(&raw).into_owned();
        assert_eq!(
            &stored[..4],
            &ZSTD_FRAME_MAGIC,
            "a .tar.zst index is compressed"
        );
        assert!(stored.len() < raw.len());
        // A plain tar's index is stored as it is (and mapped when opened).
        assert_eq!(&*index_file_bytes(&sample_index()), &sample_index()[..]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("z.idx");
        std::fs::write(&path, &stored).unwrap();
        for idx in [
            ShardIndex::open(&path).unwrap(),
            ShardIndex::open_expecting(&path, 1, 1).unwrap(),
            ShardIndex::from_bytes(stored.clone(), "z.idx").unwrap(),
        ] {
            assert_eq!(idx.as_bytes(), &raw[..]);
            assert_eq!(idx.zstd_dict(), &dict[..]);
            assert_eq!(idx.stored_len(), stored.len() as u64);
        }
        let plain = ShardIndex::from_bytes(raw.clone(), "r.idx").unwrap();
        assert_eq!(plain.stored_len(), raw.len() as u64);
        // The manifest's counts are checked once decompressed.
        let e = ShardIndex::open_expecting(&path, 2, 1).unwrap_err();
        assert!(matches!(e, FormatError::IndexMismatch { .. }), "{e}");
        let err = |b: Vec<u8>| ShardIndex::from_bytes(b, "z.idx").unwrap_err().to_string();
        // Cut short; two frames; no recorded size; a size past the ratio bound.
        let e = err(stored[..stored.len() - 3].to_vec());
        assert!(e.contains("z.idx") && e.contains("compressed index"), "{e}");
        let mut two = stored.clone();
        two.extend_from_slice(&stored);
        assert!(err(two).contains("not exactly one zstd frame"));
        let mut enc = zstd::bulk::Compressor::new(3).unwrap();
        enc.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(false))
            .unwrap();
        assert!(err(enc.compress(&raw).unwrap()).contains("does not record its size"));
        let bomb = zstd::bulk::compress(&vec![0u8; 64 << 20], 19).unwrap();
        assert!(err(bomb).contains("more than 256x"));
        // A damaged table inside the frame: the index's own checks refuse it.
        let mut bad = raw.clone();
        bad[HEADER_LEN] ^= 1;
        let e = err(zstd::bulk::compress(&bad, 3).unwrap());
        assert!(e.contains("checksum"), "{e}");
    }

    #[test]
    fn a_compressed_index_is_held_to_its_counts_and_its_frame_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("z.idx");
        // Within the ratio bound, past what an index of 1 sample and 1 member can take.
        let mut next = crate::test_rng(0x2545_F491_4F6C_DD1D);
        let noise: Vec<u8> = (0..200 << 10).map(|_| next() as u8).collect();
        let frame = zstd::bulk::compress(&noise, 3).unwrap();
        std::fs::write(&path, &frame).unwrap();
        assert!(index_len_max(1, 1) < noise.len() as u64);
        let e = ShardIndex::open_expecting(&path, 1, 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("z.idx") && e.contains("manifest's counts"),
            "{e}"
        );
        // Without counts it is read, and refused as no index.
        let e = ShardIndex::open(&path).unwrap_err().to_string();
        assert!(e.contains("z.idx") && e.contains("not a bale index"), "{e}");
        // A small frame at the start of a long file (a .tar.zst shard taken
        // for an index): refused from its first bytes, whatever its length.
        let small = zstd::bulk::compress(b"a/0.cls", 3).unwrap();
        let mut long = small.clone();
        long.resize(small.len() + (1 << 20), 0);
        std::fs::write(&path, &long).unwrap();
        for e in [
            ShardIndex::open(&path).unwrap_err(),
            ShardIndex::open_expecting(&path, 1, 1).unwrap_err(),
            ShardIndex::from_bytes(long.clone(), &path).unwrap_err(),
        ] {
            let e = e.to_string();
            assert!(
                e.contains("z.idx") && e.contains("not one index frame"),
                "{e}"
            );
        }
        // The frame header alone is checked: a cut-off one is an error.
        let e = compressed_index_size(&frame[..5], 1 << 20, None, &path).unwrap_err();
        assert!(e.to_string().contains("bad zstd frame header"), "{e}");
    }

    #[test]
    fn zstd_dictionaries_are_version_1_2_and_checked() {
        let dict: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let bytes = dict_index(&dict);
        assert_eq!(&bytes[8..12], &[1, 0, 2, 0], "version 1.2");
        assert_eq!(u32_at(&bytes, 12), FLAG_ZSTD | FLAG_CHECKSUMS | FLAG_ZDICT);
        let idx = ShardIndex::from_bytes(bytes.clone(), "d.idx").unwrap();
        assert_eq!(idx.zstd_dict(), &dict[..]);
        assert_eq!(idx.key(0), "a/0");
        // Without a dictionary the layout is 1.0, byte for byte, and the dictionary empty.
        let plain = dict_index(&[]);
        assert_eq!(&plain[8..12], &[1, 0, 0, 0]);
        assert!(
            ShardIndex::from_bytes(plain, "p.idx")
                .unwrap()
                .zstd_dict()
                .is_empty()
        );
        // Too short, too long, or the magic of a trained dictionary: not taken.
        for bad in [vec![7u8; 511], vec![7u8; ZSTD_DICT_MAX + 1], {
            let mut d = dict.clone();
            d[..4].copy_from_slice(&ZSTD_STRUCTURED_DICT_MAGIC);
            d
        }] {
            assert_eq!(&dict_index(&bad)[8..12], &[1, 0, 0, 0]);
        }
        let err = |b: Vec<u8>| ShardIndex::from_bytes(b, "d.idx").unwrap_err().to_string();
        // A length out of range, or one the flags do not allow.
        for d in [0u64, 511, ZSTD_DICT_MAX as u64 + 1, u64::MAX] {
            let e = err(patched(bytes.clone(), 56, &d.to_le_bytes()));
            assert!(e.contains("d.idx") && e.contains("offset 56"), "{e}");
        }
        let e = err(patched(dict_index(&[]), 56, &1000u64.to_le_bytes()));
        assert!(e.contains("offset 56"), "{e}");
        // Bit 4 without bit 0, or in a 1.0 index.
        let e = err(patched(
            bytes.clone(),
            12,
            &(FLAG_CHECKSUMS | FLAG_ZDICT).to_le_bytes(),
        ));
        assert!(e.contains("not a valid combination"), "{e}");
        let e = err(patched(bytes.clone(), 10, &0u16.to_le_bytes()));
        assert!(e.contains("not a valid combination"), "{e}");
        // A dictionary that now starts with the trained magic.
        let at = bytes.len() - FOOTER_LEN - dict.len();
        let e = err(patched(bytes, at, &ZSTD_STRUCTURED_DICT_MAGIC));
        assert!(e.contains("structured dictionary"), "{e}");
    }

    #[test]
    fn tar_indexes_stay_version_1_0_and_scattered_ones_are_1_1() {
        let tar = sample_index();
        assert_eq!(&tar[8..12], &[1, 0, 0, 0]);
        assert_eq!(u32_at(&tar, 12), FLAG_CHECKSUMS);
        let h5 = scattered_index();
        assert_eq!(&h5[8..12], &[1, 0, 1, 0]);
        assert_eq!(u32_at(&h5, 12), FLAG_CHECKSUMS | FLAG_SCATTERED | FLAG_H5);
    }

    #[test]
    fn scattered_index_round_trips() {
        let idx = ShardIndex::from_bytes(scattered_index(), "h.idx").unwrap();
        assert!(idx.is_scattered());
        assert_eq!(idx.compression(), Compression::H5);
        assert_eq!(idx.tar_len(), 0);
        let m: Vec<_> = idx.members(0).map(|m| (m.ext, m.offset, m.size)).collect();
        assert_eq!(m, vec![("jpg", 900, 10), ("cls", 100, 1)]);
        assert_eq!(idx.sample_bytes(0), 11);
        assert_eq!(idx.find("a/1"), Some(1));
        let bytes = scattered_index();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            assert!(ShardIndex::from_bytes(b, "x").is_err(), "byte {i}");
        }
    }

    #[test]
    fn scattered_indexes_are_checked() {
        let bytes = scattered_index();
        let members_at = HEADER_LEN + 2 * SAMPLE_LEN;
        // A member past the shard's end.
        let bad = patched(bytes.clone(), members_at, &995u64.to_le_bytes());
        let err = ShardIndex::from_bytes(bad, "x").unwrap_err().to_string();
        assert!(err.contains("past the shard's end"), "{err}");
        // A sample range that is not 0.
        let bad = patched(bytes.clone(), HEADER_LEN + 8, &5u64.to_le_bytes());
        let err = ShardIndex::from_bytes(bad, "x").unwrap_err().to_string();
        assert!(err.contains("must be 0"), "{err}");
        // Member sizes that add up past u64 (each inside the shard):
        // `sample_bytes` would overflow (fuzz/regressions/index/scattered-sizes-overflow.idx).
        let mut bad = patched(bytes.clone(), 40, &u64::MAX.to_le_bytes());
        for at in [members_at, members_at + MEMBER_LEN] {
            bad = patched(
                bad,
                at,
                &[0u64.to_le_bytes(), (1u64 << 63).to_le_bytes()].concat(),
            );
        }
        let err = ShardIndex::from_bytes(bad, "x").unwrap_err().to_string();
        assert!(err.contains("add up past 2^64"), "{err}");
        // Scattered with minor version 0, HDF5 without scattered, scattered with zstd.
        for (at, value) in [
            (10, 0u32.to_le_bytes()[..2].to_vec()),
            (12, (FLAG_CHECKSUMS | FLAG_H5).to_le_bytes().to_vec()),
            (
                12,
                (FLAG_CHECKSUMS | FLAG_SCATTERED | FLAG_ZSTD)
                    .to_le_bytes()
                    .to_vec(),
            ),
        ] {
            let bad = patched(bytes.clone(), at, &value);
            let err = ShardIndex::from_bytes(bad, "x").unwrap_err().to_string();
            assert!(err.contains("not a valid combination"), "{err}");
        }
    }

    #[test]
    fn unknown_flags_are_refused_naming_the_version() {
        // What a reader of this version does with a future flag, as a 1.0
        // reader does with bit 2: refuse, never misread.
        let bad = patched(sample_index(), 12, &(FLAG_CHECKSUMS | 32).to_le_bytes());
        let err = ShardIndex::from_bytes(bad, "x.idx")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown index flags 0x22") && err.contains("newer bale"),
            "{err}"
        );
    }

    #[test]
    fn newer_major_version_is_refused() {
        let mut bytes = sample_index();
        bytes[8] = 2;
        let err = ShardIndex::from_bytes(bytes, "x.idx").unwrap_err();
        assert!(
            matches!(err, FormatError::UnsupportedVersion { major: 2, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("x.idx"));
    }
}
