//! Arguments of `bale merge`.

use std::path::PathBuf;

/// Join the outputs of `bale pack --part I/N` into one dataset.
///
/// Every part 0..N must be given, each complete and packed with the same
/// options. Shards are renamed into OUT (no byte is copied) as
/// `shard-000000.tar`, ... in part order; one manifest is written last, and
/// the parts' manifests are removed.
///
/// Ctrl-C moves every file back to its part. A merge that was killed leaves
/// a journal of its moves in OUT (`.bale-merge-journal.json`): run the same
/// merge again, and it puts back (or finishes) what the killed one left
/// before it merges.
///
/// Parts in object storage (`s3://bucket/parts/p0 ...`) merge into a prefix
/// of the same bucket (`-o s3://bucket/ds`) by server-side copies: no shard
/// byte passes through this machine, and the parts are left whole.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// The part directories, or the parts' URLs (in any order).
    #[arg(value_name = "PART_DIR", required = true)]
    pub parts: Vec<PathBuf>,

    /// Output directory (created if missing; must be empty unless --force),
    /// or a prefix in the parts' bucket.
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,

    /// Copy shards that are on another filesystem than OUT (default: refuse).
    #[arg(long)]
    pub copy: bool,

    /// Write into a non-empty output directory.
    #[arg(long)]
    pub force: bool,

    /// Merge parts whose samples share keys (refused by default, naming the
    /// key and both shards).
    ///
    /// Parts packed from different inputs may repeat a key. Recorded in the
    /// manifest; `bale verify` then reports the shared keys as warnings, and
    /// a lookup by such a key is refused as ambiguous.
    #[arg(long)]
    pub allow_duplicate_keys: bool,

    /// Options for parts and output in object storage.
    #[command(flatten)]
    pub storage: super::storage::StorageArgs,

    #[command(flatten)]
    pub out: super::output::OutputFlags,
}
