//! `bale get`.

use std::process::ExitCode;

use crate::args::get::GetArgs;

/// Runs `bale get`.
pub fn run(args: GetArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("bale get is not implemented yet ({})", args.path.display())
}
