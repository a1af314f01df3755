//! Arguments of `bale pack`.

use std::path::PathBuf;

/// Arguments of `bale pack` (not implemented yet).
#[derive(Debug, clap::Args)]
pub struct PackArgs {
    /// The dataset or input path.
    pub path: PathBuf,
}
