//! One module per command: each takes its parsed arguments and calls the libraries.

use std::process::ExitCode;

use crate::args::{Cli, Command};

pub mod bench;
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
    }
}
