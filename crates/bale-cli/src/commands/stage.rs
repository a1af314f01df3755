//! `bale stage`.

use std::process::ExitCode;

use crate::args::stage::StageArgs;

/// Runs `bale stage`.
pub fn run(args: StageArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("bale stage is not implemented yet ({})", args.path.display())
}

/// Runs `bale unstage`.
pub fn run_unstage(args: crate::args::stage::UnstageArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("bale unstage is not implemented yet ({})", args.dir.display())
}
