//! What a dataset holds, beyond the manifest's totals: the distribution of
//! sample sizes and, from the `.cls` members, how many samples each class
//! has. [`Dataset::stats`] computes them; [`SizeHistogram`] also serves file
//! trees.

use std::collections::BTreeMap;

use bale_format::{Compression, CreatedBy};

use crate::dataset::Dataset;
use crate::error::Result;
use crate::sample::parse_label;

/// A size histogram for percentiles in bounded memory: exact below 512,
/// then 256 buckets per power of two (relative error under 0.4%).
#[derive(Debug, Clone)]
pub struct SizeHistogram {
    buckets: Vec<u64>,
    count: u64,
    sum: u64,
    max: u64,
}

impl Default for SizeHistogram {
    fn default() -> Self {
        Self {
            buckets: vec![0; 512 + 56 * 256],
            count: 0,
            sum: 0,
            max: 0,
        }
    }
}

/// Percentiles of a [`SizeHistogram`], in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Percentiles {
    /// Values counted.
    pub count: u64,
    /// Mean (rounded down).
    pub mean: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest value.
    pub max: u64,
}

impl SizeHistogram {
    fn bucket(v: u64) -> usize {
        if v < 512 {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as usize; // >= 9
        let m = ((v >> (e - 8)) & 0xff) as usize;
        512 + (e - 9) * 256 + m
    }

    /// The largest value that falls in bucket `b`.
    fn upper(b: usize) -> u64 {
        if b < 512 {
            return b as u64;
        }
        let e = (b - 512) / 256 + 9;
        let m = ((b - 512) % 256) as u64;
        let lo = (256 + m) << (e - 8);
        lo + (1u64 << (e - 8)) - 1
    }

    /// Counts one value.
    pub fn add(&mut self, v: u64) {
        self.buckets[Self::bucket(v)] += 1;
        self.count += 1;
        self.sum = self.sum.saturating_add(v);
        self.max = self.max.max(v);
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &SizeHistogram) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.count += other.count;
        self.sum = self.sum.saturating_add(other.sum);
        self.max = self.max.max(other.max);
    }

    /// Nearest-rank percentile `p` (0-100), capped at the exact maximum.
    fn percentile(&self, p: u64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = (self.count * p).div_ceil(100).max(1);
        let mut seen = 0;
        for (b, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Self::upper(b).min(self.max);
            }
        }
        self.max
    }

    /// Mean, median, 90th and 99th percentiles and maximum.
    pub fn summary(&self) -> Percentiles {
        Percentiles {
            count: self.count,
            mean: self.sum.checked_div(self.count).unwrap_or(0),
            p50: self.percentile(50),
            p90: self.percentile(90),
            p99: self.percentile(99),
            max: self.max,
        }
    }
}

/// How many samples carry each label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelCounts {
    /// Samples per `.cls` value.
    pub counts: BTreeMap<i64, u64>,
    /// Samples without a `.cls` member.
    pub unlabeled: u64,
    /// `.cls` members that are not a decimal integer.
    pub unparsed: u64,
}

impl LabelCounts {
    fn merge(&mut self, other: &LabelCounts) {
        for (k, v) in &other.counts {
            *self.counts.entry(*k).or_default() += v;
        }
        self.unlabeled += other.unlabeled;
        self.unparsed += other.unparsed;
    }
}

/// What [`Dataset::stats`] found.
#[derive(Debug, Clone)]
pub struct DatasetStats {
    /// Sizes of the samples (their members' bytes).
    pub sample_bytes: SizeHistogram,
    /// Total bytes of the shard indexes.
    pub index_bytes: u64,
    /// Label counts, when asked for and the dataset has `.cls` members.
    pub labels: Option<LabelCounts>,
}

impl Dataset {
    /// Sample sizes (from the indexes) and, with `labels`, label counts
    /// (every `.cls` member read with [`Dataset::read_member`], its checksum
    /// checked), computed on `threads` threads (0: one per core), shard by
    /// shard. Memory: one histogram (about 115 KiB) per thread, and the
    /// mapped pages of the samples read since the last release of a
    /// [`crate::Pass`] (at most 8,192 samples or 32 MiB), whatever the
    /// dataset's size.
    ///
    /// # Errors
    /// The first read error, naming the shard and sample.
    pub fn stats(&self, labels: bool, threads: usize) -> Result<DatasetStats> {
        let shards = self.shard_count();
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            t => t,
        }
        .clamp(1, shards.max(1));
        let sizes = self.shard_sizes();
        let has_cls = labels && self.fields().iter().any(|f| f == "cls");
        let next = std::sync::atomic::AtomicUsize::new(0);
        let one_thread = || -> Result<DatasetStats> {
            let mut out = DatasetStats {
                sample_bytes: SizeHistogram::default(),
                index_bytes: 0,
                labels: has_cls.then(LabelCounts::default),
            };
            loop {
                let s = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if s >= shards {
                    return Ok(out);
                }
                out.index_bytes += self.index_len(s);
                let first = self.first_of(s);
                let mut pass = crate::Pass::new(self);
                for i in first..first + sizes[s] {
                    pass.read(i)?;
                    out.sample_bytes.add(self.members(i)?.map(|m| m.size).sum());
                    if let Some(l) = &mut out.labels {
                        match self.read_member(i, "cls")? {
                            None => l.unlabeled += 1,
                            Some(d) => match parse_label(&d) {
                                Some(v) => *l.counts.entry(v).or_default() += 1,
                                None => l.unparsed += 1,
                            },
                        }
                    }
                }
            }
        };
        let parts: Vec<Result<DatasetStats>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads).map(|_| scope.spawn(one_thread)).collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(crate::ReaderError::InvalidOption {
                            name: "stats",
                            what: "a worker thread panicked".into(),
                        })
                    })
                })
                .collect()
        });
        let mut total = DatasetStats {
            sample_bytes: SizeHistogram::default(),
            index_bytes: 0,
            labels: has_cls.then(LabelCounts::default),
        };
        for p in parts {
            let p = p?;
            total.sample_bytes.merge(&p.sample_bytes);
            total.index_bytes += p.index_bytes;
            if let (Some(t), Some(l)) = (&mut total.labels, &p.labels) {
                t.merge(l);
            }
        }
        Ok(total)
    }
}

/// One shard of a [`DatasetReport`], as the manifest records it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardRow {
    /// The shard file, as the manifest names it.
    pub file: String,
    /// Its index file.
    pub index: String,
    /// Samples.
    pub samples: u64,
    /// Members.
    pub members: u64,
    /// Bytes of the shard file.
    pub bytes: u64,
    /// Bytes of its tar stream (0 for a shard without one).
    pub tar_bytes: u64,
    /// How it is stored.
    pub compression: Compression,
}

/// The members with one extension, over the dataset.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ExtRow {
    /// The extension.
    pub ext: String,
    /// Members.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// One class of a [`LabelReport`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct LabelRow {
    /// The `.cls` value.
    pub label: i64,
    /// Its class name from the manifest.
    pub name: Option<String>,
    /// Samples with it.
    pub count: u64,
}

/// The label histogram of a [`DatasetReport`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct LabelReport {
    /// How the `.cls` members were read: "positioned" (plain tar, HDF5),
    /// "sequential" (zstd: each sample's frame decompressed) or "mixed".
    pub read: &'static str,
    /// One row per `.cls` value, in order.
    pub classes: Vec<LabelRow>,
    /// Samples without a `.cls` member.
    pub unlabeled: u64,
    /// `.cls` members that are not an integer.
    pub unparsed: u64,
}

/// What a dataset holds, for `bale stat` and its `--json` (the schema is
/// pinned by the CLI's tests): the manifest's totals and shards, sample
/// sizes from the indexes, and labels.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DatasetReport {
    /// Always "dataset".
    pub kind: &'static str,
    /// The dataset directory.
    pub path: String,
    /// The manifest's format version.
    pub format_version: String,
    /// Samples.
    pub samples: u64,
    /// Shards.
    pub shards: u64,
    /// Members.
    pub members: u64,
    /// Bytes of the shard files.
    pub bytes: u64,
    /// Bytes of their tar streams.
    pub tar_bytes: u64,
    /// Bytes of the indexes.
    pub index_bytes: u64,
    /// "none", "zstd", "h5", or "mixed".
    pub compression: &'static str,
    /// Every shard.
    pub shard_table: Vec<ShardRow>,
    /// Members by extension.
    pub extensions: Vec<ExtRow>,
    /// Sample sizes (the sum of their members).
    pub sample_bytes: Percentiles,
    /// Samples per label, when asked for and present.
    pub labels: Option<LabelReport>,
    /// Input files skipped when packing.
    pub skipped: u64,
    /// How the dataset was made.
    pub created_by: CreatedBy,
}

impl Dataset {
    /// The [`DatasetReport`] of this dataset; with `labels`, every `.cls`
    /// member is read (see [`Dataset::stats`]).
    ///
    /// # Errors
    /// As [`Dataset::stats`].
    pub fn report(&self, labels: bool) -> Result<DatasetReport> {
        let st = self.stats(labels, 0)?;
        let m = self.manifest();
        let kinds: std::collections::BTreeSet<&'static str> =
            m.shards.iter().map(|s| s.compression.as_str()).collect();
        let compression = match kinds.len() {
            0 => "none",
            1 => kinds.first().copied().unwrap_or("none"),
            _ => "mixed",
        };
        let labels = st.labels.map(|l| LabelReport {
            read: match compression {
                "none" | "h5" => "positioned",
                "zstd" => "sequential",
                _ => "mixed",
            },
            classes: l
                .counts
                .iter()
                .map(|(&label, &count)| LabelRow {
                    label,
                    name: self.label_name(label).map(str::to_owned),
                    count,
                })
                .collect(),
            unlabeled: l.unlabeled,
            unparsed: l.unparsed,
        });
        Ok(DatasetReport {
            kind: "dataset",
            path: self.dir().display().to_string(),
            format_version: m.format_version.clone(),
            samples: m.samples,
            shards: m.shards.len() as u64,
            // Saturating: a hand-edited manifest's counts may add past 2**64.
            members: m
                .shards
                .iter()
                .fold(0u64, |a, s| a.saturating_add(s.members)),
            bytes: m.bytes,
            tar_bytes: m
                .shards
                .iter()
                .fold(0u64, |a, s| a.saturating_add(s.tar_bytes)),
            index_bytes: st.index_bytes,
            compression,
            shard_table: m
                .shards
                .iter()
                .map(|s| ShardRow {
                    file: s.file.clone(),
                    index: s.index.clone(),
                    samples: s.samples,
                    members: s.members,
                    bytes: s.bytes,
                    tar_bytes: s.tar_bytes,
                    compression: s.compression,
                })
                .collect(),
            extensions: m
                .fields
                .iter()
                .map(|(ext, f)| ExtRow {
                    ext: ext.clone(),
                    count: f.count,
                    bytes: f.bytes,
                })
                .collect(),
            sample_bytes: st.sample_bytes.summary(),
            labels,
            skipped: m.skipped,
            created_by: m.created_by.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_percentiles_are_exact_when_small_and_close_when_large() {
        let mut h = SizeHistogram::default();
        for v in 1..=100u64 {
            h.add(v);
        }
        let s = h.summary();
        assert_eq!((s.p50, s.p90, s.p99, s.max, s.mean), (50, 90, 99, 100, 50));
        let mut h = SizeHistogram::default();
        for v in [1_000_000u64, 2_000_000, 3_000_000, 123_456_789] {
            h.add(v);
        }
        let s = h.summary();
        assert!(
            s.p50 >= 2_000_000 && s.p50 < 2_000_000 * 1004 / 1000,
            "{}",
            s.p50
        );
        assert_eq!(s.max, 123_456_789);
        assert_eq!(s.p99, 123_456_789);
        for v in [511u64, 512, 513, 1 << 40, u64::MAX / 2] {
            let b = SizeHistogram::bucket(v);
            assert!(SizeHistogram::upper(b) >= v, "{v}");
            assert!(b == 0 || SizeHistogram::upper(b - 1) < v, "{v}");
        }
    }

    #[test]
    fn labels_parse_as_integers() {
        assert_eq!(parse_label(b"3"), Some(3));
        assert_eq!(parse_label(b" 12\n"), Some(12));
        assert_eq!(parse_label(b"cat"), None);
        assert_eq!(parse_label(b"\xff"), None);
    }
}
