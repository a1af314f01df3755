//! Arguments of `bale stage` and `bale unstage`.

use std::path::PathBuf;

/// Copy a dataset to RAM-backed storage (tmpfs) and print the staged path.
///
/// The copy goes to `/dev/shm/bale/<name>-<hash>` unless `--to` says
/// otherwise; only its path is printed on stdout, so `DATA=$(bale stage ds)`
/// works. Free space, and available memory when the copy goes to RAM, must
/// exceed the bytes to copy by a margin of 5% + 64 MiB. Shards are copied in
/// parallel, checked against the manifest's checksums, and the manifest is
/// written last. A complete copy of the same manifest is checked (sizes and
/// indexes; shard bytes too with --verify) and reused; a half-finished or
/// damaged one is resumed. Another `bale stage` or `bale unstage` of the same
/// target makes this one fail at once, unless --wait.
#[derive(Debug, clap::Args)]
pub struct StageArgs {
    /// Options for a dataset in object storage.
    #[command(flatten)]
    pub storage: crate::args::storage::StorageArgs,
    /// The dataset directory to copy.
    #[arg(value_name = "DATASET")]
    pub path: PathBuf,
    /// Where to put the copy (default: /dev/shm/bale/<name>-<first 12 hex digits of the manifest's xxh3>; /dev/shm/bale-<uid>/... when another user has /dev/shm/bale).
    #[arg(long, value_name = "DIR")]
    pub to: Option<PathBuf>,
    /// Stage into a tmpfs of bale's own, in 2 MiB pages: warm random reads
    /// of 2 KB samples ran 1.14-1.2x faster than from plain /dev/shm. As
    /// root, bale mounts a tmpfs of the needed size at the target
    /// (`huge=within_size`, source name `bale-stage` in `mount`'s list),
    /// the default one under /dev/shm included, and `bale unstage` unmounts
    /// it, even one left empty by a killed run; otherwise it prints the
    /// commands to run.
    /// Nothing is mounted where the target's tmpfs has 2 MiB pages already,
    /// or where the kernel has none for tmpfs.
    #[arg(long)]
    pub mount: bool,
    /// Files copied at once (default: 4, or the number of cores if fewer).
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,
    /// When another bale stage of the same target is running, wait for it and
    /// reuse its copy (for every rank of a node running bale stage), instead
    /// of failing at once.
    #[arg(long)]
    pub wait: bool,
    /// When reusing a complete copy, also hash every staged shard (against
    /// the manifest's checksum, or member by member), not only sizes and
    /// indexes.
    #[arg(long)]
    pub verify: bool,
    /// Stage to RAM even when available memory (MemAvailable) is short of the
    /// copy plus the 5% + 64 MiB margin. A tmpfs copy larger than free RAM
    /// silently goes to swap, and reading it then runs at the swap device's
    /// speed.
    #[arg(long)]
    pub allow_swap: bool,
    /// No progress bar and no messages (errors are still printed).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Testing aid: pretend the target file system has BYTES free.
    #[arg(long, hide = true, value_name = "BYTES")]
    pub assume_free: Option<u64>,
    /// Testing aid: pretend the machine has BYTES of available memory, and
    /// apply the memory check even when the target is not RAM-backed.
    #[arg(long, hide = true, value_name = "BYTES")]
    pub assume_mem: Option<u64>,
    /// Testing aid: behave as when not running as root.
    #[arg(long, hide = true)]
    pub assume_not_root: bool,
}

/// Remove a staged copy made by `bale stage` (and unmount the tmpfs bale mounted).
///
/// Refuses any directory without bale's staging marker (`.bale-stage.json`),
/// and one holding files that bale did not put there unless `--force`. An
/// empty tmpfs that `bale stage --mount` mounted (source `bale-stage`), left
/// by a run killed before it wrote its marker, is unmounted too. The folder
/// is removed unless it was there before the first `bale stage --to` into
/// it: then it is emptied and left.
#[derive(Debug, clap::Args)]
pub struct UnstageArgs {
    /// The staged directory to remove.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Also delete files in the staging folder that bale did not write.
    #[arg(long)]
    pub force: bool,
    /// No messages (errors are still printed).
    #[arg(long, short = 'q')]
    pub quiet: bool,
}
