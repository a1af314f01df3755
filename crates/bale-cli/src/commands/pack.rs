//! `bale pack`.

use std::process::ExitCode;

use crate::args::pack::PackArgs;

/// Runs `bale pack`.
pub fn run(args: PackArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("bale pack is not implemented yet ({})", args.path.display())
}
