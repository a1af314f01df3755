//! The diagnosis: which stage bounds the input pipeline, what relieves it, and
//! whether it keeps up with a training step. A pure function of [`Metrics`],
//! so every rule is unit-tested on synthetic timings.
//!
//! The rules, in order (docs/bench.md explains them to users):
//!
//! 1. Nothing measured (a random cold figure with zero samples or zero time):
//!    [`Bound::Unknown`].
//! 2. With `--decode`: when `threads / decode cost` (what the cores decode per
//!    second) is below the random cold rate at N threads (what storage
//!    delivers), decoding bounds the pipeline: [`Bound::DecodeCpu`]; `bale
//!    pack --resize shorter:N` (fewer pixels) or `--image-format raw` (no
//!    decode) relieve it.
//! 3. When random cold reads reach less than [`SEEK_RATIO`] of the sequential
//!    cold MB/s, the per-sample open and seek cost bounds it:
//!    [`Bound::OpensAndSeeks`]; `bale pack` for a tree, `bale stage` (or
//!    shard-shuffled reading) for a dataset.
//! 4. When cold reads are as fast as warm ones (at least [`CACHE_RATIO`] of
//!    the warm rate), storage is not the limit (the data is in RAM, or on a
//!    device as fast as the page cache): for a tree the per-file system calls
//!    bound it ([`Bound::OpensAndSeeks`], `bale pack`), for a dataset the CPU
//!    that copies and checksums the bytes ([`Bound::ReadCpu`]: more loader workers).
//! 5. Otherwise the device's bandwidth bounds it: [`Bound::DiskBandwidth`];
//!    `bale stage` (RAM or local NVMe) or `bale pack --resize shorter:N` (fewer bytes).
//!
//! A dataset whose shards are in object storage skips rules 3-5: every pass
//! there, warm or cold, is requests to the store (nothing to evict, nothing
//! cached between passes), so the store bounds it ([`Bound::ObjectStorage`]):
//! `bale stage` copies it to RAM or local NVMe; a local index naming tars in
//! a bucket is converted first (`bale convert`, which stage asks for).
//!
//! The loader's rate with N workers is `min(storage, N * per-worker rate)`,
//! where storage is the random cold rate at N threads (the first epoch, or
//! any epoch of a dataset larger than RAM) and a worker's rate is
//! `1 / (1 / random cold rate at 1 thread + decode cost)`. The workers a
//! target needs: `ceil(target / per-worker rate)`.

use serde::Serialize;

/// Below this ratio of random to sequential cold MB/s, opens and seeks bound the reads.
pub const SEEK_RATIO: f64 = 0.5;
/// At or above this ratio of cold to warm random samples/s, eviction made no
/// difference: storage is not the limit.
pub const CACHE_RATIO: f64 = 0.8;

/// One figure: samples and bytes read in some seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rate {
    /// Samples read.
    pub samples: u64,
    /// Bytes read (and checksummed).
    pub bytes: u64,
    /// Wall-clock seconds.
    pub secs: f64,
}

impl Rate {
    /// Samples per second; 0 when nothing was measured.
    pub fn samples_per_sec(&self) -> f64 {
        if self.samples == 0 || self.secs <= 0.0 {
            0.0
        } else {
            self.samples as f64 / self.secs
        }
    }

    /// Mebibytes (2^20 bytes) per second, as the text output shows rates
    /// beside sizes in KiB, MiB and GiB; 0 when nothing was measured.
    pub fn mib_per_sec(&self) -> f64 {
        self.mb_per_sec() * 1e6 / (1024.0 * 1024.0)
    }

    /// Megabytes (10^6 bytes) per second (the JSON's `mb_per_sec`); 0 when
    /// nothing was measured.
    pub fn mb_per_sec(&self) -> f64 {
        if self.samples == 0 || self.secs <= 0.0 {
            0.0
        } else {
            self.bytes as f64 / 1e6 / self.secs
        }
    }

    fn measured(&self) -> bool {
        self.samples > 0 && self.secs > 0.0
    }
}

/// What was measured on one source: the input of [`diagnose`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics {
    /// A plain tree of files (true) or a bale dataset (false).
    pub tree: bool,
    /// Where a dataset's shards are read from.
    pub shards: Shards,
    /// N, the thread count of the multi-threaded figures.
    pub threads: usize,
    /// Sequential, cold cache, N threads.
    pub seq_cold_n: Rate,
    /// Random, warm cache, N threads.
    pub rand_warm_n: Rate,
    /// Random, cold cache, 1 thread.
    pub rand_cold_1: Rate,
    /// Random, cold cache, N threads.
    pub rand_cold_n: Rate,
    /// Decode CPU seconds per sample (with `--decode`).
    pub decode_secs_per_sample: Option<f64>,
    /// Samples per second the training step consumes (`--target`).
    pub target: Option<f64>,
}

/// Where a source's bytes are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Shards {
    /// Local files (a tree, or a dataset on a file system).
    #[default]
    Local,
    /// A dataset in object storage (`bale bench s3://...`).
    Bucket,
    /// A local dataset directory whose manifest names tars in object
    /// storage by URL (`bale index URL... -o DIR`).
    LocalIndexOfBucket,
}

/// The stage that bounds throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// Per-sample file opens and seeks (small random reads).
    OpensAndSeeks,
    /// The storage device's bandwidth.
    DiskBandwidth,
    /// Image decoding on the CPU.
    DecodeCpu,
    /// Copying and checksumming bytes already in memory.
    ReadCpu,
    /// Requests to object storage (the shards are in a bucket).
    ObjectStorage,
    /// Nothing was measured.
    Unknown,
}

impl Bound {
    /// How the report names the stage.
    pub fn describe(self) -> &'static str {
        match self {
            Bound::OpensAndSeeks => "file opens and seeks",
            Bound::DiskBandwidth => "disk bandwidth",
            Bound::DecodeCpu => "decode CPU",
            Bound::ReadCpu => "read CPU (copying and checksumming bytes in memory)",
            Bound::ObjectStorage => "object storage (every read is a request to the store)",
            Bound::Unknown => "unknown (nothing was measured)",
        }
    }
}

/// Whether the pipeline keeps up with `--target`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetVerdict {
    /// The target, samples per second.
    pub samples_per_sec: f64,
    /// Whether N loader workers reach it.
    pub keeps_up: bool,
    /// Loader workers needed: `ceil(target / per-worker rate)`; null when nothing was measured.
    pub workers: Option<u64>,
    /// Storage at N threads (random, cold) is below the target: no worker count reaches it.
    pub storage_limited: bool,
    /// More workers are needed than the N threads measured (cores).
    pub exceeds_threads: bool,
}

/// The diagnosis of one source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// The bounding stage.
    pub bound: Bound,
    /// The bale command that relieves it (empty when none applies).
    pub remedy: String,
    /// Random cold samples/s at N threads: what storage delivers.
    pub storage_samples_per_sec: f64,
    /// `threads / decode cost`: what the cores decode per second (with `--decode`).
    pub decode_samples_per_sec: Option<f64>,
    /// One loader worker: `1 / (1 / random cold rate at 1 thread + decode cost)`.
    pub worker_samples_per_sec: f64,
    /// N workers: `min(storage, N * worker rate)`.
    pub pipeline_samples_per_sec: f64,
    /// With `--target`.
    pub target: Option<TargetVerdict>,
    /// The one-line diagnosis the report prints.
    pub line: String,
}

/// Diagnoses one source from its figures (rules in the module docs).
pub fn diagnose(m: &Metrics) -> Diagnosis {
    let threads = m.threads.max(1) as f64;
    let storage = m.rand_cold_n.samples_per_sec();
    let decode_cost = m
        .decode_secs_per_sample
        .filter(|c| c.is_finite() && *c > 0.0);
    let decode_rate = decode_cost.map(|c| threads / c);
    let r1 = m.rand_cold_1.samples_per_sec();
    let worker = if r1 > 0.0 {
        1.0 / (1.0 / r1 + decode_cost.unwrap_or(0.0))
    } else {
        0.0
    };
    let pipeline = storage.min(threads * worker);
    let measured = m.rand_cold_n.measured() && m.rand_cold_1.measured();

    let (bound, remedy, why) = if !measured {
        (
            Bound::Unknown,
            String::new(),
            "no sample was read".to_owned(),
        )
    } else if let Some(d) = decode_rate.filter(|d| *d < storage) {
        (
            Bound::DecodeCpu,
            "bale pack --resize shorter:256 (fewer pixels to decode; N a little above the \
             training crop) or --image-format raw (no decode)"
                .to_owned(),
            format!(
                "{} cores decode {} samples/s, storage delivers {}",
                m.threads,
                fmt_rate(d),
                fmt_rate(storage)
            ),
        )
    } else if m.shards != Shards::Local {
        let remedy = if m.shards == Shards::Bucket {
            "bale stage URL (copy the dataset to RAM or local NVMe once per node)"
        } else {
            "bale convert DIR -o OUT (shards of its own on local disk), then bale stage OUT"
        };
        (
            Bound::ObjectStorage,
            remedy.to_owned(),
            format!(
                "random reads from the store reach {} samples/s ({:.0} MiB/s), sequential {:.0} MiB/s",
                fmt_rate(storage),
                m.rand_cold_n.mib_per_sec(),
                m.seq_cold_n.mib_per_sec()
            ),
        )
    } else if m.seq_cold_n.measured()
        && m.rand_cold_n.mb_per_sec() < SEEK_RATIO * m.seq_cold_n.mb_per_sec()
    {
        let remedy = if m.tree {
            "bale pack (one positioned read per sample in a few large files)"
        } else {
            "bale stage (copy the shards to RAM) or read shard-shuffled (sequential within shards)"
        };
        (
            Bound::OpensAndSeeks,
            remedy.to_owned(),
            format!(
                "random cold reads reach {:.0} MiB/s, sequential {:.0} MiB/s",
                m.rand_cold_n.mib_per_sec(),
                m.seq_cold_n.mib_per_sec()
            ),
        )
    } else if m.rand_warm_n.measured() && storage >= CACHE_RATIO * m.rand_warm_n.samples_per_sec() {
        let why = format!(
            "cold reads ({} samples/s) are as fast as warm ones ({}): storage is not the limit",
            fmt_rate(storage),
            fmt_rate(m.rand_warm_n.samples_per_sec())
        );
        if m.tree {
            (
                Bound::OpensAndSeeks,
                "bale pack (no open/close per file)".to_owned(),
                why,
            )
        } else {
            (
                Bound::ReadCpu,
                "more loader workers (nothing to pack or stage)".to_owned(),
                why,
            )
        }
    } else {
        (
            Bound::DiskBandwidth,
            "bale stage (copy to RAM or local NVMe) or bale pack --resize shorter:256 (fewer bytes)"
                .to_owned(),
            format!(
                "random cold reads reach {:.0} MiB/s against {:.0} MiB/s warm",
                m.rand_cold_n.mib_per_sec(),
                m.rand_warm_n.mib_per_sec()
            ),
        )
    };

    let target = m.target.map(|t| {
        let workers = (worker > 0.0).then(|| (t / worker).ceil().max(1.0) as u64);
        TargetVerdict {
            samples_per_sec: t,
            keeps_up: measured && pipeline >= t,
            workers,
            storage_limited: measured && storage < t,
            exceeds_threads: workers.is_some_and(|w| w > m.threads.max(1) as u64),
        }
    });

    let mut line = format!("bound by {}: {why}", bound.describe());
    if !remedy.is_empty() {
        line.push_str(&format!("; relieve it with {remedy}"));
    }
    if let Some(v) = &target {
        line.push_str(&format!(
            ". Target {} samples/s: ",
            fmt_rate(v.samples_per_sec)
        ));
        line.push_str(&target_text(v, m.threads, pipeline, storage));
    }

    Diagnosis {
        bound,
        remedy,
        storage_samples_per_sec: storage,
        decode_samples_per_sec: decode_rate,
        worker_samples_per_sec: worker,
        pipeline_samples_per_sec: pipeline,
        target,
        line,
    }
}

fn target_text(v: &TargetVerdict, threads: usize, pipeline: f64, storage: f64) -> String {
    let Some(w) = v.workers else {
        return "unknown (nothing was measured)".to_owned();
    };
    let plural = if w == 1 { "" } else { "s" };
    if v.storage_limited {
        return format!(
            "not reachable: storage delivers {} samples/s with {threads} threads, at any worker count",
            fmt_rate(storage)
        );
    }
    if v.keeps_up {
        format!("kept up with {w} loader worker{plural}")
    } else if v.exceeds_threads {
        format!(
            "needs {w} loader worker{plural}, more than the {threads} threads measured ({} samples/s with {threads})",
            fmt_rate(pipeline)
        )
    } else {
        format!("needs {w} loader worker{plural}")
    }
}

/// A rate with thousands separators and no decimals above 100.
pub fn fmt_rate(r: f64) -> String {
    if !r.is_finite() {
        return "-".to_owned();
    }
    if r < 100.0 {
        return format!("{r:.1}");
    }
    fmt_count(r.round() as u64)
}

/// A count with thousands separators.
pub fn fmt_count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rate of `sps` samples/s of `size` bytes each, measured over 2 s.
    fn rate(sps: f64, size: u64) -> Rate {
        let samples = (sps * 2.0).round() as u64;
        Rate {
            samples,
            bytes: samples * size,
            secs: 2.0,
        }
    }

    /// A tree on a disk: sequential 1000 MB/s, random cold N at `rand` samples/s of 100 kB.
    fn metrics(tree: bool, seq: f64, warm: f64, cold1: f64, coldn: f64) -> Metrics {
        Metrics {
            tree,
            shards: Shards::Local,
            threads: 8,
            seq_cold_n: rate(seq, 100_000),
            rand_warm_n: rate(warm, 100_000),
            rand_cold_1: rate(cold1, 100_000),
            rand_cold_n: rate(coldn, 100_000),
            decode_secs_per_sample: None,
            target: None,
        }
    }

    #[test]
    fn slow_random_reads_of_a_tree_are_opens_and_seeks_and_pack_relieves_them() {
        // Sequential 10,000 samples/s (1000 MB/s), random cold 2,000 (200 MB/s,
        // 191 MiB/s).
        let d = diagnose(&metrics(true, 10_000.0, 40_000.0, 400.0, 2_000.0));
        assert_eq!(d.bound, Bound::OpensAndSeeks);
        assert!(d.remedy.starts_with("bale pack"), "{}", d.remedy);
        assert!(d.line.contains("file opens and seeks"), "{}", d.line);
        assert!(d.line.contains("191 MiB/s"), "{}", d.line);
        // On a dataset the same figures point at stage instead.
        let d = diagnose(&metrics(false, 10_000.0, 40_000.0, 400.0, 2_000.0));
        assert_eq!(d.bound, Bound::OpensAndSeeks);
        assert!(d.remedy.starts_with("bale stage"), "{}", d.remedy);
    }

    #[test]
    fn random_as_fast_as_sequential_but_slower_than_warm_is_disk_bandwidth() {
        let d = diagnose(&metrics(false, 5_000.0, 50_000.0, 1_000.0, 4_000.0));
        assert_eq!(d.bound, Bound::DiskBandwidth);
        assert!(d.remedy.contains("bale stage"), "{}", d.remedy);
        assert_resize_parses(&d.remedy);
    }

    /// The `--resize` rule a remedy recommends is one `bale pack` accepts.
    fn assert_resize_parses(remedy: &str) {
        let rule = remedy
            .split_whitespace()
            .skip_while(|w| *w != "--resize")
            .nth(1)
            .unwrap_or_else(|| panic!("no --resize RULE in {remedy:?}"));
        let parsed = <crate::args::Cli as clap::Parser>::try_parse_from([
            "bale", "pack", "in", "-o", "out", "--resize", rule,
        ]);
        assert!(parsed.is_ok(), "{remedy:?}: {}", parsed.unwrap_err());
    }

    #[test]
    fn cold_as_fast_as_warm_is_read_cpu_for_a_dataset_and_file_opens_for_a_tree() {
        let d = diagnose(&metrics(false, 50_000.0, 50_000.0, 9_000.0, 45_000.0));
        assert_eq!(d.bound, Bound::ReadCpu);
        let d = diagnose(&metrics(true, 50_000.0, 50_000.0, 9_000.0, 45_000.0));
        assert_eq!(d.bound, Bound::OpensAndSeeks);
        assert!(d.remedy.starts_with("bale pack"));
        // Just under the cache ratio: storage bound again.
        let d = diagnose(&metrics(false, 50_000.0, 50_000.0, 9_000.0, 39_000.0));
        assert_eq!(d.bound, Bound::DiskBandwidth);
    }

    #[test]
    fn shards_in_a_bucket_are_bound_by_the_store_whatever_warm_and_cold_say() {
        // Figures that would read as "storage is not the limit" (cold as
        // fast as warm) and as opens and seeks (random far below
        // sequential): from a bucket neither pass was cached, so the store
        // is what bounds the reads.
        for figures in [
            (50_000.0, 50_000.0, 9_000.0, 45_000.0),
            (10_000.0, 40_000.0, 400.0, 2_000.0),
        ] {
            let mut m = metrics(false, figures.0, figures.1, figures.2, figures.3);
            m.shards = Shards::Bucket;
            let d = diagnose(&m);
            assert_eq!(d.bound, Bound::ObjectStorage);
            assert!(d.remedy.starts_with("bale stage URL"), "{}", d.remedy);
            assert!(d.line.contains("object storage"), "{}", d.line);
            // A local index of tars in a bucket cannot be staged as it is.
            m.shards = Shards::LocalIndexOfBucket;
            let d = diagnose(&m);
            assert_eq!(d.bound, Bound::ObjectStorage);
            assert!(
                d.remedy.starts_with("bale convert DIR -o OUT"),
                "{}",
                d.remedy
            );
        }
        // Decoding slower than the store still bounds the pipeline first.
        let mut m = metrics(false, 10_000.0, 40_000.0, 1_000.0, 8_000.0);
        m.shards = Shards::Bucket;
        m.decode_secs_per_sample = Some(0.005);
        assert_eq!(diagnose(&m).bound, Bound::DecodeCpu);
    }

    #[test]
    fn slow_decode_bounds_the_pipeline_and_resize_or_raw_relieves_it() {
        let mut m = metrics(false, 10_000.0, 40_000.0, 1_000.0, 8_000.0);
        // 5 ms per sample: 8 cores decode 1,600 samples/s < 8,000 from storage.
        m.decode_secs_per_sample = Some(0.005);
        let d = diagnose(&m);
        assert_eq!(d.bound, Bound::DecodeCpu);
        assert!(d.remedy.contains("raw"), "{}", d.remedy);
        assert_resize_parses(&d.remedy);
        assert!((d.decode_samples_per_sec.unwrap() - 1_600.0).abs() < 1e-6);
        // One worker: 1 / (1/1000 + 0.005) = 166.7/s; 8 workers: 1,333/s.
        assert!((d.worker_samples_per_sec - 1000.0 / 6.0).abs() < 1e-6);
        assert!((d.pipeline_samples_per_sec - 8000.0 / 6.0).abs() < 1e-6);
        // Fast decode (0.1 ms): 80,000/s, storage bounds.
        m.decode_secs_per_sample = Some(0.0001);
        assert_ne!(diagnose(&m).bound, Bound::DecodeCpu);
    }

    #[test]
    fn target_met_gives_the_workers_needed() {
        let mut m = metrics(false, 10_000.0, 40_000.0, 1_000.0, 8_000.0);
        m.target = Some(2_500.0);
        let d = diagnose(&m);
        let t = d.target.clone().unwrap();
        // 1,000 samples/s per worker: 3 workers for 2,500.
        assert_eq!(t.workers, Some(3));
        assert!(t.keeps_up && !t.storage_limited && !t.exceeds_threads);
        assert!(
            d.line.contains("kept up with 3 loader workers"),
            "{}",
            d.line
        );
        // Exactly on a multiple: no extra worker.
        m.target = Some(3_000.0);
        assert_eq!(diagnose(&m).target.unwrap().workers, Some(3));
    }

    #[test]
    fn target_beyond_storage_is_unreachable_at_any_worker_count() {
        let mut m = metrics(true, 10_000.0, 40_000.0, 400.0, 2_000.0);
        m.target = Some(5_000.0);
        let d = diagnose(&m);
        let t = d.target.clone().unwrap();
        assert!(!t.keeps_up && t.storage_limited);
        assert_eq!(t.workers, Some(13)); // ceil(5000 / 400)
        assert!(d.line.contains("not reachable"), "{}", d.line);
    }

    #[test]
    fn target_needing_more_workers_than_threads_says_so() {
        let mut m = metrics(false, 10_000.0, 40_000.0, 500.0, 8_000.0);
        m.decode_secs_per_sample = Some(0.001); // 8,000/s on 8 cores: not the bound
        m.target = Some(6_000.0);
        let d = diagnose(&m);
        let t = d.target.clone().unwrap();
        // Worker: 1 / (0.002 + 0.001) = 333/s; 18 workers; 8 reach 2,667/s.
        assert_eq!(t.workers, Some(18));
        assert!(!t.keeps_up && !t.storage_limited && t.exceeds_threads);
        assert!(
            d.line.contains("needs 18 loader workers, more than the 8"),
            "{}",
            d.line
        );
    }

    #[test]
    fn zero_samples_is_unknown_not_a_division_by_zero() {
        let mut m = Metrics {
            threads: 4,
            target: Some(100.0),
            ..Metrics::default()
        };
        let d = diagnose(&m);
        assert_eq!(d.bound, Bound::Unknown);
        assert_eq!(d.pipeline_samples_per_sec, 0.0);
        let t = d.target.unwrap();
        assert_eq!(t.workers, None);
        assert!(!t.keeps_up);
        assert!(d.line.contains("nothing was measured"), "{}", d.line);
        // Samples but zero seconds (a clock that did not move) is not a rate either.
        m.rand_cold_n = Rate {
            samples: 5,
            bytes: 50,
            secs: 0.0,
        };
        m.rand_cold_1 = m.rand_cold_n;
        assert_eq!(diagnose(&m).bound, Bound::Unknown);
        // A zero or NaN decode cost is ignored rather than dividing by it.
        let mut m = metrics(false, 10_000.0, 40_000.0, 1_000.0, 8_000.0);
        m.decode_secs_per_sample = Some(0.0);
        assert_eq!(diagnose(&m).decode_samples_per_sec, None);
        m.decode_secs_per_sample = Some(f64::NAN);
        assert_eq!(diagnose(&m).decode_samples_per_sec, None);
    }

    #[test]
    fn rates_format_with_separators() {
        assert_eq!(fmt_rate(1_234_567.4), "1,234,567");
        assert_eq!(fmt_rate(123.4), "123");
        assert_eq!(fmt_rate(12.34), "12.3");
        assert_eq!(fmt_rate(f64::INFINITY), "-");
        assert_eq!(fmt_count(0), "0");
        assert_eq!(fmt_count(1000), "1,000");
    }
}
