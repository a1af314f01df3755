//! Command-line definitions (clap). One file per command; `commands/` runs them.

use clap::{Parser, Subcommand};

pub mod bench;
pub mod completions;
pub mod convert;
pub mod export_index;
pub mod get;
pub mod index;
pub mod ls;
pub mod merge;
pub mod output;
pub mod pack;
pub mod stage;
pub mod stat;
pub mod storage;
pub mod verify;

/// Shown after the commands and options by `bale --help` and in the manual
/// page (verbatim: clap reflows doc comments into paragraphs).
pub const EXIT_STATUS: &str = "\
Exit status:
  0    success
  1    problems found (bale verify: the dataset is damaged)
  2    an error (bad input, I/O, a dataset that cannot be read), or a usage
       error: usage errors print clap's message, then the usage line and
       \"For more information, try '--help'.\"
  130  interrupted by Ctrl-C (a second Ctrl-C exits at once)";

/// bale packs many small training files into a few large, indexed tar shards
/// and reads them back fast.
///
/// Typical use: `bale pack DIR -o DATASET` once, `bale verify DATASET`, then
/// read DATASET from your data loader (Rust: bale-reader; Python: `import bale`).
#[derive(Debug, Parser)]
#[command(name = "bale", version, about, long_about, propagate_version = true)]
#[command(after_help = EXIT_STATUS)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
///
/// The variants carry no doc comments on purpose: clap would take a variant's
/// doc comment as the command's `about` and `long_about`, hiding the Args
/// struct's. Each command's help is its Args struct's doc comment: the first
/// paragraph is the one-line summary `bale --help` lists, the whole text is
/// what `bale <cmd> --help` prints. clap joins the lines of each paragraph,
/// so examples that must keep their lines go in `#[command(after_long_help =
/// ...)]` (as in `verify.rs`).
#[derive(Debug, Subcommand)]
pub enum Command {
    Pack(pack::PackArgs),
    Merge(merge::MergeArgs),
    Convert(convert::ConvertArgs),
    Verify(verify::VerifyArgs),
    Stat(stat::StatArgs),
    Ls(ls::LsArgs),
    Get(get::GetArgs),
    Index(index::IndexArgs),
    ExportIndex(export_index::ExportIndexArgs),
    Stage(stage::StageArgs),
    Unstage(stage::UnstageArgs),
    Bench(bench::BenchArgs),
    Completions(completions::CompletionsArgs),
    Man(completions::ManArgs),
}
