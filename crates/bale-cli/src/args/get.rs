//! Arguments of `bale get`.

use std::path::PathBuf;

/// Write a sample's members to stdout or a directory.
///
/// SAMPLE is a key, or a sample index: a string that parses as an integer
/// smaller than the number of samples is taken as an index (use `--key` to
/// look such a string up as a key). With `--ext`, that member's bytes go to
/// stdout (or to the file `-o` names). Without it, `-o DIR` is required and
/// every member is written to `DIR/<key>.<ext>`, creating subdirectories;
/// names that would escape DIR (through `..`, absolute paths or symlinks) are
/// refused, and existing files are not overwritten without `--force`. Every
/// target is checked before any member is written.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// Options for a dataset in object storage.
    #[command(flatten)]
    pub storage: crate::args::storage::StorageArgs,
    /// The dataset directory.
    #[arg(value_name = "DATASET")]
    pub path: PathBuf,
    /// The sample: a key, or an index.
    #[arg(value_name = "KEY|INDEX")]
    pub sample: String,
    /// Take SAMPLE as a key even when it looks like an index.
    #[arg(long)]
    pub key: bool,
    /// Write only this member's bytes (to stdout, or to the file `-o` names).
    #[arg(long, value_name = "EXT")]
    pub ext: Option<String>,
    /// Output: a file with `--ext`, else a directory.
    #[arg(long, short = 'o', value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Overwrite existing files (never a file of the dataset being read: its
    /// manifest, a shard or an index, by whatever path).
    #[arg(long)]
    pub force: bool,
}
