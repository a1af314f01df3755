//! Command-line definitions (clap). One file per command; `commands/` runs them.

use clap::{Parser, Subcommand};

pub mod get;
pub mod index;
pub mod ls;
pub mod merge;
pub mod pack;
pub mod stage;
pub mod stat;
pub mod verify;

/// bale packs many small training files into a few large, indexed tar shards
/// and reads them back fast.
///
/// Typical use: `bale pack DIR -o DATASET` once, `bale verify DATASET`, then
/// read DATASET from your data loader (Rust: bale-reader; Python: `import bale`).
#[derive(Debug, Parser)]
#[command(name = "bale", version, about, long_about, propagate_version = true)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Pack a tree of files into tar shards with an index and a manifest.
    Pack(pack::PackArgs),
    /// Join the outputs of `bale pack --part I/N` into one dataset.
    Merge(merge::MergeArgs),
    /// Check a dataset: every shard, index and member checksum.
    Verify(verify::VerifyArgs),
    /// Summarize a dataset or a plain file tree.
    Stat(stat::StatArgs),
    /// List the samples of a dataset.
    Ls(ls::LsArgs),
    /// Write a sample's members to stdout or a directory.
    Get(get::GetArgs),
    /// Index existing WebDataset tars in place (no repacking): indexes and a manifest that point at them.
    Index(index::IndexArgs),
    /// Copy a dataset to RAM-backed storage (tmpfs) for training.
    Stage(stage::StageArgs),
    /// Remove a staged copy made by `bale stage`.
    Unstage(stage::UnstageArgs),
}
