//! Arguments of `bale index`.

use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  bale index 'shards/train-{000000..000999}.tar' -o train
                                 headers only; then `bale verify train`
  bale index 'shards/*.tar' -o ds --checksum
                                 also read every byte and record checksums
  bale index x.tar -o ds --rename-split
                                 a.jpg b.jpg a.cls: samples a, b, a~2
  bale index x.tar -o ds --allow-split
                                 a.jpg b.jpg a.cls: samples a (jpg, cls), b;
                                 x.idx is a scattered 1.1 index (one read
                                 per member for every sample of x.tar)
  bale index 'shards/*.tar' -o ds --append
                                 index the tars ds does not list yet, add them";

/// Index existing WebDataset tars in place, without repacking them.
///
/// Scans each tar's headers (seeking over member data) and writes a bale index per tar and a
/// manifest `bale.json` into DATASET_DIR that point at the original files, so `bale verify`,
/// `stat`, `ls`, `get`, the reader and the Python package work on them unchanged. The tars are
/// never modified.
///
/// SHARD arguments may be paths, brace patterns (`train-{000000..000999}.tar`, `{train,val}.tar`)
/// or globs (`shards/*.tar`, `data/**/*.tar`), expanded by bale (quote them so the shell leaves
/// them alone). The dataset's samples are numbered in argument order, each glob's matches sorted by
/// name.
///
/// Tars from GNU tar (gnu, ustar, pax formats), Python's tarfile and webdataset's TarWriter are
/// read; directories, links and files without an extension are skipped, and a leading `./` is
/// removed from member names. `.tar.zst` files with one zstd frame per sample (`bale pack
/// --compress zstd`) are indexed too; gzip and single-frame zstd tars cannot be read at random and
/// are refused.
///
/// The manifest records shard paths relative to DATASET_DIR (or absolute with `--absolute`): keep
/// the two where they are relative to each other. The manifest is written last; a failed run writes
/// none and removes the indexes it created.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub struct IndexArgs {
    /// Options for a dataset in object storage.
    #[command(flatten)]
    pub storage: crate::args::storage::StorageArgs,
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
    #[arg(long, conflicts_with = "allow_split")]
    pub rename_split: bool,

    /// When a key reappears after other samples, regroup all its members into one sample (plain
    /// tars only).
    ///
    /// The sample keeps the place of the key's first appearance and its members stay in tar order;
    /// a member whose extension the sample already has is an error naming both offsets. A shard
    /// with such a sample gets a scattered index (layout 1.1): every sample of that shard is then
    /// read member by member, one positioned read per member instead of one per sample. Shards
    /// without split samples keep the usual 1.0 index. Refused with .tar.zst shards (a frame per
    /// sample cannot be regrouped) and, when a sample was regrouped, with --wids-json (wids needs
    /// contiguous samples).
    #[arg(long)]
    pub allow_split: bool,

    /// Index tars whose samples share keys (refused by default, naming the key and both tars). A
    /// lookup of such a key by `bale get` or `get_by_key` is refused as ambiguous, naming the
    /// samples' indices; `bale verify` reports the shared keys.
    #[arg(long)]
    pub allow_duplicate_keys: bool,

    /// Replace an existing bale.json (and the indexes of the tars given, and the --wids-json file)
    /// in DATASET_DIR. The old ones stay until every tar is scanned: a run that fails before leaves
    /// the old dataset whole (with -o URL they are deleted then, before the new indexes are
    /// uploaded). A bale.json that no bale run wrote, and a `<tar>.idx` that is not one of bale's
    /// indexes (DALI's tar indexer writes that name too), are never replaced, nor is one that `bale
    /// pack`, `merge` or `convert` wrote (an index in place would drop its checksums, labels and
    /// stats).
    #[arg(long)]
    pub force: bool,

    /// Add the tars to the dataset in DATASET_DIR, which `bale index` wrote with the same
    /// --checksum, --absolute, --rename-split, --allow-split: tars it lists are skipped, the others
    /// indexed, then a new bale.json (docs/index.md)
    #[arg(long, conflicts_with_all = ["force", "wids_json", "dali_index"])]
    pub append: bool,

    /// Once the dataset is complete, also write NVIDIA DALI's index files for
    /// the tars into DIR (as `bale export-index --dali`; plain tar only).
    #[arg(long, value_name = "DIR")]
    pub dali_index: Option<PathBuf>,

    /// Shards scanned at once (default: one per core).
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,

    #[command(flatten)]
    pub out: super::output::OutputFlags,
}
