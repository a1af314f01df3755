//! Arguments of `bale get`.

use std::path::PathBuf;

/// Write a sample's members to stdout or a directory.
///
/// SAMPLE is a key, or a sample index: a string that is a key is that key; a
/// string that is no key and parses as an integer smaller than the number of
/// samples is that index. A string that is both a key and the index of
/// another sample is refused as ambiguous: say `--key` or `--index`. A key
/// that more than one sample has is refused, naming their indices. With `--ext`, that member's bytes go to
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
    /// Take SAMPLE as a key, never as an index.
    #[arg(long, conflicts_with = "index")]
    pub key: bool,
    /// Take SAMPLE as a sample index, never as a key.
    #[arg(long)]
    pub index: bool,
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
