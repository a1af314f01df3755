//! Arguments of `bale stat`.

use std::path::PathBuf;

/// Arguments of `bale stat` (not implemented yet).
#[derive(Debug, clap::Args)]
pub struct StatArgs {
    /// The dataset or input path.
    pub path: PathBuf,
}
