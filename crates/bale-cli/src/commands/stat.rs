//! `bale stat`: what a dataset (or a plain tree of files) holds.
//!
//! On a dataset, everything comes from the manifest and the indexes except the
//! label histogram, which needs the bytes of every `.cls` member: in a plain
//! `.tar` shard each is read with one positioned read of just its bytes (a few
//! bytes per sample); a `.tar.zst` shard is streamed sequentially instead,
//! since reaching a member means decompressing its sample's frame anyway.
//! Shards are read in parallel. `--no-labels` skips this.
//!
//! The `--json` schema is documented on [`crate::args::stat::StatArgs`].

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use bale_format::{Compression, CreatedBy, Manifest, ShardIndex, split_member_name};
use indicatif::{HumanBytes, HumanCount};
use rayon::prelude::*;
use serde::Serialize;

use crate::args::stat::StatArgs;

/// Rows shown in the human tables unless `--all`.
const SHARD_ROWS: usize = 20;
const LABEL_ROWS: usize = 40;

/// A size histogram for percentiles in bounded memory: exact below 512,
/// then 256 buckets per power of two (relative error under 0.4%).
#[derive(Debug, Clone)]
pub(crate) struct SizeHist {
    buckets: Vec<u64>,
    count: u64,
    sum: u64,
    max: u64,
}

impl Default for SizeHist {
    fn default() -> Self {
        Self {
            buckets: vec![0; 512 + 56 * 256],
            count: 0,
            sum: 0,
            max: 0,
        }
    }
}

impl SizeHist {
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

    pub(crate) fn add(&mut self, v: u64) {
        self.buckets[Self::bucket(v)] += 1;
        self.count += 1;
        self.sum += v;
        self.max = self.max.max(v);
    }

    fn merge(&mut self, other: &SizeHist) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.count += other.count;
        self.sum += other.sum;
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

    fn summary(&self) -> Percentiles {
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

/// Size percentiles in bytes.
#[derive(Debug, Serialize)]
struct Percentiles {
    count: u64,
    mean: u64,
    p50: u64,
    p90: u64,
    p99: u64,
    max: u64,
}

#[derive(Debug, Serialize)]
struct ShardRow {
    file: String,
    index: String,
    samples: u64,
    members: u64,
    bytes: u64,
    tar_bytes: u64,
    compression: Compression,
}

#[derive(Debug, Serialize)]
struct ExtRow {
    ext: String,
    count: u64,
    bytes: u64,
}

#[derive(Debug, Serialize)]
struct LabelRow {
    label: i64,
    name: Option<String>,
    count: u64,
}

#[derive(Debug, Serialize)]
struct Labels {
    /// How the `.cls` members were read: "positioned" (plain tar) or "sequential" (zstd) or "mixed".
    read: &'static str,
    classes: Vec<LabelRow>,
    /// Samples without a `.cls` member.
    unlabeled: u64,
    /// `.cls` members that are not an integer.
    unparsed: u64,
}

#[derive(Debug, Serialize)]
struct DatasetStat {
    kind: &'static str,
    path: String,
    format_version: String,
    samples: u64,
    shards: u64,
    members: u64,
    bytes: u64,
    tar_bytes: u64,
    index_bytes: u64,
    compression: &'static str,
    shard_table: Vec<ShardRow>,
    extensions: Vec<ExtRow>,
    sample_bytes: Percentiles,
    labels: Option<Labels>,
    skipped: u64,
    created_by: CreatedBy,
}

#[derive(Debug, Serialize)]
struct TreeStat {
    kind: &'static str,
    path: String,
    files: u64,
    bytes: u64,
    samples: u64,
    extensions: Vec<ExtRow>,
    file_bytes: Percentiles,
    /// Files (counted in `files`) that packing would skip: no extension, or hidden (`.name`).
    no_extension: u64,
    /// Entries that are neither regular files nor directories (symlinks, sockets...).
    not_regular: u64,
}

/// Runs `bale stat`.
pub fn run(args: StatArgs) -> anyhow::Result<ExitCode> {
    let path = args.path.as_path();
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
    anyhow::ensure!(meta.is_dir(), "{} is not a directory", path.display());
    let mut out = std::io::stdout().lock();
    if Manifest::path_in(path).exists() {
        let s = dataset_stat(path, !args.no_labels)?;
        if args.json {
            serde_json::to_writer_pretty(&mut out, &s)?;
            writeln!(out)?;
        } else {
            print_dataset(&mut out, &s, args.all)?;
        }
    } else {
        let s = tree_stat(path)?;
        if args.json {
            serde_json::to_writer_pretty(&mut out, &s)?;
            writeln!(out)?;
        } else {
            print_tree(&mut out, &s)?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Parses a `.cls` member: an integer in ASCII, surrounding whitespace allowed.
pub(crate) fn parse_label(data: &[u8]) -> Option<i64> {
    std::str::from_utf8(data).ok()?.trim().parse().ok()
}

/// Reads the bytes of member `ext` of sample `i` without verifying them: one
/// positioned read of the member for a plain tar, the sample's frame for zstd.
/// `None` when the sample has no such member.
pub(crate) fn read_member(
    file: &File,
    path: &Path,
    idx: &ShardIndex,
    i: usize,
    ext: &str,
) -> anyhow::Result<Option<Vec<u8>>> {
    let Some(m) = idx.members(i).find(|m| m.ext == ext) else {
        return Ok(None);
    };
    let data = match idx.compression() {
        // HDF5 shards: the member's offset is absolute in the file.
        Compression::None | Compression::H5 => {
            bale_format::read::read_exact_at(file, path, m.offset, m.size)?
        }
        Compression::Zstd => {
            let buf =
                bale_format::read::read_sample(file, path, Compression::Zstd, &idx.sample(i))?;
            buf.member(&m).to_vec()
        }
    };
    Ok(Some(data))
}

#[derive(Debug, Default)]
struct ShardLabels {
    counts: BTreeMap<i64, u64>,
    unlabeled: u64,
    unparsed: u64,
}

fn shard_labels(
    dir: &Path,
    entry: &bale_format::ShardEntry,
    idx: &ShardIndex,
) -> anyhow::Result<ShardLabels> {
    let path = Manifest::resolve(dir, &entry.file);
    let mut out = ShardLabels::default();
    let mut note = |v: Option<&[u8]>| match v {
        None => out.unlabeled += 1,
        Some(d) => match parse_label(d) {
            Some(l) => *out.counts.entry(l).or_default() += 1,
            None => out.unparsed += 1,
        },
    };
    match idx.compression() {
        Compression::None | Compression::H5 => {
            let file =
                File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
            for i in 0..idx.len() {
                note(read_member(&file, &path, idx, i, "cls")?.as_deref());
            }
        }
        Compression::Zstd => {
            let stream = bale_format::open_shard_stream(&path, Compression::Zstd)?;
            for s in stream {
                let s = s?;
                note(
                    s.members
                        .iter()
                        .find(|m| m.ext == "cls")
                        .map(|m| m.data.as_slice()),
                );
            }
        }
    }
    Ok(out)
}

fn dataset_stat(dir: &Path, labels: bool) -> anyhow::Result<DatasetStat> {
    let m = Manifest::read(dir)?;
    // Per shard: the index (sizes per sample) and, when asked, labels.
    let per_shard: Vec<(SizeHist, u64, Option<ShardLabels>)> = m
        .shards
        .par_iter()
        .map(|entry| -> anyhow::Result<_> {
            let idx = ShardIndex::open(Manifest::resolve(dir, &entry.index))?;
            let mut hist = SizeHist::default();
            for i in 0..idx.len() {
                hist.add(idx.members(i).map(|m| m.size).sum());
            }
            let index_bytes = idx.as_bytes().len() as u64;
            let has_cls = entry.fields.contains_key("cls");
            let l = if labels && has_cls {
                Some(
                    shard_labels(dir, entry, &idx)
                        .with_context(|| format!("cannot read the labels of {}", entry.file))?,
                )
            } else {
                None
            };
            Ok((hist, index_bytes, l))
        })
        .collect::<anyhow::Result<_>>()?;
    let mut hist = SizeHist::default();
    let mut index_bytes = 0;
    let mut label_sum: Option<ShardLabels> = None;
    for (h, ib, l) in &per_shard {
        hist.merge(h);
        index_bytes += ib;
        if let Some(l) = l {
            let acc = label_sum.get_or_insert_with(ShardLabels::default);
            for (k, v) in &l.counts {
                *acc.counts.entry(*k).or_default() += v;
            }
            acc.unlabeled += l.unlabeled;
            acc.unparsed += l.unparsed;
        }
    }
    let kinds: std::collections::BTreeSet<&'static str> =
        m.shards.iter().map(|s| s.compression.as_str()).collect();
    let compression = match kinds.len() {
        0 => "none",
        1 => kinds.first().copied().unwrap_or("none"),
        _ => "mixed",
    };
    let labels = label_sum.map(|l| Labels {
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
                name: usize::try_from(label)
                    .ok()
                    .and_then(|i| m.labels.as_ref()?.get(i).cloned()),
                count,
            })
            .collect(),
        unlabeled: l.unlabeled,
        unparsed: l.unparsed,
    });
    Ok(DatasetStat {
        kind: "dataset",
        path: dir.display().to_string(),
        format_version: m.format_version.clone(),
        samples: m.samples,
        shards: m.shards.len() as u64,
        members: m.shards.iter().map(|s| s.members).sum(),
        bytes: m.bytes,
        tar_bytes: m.shards.iter().map(|s| s.tar_bytes).sum(),
        index_bytes,
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
        sample_bytes: hist.summary(),
        labels,
        skipped: m.skipped,
        created_by: m.created_by.clone(),
    })
}

fn tree_stat(root: &Path) -> anyhow::Result<TreeStat> {
    let mut hist = SizeHist::default();
    let mut exts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let (mut files, mut bytes, mut samples, mut no_ext, mut not_regular) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    // Sorted by name, the files of one sample (`K.ext1`, `K.ext2`) are
    // adjacent within a directory: counting key changes needs no key set.
    let mut last_key: Option<String> = None;
    for entry in walkdir::WalkDir::new(root).sort_by_file_name() {
        let entry = entry.with_context(|| format!("cannot walk {}", root.display()))?;
        let ft = entry.file_type();
        if ft.is_dir() {
            continue;
        }
        if !ft.is_file() {
            not_regular += 1;
            continue;
        }
        let size = entry
            .metadata()
            .with_context(|| format!("cannot stat {}", entry.path().display()))?
            .len();
        files += 1;
        bytes += size;
        hist.add(size);
        let rel = entry.path().strip_prefix(root).unwrap_or(entry.path());
        let rel = rel.to_string_lossy();
        let Some((key, ext)) = split_member_name(&rel).filter(|(_, e)| !e.is_empty()) else {
            no_ext += 1;
            continue;
        };
        let e = exts.entry(ext.to_owned()).or_default();
        e.0 += 1;
        e.1 += size;
        if last_key.as_deref() != Some(key) {
            samples += 1;
            last_key = Some(key.to_owned());
        }
    }
    Ok(TreeStat {
        kind: "tree",
        path: root.display().to_string(),
        files,
        bytes,
        samples,
        extensions: exts
            .into_iter()
            .map(|(ext, (count, bytes))| ExtRow { ext, count, bytes })
            .collect(),
        file_bytes: hist.summary(),
        no_extension: no_ext,
        not_regular,
    })
}

/// The shard table's raw-bytes cell: `-` for a shard that has no tar stream
/// (`.h5`, or a plain tar whose index is scattered), recorded as 0.
fn raw_bytes(tar_bytes: u64, bytes: u64) -> String {
    if tar_bytes == 0 && bytes > 0 {
        "-".to_owned()
    } else {
        HumanBytes(tar_bytes).to_string()
    }
}

fn print_sizes(out: &mut impl Write, label: &str, p: &Percentiles) -> std::io::Result<()> {
    writeln!(
        out,
        "{label:<13}mean {}  p50 {}  p90 {}  p99 {}  max {}",
        HumanBytes(p.mean),
        HumanBytes(p.p50),
        HumanBytes(p.p90),
        HumanBytes(p.p99),
        HumanBytes(p.max)
    )
}

fn print_exts(out: &mut impl Write, exts: &[ExtRow]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<12} {:>12} {:>12} {:>12}",
        "extension", "count", "bytes", "mean"
    )?;
    for e in exts {
        let mean = e.bytes.checked_div(e.count).unwrap_or(0);
        writeln!(
            out,
            "{:<12} {:>12} {:>12} {:>12}",
            e.ext,
            HumanCount(e.count).to_string(),
            HumanBytes(e.bytes).to_string(),
            HumanBytes(mean).to_string()
        )?;
    }
    Ok(())
}

fn print_dataset(out: &mut impl Write, s: &DatasetStat, all: bool) -> std::io::Result<()> {
    writeln!(
        out,
        "dataset      {} (bale format {})",
        s.path, s.format_version
    )?;
    let c = &s.created_by;
    let options = if c.options.is_null() {
        String::new()
    } else {
        format!(" {}", c.options)
    };
    writeln!(
        out,
        "made by      {} {} {}{options}",
        c.tool, c.version, c.command
    )?;
    writeln!(
        out,
        "samples      {} in {} shards ({} members)",
        HumanCount(s.samples),
        HumanCount(s.shards),
        HumanCount(s.members)
    )?;
    if s.compression == "none" {
        writeln!(
            out,
            "bytes        {} in shards, {} in indexes",
            HumanBytes(s.bytes),
            HumanBytes(s.index_bytes)
        )?;
    } else {
        let ratio = if s.bytes == 0 {
            1.0
        } else {
            s.tar_bytes as f64 / s.bytes as f64
        };
        writeln!(
            out,
            "bytes        {} in shards ({} compressed, {} raw, ratio {ratio:.2}), {} in indexes",
            HumanBytes(s.bytes),
            s.compression,
            HumanBytes(s.tar_bytes),
            HumanBytes(s.index_bytes)
        )?;
    }
    if s.skipped > 0 {
        writeln!(
            out,
            "skipped      {} input files when packing",
            HumanCount(s.skipped)
        )?;
    }
    print_sizes(out, "sample size", &s.sample_bytes)?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<24} {:>10} {:>10} {:>12} {:>12}  compression",
        "shard", "samples", "members", "bytes", "raw bytes"
    )?;
    let rows = if all { s.shard_table.len() } else { SHARD_ROWS };
    for r in s.shard_table.iter().take(rows) {
        writeln!(
            out,
            "{:<24} {:>10} {:>10} {:>12} {:>12}  {}",
            r.file,
            HumanCount(r.samples).to_string(),
            HumanCount(r.members).to_string(),
            HumanBytes(r.bytes).to_string(),
            raw_bytes(r.tar_bytes, r.bytes),
            r.compression.as_str()
        )?;
    }
    if s.shard_table.len() > rows {
        writeln!(
            out,
            "... {} more shards (--all to show them)",
            s.shard_table.len() - rows
        )?;
    }
    writeln!(out)?;
    print_exts(out, &s.extensions)?;
    if let Some(l) = &s.labels {
        writeln!(out)?;
        let how = match l.read {
            "positioned" => "one positioned read each",
            "sequential" => "shards streamed",
            _ => "positioned reads and streamed shards",
        };
        writeln!(
            out,
            "labels ({} classes; .cls members read: {how})",
            l.classes.len()
        )?;
        let rows = if all { l.classes.len() } else { LABEL_ROWS };
        for c in l.classes.iter().take(rows) {
            writeln!(
                out,
                "{:>6}  {:<30} {:>10}",
                c.label,
                c.name.as_deref().unwrap_or("-"),
                HumanCount(c.count).to_string()
            )?;
        }
        if l.classes.len() > rows {
            writeln!(
                out,
                "... {} more classes (--all to show them)",
                l.classes.len() - rows
            )?;
        }
        if l.unlabeled > 0 {
            writeln!(
                out,
                "{} samples have no .cls member",
                HumanCount(l.unlabeled)
            )?;
        }
        if l.unparsed > 0 {
            writeln!(
                out,
                "{} .cls members are not integers",
                HumanCount(l.unparsed)
            )?;
        }
    }
    Ok(())
}

fn print_tree(out: &mut impl Write, s: &TreeStat) -> std::io::Result<()> {
    writeln!(
        out,
        "tree         {} (not a bale dataset: no bale.json)",
        s.path
    )?;
    writeln!(
        out,
        "files        {} ({}), forming {} samples",
        HumanCount(s.files),
        HumanBytes(s.bytes),
        HumanCount(s.samples)
    )?;
    print_sizes(out, "file size", &s.file_bytes)?;
    if s.no_extension > 0 {
        writeln!(
            out,
            "skipped      {} files without an extension (or hidden)",
            HumanCount(s.no_extension)
        )?;
    }
    if s.not_regular > 0 {
        writeln!(
            out,
            "skipped      {} entries that are not regular files (symlinks...)",
            HumanCount(s.not_regular)
        )?;
    }
    writeln!(out)?;
    print_exts(out, &s.extensions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_percentiles_are_exact_when_small_and_close_when_large() {
        let mut h = SizeHist::default();
        for v in 1..=100u64 {
            h.add(v);
        }
        let s = h.summary();
        assert_eq!((s.p50, s.p90, s.p99, s.max, s.mean), (50, 90, 99, 100, 50));
        let mut h = SizeHist::default();
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
            let b = SizeHist::bucket(v);
            assert!(SizeHist::upper(b) >= v, "{v}");
            assert!(b == 0 || SizeHist::upper(b - 1) < v, "{v}");
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
