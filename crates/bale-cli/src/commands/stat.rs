//! `bale stat`.

use std::process::ExitCode;

use crate::args::stat::StatArgs;

/// Runs `bale stat`.
pub fn run(args: StatArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("bale stat is not implemented yet ({})", args.path.display())
}
