//! Arguments of `bale merge`.

use std::path::PathBuf;

/// Arguments of `bale merge` (not implemented yet).
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// The dataset or input path.
    pub path: PathBuf,
}
