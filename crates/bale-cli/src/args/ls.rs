//! Arguments of `bale ls`.

use std::path::PathBuf;

/// List the samples of a dataset.
///
/// One line per sample: `INDEX<TAB>KEY<TAB>LABEL<TAB>EXT:SIZE,EXT:SIZE`. LABEL
/// is the class name when the sample has a `.cls` member and the manifest names
/// the classes, else the label, else `-` (also for a `.cls` member that is not
/// a decimal integer, with a warning).
#[derive(Debug, clap::Args)]
pub struct LsArgs {
    /// Options for a dataset in object storage.
    #[command(flatten)]
    pub storage: crate::args::storage::StorageArgs,
    /// The dataset directory.
    #[arg(value_name = "DATASET")]
    pub path: PathBuf,
    /// Print JSON lines: `{"index", "key", "shard", "label", "label_name", "members": [{"ext", "size"}]}`.
    #[arg(long)]
    pub json: bool,
    /// Do not read `.cls` members (the label column shows `-`).
    #[arg(long)]
    pub no_labels: bool,
}
