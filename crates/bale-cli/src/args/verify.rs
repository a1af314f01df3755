//! Arguments of `bale verify`.

use std::path::PathBuf;

/// Check a dataset: every shard, index and member checksum.
///
/// By default a full check: every member's checksum, the tar structure against
/// the index, the index against the manifest, every shard present and of the
/// recorded size, and no unknown shard in the directory. Problems are listed
/// one per line on stdout (`shard: key "K" member "EXT" at offset N: what`);
/// the exit status is 0 when the dataset is clean (warnings, such as leftover
/// temporary files, do not count), 1 when anything is wrong, and 2 when the
/// check could not run (no such directory, not a bale dataset).
///
/// `--json` prints one object: `ok`, `dataset`, `level` ("full" or "quick"),
/// `decode`, `shards_checked`, `samples_checked`, `members_checked`,
/// `bytes_read`, `errors`, `warnings`, and `problems` [{`shard`, `key`,
/// `member`, `offset`, `what`, `severity` ("error" or "warning")}], where
/// `key`, `member` and `offset` are null when they do not apply.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The dataset directory.
    #[arg(value_name = "DATASET")]
    pub path: PathBuf,
    /// Quick check: sizes, tar headers and index checksums only (no member checksums).
    #[arg(long, conflicts_with = "decode")]
    pub quick: bool,
    /// Also decode every image member (jpg, jpeg, png, webp, gif, bmp).
    #[arg(long)]
    pub decode: bool,
    /// Print the result as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Shards checked at once (default: one per core).
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,
    /// No progress bar and no summary line.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}
