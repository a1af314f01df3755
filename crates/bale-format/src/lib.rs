//! The bale on-disk format, and nothing else.
//!
//! A bale dataset is a directory:
//!
//! ```text
//! out/
//!   bale.json            manifest, written last: no manifest, no dataset
//!   shard-000000.tar     a WebDataset-style tar (or .tar.zst, one zstd frame per sample)
//!   shard-000000.idx     its index: every sample's and member's byte range and checksum
//! ```
//!
//! This crate writes and reads those files: [`ShardWriter`] and
//! [`ShardFileWriter`] write shards and indexes, [`ShardIndex`] loads an index
//! (memory-mapped, validated once, then allocation-free), [`read::ShardReader`] reads
//! a sample with one positioned read, [`SampleStream`] reads a tar
//! sequentially, and [`Manifest`] is `bale.json`. docs/format.md is the spec.
//!
//! ```
//! use bale_format::read::ShardReader;
//! use bale_format::{Compression, CreatedBy, Manifest, Member, ShardFileWriter};
//! let dir = tempfile::tempdir()?;
//! let mut w = ShardFileWriter::create(dir.path(), "shard-000000.tar", Compression::None, 0)?;
//! w.writer().write_sample("cat/0001", &[
//!     Member { ext: "jpg", data: b"\xff\xd8 not really a jpeg" },
//!     Member { ext: "cls", data: b"0" },
//! ])?;
//! let entry = w.finish()?;
//! let created_by = CreatedBy { tool: "bale".into(), version: "0".into(), command: "doc".into(), options: Default::default() };
//! Manifest::new(vec![entry], Some(vec!["cat".into()]), created_by).write(dir.path())?;
//!
//! let m = Manifest::read(dir.path())?;
//! let shard = &m.shards[0];
//! let r = ShardReader::open(dir.path().join(&shard.file), dir.path().join(&shard.index))?;
//! let sample = r.read(0, true)?;
//! assert_eq!(sample.key, "cat/0001");
//! assert_eq!(sample.get("cls"), Some(&b"0"[..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod atomic;
mod error;
pub mod files;
pub mod foreign;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod h5;
pub mod hash;
mod index;
mod manifest;
mod name;
pub mod npy;
pub mod read;
pub mod read_at;
mod regular;
pub mod scan;
mod shard;
pub mod shuffle;
mod stream;
mod tar;
pub mod verify;

pub use error::{FormatError, Result, Shown, shown};
pub use index::{
    Compression, DuplicateKey, IndexBuilder, MemberEntry, SampleEntry, ShardIndex, checksum,
    duplicate_keys, index_file_bytes, index_len_max, index_len_min, is_index_head, prefetch,
    prefetch_sample,
};
/// The shard's dictionary frame, for tests and fuzz targets that build one.
#[cfg(feature = "fuzzing")]
pub use index::{ZSTD_DICT_FRAME_MAGIC, ZSTD_DICT_MAX};
pub use manifest::{
    CreatedBy, FieldStats, ImageTransform, MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest,
    ORIGINAL_SIZE_EXT, ShardEntry, hex64, indexed_in_place, listed_files, parse_hex64,
};
pub use name::{
    MAX_LABEL_BYTES, is_reserved_ext, parse_label, split_member_name, validate_key,
    validate_written_ext,
};
pub use shard::{
    DEFAULT_ZSTD_LEVEL, EncodedSample, Member, MemberSource, ShardBuf, ShardFileWriter,
    ShardSummary, ShardWriter, index_file_name, is_bale_file_name, shard_file_name,
};
/// Opens a shard file as a sample stream, for tests that read one whole.
#[cfg(feature = "fuzzing")]
pub use stream::open_shard_stream;
pub use stream::{STREAM_BUFFER, SampleStream, StreamMember, StreamSample};
pub use tar::{Entry, EntryKind, TAR_END_LEN, first_entry, is_member_header, tar_member_len};

/// A seeded xorshift64 generator for unit tests (`seed` not 0).
#[cfg(test)]
pub(crate) fn test_rng(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}
