//! Adopting existing tars: [`scan_shard`] reads the headers of a WebDataset
//! tar written by any tool (GNU tar, Python's `tarfile`, webdataset's
//! `TarWriter`, bale) and builds a bale index that points into the file as it
//! is, so it can be read at random without repacking.
//!
//! - **Plain tars** are scanned header by header with positioned reads: the
//!   scan reads each 512-byte header (and the pax or GNU long-name records
//!   before it) and seeks over the member data, so its cost grows with the
//!   number of members, not with the bytes. ustar, GNU (long names) and pax
//!   headers are understood; GNU sparse files are refused.
//! - **`.tar.zst` with one zstd frame per sample** (what `bale pack --compress
//!   zstd` writes) is indexed by walking the zstd frame headers (each block
//!   header gives the block's size, so frame boundaries are found without
//!   decompressing) and decompressing each frame to find its members. A frame
//!   holding more than one sample, or a sample spread over frames, is refused.
//! - **gzip, bzip2, xz, lz4 and single-frame zstd** tars cannot be read at
//!   random and are refused, saying so.
//!
//! Samples follow WebDataset's rule (see [`split_member_name`](crate::split_member_name)).
//! Directories, links and other non-file entries are skipped, and so are
//! regular files whose base name has no dot; both are counted in
//! [`ScanStats`]. A leading `./` is removed from member names (`./0001.jpg`
//! is member `jpg` of sample `0001`; see [`normalize_member_name`]); any other
//! name that is not a valid bale key or extension is an error naming the tar,
//! the header's offset and the name.
//!
//! A sample's tar range runs from its first member's first header (pax or GNU
//! long-name headers included) to the end of its last member's padding; the
//! headers of skipped entries between members of one sample lie inside it. A
//! key that reappears after another sample breaks WebDataset's contiguity
//! rule: by default that is an error naming both places. With
//! [`SplitPolicy::Rename`] each later run becomes a sample of its own, keyed
//! `<key>~2`, `<key>~3`, ... With [`SplitPolicy::Regroup`] (plain tars only)
//! the later runs join the sample of the key's first run: the sample keeps the
//! place of its first appearance, its members stay in tar order, and a shard
//! that has such a sample gets a scattered index (layout 1.1, flag bit 2: one
//! absolute offset per member, every sample of the shard read member by
//! member) instead of one byte range per sample. Shards without split samples
//! get the same 1.0 index as with the other policies. Regrouping keeps the
//! shard's sample list in memory until the end of the scan (about what the
//! index itself takes: under 100 bytes per member plus the key and
//! extension strings), since any key may still reappear.
//!
//! Member checksums are computed only with [`ScanOptions::checksums`], which
//! reads every byte (and also gives the whole file's xxh3 for the manifest);
//! otherwise the index records them as absent ([`ShardIndex::has_checksums`]
//! is false).
//!
//! ```
//! use bale_format::scan::{ScanOptions, scan_shard};
//! use bale_format::{Compression, Member, ShardReader, ShardWriter};
//! let dir = tempfile::tempdir()?;
//! // Any WebDataset tar: here one written by bale itself.
//! let mut w = ShardWriter::new(Vec::new(), "x.tar", Compression::None, 0)?;
//! w.write_sample("0001", &[Member { ext: "txt", data: b"hello" }])?;
//! let (tar, _, _) = w.finish()?;
//! let tar_path = dir.path().join("x.tar");
//! std::fs::write(&tar_path, tar)?;
//!
//! let scanned = scan_shard(&tar_path, &ScanOptions::default())?;
//! assert_eq!(scanned.samples, 1);
//! let idx_path = dir.path().join("x.idx");
//! scanned.write_index(&idx_path)?;
//! let r = ShardReader::open(&tar_path, &idx_path)?;
//! assert!(!r.index().has_checksums());
//! assert_eq!(r.read(0, true)?.get("txt"), Some(&b"hello"[..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::hash::Xxh3;

use crate::atomic::write_atomic;
use crate::error::{FormatError, Result};
use crate::index::{Compression, IndexBuilder, ShardIndex};
use crate::manifest::{FieldStats, ShardEntry, hex64};
use crate::name::{split_member_name, validate_ext, validate_key};
use crate::tar::{BLOCK, EntryKind, Extended, padded, parse_header, sparse_error};

/// Largest pax or GNU long-name record accepted (1 MiB, as [`crate::tar::TarReader`]).
const MAX_META: u64 = 1 << 20;
/// Largest member size accepted (a file size is at most `i64::MAX`).
const MAX_MEMBER_SIZE: u64 = i64::MAX as u64;
/// Largest decompressed zstd frame accepted (one sample): 4 GiB.
const MAX_FRAME_CONTENT: u64 = 4 << 30;
/// Largest zstd block (the format's Block_Maximum_Size).
const MAX_ZSTD_BLOCK: u64 = 128 << 10;
/// Buffer of the sequential reader used with checksums.
const SEQ_BUFFER: usize = 4 << 20;

const ZSTD_MAGIC: u32 = 0xFD2F_B528;
const SKIPPABLE_MAGIC: u32 = 0x184D_2A50;

/// What to do with a key that reappears after other samples (WebDataset's
/// contiguity rule broken).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SplitPolicy {
    /// Refuse the tar, naming both places (the default).
    #[default]
    Refuse,
    /// Index each later run as a sample of its own, keyed `<key>~N` with the
    /// smallest `N >= 2` that is free in the shard. (WebDataset itself yields
    /// such runs as separate samples with the same key.)
    Rename,
    /// Regroup the later runs into the sample of the key's first run (plain
    /// tars only; a `.tar.zst` is refused). A shard with at least one such
    /// sample gets a scattered index (layout 1.1; see the module docs); a
    /// member whose extension the sample already has is an error naming both
    /// header offsets.
    Regroup,
}

/// Options of [`scan_shard`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ScanOptions {
    /// Read every member's data and record its xxh3 checksum in the index, and
    /// compute the whole file's xxh3 ([`ScannedShard::shard_checksum`]).
    /// Default `false`: only headers are read and the index records checksums
    /// as absent.
    pub checksums: bool,
    /// Keys that reappear after other samples. Default [`SplitPolicy::Refuse`].
    pub split: SplitPolicy,
}

/// A sample indexed under another key than its members' names give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renamed {
    /// The key the tar's member names give.
    pub tar_key: String,
    /// The key in the index.
    pub key: String,
    /// Offset in the tar stream of the run's first header.
    pub tar_offset: u64,
}

/// A run of members joined to the sample of its key's first run
/// ([`SplitPolicy::Regroup`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regrouped {
    /// The sample's key.
    pub key: String,
    /// Offset in the tar of the sample's first header (its first run).
    pub first_offset: u64,
    /// Offset in the tar of this run's first header.
    pub tar_offset: u64,
}

/// Counts of what the scan saw and skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Tar entries (members, directories, links, ...; extended headers not counted).
    pub entries: u64,
    /// Directories, links and other entries that are not regular files: skipped.
    pub skipped_not_files: u64,
    /// Regular files whose base name has no dot (or starts with one): they
    /// belong to no sample and are skipped, as WebDataset does.
    pub skipped_no_extension: u64,
    /// Member names from which a leading `./` was removed.
    pub stripped_dot_slash: u64,
    /// Members whose name does not fit the 100-byte ustar name field (it comes
    /// from a pax record, a GNU long-name record or the ustar prefix). Readers
    /// that look only at that field, such as webdataset's `wids`, misread them.
    pub long_names: u64,
    /// Samples indexed under a new key ([`SplitPolicy::Rename`]).
    pub renamed: Vec<Renamed>,
    /// Later runs of a key joined to its first run ([`SplitPolicy::Regroup`]).
    pub regrouped: Vec<Regrouped>,
    /// Bytes read from the shard file.
    pub bytes_read: u64,
}

/// The result of [`scan_shard`]: the index of an existing tar, ready to write.
#[derive(Debug)]
pub struct ScannedShard {
    /// The shard file scanned.
    pub path: PathBuf,
    /// Plain tar, or `.tar.zst` with one frame per sample.
    pub compression: Compression,
    /// Length of the shard file.
    pub shard_len: u64,
    /// Length of the (uncompressed) tar stream up to the end of its
    /// end-of-archive blocks. For a plain tar this can be less than
    /// `shard_len`: GNU tar pads archives to whole 10240-byte records.
    pub tar_len: u64,
    /// Number of samples.
    pub samples: u64,
    /// Number of members.
    pub members: u64,
    /// Member count and bytes per extension.
    pub fields: BTreeMap<String, FieldStats>,
    /// xxh3-64 of the whole shard file, when [`ScanOptions::checksums`] was set.
    pub shard_checksum: Option<u64>,
    /// What was seen and skipped.
    pub stats: ScanStats,
    index: IndexBuilder,
}

impl ScannedShard {
    /// Whether the index is scattered (layout 1.1): the shard has samples
    /// regrouped by [`SplitPolicy::Regroup`].
    pub fn is_scattered(&self) -> bool {
        self.index.is_scattered()
    }

    /// The serialized index.
    pub fn index_bytes(&self) -> Vec<u8> {
        self.index.to_bytes(self.shard_len, self.tar_len)
    }

    /// Writes the index to `path` atomically (temporary file, sync, rename),
    /// after checking that it validates as a [`ShardIndex`]. Returns the
    /// index's checksum (its footer), which the manifest records.
    ///
    /// # Errors
    /// I/O errors naming the file; an index that does not validate (a bug).
    pub fn write_index(&self, path: &Path) -> Result<u64> {
        let bytes = self.index_bytes();
        let checksum = ShardIndex::from_bytes(bytes.clone(), path)?.checksum();
        write_atomic(path, &bytes)?;
        Ok(checksum)
    }

    /// The manifest entry of this shard: `file` and `index` are the paths the
    /// manifest records (relative to the dataset directory, or absolute), and
    /// `index_checksum` is what [`ScannedShard::write_index`] returned.
    pub fn manifest_entry(&self, file: String, index: String, index_checksum: u64) -> ShardEntry {
        ShardEntry {
            file,
            index,
            samples: self.samples,
            members: self.members,
            bytes: self.shard_len,
            tar_bytes: self.tar_len,
            compression: self.compression,
            index_xxh3: hex64(index_checksum),
            shard_xxh3: self.shard_checksum.map(hex64),
            fields: self.fields.clone(),
        }
    }
}

/// Removes any leading `./` from a member name (`./a/0001.jpg` -> `a/0001.jpg`),
/// as `bale index` does before splitting it into key and extension.
///
/// ```
/// assert_eq!(bale_format::scan::normalize_member_name("././a/0001.jpg"), "a/0001.jpg");
/// assert_eq!(bale_format::scan::normalize_member_name("a/./b.jpg"), "a/./b.jpg");
/// ```
pub fn normalize_member_name(name: &str) -> &str {
    let mut n = name;
    while let Some(rest) = n.strip_prefix("./") {
        n = rest;
    }
    n
}

/// Scans a shard file and builds its index; see the module docs.
///
/// # Errors
/// Every problem names the file and, where known, the offset: I/O errors,
/// compressed tars that cannot be read at random, truncation, bad headers,
/// sparse files, member names bale cannot store, a key that reappears apart
/// (with [`SplitPolicy::Refuse`]), a repeated extension within a sample
/// (with [`SplitPolicy::Regroup`], also across its runs), `.tar.zst` files not
/// compressed one frame per sample, and any `.tar.zst` with
/// [`SplitPolicy::Regroup`].
pub fn scan_shard(path: impl AsRef<Path>, opts: &ScanOptions) -> Result<ScannedShard> {
    let path = path.as_ref();
    let file = crate::files::open_regular(path)?;
    let meta = file.metadata().map_err(|e| FormatError::io(path, e))?;
    if !meta.is_file() {
        return Err(FormatError::io(
            path,
            io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
        ));
    }
    let len = meta.len();
    let mut magic = [0u8; 6];
    let n = (len as usize).min(magic.len());
    file.read_exact_at(&mut magic[..n], 0)
        .map_err(|e| FormatError::io_at(path, 0, e))?;
    let magic = &magic[..n];
    if let Some(what) = foreign_compression(magic) {
        return Err(FormatError::tar(
            path,
            0,
            format!(
                "{what}-compressed tar: a {what} stream cannot be read at random, so bale cannot index it in place; \
                 decompress it and index the plain .tar, repack it with `bale pack`, or convert it with `bale convert`"
            ),
        ));
    }
    let word =
        (magic.len() >= 4).then(|| u32::from_le_bytes([magic[0], magic[1], magic[2], magic[3]]));
    let mut shard = match word {
        Some(w) if w == ZSTD_MAGIC || w & 0xFFFF_FFF0 == SKIPPABLE_MAGIC => {
            if opts.split == SplitPolicy::Regroup {
                return Err(FormatError::tar(
                    path,
                    0,
                    "a .tar.zst cannot have its split samples regrouped (--allow-split): each sample is one \
                     zstd frame, and a member cannot be read on its own; index it without --allow-split \
                     (or with --rename-split), or decompress it and index the plain .tar",
                ));
            }
            scan_zstd(&file, path, len, opts)?
        }
        _ => scan_plain(&file, path, len, opts)?,
    };
    shard.path = path.to_path_buf();
    Ok(shard)
}

fn foreign_compression(magic: &[u8]) -> Option<&'static str> {
    if magic.starts_with(&[0x1f, 0x8b]) {
        Some("gzip")
    } else if magic.starts_with(b"BZh") {
        Some("bzip2")
    } else if magic.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Some("xz")
    } else if magic.starts_with(&[0x04, 0x22, 0x4d, 0x18]) {
        Some("lz4")
    } else {
        None
    }
}

// ---------------------------------------------------------------------------
// Byte sources: where the scan reads tar bytes from.

/// Tar bytes by offset. Offsets passed to one source only grow.
trait Source {
    /// Reads `buf.len()` bytes at `offset` of the tar stream; the caller has
    /// checked that they lie before the stream's end.
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Reads `size` bytes at `offset` and returns their xxh3.
    fn hash_at(&mut self, offset: u64, size: u64) -> Result<u64>;
}

/// Positioned reads of a plain tar file: headers only, data never touched.
struct Pread<'a> {
    file: &'a File,
    path: &'a Path,
    bytes_read: u64,
}

impl Source for Pread<'_> {
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
struct Sequential<'a> {
    file: &'a File,
    path: &'a Path,
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    start: u64,
    /// Valid bytes in `buf`.
    len: usize,
    file_hash: Xxh3,
}

impl<'a> Sequential<'a> {
    fn new(file: &'a File, path: &'a Path, len: u64) -> Self {
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
    fn next_chunk(&mut self) -> Result<bool> {
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
    fn at(&mut self, offset: u64) -> Result<&[u8]> {
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
    fn finish(mut self) -> Result<(u64, u64)> {
        while self.next_chunk()? {}
        Ok((self.file_hash.digest(), self.start))
    }
}

impl Source for Sequential<'_> {
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
struct Slice {
    data: Vec<u8>,
    base: u64,
}

impl Slice {
    fn range(&self, offset: u64, len: u64) -> &[u8] {
        // The caller checked the bounds against base + data.len().
        let start = (offset - self.base) as usize;
        &self.data[start..start + len as usize]
    }
}

impl Source for Slice {
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        buf.copy_from_slice(self.range(offset, buf.len() as u64));
        Ok(())
    }

    fn hash_at(&mut self, offset: u64, size: u64) -> Result<u64> {
        Ok(crate::index::checksum(self.range(offset, size)))
    }
}

// ---------------------------------------------------------------------------
// Tar entries.

/// Where the bytes being parsed end.
#[derive(Clone, Copy)]
enum Bound {
    /// The end of a plain tar file.
    File,
    /// The end of a decompressed zstd frame that starts at this file offset.
    Frame(u64),
}

struct RawEntry {
    name: Vec<u8>,
    size: u64,
    kind: EntryKind,
    header_offset: u64,
    data_offset: u64,
    /// The name did not come from the 100-byte ustar name field alone.
    long_name: bool,
}

enum Step {
    Entry(RawEntry),
    /// A zero block (end of archive) at this offset.
    Zero(u64),
    /// The bytes end exactly here, at a header boundary, without a zero block.
    End(u64),
}

fn past_end(
    path: &Path,
    bound: Bound,
    at: u64,
    what: &'static str,
    needed: u64,
    end: u64,
) -> FormatError {
    match bound {
        Bound::File => FormatError::Truncated {
            path: path.to_path_buf(),
            what,
            needed,
            len: end,
        },
        Bound::Frame(frame) => FormatError::tar(
            path,
            at,
            format!(
                "{what} crosses the end of the zstd frame at file offset {frame}: the shard is not compressed \
                 one frame per sample; decompress it and index the plain .tar, or repack it with `bale pack`"
            ),
        ),
    }
}

/// Reads the entry whose first header is at `pos` (which is < `end` or == `end`).
fn next_entry(
    src: &mut dyn Source,
    path: &Path,
    mut pos: u64,
    end: u64,
    bound: Bound,
) -> Result<Step> {
    let mut ext = Extended::default();
    let mut first: Option<u64> = None;
    loop {
        let at = pos;
        if at == end {
            if first.is_some() {
                return Err(FormatError::tar(
                    path,
                    at,
                    "archive ends after an extended header",
                ));
            }
            return Ok(Step::End(at));
        }
        if end - at < BLOCK {
            return Err(past_end(path, bound, at, "a tar header", at + BLOCK, end));
        }
        let mut block = [0u8; BLOCK as usize];
        src.read_at(at, &mut block)?;
        let Some(h) = parse_header(&block).map_err(|e| FormatError::tar(path, at, e))? else {
            if first.is_some() {
                return Err(FormatError::tar(
                    path,
                    at,
                    "zero block after an extended header",
                ));
            }
            return Ok(Step::Zero(at));
        };
        let header_offset = *first.get_or_insert(at);
        pos = at + BLOCK;
        match h.typeflag {
            b'x' | b'g' | b'L' | b'K' => {
                if h.size > MAX_META {
                    return Err(FormatError::tar(
                        path,
                        at,
                        format!(
                            "extended header of {} bytes is larger than the 1 MiB allowed",
                            h.size
                        ),
                    ));
                }
                if end - pos < padded(h.size) {
                    return Err(past_end(
                        path,
                        bound,
                        at,
                        "an extended header",
                        pos + padded(h.size),
                        end,
                    ));
                }
                let mut data = vec![0u8; h.size as usize];
                src.read_at(pos, &mut data)?;
                pos += padded(h.size);
                ext.apply(h.typeflag, data, path, at)?;
            }
            b'S' => return Err(sparse_error(path, at)),
            t => {
                let kind = match t {
                    b'0' | 0 | b'7' => EntryKind::File,
                    b'5' => EntryKind::Directory,
                    _ => EntryKind::Other,
                };
                let size = ext.size.unwrap_or(h.size);
                if size > MAX_MEMBER_SIZE {
                    return Err(FormatError::tar(
                        path,
                        at,
                        format!("member size {size} is larger than any tar member can be"),
                    ));
                }
                // Links, devices and FIFOs carry no data whatever the size field says.
                let size = if matches!(t, b'1' | b'2' | b'3' | b'4' | b'6') {
                    0
                } else {
                    size
                };
                if end - pos < size {
                    return Err(past_end(path, bound, at, "member data", pos + size, end));
                }
                let prefixed = &block[257..263] == b"ustar\0" && block[345] != 0;
                return Ok(Step::Entry(RawEntry {
                    long_name: ext.name.is_some() || prefixed,
                    name: ext.name.unwrap_or(h.name),
                    size,
                    kind,
                    header_offset,
                    data_offset: pos,
                }));
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Grouping members into samples.

struct OpenSample {
    tar_key: String,
    tar_offset: u64,
    end: u64,
    /// (ext, data offset, size, checksum, header offset)
    members: Vec<(String, u64, u64, u64, u64)>,
}

struct Grouper<'a> {
    path: &'a Path,
    opts: ScanOptions,
    index: IndexBuilder,
    /// Tar key -> (first header offset, sample number) of samples already closed.
    tar_keys: HashMap<String, (u64, usize)>,
    index_keys: HashSet<String>,
    fields: BTreeMap<String, FieldStats>,
    members: u64,
    stats: ScanStats,
    last_tar_key: Option<String>,
    /// [`SplitPolicy::Regroup`]: the samples, held until the end of the scan.
    held: Vec<OpenSample>,
}

/// A member found by the scan, already split into key and extension.
struct Found {
    key: String,
    ext: String,
    header_offset: u64,
    data_offset: u64,
    size: u64,
}

impl<'a> Grouper<'a> {
    fn new(path: &'a Path, opts: ScanOptions, compression: Compression) -> Self {
        Self {
            path,
            opts,
            index: IndexBuilder::with_checksums(compression, opts.checksums),
            tar_keys: HashMap::new(),
            index_keys: HashSet::new(),
            fields: BTreeMap::new(),
            members: 0,
            stats: ScanStats::default(),
            last_tar_key: None,
            held: Vec::new(),
        }
    }

    /// Classifies an entry: `Ok(None)` for entries that belong to no sample (counted).
    fn member_of(&mut self, e: &RawEntry) -> Result<Option<Found>> {
        self.stats.entries += 1;
        if e.kind != EntryKind::File {
            self.stats.skipped_not_files += 1;
            return Ok(None);
        }
        let raw = std::str::from_utf8(&e.name).map_err(|_| {
            FormatError::tar(
                self.path,
                e.header_offset,
                format!(
                    "member name {:?} is not UTF-8",
                    String::from_utf8_lossy(&e.name)
                ),
            )
        })?;
        let name = normalize_member_name(raw);
        let Some((key, ext)) = split_member_name(name) else {
            self.stats.skipped_no_extension += 1;
            return Ok(None);
        };
        for check in [validate_key(key), validate_ext(ext)] {
            if let Err(FormatError::InvalidName { reason, .. }) = check {
                return Err(FormatError::tar(
                    self.path,
                    e.header_offset,
                    format!(
                        "member {raw:?} cannot be indexed: {reason} (key {key:?}, extension {ext:?}); \
                         rename it in the tar or repack with `bale pack`"
                    ),
                ));
            }
        }
        if name.len() != raw.len() {
            self.stats.stripped_dot_slash += 1;
        }
        if e.long_name {
            self.stats.long_names += 1;
        }
        Ok(Some(Found {
            key: key.to_owned(),
            ext: ext.to_owned(),
            header_offset: e.header_offset,
            data_offset: e.data_offset,
            size: e.size,
        }))
    }

    /// Adds a member to `open` (which must hold the same key).
    fn add(&mut self, open: &mut OpenSample, m: Found, sum: u64) -> Result<()> {
        if let Some(prev) = open.members.iter().find(|p| p.0 == m.ext) {
            return Err(FormatError::tar(
                self.path,
                m.header_offset,
                format!(
                    "member {}.{} repeats extension {:?} of sample {:?}, whose member at offset {} has it already",
                    m.key, m.ext, m.ext, open.tar_key, prev.4
                ),
            ));
        }
        open.end = m.data_offset + padded(m.size);
        open.members
            .push((m.ext, m.data_offset, m.size, sum, m.header_offset));
        Ok(())
    }

    /// Records a finished sample; `file` is its byte range in the shard file
    /// (the tar range for a plain tar, the frame for `.tar.zst`).
    fn close(&mut self, s: OpenSample, file: Option<(u64, u64)>) -> Result<()> {
        if self.opts.split == SplitPolicy::Regroup {
            return self.hold(s);
        }
        let number = self.index.len();
        let key = match self.tar_keys.get(&s.tar_key) {
            None => s.tar_key.clone(),
            Some(&(first, sample)) => match self.opts.split {
                // (Regroup never gets here: `close` holds its samples.)
                SplitPolicy::Refuse | SplitPolicy::Regroup => {
                    return Err(FormatError::SplitSample {
                        path: self.path.to_path_buf(),
                        offset: s.tar_offset,
                        key: s.tar_key.clone(),
                        first,
                        sample: sample as u64,
                    });
                }
                SplitPolicy::Rename => self.free_key(&s.tar_key),
            },
        };
        let key = if self.index_keys.contains(&key) {
            self.free_key(&key)
        } else {
            key
        };
        if key != s.tar_key {
            self.stats.renamed.push(Renamed {
                tar_key: s.tar_key.clone(),
                key: key.clone(),
                tar_offset: s.tar_offset,
            });
        }
        let tar_len = s.end - s.tar_offset;
        let (file_offset, file_len) = file.unwrap_or((s.tar_offset, tar_len));
        self.push_indexed(&key, (file_offset, file_len), (s.tar_offset, tar_len), &s)?;
        self.tar_keys
            .entry(s.tar_key.clone())
            .or_insert((s.tar_offset, number));
        self.index_keys.insert(key);
        self.last_tar_key = Some(s.tar_key);
        Ok(())
    }

    /// [`SplitPolicy::Regroup`]: keeps a finished run, joined to its key's
    /// first run if the key was seen before.
    fn hold(&mut self, s: OpenSample) -> Result<()> {
        let Some(&(first, number)) = self.tar_keys.get(&s.tar_key) else {
            if self.held.len() >= u32::MAX as usize - 1 {
                return Err(FormatError::Limit {
                    path: self.path.to_path_buf(),
                    what: "the shard exceeds the index's limits (2^32-1 samples)".into(),
                });
            }
            self.tar_keys
                .insert(s.tar_key.clone(), (s.tar_offset, self.held.len()));
            self.held.push(s);
            return Ok(());
        };
        let sample = &mut self.held[number];
        for m in &s.members {
            if let Some(prev) = sample.members.iter().find(|p| p.0 == m.0) {
                return Err(FormatError::tar(
                    self.path,
                    m.4,
                    format!(
                        "member {key}.{ext} at offset {} repeats extension {ext:?} of sample {key:?}, whose member \
                         at offset {} has it already: the key reappears after other samples, and regrouping \
                         (--allow-split) would give the sample two {ext:?} members",
                        m.4,
                        prev.4,
                        key = s.tar_key,
                        ext = m.0,
                    ),
                ));
            }
        }
        self.stats.regrouped.push(Regrouped {
            key: s.tar_key,
            first_offset: first,
            tar_offset: s.tar_offset,
        });
        sample.members.extend(s.members);
        Ok(())
    }

    /// [`SplitPolicy::Regroup`]: builds the index from the held samples, at
    /// the end of the scan. Without regrouped samples it is the index the
    /// other policies give; with them, a scattered one. Returns whether it is
    /// scattered.
    fn release(&mut self) -> Result<bool> {
        let scattered = !self.stats.regrouped.is_empty();
        if scattered {
            self.index = std::mem::take(&mut self.index).scattered();
        }
        for s in std::mem::take(&mut self.held) {
            let range = if scattered {
                (0, 0)
            } else {
                (s.tar_offset, s.end - s.tar_offset)
            };
            self.push_indexed(&s.tar_key, range, range, &s)?;
        }
        Ok(scattered)
    }

    /// Adds sample `s` to the index under `key`, with its (offset, length)
    /// in the file and in the tar stream, and counts its members.
    fn push_indexed(
        &mut self,
        key: &str,
        (file_offset, file_len): (u64, u64),
        (tar_offset, tar_len): (u64, u64),
        s: &OpenSample,
    ) -> Result<()> {
        let members: Vec<(&str, u64, u64, u64)> = s
            .members
            .iter()
            .map(|m| (m.0.as_str(), m.1, m.2, m.3))
            .collect();
        self.index
            .push_sample(key, file_offset, file_len, tar_offset, tar_len, &members);
        if self.index.over_limits() {
            return Err(FormatError::Limit {
                path: self.path.to_path_buf(),
                what: "the shard exceeds the index's limits (2^32-1 samples, members or key bytes)"
                    .into(),
            });
        }
        for m in &s.members {
            let f = self.fields.entry(m.0.clone()).or_default();
            f.count += 1;
            f.bytes += m.2;
        }
        self.members += s.members.len() as u64;
        Ok(())
    }

    fn free_key(&self, base: &str) -> String {
        (2u64..)
            .map(|n| format!("{base}~{n}"))
            .find(|k| !self.index_keys.contains(k) && !self.tar_keys.contains_key(k))
            .unwrap_or_default()
    }

    fn finish(
        self,
        compression: Compression,
        shard_len: u64,
        tar_len: u64,
        shard_checksum: Option<u64>,
    ) -> ScannedShard {
        ScannedShard {
            path: self.path.to_path_buf(),
            compression,
            shard_len,
            tar_len,
            samples: self.index.len() as u64,
            members: self.members,
            fields: self.fields,
            shard_checksum,
            stats: self.stats,
            index: self.index,
        }
    }
}

// ---------------------------------------------------------------------------
// Plain tars.

fn scan_plain(file: &File, path: &Path, len: u64, opts: &ScanOptions) -> Result<ScannedShard> {
    let mut g = Grouper::new(path, *opts, Compression::None);
    let mut pread = Pread {
        file,
        path,
        bytes_read: 0,
    };
    let mut seq = opts.checksums.then(|| Sequential::new(file, path, len));
    let src: &mut dyn Source = match seq.as_mut() {
        Some(s) => s,
        None => &mut pread,
    };
    let mut open: Option<OpenSample> = None;
    let mut pos = 0u64;
    let tar_len = loop {
        let e = match next_entry(src, path, pos, len, Bound::File)? {
            Step::Entry(e) => e,
            Step::Zero(at) => break (at + 2 * BLOCK).min(len),
            Step::End(at) => {
                return Err(FormatError::Truncated {
                    path: path.to_path_buf(),
                    what: "the end-of-archive blocks",
                    needed: at + 2 * BLOCK,
                    len: at,
                });
            }
        };
        pos = e.data_offset + padded(e.size);
        if pos > len {
            // The data fits but its padding does not: no end blocks can follow.
            return Err(FormatError::Truncated {
                path: path.to_path_buf(),
                what: "member padding",
                needed: pos,
                len,
            });
        }
        let Some(m) = g.member_of(&e)? else {
            continue;
        };
        let sum = if opts.checksums {
            src.hash_at(m.data_offset, m.size)?
        } else {
            0
        };
        match open.as_mut() {
            Some(o) if o.tar_key == m.key => g.add(o, m, sum)?,
            _ => {
                if let Some(done) = open.take() {
                    g.close(done, None)?;
                }
                let mut o = OpenSample {
                    tar_key: m.key.clone(),
                    tar_offset: m.header_offset,
                    end: 0,
                    members: Vec::new(),
                };
                g.add(&mut o, m, sum)?;
                open = Some(o);
            }
        }
    };
    if let Some(done) = open.take() {
        g.close(done, None)?;
    }
    // A scattered index records no tar length (its samples have no tar range).
    let tar_len = if g.release()? { 0 } else { tar_len };
    let (shard_checksum, bytes_read) = match seq {
        Some(s) => {
            let (sum, read) = s.finish()?;
            (Some(sum), read)
        }
        None => (None, pread.bytes_read),
    };
    g.stats.bytes_read = bytes_read;
    Ok(g.finish(Compression::None, len, tar_len, shard_checksum))
}

// ---------------------------------------------------------------------------
// Zstd: one frame per sample.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Frame {
    offset: u64,
    len: u64,
    skippable: bool,
}

fn read_le(
    file: &File,
    path: &Path,
    offset: u64,
    n: usize,
    len: u64,
    what: &'static str,
) -> Result<u64> {
    if offset + n as u64 > len {
        return Err(FormatError::Truncated {
            path: path.to_path_buf(),
            what,
            needed: offset + n as u64,
            len,
        });
    }
    let mut b = [0u8; 8];
    file.read_exact_at(&mut b[..n], offset)
        .map_err(|e| FormatError::io_at(path, offset, e))?;
    Ok(u64::from_le_bytes(b))
}

/// Finds the frame at `offset` and its length, from its header and block headers only.
fn frame_at(file: &File, path: &Path, offset: u64, len: u64) -> Result<Frame> {
    let magic = read_le(file, path, offset, 4, len, "a zstd frame header")? as u32;
    if magic & 0xFFFF_FFF0 == SKIPPABLE_MAGIC {
        let size = read_le(
            file,
            path,
            offset + 4,
            4,
            len,
            "a zstd skippable frame header",
        )?;
        let end = offset + 8 + size;
        if end > len {
            return Err(FormatError::Truncated {
                path: path.to_path_buf(),
                what: "a zstd skippable frame",
                needed: end,
                len,
            });
        }
        return Ok(Frame {
            offset,
            len: end - offset,
            skippable: true,
        });
    }
    if magic != ZSTD_MAGIC {
        return Err(FormatError::corrupt(
            path,
            offset,
            format!("expected a zstd frame (magic 28 b5 2f fd), found {magic:08x}"),
        ));
    }
    let fhd = read_le(file, path, offset + 4, 1, len, "a zstd frame header")? as u8;
    if fhd & 0x08 != 0 {
        return Err(FormatError::corrupt(
            path,
            offset + 4,
            "zstd frame header has its reserved bit set",
        ));
    }
    let single_segment = fhd & 0x20 != 0;
    let fcs_len = match fhd >> 6 {
        0 => u64::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let dict_len = [0u64, 1, 2, 4][(fhd & 3) as usize];
    let header_len = 1 + u64::from(!single_segment) + dict_len + fcs_len;
    let mut p = offset + 4 + header_len;
    loop {
        let bh = read_le(file, path, p, 3, len, "a zstd block header")?;
        let last = bh & 1 != 0;
        let size = bh >> 3;
        let content = match (bh >> 1) & 3 {
            0 | 2 => size,
            1 => 1,
            _ => {
                return Err(FormatError::corrupt(
                    path,
                    p,
                    "zstd block of the reserved type 3",
                ));
            }
        };
        if size > MAX_ZSTD_BLOCK {
            return Err(FormatError::corrupt(
                path,
                p,
                format!("zstd block of {size} bytes, more than 128 KiB"),
            ));
        }
        p += 3 + content;
        if p > len {
            return Err(FormatError::Truncated {
                path: path.to_path_buf(),
                what: "a zstd block",
                needed: p,
                len,
            });
        }
        if last {
            break;
        }
    }
    if fhd & 0x04 != 0 {
        p += 4;
        if p > len {
            return Err(FormatError::Truncated {
                path: path.to_path_buf(),
                what: "a zstd frame checksum",
                needed: p,
                len,
            });
        }
    }
    Ok(Frame {
        offset,
        len: p - offset,
        skippable: false,
    })
}

/// A region of a file as a reader, hashing what passes through when asked.
struct At<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
    hash: Option<&'a mut Xxh3>,
    read: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (self.end - self.pos).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        let k = self.file.read_at(&mut buf[..n], self.pos)?;
        if k == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file shrank while being read",
            ));
        }
        if let Some(h) = self.hash.as_mut() {
            h.update(&buf[..k]);
        }
        self.pos += k as u64;
        self.read += k as u64;
        Ok(k)
    }
}

/// Decompresses frame `f` of `file`, streaming (the compressed bytes are not
/// held), up to `limit` bytes of output (more is [`FormatError::Limit`]).
/// Every byte of the frame passes through `hash`. Returns the output and the
/// number of bytes read from the file.
fn decompress(
    file: &File,
    path: &Path,
    f: Frame,
    limit: u64,
    hash: Option<&mut Xxh3>,
) -> Result<(Vec<u8>, u64)> {
    let bad = |e: io::Error| FormatError::corrupt(path, f.offset, format!("bad zstd frame: {e}"));
    let at = At {
        file,
        pos: f.offset,
        end: f.offset + f.len,
        hash,
        read: 0,
    };
    let mut dec = zstd::stream::read::Decoder::new(at)
        .map_err(bad)?
        .single_frame();
    let mut out = Vec::new();
    (&mut dec)
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(bad)?;
    if out.len() as u64 > limit {
        return Err(FormatError::Limit {
            path: path.to_path_buf(),
            what: format!(
                "the zstd frame at offset {} decompresses to more than {limit} bytes",
                f.offset
            ),
        });
    }
    // Whatever of the frame the decoder did not need still counts for the file's hash.
    let mut at = dec.finish().into_inner();
    io::copy(&mut at, &mut io::sink()).map_err(|e| FormatError::io_at(path, at.pos, e))?;
    Ok((out, at.read))
}

/// Reads a frame that holds no tar data, for the whole file's hash.
fn hash_frame(file: &File, path: &Path, f: Frame, hash: &mut Xxh3) -> Result<u64> {
    let mut at = At {
        file,
        pos: f.offset,
        end: f.offset + f.len,
        hash: Some(hash),
        read: 0,
    };
    io::copy(&mut at, &mut io::sink()).map_err(|e| FormatError::io_at(path, at.pos, e))?;
    Ok(at.read)
}

fn single_frame_error(path: &Path) -> FormatError {
    FormatError::tar(
        path,
        0,
        "single-frame zstd: the whole tar is one zstd frame, which cannot be read at random, so bale cannot \
         index it in place; decompress it (`zstd -d`) and index the plain .tar, repack it with \
         `bale pack --compress zstd` (one frame per sample), or convert it with `bale convert`",
    )
}

fn scan_zstd(file: &File, path: &Path, len: u64, opts: &ScanOptions) -> Result<ScannedShard> {
    // Walk the frames first (headers only), so a single-frame file is refused
    // before anything is decompressed.
    let mut frames = Vec::new();
    let mut at = 0u64;
    while at < len {
        let f = frame_at(file, path, at, len)?;
        at += f.len;
        frames.push(f);
    }
    let data_frames = frames.iter().filter(|f| !f.skippable).count();
    if data_frames == 0 {
        return Err(FormatError::Truncated {
            path: path.to_path_buf(),
            what: "a zstd frame",
            needed: len + 1,
            len,
        });
    }
    if data_frames == 1 {
        // An empty shard is one frame of end blocks; anything else is a whole tar in one frame.
        let f = frames
            .iter()
            .find(|f| !f.skippable)
            .copied()
            .unwrap_or(frames[0]);
        let (head, _) = decompress(file, path, f, 64 << 10, None).map_err(|e| {
            if matches!(e, FormatError::Limit { .. }) {
                single_frame_error(path)
            } else {
                e
            }
        })?;
        if head.iter().any(|&b| b != 0) {
            return Err(single_frame_error(path));
        }
    }
    let mut g = Grouper::new(path, *opts, Compression::Zstd);
    let mut file_hash = opts.checksums.then(Xxh3::new);
    let mut bytes_read = 0u64;
    let mut base = 0u64;
    let mut tar_len: Option<u64> = None;
    for &f in &frames {
        if f.skippable || tar_len.is_some() {
            // Not tar data (a skippable frame, or frames after the end blocks):
            // read only to hash the whole file.
            if let Some(h) = file_hash.as_mut() {
                bytes_read += hash_frame(file, path, f, h)?;
            }
            continue;
        }
        let (data, read) = decompress(file, path, f, MAX_FRAME_CONTENT, file_hash.as_mut())?;
        bytes_read += read;
        let end = base + data.len() as u64;
        let mut src = Slice { data, base };
        let mut open: Option<OpenSample> = None;
        let mut pos = base;
        loop {
            let e = match next_entry(&mut src, path, pos, end, Bound::Frame(f.offset))? {
                Step::Entry(e) => e,
                Step::Zero(at) => {
                    if open.is_some() || at != base {
                        return Err(FormatError::tar(
                            path,
                            at,
                            format!(
                                "the end-of-archive blocks share the zstd frame at file offset {} with members: \
                                 the shard is not compressed one frame per sample",
                                f.offset
                            ),
                        ));
                    }
                    tar_len = Some(end);
                    break;
                }
                Step::End(_) => break,
            };
            pos = e.data_offset + padded(e.size);
            if pos > end {
                return Err(past_end(
                    path,
                    Bound::Frame(f.offset),
                    e.header_offset,
                    "member padding",
                    pos,
                    end,
                ));
            }
            let Some(m) = g.member_of(&e)? else {
                if open.is_some() {
                    return Err(frame_extra(path, f, e.header_offset));
                }
                continue;
            };
            let sum = if opts.checksums {
                src.hash_at(m.data_offset, m.size)?
            } else {
                0
            };
            match open.as_mut() {
                Some(o) if o.tar_key == m.key => g.add(o, m, sum)?,
                Some(o) => {
                    return Err(FormatError::tar(
                        path,
                        m.header_offset,
                        format!(
                            "the zstd frame at file offset {} holds more than one sample ({:?} and {:?}): \
                             the shard is not compressed one frame per sample; decompress it and index the \
                             plain .tar, or repack it with `bale pack`",
                            f.offset, o.tar_key, m.key
                        ),
                    ));
                }
                None => {
                    if m.header_offset != base {
                        return Err(frame_extra(path, f, base));
                    }
                    if g.last_tar_key.as_deref() == Some(m.key.as_str()) {
                        return Err(FormatError::tar(
                            path,
                            m.header_offset,
                            format!(
                                "sample {:?} is spread over more than one zstd frame (this one at file offset {}): \
                                 the shard is not compressed one frame per sample; decompress it and index the \
                                 plain .tar, or repack it with `bale pack`",
                                m.key, f.offset
                            ),
                        ));
                    }
                    let mut o = OpenSample {
                        tar_key: m.key.clone(),
                        tar_offset: m.header_offset,
                        end: 0,
                        members: Vec::new(),
                    };
                    g.add(&mut o, m, sum)?;
                    open = Some(o);
                }
            }
        }
        if let Some(o) = open.take() {
            if o.end != end {
                return Err(frame_extra(path, f, o.end));
            }
            g.close(o, Some((f.offset, f.len)))?;
        }
        base = end;
    }
    let Some(tar_len) = tar_len else {
        return Err(FormatError::Truncated {
            path: path.to_path_buf(),
            what: "the end-of-archive blocks",
            needed: base + 2 * BLOCK,
            len: base,
        });
    };
    g.stats.bytes_read = bytes_read;
    Ok(g.finish(
        Compression::Zstd,
        len,
        tar_len,
        file_hash.map(|h| h.digest()),
    ))
}

fn frame_extra(path: &Path, f: Frame, at: u64) -> FormatError {
    FormatError::tar(
        path,
        at,
        format!(
            "the zstd frame at file offset {} holds tar entries outside its sample: the shard is not compressed \
             one frame per sample; decompress it and index the plain .tar, or repack it with `bale pack`",
            f.offset
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tar::encode_member_header;
    use crate::{Member, ShardReader, ShardWriter};

    /// A tar built by hand: (name, typeflag, data) entries, then end blocks and `pad` zero bytes.
    fn tar(entries: &[(&str, u8, &[u8])], pad: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for &(name, t, data) in entries {
            let start = out.len();
            encode_member_header(name, data.len() as u64, &mut out);
            if t != b'0' {
                // Retype the (last) ustar header and fix its checksum.
                let h = out.len() - 512;
                out[h + 156] = t;
                out[h + 148..h + 156].copy_from_slice(b"        ");
                let sum: u32 = out[h..h + 512].iter().map(|&b| u32::from(b)).sum();
                out[h + 148..h + 156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
            }
            let _ = start;
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
        out.resize(out.len() + 1024 + pad, 0);
        out
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn scan(bytes: &[u8], opts: ScanOptions) -> (tempfile::TempDir, PathBuf, Result<ScannedShard>) {
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "t.tar", bytes);
        let r = scan_shard(&p, &opts);
        (dir, p, r)
    }

    type Samples = Vec<(String, Vec<(String, Vec<u8>)>)>;

    /// Reads every sample back through a written index.
    fn read_back(s: &ScannedShard, dir: &Path) -> Samples {
        let idx = dir.join("t.idx");
        s.write_index(&idx).unwrap();
        let r = ShardReader::open(&s.path, &idx).unwrap();
        (0..r.len())
            .map(|i| {
                let smp = r.read(i, true).unwrap();
                (smp.key, smp.members)
            })
            .collect()
    }

    #[test]
    fn groups_members_skips_non_members_and_pads() {
        let bytes = tar(
            &[
                ("d/", b'5', b""),
                ("./d/0001.jpg", b'0', b"JPEG1"),
                ("d/sub/", b'5', b""),
                ("./d/0001.cls", b'0', b"3"),
                ("README", b'0', b"not a member"),
                ("d/0002.jpg", b'0', &[7u8; 700]),
                ("link.jpg", b'2', b""),
            ],
            10240 - 1024,
        );
        let (dir, _, r) = scan(&bytes, ScanOptions::default());
        let s = r.unwrap();
        assert_eq!((s.samples, s.members), (2, 3));
        assert_eq!(s.shard_len, bytes.len() as u64);
        assert_eq!(s.tar_len, bytes.len() as u64 - (10240 - 1024));
        assert_eq!(s.stats.skipped_not_files, 3);
        assert_eq!(s.stats.skipped_no_extension, 1);
        assert_eq!(s.stats.stripped_dot_slash, 2);
        assert_eq!(s.shard_checksum, None);
        // Headers only: 8 headers of 512 bytes (7 entries and the zero block).
        assert_eq!(s.stats.bytes_read, 8 * 512);
        let got = read_back(&s, dir.path());
        assert_eq!(got[0].0, "d/0001");
        assert_eq!(
            got[0].1,
            vec![
                ("jpg".into(), b"JPEG1".to_vec()),
                ("cls".into(), b"3".to_vec())
            ]
        );
        assert_eq!(got[1].1, vec![("jpg".into(), vec![7u8; 700])]);
        let idx = ShardIndex::from_bytes(s.index_bytes(), "t.idx").unwrap();
        assert!(!idx.has_checksums());
        // The first sample's range covers the directory header between its members.
        let e = idx.sample(0);
        assert_eq!((e.tar_offset, e.tar_len), (512, 5 * 512));
    }

    #[test]
    fn checksums_read_everything_and_match_the_file() {
        let bytes = tar(
            &[("a.txt", b'0', b"hello"), ("b.txt", b'0', &[1u8; 3000])],
            512,
        );
        let (dir, _, r) = scan(
            &bytes,
            ScanOptions {
                checksums: true,
                ..Default::default()
            },
        );
        let s = r.unwrap();
        assert_eq!(s.shard_checksum, Some(crate::checksum(&bytes)));
        assert_eq!(s.stats.bytes_read, bytes.len() as u64);
        let idx = ShardIndex::from_bytes(s.index_bytes(), "t.idx").unwrap();
        assert!(idx.has_checksums());
        assert_eq!(idx.member(1).checksum, crate::checksum(&[1u8; 3000]));
        assert_eq!(read_back(&s, dir.path()).len(), 2);
    }

    #[test]
    fn long_names_through_pax_are_indexed() {
        let long = format!("{}/0001.jpg", "d".repeat(150));
        let bytes = tar(&[(&long, b'0', b"x"), ("k.txt", b'0', b"y")], 0);
        let (dir, _, r) = scan(&bytes, ScanOptions::default());
        let s = r.unwrap();
        assert_eq!(s.stats.long_names, 1);
        let got = read_back(&s, dir.path());
        assert_eq!(got[0].0, format!("{}/0001", "d".repeat(150)));
        // The pax header is part of the sample's range.
        let idx = ShardIndex::from_bytes(s.index_bytes(), "t.idx").unwrap();
        assert_eq!(idx.sample(0).tar_offset, 0);
    }

    #[test]
    fn split_keys_are_refused_naming_both_places_or_renamed() {
        let bytes = tar(
            &[
                ("a.jpg", b'0', b"1"),
                ("b.jpg", b'0', b"2"),
                ("a.cls", b'0', b"3"),
            ],
            0,
        );
        let (_d, _, r) = scan(&bytes, ScanOptions::default());
        let err = r.unwrap_err().to_string();
        assert!(
            err.contains("t.tar") && err.contains("offset 0") && err.contains("offset 2048"),
            "{err}"
        );
        let (dir, _, r) = scan(
            &bytes,
            ScanOptions {
                split: SplitPolicy::Rename,
                ..Default::default()
            },
        );
        let s = r.unwrap();
        assert_eq!(
            s.stats.renamed,
            vec![Renamed {
                tar_key: "a".into(),
                key: "a~2".into(),
                tar_offset: 2048
            }]
        );
        let keys: Vec<String> = read_back(&s, dir.path()).into_iter().map(|s| s.0).collect();
        assert_eq!(keys, ["a", "b", "a~2"]);
        // A real key that collides with a renamed one gets the next free name.
        let bytes = tar(
            &[
                ("a.jpg", b'0', b"1"),
                ("b.jpg", b'0', b"2"),
                ("a.cls", b'0', b"3"),
                ("a~2.x", b'0', b"4"),
            ],
            0,
        );
        let (dir, _, r) = scan(
            &bytes,
            ScanOptions {
                split: SplitPolicy::Rename,
                ..Default::default()
            },
        );
        let keys: Vec<String> = read_back(&r.unwrap(), dir.path())
            .into_iter()
            .map(|s| s.0)
            .collect();
        assert_eq!(keys, ["a", "b", "a~2", "a~2~2"]);
    }

    fn regroup(checksums: bool) -> ScanOptions {
        ScanOptions {
            checksums,
            split: SplitPolicy::Regroup,
        }
    }

    #[test]
    fn split_keys_are_regrouped_into_a_scattered_index() {
        let jpg = [9u8; 700];
        let bytes = tar(
            &[
                ("a.jpg", b'0', &jpg),
                ("b.jpg", b'0', b"2"),
                ("b.cls", b'0', b"5"),
                ("d/", b'5', b""),
                ("a.cls", b'0', b"3"),
                ("c.jpg", b'0', b"4"),
                ("a.txt", b'0', b"text"),
            ],
            0,
        );
        for checksums in [false, true] {
            let (dir, _, r) = scan(&bytes, regroup(checksums));
            let s = r.unwrap();
            assert!(s.is_scattered());
            assert_eq!((s.samples, s.members), (3, 6));
            assert_eq!(s.tar_len, 0);
            assert_eq!(s.fields["jpg"].count, 3);
            assert_eq!(
                s.stats.regrouped,
                vec![
                    Regrouped {
                        key: "a".into(),
                        first_offset: 0,
                        tar_offset: 4096,
                    },
                    Regrouped {
                        key: "a".into(),
                        first_offset: 0,
                        tar_offset: 6144,
                    },
                ]
            );
            let idx = ShardIndex::from_bytes(s.index_bytes(), "t.idx").unwrap();
            assert_eq!(&idx.as_bytes()[8..12], &[1, 0, 1, 0], "version 1.1");
            assert!(idx.is_scattered());
            assert_eq!(idx.compression(), Compression::None);
            assert_eq!(idx.has_checksums(), checksums);
            // Samples in the order of first appearance, members in tar order,
            // offsets absolute in the file.
            let keys: Vec<&str> = (0..idx.len()).map(|i| idx.key(i)).collect();
            assert_eq!(keys, ["a", "b", "c"]);
            let a: Vec<(&str, u64, u64)> =
                idx.members(0).map(|m| (m.ext, m.offset, m.size)).collect();
            assert_eq!(a, [("jpg", 512, 700), ("cls", 4608, 1), ("txt", 6656, 4)]);
            for i in 0..3 {
                assert_eq!(idx.sample(i).file_len, 0);
            }
            let got = read_back(&s, dir.path());
            assert_eq!(
                got[0],
                (
                    "a".to_owned(),
                    vec![
                        ("jpg".to_owned(), jpg.to_vec()),
                        ("cls".to_owned(), b"3".to_vec()),
                        ("txt".to_owned(), b"text".to_vec()),
                    ]
                )
            );
            assert_eq!(got[1].1.len(), 2);
            assert_eq!(got[2].1, vec![("jpg".to_owned(), b"4".to_vec())]);
            // No sample of the shard is one byte range any more.
            let r = ShardReader::open(&s.path, dir.path().join("t.idx")).unwrap();
            let err = r.read_raw(1).unwrap_err().to_string();
            assert!(err.contains("member by member"), "{err}");
        }
    }

    #[test]
    fn regrouping_without_split_samples_gives_the_1_0_index() {
        let bytes = tar(
            &[
                ("a.jpg", b'0', b"1"),
                ("a.cls", b'0', b"3"),
                ("x", b'0', b"no extension"),
                ("b.jpg", b'0', b"2"),
            ],
            1536,
        );
        for checksums in [false, true] {
            let (_d, _, plain) = scan(
                &bytes,
                ScanOptions {
                    checksums,
                    ..Default::default()
                },
            );
            let (_d, _, regrouped) = scan(&bytes, regroup(checksums));
            let (plain, regrouped) = (plain.unwrap(), regrouped.unwrap());
            assert!(!regrouped.is_scattered());
            assert_eq!(regrouped.index_bytes(), plain.index_bytes());
            assert_eq!(regrouped.tar_len, plain.tar_len);
            assert_eq!(regrouped.fields, plain.fields);
            assert_eq!(regrouped.shard_checksum, plain.shard_checksum);
        }
    }

    #[test]
    fn regrouping_a_repeated_extension_names_both_offsets() {
        let bytes = tar(
            &[
                ("a.jpg", b'0', b"1"),
                ("b.jpg", b'0', b"2"),
                ("a.cls", b'0', b"3"),
                ("a.jpg", b'0', b"4"),
            ],
            0,
        );
        let (_d, _, r) = scan(&bytes, regroup(false));
        let err = r.unwrap_err().to_string();
        assert!(
            err.contains("t.tar")
                && err.contains("member a.jpg at offset 3072")
                && err.contains("at offset 0 has it already"),
            "{err}"
        );
        // Within one run, as without regrouping.
        let bytes = tar(&[("a.jpg", b'0', b"1"), ("a.jpg", b'0', b"2")], 0);
        let (_d, _, r) = scan(&bytes, regroup(false));
        assert!(r.unwrap_err().to_string().contains("repeats extension"));
    }

    #[test]
    fn regrouping_a_zstd_shard_is_refused() {
        let (_d, _, r) = scan(
            &bale_shard(Compression::Zstd, &[("a", b"1")]),
            regroup(false),
        );
        let err = r.unwrap_err().to_string();
        assert!(
            err.contains("t.tar")
                && err.contains(".tar.zst cannot have its split samples regrouped"),
            "{err}"
        );
    }

    #[test]
    fn bad_input_is_an_error_naming_file_and_offset() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                tar(&[("a.jpg", b'0', b"1"), ("a.jpg", b'0', b"2")], 0),
                "repeats extension",
            ),
            (
                tar(&[("a.jpg", b'0', b"1"), ("x/../b.jpg", b'0', b"2")], 0),
                "cannot be indexed",
            ),
            (tar(&[("k.", b'0', b"1")], 0), "cannot be indexed"),
            (tar(&[("s.jpg", b'S', b"1")], 0), "sparse"),
            (
                tar(&[("a.jpg", b'0', b"1")], 0)[..1024].to_vec(),
                "truncated",
            ),
            (
                tar(&[("a.jpg", b'0', &[1u8; 2000])], 0)[..1200].to_vec(),
                "truncated",
            ),
            (vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0], "gzip-compressed"),
            (b"BZh91AY&SY".to_vec(), "bzip2-compressed"),
            (vec![b'x'; 1024], "offset 0"),
            (Vec::new(), "truncated"),
        ];
        for (bytes, want) in cases {
            let (_d, _, r) = scan(&bytes, ScanOptions::default());
            let err = r.unwrap_err().to_string();
            assert!(
                err.contains("t.tar") && err.contains(want),
                "want {want:?}: {err}"
            );
        }
    }

    /// A shard bale writes, each sample a `.bin` with the bytes given and a `.txt`.
    fn bale_shard(compression: Compression, samples: &[(&str, &[u8])]) -> Vec<u8> {
        let name = match compression {
            Compression::Zstd => "x.tar.zst",
            _ => "x.tar",
        };
        let mut w = ShardWriter::new(Vec::new(), name, compression, 0).unwrap();
        for &(k, d) in samples {
            w.write_sample(
                k,
                &[
                    Member {
                        ext: "bin",
                        data: d,
                    },
                    Member {
                        ext: "txt",
                        data: b"t",
                    },
                ],
            )
            .unwrap();
        }
        w.finish().unwrap().0
    }

    #[test]
    fn per_sample_zstd_gives_the_writers_own_index() {
        let mut w = ShardWriter::new(Vec::new(), "x.tar.zst", Compression::Zstd, 0).unwrap();
        for i in 0..20u32 {
            let data = vec![i as u8; (i as usize) * 300];
            w.write_sample(
                &format!("k{i:03}"),
                &[Member {
                    ext: "bin",
                    data: &data,
                }],
            )
            .unwrap();
        }
        let (bytes, want_index, summary) = w.finish().unwrap();
        for checksums in [false, true] {
            let (_d, _, r) = scan(
                &bytes,
                ScanOptions {
                    checksums,
                    ..Default::default()
                },
            );
            let s = r.unwrap();
            assert_eq!(s.compression, Compression::Zstd);
            assert_eq!(s.tar_len, summary.tar_bytes);
            if checksums {
                // Byte-identical to the index bale wrote while packing.
                assert_eq!(s.index_bytes(), want_index);
                assert_eq!(s.shard_checksum, Some(summary.shard_checksum));
            } else {
                let idx = ShardIndex::from_bytes(s.index_bytes(), "x").unwrap();
                let want = ShardIndex::from_bytes(want_index.clone(), "x").unwrap();
                assert_eq!(idx.len(), 20);
                for i in 0..20 {
                    assert_eq!(idx.sample(i), want.sample(i));
                }
            }
        }
        // An empty bale .tar.zst (one frame of end blocks) is an empty shard.
        let (_d, _, r) = scan(&bale_shard(Compression::Zstd, &[]), ScanOptions::default());
        assert_eq!(r.unwrap().samples, 0);
    }

    #[test]
    fn plain_bale_tar_gives_the_writers_own_index() {
        let mut w = ShardWriter::new(Vec::new(), "x.tar", Compression::None, 0).unwrap();
        for i in 0..30u32 {
            let data = vec![i as u8; (i as usize) * 97];
            let long = format!("{}{i}", "n".repeat(120));
            w.write_sample(
                &long,
                &[
                    Member {
                        ext: "bin",
                        data: &data,
                    },
                    Member {
                        ext: "cls",
                        data: b"1",
                    },
                ],
            )
            .unwrap();
        }
        let (bytes, want_index, _) = w.finish().unwrap();
        let (_d, _, r) = scan(
            &bytes,
            ScanOptions {
                checksums: true,
                ..Default::default()
            },
        );
        assert_eq!(r.unwrap().index_bytes(), want_index);
    }

    #[test]
    fn zstd_not_framed_per_sample_is_refused() {
        let plain = tar(
            &[("a.jpg", b'0', &[1u8; 3000]), ("b.jpg", b'0', &[2u8; 3000])],
            0,
        );
        // One frame for the whole tar.
        let single = zstd::bulk::compress(&plain, 3).unwrap();
        let (_d, _, r) = scan(&single, ScanOptions::default());
        assert!(r.unwrap_err().to_string().contains("single-frame zstd"));
        // Two samples in the first frame, end blocks in the second.
        let cut = plain.len() - 1024;
        let mut two = zstd::bulk::compress(&plain[..cut], 3).unwrap();
        two.extend(zstd::bulk::compress(&plain[cut..], 3).unwrap());
        let (_d, _, r) = scan(&two, ScanOptions::default());
        let err = r.unwrap_err().to_string();
        assert!(err.contains("more than one sample"), "{err}");
        // A frame boundary inside a member.
        let mut cut_mid = zstd::bulk::compress(&plain[..1000], 3).unwrap();
        cut_mid.extend(zstd::bulk::compress(&plain[1000..], 3).unwrap());
        let (_d, _, r) = scan(&cut_mid, ScanOptions::default());
        let err = r.unwrap_err().to_string();
        assert!(err.contains("crosses the end of the zstd frame"), "{err}");
        // One sample over two frames (a frame per member).
        let p2 = tar(&[("a.jpg", b'0', &[1u8; 100]), ("a.cls", b'0', b"1")], 0);
        let mut spread = Vec::new();
        for (a, b) in [(0, 1024), (1024, 2048), (2048, p2.len())] {
            spread.extend(zstd::bulk::compress(&p2[a..b], 3).unwrap());
        }
        let (_d, _, r) = scan(&spread, ScanOptions::default());
        let err = r.unwrap_err().to_string();
        assert!(
            err.contains("spread over more than one zstd frame"),
            "{err}"
        );
    }

    /// Damaged shards never panic, and whatever the scan accepts is an index
    /// that validates and reads back without error.
    #[test]
    fn every_truncation_and_many_bit_flips_are_errors_or_valid_indexes() {
        let long = format!("{}/k", "x".repeat(120));
        let samples: [(&str, &[u8]); 3] = [("a", b"one"), (&long, &[5u8; 700]), ("c", b"")];
        let plain = bale_shard(Compression::None, &samples);
        let zst = bale_shard(Compression::Zstd, &samples);
        let dir = tempfile::tempdir().unwrap();
        let check = |bytes: &[u8], name: &str| {
            let p = write(dir.path(), name, bytes);
            for checksums in [false, true] {
                if let Ok(s) = scan_shard(
                    &p,
                    &ScanOptions {
                        checksums,
                        ..Default::default()
                    },
                ) {
                    let idx = ShardIndex::from_bytes(s.index_bytes(), "mem.idx").unwrap();
                    let file = File::open(&p).unwrap();
                    for i in 0..idx.len() {
                        let buf =
                            crate::read::read_sample(&file, &p, idx.compression(), &idx.sample(i))
                                .unwrap();
                        for m in idx.members(i) {
                            let data = buf.member(&m);
                            assert_eq!(data.len() as u64, m.size);
                            if checksums {
                                crate::read::verify_member(&p, idx.key(i), &m, data).unwrap();
                            }
                        }
                    }
                }
            }
        };
        for (bytes, name) in [(&plain, "p.tar"), (&zst, "z.tar.zst")] {
            // Cuts at and around every block boundary, and at seeded random places
            // (all of them would take minutes in a debug build).
            let mut rng = crate::shuffle::SplitMix64::new(bytes.len() as u64);
            let len = bytes.len() as u64;
            let cuts = (0..len)
                .filter(|c| matches!(c % 512, 0 | 1 | 511))
                .chain((0..300).map(|_| rng.below(len)));
            for cut in cuts {
                check(&bytes[..cut as usize], name);
            }
            for _ in 0..400 {
                let i = rng.below(len) as usize;
                let mut b = bytes.clone();
                b[i] ^= 1 << rng.below(8);
                check(&b, name);
            }
        }
    }

    #[test]
    fn zstd_frame_walk_matches_the_library() {
        // Frames with checksums, content sizes and skippable frames in between.
        let mut bytes = Vec::new();
        let mut want = Vec::new();
        for (i, n) in [10usize, 200_000, 0, 5000, 300_000].into_iter().enumerate() {
            if i == 2 {
                let mut skip = 0x184D_2A53u32.to_le_bytes().to_vec();
                skip.extend(7u32.to_le_bytes());
                skip.extend([9u8; 7]);
                want.push(Frame {
                    offset: bytes.len() as u64,
                    len: skip.len() as u64,
                    skippable: true,
                });
                bytes.extend(skip);
            }
            // The last frame repeats one byte: RLE blocks.
            let data: Vec<u8> = (0..n)
                .map(|j| if i == 4 { 5 } else { (j * 7 % 251) as u8 })
                .collect();
            let mut enc = zstd::bulk::Compressor::new(1 + i as i32).unwrap();
            enc.include_checksum(i % 2 == 0).unwrap();
            enc.include_contentsize(i % 2 == 1).unwrap();
            let frame = enc.compress(&data).unwrap();
            want.push(Frame {
                offset: bytes.len() as u64,
                len: frame.len() as u64,
                skippable: false,
            });
            bytes.extend(frame);
        }
        let dir = tempfile::tempdir().unwrap();
        let p = write(dir.path(), "f.zst", &bytes);
        let file = File::open(&p).unwrap();
        let mut at = 0;
        let mut got = Vec::new();
        while at < bytes.len() as u64 {
            let f = frame_at(&file, &p, at, bytes.len() as u64).unwrap();
            at += f.len;
            got.push(f);
        }
        assert_eq!(got, want);
        // A cut frame is truncated, naming the file.
        let p = write(dir.path(), "cut.zst", &bytes[..bytes.len() - 3]);
        let file = File::open(&p).unwrap();
        let last = want.last().unwrap().offset;
        let err = frame_at(&file, &p, last, bytes.len() as u64 - 3).unwrap_err();
        assert!(matches!(err, FormatError::Truncated { .. }), "{err}");
    }
}
