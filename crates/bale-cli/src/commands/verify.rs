//! `bale verify`.

use std::process::ExitCode;

use crate::args::verify::VerifyArgs;

/// Runs `bale verify`.
pub fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("bale verify is not implemented yet ({})", args.path.display())
}
