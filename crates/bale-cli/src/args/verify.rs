//! Arguments of `bale verify`.

use std::path::PathBuf;

/// Shown after the options by `bale verify --help` (verbatim: clap reflows doc
/// comments into paragraphs, which would join these lines).
const EXAMPLES: &str = "\
Examples:
  bale verify ds                 full check; exit status 1 if anything is wrong
  bale verify ds --quick         headers and sizes only: fast, reads little data
  bale verify ds --decode        also decode every image member
  bale verify ds --json -q | jq '.problems[] | select(.severity == \"error\")'
  bale index 'shards/*.tar' -o ds && bale verify ds
                                 an adopted dataset: structure only, with one
                                 warning, unless indexed with --checksum";

/// Check a dataset: every shard, index and member checksum.
///
/// By default a full check: every shard present and of the recorded size, no
/// unknown shard in the directory, every index against the manifest, then one
/// sequential read of each shard comparing every tar member (name, offset,
/// size) with the index and every member's bytes with its checksum. `--quick`
/// reads only the tar headers at the offsets the indexes give, and the `.cls`
/// members (a label no reader parses is reported at both levels). Problems are
/// listed one per line on stdout (`shard: key "K" member "EXT" at offset N:
/// what`, warnings prefixed `warning: `), a summary goes to stderr.
///
/// Exit status: 0 when the dataset is clean (warnings do not count), 1 when
/// anything is wrong, 2 when the check could not run (no such directory, not
/// a bale dataset).
///
/// Datasets made by `bale index` (existing tars adopted in place): without
/// `--checksum` their indexes record no member checksums. The full check then
/// compares the structure only (names, offsets, sizes) and says so with one
/// warning, `bale.json: member checksums are absent: ...`, and `"checksums":
/// "absent"` in the JSON. Tar names are compared as `bale index` reads them: a
/// leading `./` is removed, and when the manifest records `--rename-split`,
/// the index key `K~2` matches tar members named `K.EXT`. Entries that belong
/// to no sample (directories, links, files without an extension) are stepped
/// over, also between two members of one sample.
///
/// `--json` prints one object: `ok`, `dataset`, `level` ("full" or "quick"),
/// `decode`, `checksums` ("present", "absent", "partial", or null when no
/// index could be read), `shards_checked`, `samples_checked`,
/// `members_checked`, `bytes_read`, `errors`, `warnings`, and `problems`
/// [{`shard`, `key`, `member`, `offset`, `what`, `severity` ("error" or
/// "warning")}], where `key`, `member` and `offset` are null when they do not
/// apply.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub struct VerifyArgs {
    /// Options for a dataset in object storage.
    #[command(flatten)]
    pub storage: crate::args::storage::StorageArgs,
    /// The dataset directory.
    #[arg(value_name = "DATASET")]
    pub path: PathBuf,
    /// Quick check: sizes, tar headers, index checksums and `.cls` labels only
    /// (no member checksums).
    #[arg(long, conflicts_with = "decode")]
    pub quick: bool,
    /// Also decode every image member (jpg, jpeg, png, webp, gif, bmp, tif, tiff).
    #[arg(long)]
    pub decode: bool,
    /// With --decode: refuse images of more pixels (width x height) than N,
    /// as the loader's max_pixels does (the default is Pillow's bomb limit).
    #[arg(long, value_name = "N", requires = "decode", default_value_t = bale_image::DEFAULT_MAX_PIXELS, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_pixels: u64,
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
