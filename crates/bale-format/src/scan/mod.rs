//! Adopting existing tars: [`scan_shard`] reads the headers of a WebDataset
//! tar written by any tool (GNU tar, Python's `tarfile`, webdataset's
//! `TarWriter`, bale) and builds a bale index that points into the file as it
//! is, so it can be read at random without repacking.
//!
//! Plain tars are scanned header by header with positioned reads, seeking
//! over member data ((`plain`)); `.tar.zst` with one zstd frame per sample is
//! walked frame by frame (`frames`); gzip and other stream compressions
//! are refused. Entries are grouped into samples by WebDataset's rule
//! (`group`); [`SplitPolicy`] says what to do with a key that reappears
//! after other samples. docs/format.md (index layout 1.1) and docs/index.md
//! describe the results and their costs.
//!
//! ```
//! use bale_format::scan::{ScanOptions, scan_shard};
//! use bale_format::read::ShardReader;
//! use bale_format::{Compression, Member, ShardWriter};
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

use crate::read_at::ReadAt;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::hash::Xxh3;

use crate::atomic::write_atomic;
use crate::error::{FormatError, Result};
use crate::index::{Compression, IndexBuilder, ShardIndex};
use crate::manifest::{FieldStats, ShardEntry, hex64};
use crate::name::{split_member_name, validate_key};
use crate::tar::{BLOCK, Entry, EntryHeaders, EntryKind, HeaderStep, padded};

mod entry;
mod frames;
mod group;
mod plain;
mod source;
#[cfg(test)]
mod tests;

use entry::*;
use frames::*;
use group::*;
use plain::*;
use source::*;

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
        write_atomic(path, &crate::index::index_file_bytes(&bytes))?;
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
    // A local regular file, or an object at a URL (through the storage layer).
    let (file, len) = crate::read_at::open(path)?;
    let file: &dyn ReadAt = &*file;
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
            scan_zstd(file, path, len, opts)?
        }
        _ => scan_plain(file, path, len, opts)?,
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
