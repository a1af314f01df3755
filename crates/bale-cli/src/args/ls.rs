//! Arguments of `bale ls`.

use std::path::PathBuf;

/// Arguments of `bale ls` (not implemented yet).
#[derive(Debug, clap::Args)]
pub struct LsArgs {
    /// The dataset or input path.
    pub path: PathBuf,
}
