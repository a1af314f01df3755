//! `bale completions` and `bale man`: generated from the clap definitions.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::CommandFactory;

use crate::args::Cli;
use crate::args::completions::{CompletionsArgs, ManArgs};

/// Prints the completion script for the shell asked.
pub fn run(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "bale", &mut out);
    std::io::stdout().lock().write_all(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints `bale.1`, or writes it and a page per command into `--dir`.
pub fn run_man(args: ManArgs) -> anyhow::Result<ExitCode> {
    let cmd = Cli::command();
    match args.dir {
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut out)?;
            std::io::stdout().lock().write_all(&out)?;
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", bale_format::shown(&dir)))?;
            clap_mangen::generate_to(cmd, &dir).with_context(|| {
                format!("cannot write the pages into {}", bale_format::shown(&dir))
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
