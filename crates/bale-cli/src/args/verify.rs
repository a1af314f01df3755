//! Arguments of `bale verify`.

use std::path::PathBuf;

/// Arguments of `bale verify` (not implemented yet).
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The dataset or input path.
    pub path: PathBuf,
}
