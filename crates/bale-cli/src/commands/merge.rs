//! `bale merge`.

use std::process::ExitCode;

use crate::args::merge::MergeArgs;

/// Runs `bale merge`.
pub fn run(args: MergeArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("bale merge is not implemented yet ({})", args.path.display())
}
