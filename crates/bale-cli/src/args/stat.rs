//! Arguments of `bale stat`.

use std::path::PathBuf;

/// Summarize a dataset, or a plain file tree before packing it.
///
/// On a dataset (a directory with bale.json): totals, a per-shard table,
/// per-extension counts and bytes, sample size percentiles, the label
/// histogram and how the dataset was made. On any other directory: file
/// count and bytes, per-extension counts, file size percentiles and the number
/// of samples the files would group into.
///
/// `--json` prints one object. For a dataset: `kind` ("dataset"), `path`,
/// `format_version`, `samples`, `shards`, `members`, `bytes` (shard files),
/// `tar_bytes` (uncompressed), `index_bytes`, `compression` ("none", "zstd" or
/// "mixed"), `shard_table` [{`file`, `index`, `samples`, `members`, `bytes`,
/// `tar_bytes`, `compression`}], `extensions` [{`ext`, `count`, `bytes`}],
/// `sample_bytes` {`count`, `mean`, `p50`, `p90`, `p99`, `max`} (payload bytes
/// per sample, from the indexes), `labels` (null, or {`read`, `classes`
/// [{`label`, `name`, `count`}], `unlabeled`, `unparsed`}), `skipped` and
/// `created_by` {`tool`, `version`, `command`, `options`}. For a tree: `kind`
/// ("tree"), `path`, `files`, `bytes`, `samples`, `extensions`, `file_bytes`
/// (as `sample_bytes`), `no_extension` and `not_regular`. Percentiles are exact
/// below 512 bytes and within 0.4% above.
#[derive(Debug, clap::Args)]
pub struct StatArgs {
    /// Options for a dataset in object storage.
    #[command(flatten)]
    pub storage: crate::args::storage::StorageArgs,
    /// A dataset directory or a plain directory of files.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// Print one JSON object on stdout (fields above).
    #[arg(long)]
    pub json: bool,
    /// Skip the label histogram (it reads every `.cls` member).
    #[arg(long)]
    pub no_labels: bool,
    /// Show every shard and every label in the tables (default: the first 20 shards, 40 labels).
    #[arg(long)]
    pub all: bool,
}
