//! The bale packing pipeline: turns a tree of files into WebDataset-style tar
//! shards with indexes and a manifest.
//!
//! A pack runs in phases: **discover** (walk the input roots, or a file list;
//! globs, symlinks, hidden and extension-less files), **group** (files sharing
//! a key form a sample: `a/b/0001.jpg` + `a/b/0001.json` are sample
//! `a/b/0001`), **label** (ImageFolder directories or a CSV, stored as a
//! `.cls` member), **plan** (sort by key or a seeded shuffle, take a part,
//! stat), **read** (and checksummed) in parallel on reader threads within an
//! in-flight byte budget, and **write** in order into shards of bounded size.
//! The manifest is written last: a pack that fails or is cancelled leaves
//! none, and removes every shard and temporary file it wrote. The output is
//! byte-identical for the same input and options, whatever the thread count.
//!
//! [`merge`] joins the outputs of `--part I/N` packs; [`convert`] turns a
//! dataset into another form (tar, `.tar.zst`, HDF5 with feature `hdf5`, or
//! a directory of files). docs/pack.md describes
//! every behaviour for users.
//!
//! ```
//! use bale_pack::{NoProgress, Packer};
//! let dir = tempfile::tempdir()?;
//! let input = dir.path().join("in");
//! for (class, name) in [("cat", "0001"), ("cat", "0002"), ("dog", "0003")] {
//!     std::fs::create_dir_all(input.join(class))?;
//!     std::fs::write(input.join(class).join(format!("{name}.jpg")), b"pixels")?;
//! }
//! std::fs::write(input.join("dog/0003.json"), b"{}")?;
//!
//! let summary = Packer::builder()
//!     .input(&input)
//!     .output(dir.path().join("out"))
//!     .jobs(2)
//!     .build()?
//!     .run(&NoProgress)?;
//! assert_eq!((summary.samples, summary.shards), (3, 1));
//! assert_eq!(summary.labels, "dir"); // cat/ and dog/ look like ImageFolder classes
//!
//! let m = bale_format::Manifest::read(&dir.path().join("out"))?;
//! assert_eq!(m.labels, Some(vec!["cat".to_string(), "dog".to_string()]));
//! assert_eq!(m.shards[0].file, "shard-000000.tar");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod append;
mod convert;
mod dali;
mod destination;
mod discover;
mod error;
mod hooks;
mod image;
mod index;
mod left;
mod merge;
mod options;
mod output;
mod packer;
mod patterns;
mod pipeline;
mod plan;
mod progress;
mod remote;
mod shard_out;
mod spill;
mod spilled;

pub use append::AppendBase;
pub use convert::{
    ConvertFormat, ConvertOptions, ConvertProgress, ConvertSummary, convert, convert_inputs,
};
pub use dali::{
    DALI_INDEX_SUFFIX, DALI_INDEX_VERSION, DaliIndexFile, DaliSummary, dali_text, export_dali_index,
};
pub use destination::{Destination, NamesOutput, StorageFn, merge_into};
pub use discover::{FileList, IGNORED_EXAMPLES, Ignored, IgnoredKind, Tree, TreeFile, walk_tree};
pub use error::{PackError, Result, SampleTransformError, TransformError};
pub use hooks::{MemberData, SampleTransformFn, TransformFn};
pub use index::{IndexOptions, IndexProgress, IndexSummary, IndexedShard, index};
pub use left::{Failed, Left, LockReason, Old, Run, Undo};
pub use merge::{
    MergeFile, MergeOptions, MergePlan, MergeSummary, merge, merge_cancellable, plan_merge,
};
pub use options::{
    CompressSpec, DEFAULT_IN_FLIGHT, DEFAULT_SHARD_SIZE, DEFAULT_ZSTD_LEVEL, LabelMode, MAX_JOBS,
    OnError, PackOrder, Part, ShapingOptions, check_jobs, parse_size,
};
pub use output::JOURNAL_NAME;
pub use packer::{PackSummary, Packer, PackerBuilder, default_jobs};
pub use patterns::{MAX_EXPANSION, expand_all as expand_patterns, expand_braces};
pub use progress::{NoProgress, PackProgress, SkippedFile};
pub use remote::{RemoteOutput, Unfinished, is_remote};
