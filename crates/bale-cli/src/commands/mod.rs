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

/// A local output that holds a dataset before a run with `--force`: a run
/// that fails after `--force` removed it says so, rather than only that no
/// new one was written ([`OldDataset::note`]).
pub(crate) struct OldDataset(Option<std::path::PathBuf>);

impl OldDataset {
    pub(crate) fn before(out: &std::path::Path, force: bool) -> Self {
        let manifest = out.join(bale_format::MANIFEST_NAME);
        Self((force && !bale_pack::is_remote(out) && manifest.is_file()).then_some(manifest))
    }

    /// A line to add to a failure's message when the old dataset is gone.
    pub(crate) fn note(&self) -> String {
        match &self.0 {
            Some(m) if !m.exists() => format!(
                "\nthe old dataset in {} had been removed by --force before the failure",
                bale_format::shown(m.parent().unwrap_or(m))
            ),
            _ => String::new(),
        }
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
    }
}
