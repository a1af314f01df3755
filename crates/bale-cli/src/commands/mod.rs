//! One module per command: each takes its parsed arguments and calls the libraries.

use std::process::ExitCode;

use crate::args::{Cli, Command};

pub mod bench;
pub mod completions;
pub mod convert;
pub mod export_index;
pub mod get;
pub mod index;
pub mod ls;
pub mod merge;
pub mod pack;
pub mod stage;
pub mod stat;
pub mod verify;

/// The end of a run that did not commit: after Ctrl-C, `interrupted` and
/// what it left (exit 130); else the error, with what it left.
pub(crate) fn failed(f: bale_pack::Failed) -> anyhow::Result<ExitCode> {
    if f.interrupted() {
        eprintln!("error: interrupted: {}", f.left);
        return Ok(ExitCode::from(pack::EXIT_INTERRUPTED));
    }
    Err(f.into())
}

/// An error followed by lines of its own (a `hint:`, what is left): the
/// message reads as one, and the error stays the cause in the chain.
#[derive(Debug)]
pub(crate) struct Noted<E> {
    pub error: E,
    pub note: String,
}

impl<E: std::fmt::Display> std::fmt::Display for Noted<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\n{}", self.error, self.note)
    }
}

impl<E: std::error::Error + 'static> std::error::Error for Noted<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Prints on stderr what the object-storage layer tells of a long wait
/// (`--force` watching another run's lock), unless `quiet`.
pub(crate) fn notices(quiet: bool) {
    if !quiet {
        bale_storage::set_notice(|m| eprintln!("{}", crate::escape::message(m)));
    }
}

/// Runs the command the user asked for.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Pack(a) => pack::run(a),
        Command::Merge(a) => merge::run(a),
        Command::Convert(a) => convert::run(a),
        Command::Verify(a) => verify::run(a),
        Command::Stat(a) => stat::run(a),
        Command::Ls(a) => ls::run(a),
        Command::Get(a) => get::run(a),
        Command::Index(a) => index::run(a),
        Command::ExportIndex(a) => export_index::run(a),
        Command::Stage(a) => stage::run(a),
        Command::Unstage(a) => stage::run_unstage(a),
        Command::Bench(a) => bench::run(a),
        Command::Completions(a) => completions::run(a),
        Command::Man(a) => completions::run_man(a),
    }
}
