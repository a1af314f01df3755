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

/// A local output that holds a dataset before a run with `--force`: a run
/// that fails after `--force` removed it says so, rather than only that no
/// new one was written ([`OldDataset::note`]).
pub(crate) struct OldDataset(Option<std::path::PathBuf>);

impl OldDataset {
    pub(crate) fn before(out: &std::path::Path, force: bool) -> Self {
        let manifest = out.join(bale_format::MANIFEST_NAME);
        Self((force && !bale_pack::is_remote(out) && manifest.is_file()).then_some(manifest))
    }

    /// What a failed or interrupted local run left in `out`, for its
    /// message: no dataset of its own (`removed` says what it cleaned up),
    /// and whether the old dataset that `--force` would replace is there
    /// as it was or had been removed.
    pub(crate) fn left(&self, out: &std::path::Path, removed: &str) -> String {
        let out = bale_format::shown(out);
        match &self.0 {
            Some(m) if m.exists() => format!(
                "no dataset was written to {out} by this run ({removed}); the old dataset there is as it was"
            ),
            Some(_) => format!(
                "no dataset was written to {out} (no manifest; {removed})\nthe old dataset in {out} had been removed by --force before the failure"
            ),
            None => format!("no dataset was written to {out} (no manifest; {removed})"),
        }
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
