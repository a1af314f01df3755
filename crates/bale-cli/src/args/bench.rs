//! Arguments of `bale bench`.

use std::path::PathBuf;

/// Shown after the options by `bale bench --help` (verbatim).
const EXAMPLES: &str = "\
Examples:
  bale bench imagenet/                        a plain tree: loose files
  bale bench ds --decode --target 2400        a dataset; can it feed 2,400 samples/s?
  bale bench imagenet/ --compare ds --compare /dev/shm/bale/ds-0123456789ab \\
      --plot bench.svg --plot bench.png       loose vs shards vs staged, side by side
  bale bench ds --json | jq '.sources[0].diagnosis'

The target is what the training step consumes: batch size / step time
(batch 256 at 0.1 s per step: --target 2560).";

/// Measure how fast samples can be read (and decoded) here, and say what bounds it.
///
/// Answers "why is my GPU at 30%?" for your data on your machine, before and
/// after packing. On a plain tree (loose files) or a bale dataset (shards),
/// measures samples/s and MiB/s for sequential and random order, with a warm
/// page cache and a cold one (pages evicted with posix_fadvise DONTNEED;
/// inode and dentry caches are not evicted), with 1 thread and with N; with
/// `--decode`, the image decode cost per sample. A dataset in object storage
/// (or a local index of tars in a bucket) has no cache to warm or evict
/// here: every pass reads from the store. Every byte counted is read
/// and checksummed (xxh3). Each figure is bounded by `--budget` seconds and
/// says how many samples it rests on, so a run takes about 12 budgets per
/// path (14 with `--decode`) whatever the dataset's size.
///
/// Then prints a one-line diagnosis naming the stage that bounds throughput
/// (file opens and seeks, disk bandwidth, decode CPU, read CPU, object
/// storage) and the bale
/// command that relieves it (pack, pack --resize or raw, stage); with
/// `--target`, whether the input pipeline keeps up and with how many loader
/// workers. The rules are in docs/bench.md.
///
/// `--json` prints one object, schema 1: `schema`, `budget_secs`, `threads`,
/// `seed`, `decode`, `target`, `elapsed_secs`, `sources` [{`path`, `kind`
/// ("tree" or "dataset"), `ram_backed`, `object_storage`, `samples`, `files`, `bytes`, `runs`
/// [{`order` ("sequential" or "random"), `cache` ("warm" or "cold"),
/// `threads`, `samples`, `bytes`, `secs`, `samples_per_sec`, `mb_per_sec`,
/// `open_secs`}], `decode` (null, or {`secs_per_sample`, `images`, `errors`,
/// `first_error`, `runs` [{`threads`, `samples`, `bytes`, `secs`,
/// `samples_per_sec`, `decode_secs`}]}), `diagnosis` {`bound`
/// ("opens_and_seeks", "disk_bandwidth", "decode_cpu", "read_cpu",
/// "object_storage", "unknown"), `remedy`, `storage_samples_per_sec`, `decode_samples_per_sec`,
/// `worker_samples_per_sec`, `pipeline_samples_per_sec`, `target` (null, or
/// {`samples_per_sec`, `keeps_up`, `workers`, `storage_limited`,
/// `exceeds_threads`}), `line`}}].
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub struct BenchArgs {
    /// Options for a dataset in object storage.
    #[command(flatten)]
    pub storage: crate::args::storage::StorageArgs,
    /// A plain directory of files, or a bale dataset (a directory with bale.json).
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// Also measure this tree or dataset (a packed or staged copy), side by side; repeatable.
    #[arg(long, value_name = "PATH")]
    pub compare: Vec<PathBuf>,
    /// Also measure the image decode cost per sample (jpg, png, webp, gif, bmp; .npy arrays).
    #[arg(long)]
    pub decode: bool,
    /// With --decode, also resize each decoded image as a loader would
    /// (`shorter:N`, `longer:N` or `fit:WxH`, Lanczos3; as `bale pack --resize`).
    #[arg(long, value_name = "SPEC", requires = "decode", value_parser = parse_resize)]
    pub resize: Option<bale_image::Resize>,
    /// Samples per second the training step consumes (batch size / step time).
    #[arg(long, value_name = "SAMPLES_PER_SEC", value_parser = positive_f64)]
    pub target: Option<f64>,
    /// N, the thread count of the multi-threaded figures [default: available parallelism].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    /// Seconds per measured pass.
    #[arg(long, value_name = "SECS", default_value_t = 2.0, value_parser = positive_f64)]
    pub budget: f64,
    /// Seed of the random order (a permutation of all samples).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print one JSON object on stdout (schema above) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Draw the comparison to FILE.svg or FILE.png; repeatable (one run, several files).
    /// An existing FILE is refused (checked before measuring) unless `--force`.
    #[arg(long, value_name = "FILE")]
    pub plot: Vec<PathBuf>,
    /// Replace existing `--plot` files (a symlink is replaced, not written through).
    #[arg(long)]
    pub force: bool,
    /// No progress messages on stderr.
    #[arg(short, long)]
    pub quiet: bool,
}

fn parse_resize(s: &str) -> Result<bale_image::Resize, String> {
    s.parse().map_err(|e: bale_image::ImageError| e.to_string())
}

fn positive_f64(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err("must be a positive number".into())
    }
}
