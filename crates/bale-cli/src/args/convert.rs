//! Arguments of `bale convert`.

use std::path::PathBuf;

fn size(s: &str) -> Result<u64, bale_pack::PackError> {
    bale_pack::parse_size(s)
}

const EXAMPLES: &str = "\
Examples:
  bale convert data -o data-h5 --format h5          HDF5 shards h5py opens
  bale convert data-h5 -o data-zst --format tar.zst  back to compressed tar
  bale convert data -o big --shard-size 4GiB         reshard into larger tars
  bale convert data -o files --format dir            the samples as files KEY.EXT
  bale convert mds-train -o train                    from a MosaicML Streaming (MDS) dataset
  bale convert litdata-train -o train                from a LitData optimized dataset
  bale convert day-2 -o train --append               add day-2's samples to train

Keys, members (and their order), sample order and label names are kept; every
member is checked against its index checksum as it is read.

MDS and LitData sources are read from their index.json and shards (no
Python): sample i gets the key 00000000+i, each column a member named after
it (jpeg -> .jpg, png -> .png, json -> .json, ndarray/numpy/pil -> .npy,
numbers -> decimal text; a column `cls` is bale's label). Pickles, lists
and tensors are refused by name. See docs/convert.md.";

/// Convert a dataset to another form: tar, tar.zst, h5 or a directory of files; also from MosaicML
/// Streaming (MDS) and LitData datasets.
///
/// Streams the samples of SRC in dataset order into DST, one sample in memory at a time, and writes
/// the shards like `bale pack` does (temporary names, manifest last: an interrupted conversion
/// leaves no dataset). `--format dir` writes each member as the file `DST/<key>.<ext>` and refuses
/// any name that would leave DST (absolute paths, `..`, paths through a symlink).
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub struct ConvertArgs {
    /// The source: a bale dataset (a directory with bale.json), or a directory with the index.json
    /// of a MosaicML Streaming (MDS) or LitData dataset.
    #[arg(value_name = "SRC")]
    pub source: PathBuf,

    /// Output directory (created if missing; must be empty unless --force).
    #[arg(short, long, value_name = "DST")]
    pub output: PathBuf,

    /// Output form: tar, tar.zst, h5 (needs a bale built with `--features hdf5`) or dir.
    #[arg(long, value_name = "FORMAT", default_value = "tar")]
    pub format: ConvertFormatArg,

    /// zstd level for `--format tar.zst` (1-22).
    #[arg(long, value_name = "N", default_value_t = bale_pack::DEFAULT_ZSTD_LEVEL)]
    pub level: i32,

    /// Largest shard, in bytes of tar stream (for every format): 1GiB, 512MiB, ...
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = size)]
    pub shard_size: u64,

    /// Most samples in a shard.
    #[arg(long, value_name = "N")]
    pub shard_samples: Option<u64>,

    /// Write into a non-empty output directory (shard formats: bale's files
    /// there are replaced; dir: new files go beside the others, never over one).
    #[arg(long)]
    pub force: bool,

    /// Add the samples to the dataset in DST, which `bale convert` wrote with the same --format,
    /// --level, --shard-size, --shard-samples: new shards, then a new bale.json (docs/convert.md)
    #[arg(long, conflicts_with = "force")]
    pub append: bool,

    /// Convert a dataset whose samples share keys (refused by default,
    /// naming the key and both shards).
    ///
    /// Such a dataset is one `bale index --allow-duplicate-keys` made. The
    /// exception is recorded in the output's manifest.
    #[arg(long)]
    pub allow_duplicate_keys: bool,

    /// Options for object storage: an output there (`-o s3://bucket/prefix`: the shards are written
    /// to a local spool, then uploaded, `bale.json` last), and a source whose manifest names its
    /// shards by URL (`bale index` of tars in a bucket).
    #[command(flatten)]
    pub storage: super::storage::StorageArgs,

    #[command(flatten)]
    pub out: super::output::OutputFlags,
}

/// `--format` of `bale convert`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ConvertFormatArg {
    /// Plain tar shards.
    Tar,
    /// zstd-compressed tar shards, one frame per sample.
    #[value(name = "tar.zst")]
    TarZst,
    /// HDF5 shards.
    H5,
    /// A directory of files `<key>.<ext>`.
    Dir,
}
