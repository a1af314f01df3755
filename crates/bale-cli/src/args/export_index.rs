//! Arguments of `bale export-index`.

use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  bale export-index --dali ds/train -o ds/train-dali
      ds/train-dali/shard-000000.dali.idx, ... one per shard

Then, in a DALI pipeline:
  shards = sorted(glob.glob(\"ds/train/shard-*.tar\"))
  indexes = sorted(glob.glob(\"ds/train-dali/*.dali.idx\"))
  jpg, cls = fn.readers.webdataset(paths=shards, index_paths=indexes,
                                   ext=[\"jpg\", \"cls\"], ...)

`bale pack ... --dali-index DIR` and `bale index ... --dali-index DIR` write
the same files once the dataset is complete. See docs/dali.md.";

/// Write another tool's index files for a dataset's shards, from bale's own
/// indexes (no shard is read).
///
/// `--dali` writes NVIDIA DALI's WebDataset index (format v1.2), one file per
/// shard, named after the shard (`shard-000000.dali.idx`) so that the names
/// sort in the shards' order; with them `fn.readers.webdataset` starts at
/// once instead of scanning every tar, and reads pax-extended members (long
/// names) its own scan gets wrong. Plain `.tar` shards only. DIR is created if
/// missing and locked while written; an existing file of the same name is an
/// error unless --force. DIR may not be the dataset directory.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub struct ExportIndexArgs {
    /// The dataset (a directory with bale.json).
    #[arg(value_name = "DATASET")]
    pub dataset: PathBuf,

    /// Directory to write the index files into.
    #[arg(short, long, value_name = "DIR")]
    pub output: PathBuf,

    /// Write NVIDIA DALI's WebDataset index files (the only kind for now).
    #[arg(long, required = true)]
    pub dali: bool,

    /// Replace index files of the same names in DIR (never a dataset's own files).
    #[arg(long)]
    pub force: bool,

    #[command(flatten)]
    pub out: super::output::OutputFlags,
}
