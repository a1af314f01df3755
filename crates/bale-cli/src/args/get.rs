//! Arguments of `bale get`.

use std::path::PathBuf;

/// Arguments of `bale get` (not implemented yet).
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// The dataset or input path.
    pub path: PathBuf,
}
