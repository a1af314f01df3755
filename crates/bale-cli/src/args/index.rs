//! Arguments of `bale index`.

use std::path::PathBuf;

/// Index existing WebDataset tars in place, without repacking them.
///
/// Scans each tar's headers (seeking over member data) and writes a bale
/// index per tar and a manifest `bale.json` into DATASET_DIR that point at the
/// original files, so `bale verify`, `stat`, `ls`, `get`, the reader and the
/// Python package work on them unchanged. The tars are never modified.
///
/// SHARD arguments may be paths, brace patterns (`train-{000000..000999}.tar`,
/// `{train,val}.tar`) or globs (`shards/*.tar`, `data/**/*.tar`), expanded by
/// bale (quote them so the shell leaves them alone). The dataset's samples are
/// numbered in argument order, each glob's matches sorted by name.
///
/// Tars from GNU tar (gnu, ustar, pax formats), Python's tarfile and
/// webdataset's TarWriter are read; directories, links and files without an
/// extension are skipped, and a leading `./` is removed from member names.
/// `.tar.zst` files with one zstd frame per sample (`bale pack --compress
/// zstd`) are indexed too; gzip and single-frame zstd tars cannot be read at
/// random and are refused.
///
/// The manifest records shard paths relative to DATASET_DIR (or absolute with
/// `--absolute`): keep the two where they are relative to each other. The
/// manifest is written last; a failed run writes none and removes the
/// indexes it created.
#[derive(Debug, clap::Args)]
pub struct IndexArgs {
    /// The tar files: paths, brace patterns or globs.
    #[arg(value_name = "SHARD", required = true)]
    pub shards: Vec<String>,

    /// The dataset directory to write indexes and bale.json into (created if
    /// missing; may be the tars' own directory).
    #[arg(short, long, value_name = "DATASET_DIR")]
    pub output: PathBuf,

    /// Record absolute shard paths in the manifest (and the wids JSON) instead
    /// of paths relative to DATASET_DIR.
    #[arg(long)]
    pub absolute: bool,

    /// Read every member and record checksums in the indexes, and each shard's
    /// checksum in the manifest. Without it only headers are read, and the
    /// indexes record checksums as absent (`bale verify` then checks structure only).
    #[arg(long)]
    pub checksum: bool,

    /// Also write a webdataset `wids` shard index (JSON, wids-shard-index-v1)
    /// to FILE, with shard URLs relative to FILE's directory (or absolute).
    #[arg(long, value_name = "FILE")]
    pub wids_json: Option<PathBuf>,

    /// When a key reappears after other samples, index each later run as a
    /// sample of its own, keyed KEY~2, KEY~3, ... (default: refuse the tar).
    #[arg(long)]
    pub rename_split: bool,

    /// Regroup a sample whose members are apart into one sample. Index format
    /// 1.0 holds one contiguous byte range per sample, so this is refused with
    /// an explanation; see --rename-split.
    #[arg(long)]
    pub allow_split: bool,

    /// Replace an existing bale.json in DATASET_DIR.
    #[arg(long)]
    pub force: bool,

    /// Shards scanned at once (default: one per core).
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,

    /// No progress bar, notes or summary line.
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}
