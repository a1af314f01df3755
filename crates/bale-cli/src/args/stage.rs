//! Arguments of `bale stage`.

use std::path::PathBuf;

/// Arguments of `bale stage` (not implemented yet).
#[derive(Debug, clap::Args)]
pub struct StageArgs {
    /// The dataset or input path.
    pub path: PathBuf,
}

/// Arguments of `bale unstage` (not implemented yet).
#[derive(Debug, clap::Args)]
pub struct UnstageArgs {
    /// The staged directory to remove.
    pub dir: PathBuf,
}
