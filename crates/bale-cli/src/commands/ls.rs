//! `bale ls`.

use std::process::ExitCode;

use crate::args::ls::LsArgs;

/// Runs `bale ls`.
pub fn run(args: LsArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("bale ls is not implemented yet ({})", args.path.display())
}
