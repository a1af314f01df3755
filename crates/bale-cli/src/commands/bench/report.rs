//! The report: the versioned JSON schema (`--json`) and the text table.
//!
//! **The schema is versioned**: `schema` is 1. Adding a field keeps 1;
//! renaming, removing or changing the meaning of one bumps it. A test pins
//! every key path so that no change slips through unnoticed. The fields are
//! documented on [`crate::args::bench::BenchArgs`] and in docs/bench.md.

use std::io::Write;

use serde::Serialize;

use super::diagnose::{Diagnosis, Metrics, Rate, Shards, diagnose, fmt_count, fmt_rate};
use super::measure::{Measured, Opened, Pass, ReadOrder, Settings};

/// The JSON schema version.
pub const SCHEMA: u32 = 1;

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: u32,
    /// Seconds per measured pass (`--budget`).
    pub budget_secs: f64,
    /// N (`--threads`).
    pub threads: usize,
    /// Seed of the random order.
    pub seed: u64,
    /// Whether decoding was measured.
    pub decode: bool,
    /// `--target`, samples per second.
    pub target: Option<f64>,
    /// Wall-clock seconds of the whole run.
    pub elapsed_secs: f64,
    /// PATH first, then each `--compare` path.
    pub sources: Vec<SourceReport>,
}

/// One measured source.
#[derive(Debug, Serialize)]
pub struct SourceReport {
    /// The path given.
    pub path: String,
    /// "tree" or "dataset".
    pub kind: &'static str,
    /// On tmpfs or ramfs: eviction does nothing there, cold figures are warm ones.
    pub ram_backed: bool,
    /// The shards are read from object storage (a dataset in a bucket, or a
    /// local index of tars in one): every pass is requests to the store.
    pub object_storage: bool,
    /// Samples in the source.
    pub samples: u64,
    /// Loose files (tree) or shard files (dataset).
    pub files: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// The read figures.
    pub runs: Vec<RunReport>,
    /// The decode figures (with `--decode`).
    pub decode: Option<DecodeReport>,
    /// What bounds throughput.
    pub diagnosis: Diagnosis,
}

/// One read figure.
#[derive(Debug, Serialize)]
pub struct RunReport {
    /// "sequential" or "random".
    pub order: &'static str,
    /// "warm" or "cold".
    pub cache: &'static str,
    /// Threads.
    pub threads: usize,
    /// Samples read: what the figure rests on.
    pub samples: u64,
    /// Payload bytes read and checksummed (file bytes; member bytes after decompression).
    pub bytes: u64,
    /// Wall-clock seconds.
    pub secs: f64,
    /// `samples / secs`.
    pub samples_per_sec: f64,
    /// `bytes / 10^6 / secs`.
    pub mb_per_sec: f64,
    /// Seconds to reopen the dataset after eviction (cold dataset figures), else null.
    pub open_secs: Option<f64>,
}

/// The decode figures: random order, warm cache, read + decode.
#[derive(Debug, Serialize)]
pub struct DecodeReport {
    /// Decode CPU seconds per sample, from the 1-thread run.
    pub secs_per_sample: f64,
    /// Members decoded (images, `.npy` arrays), over all runs.
    pub images: u64,
    /// Members that did not decode, over all runs.
    pub errors: u64,
    /// The first of them, `key.ext: why`.
    pub first_error: Option<String>,
    /// 1 thread, then N.
    pub runs: Vec<DecodeRun>,
}

/// One decode run.
#[derive(Debug, Serialize)]
pub struct DecodeRun {
    /// Threads.
    pub threads: usize,
    /// Samples read and decoded.
    pub samples: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Wall-clock seconds.
    pub secs: f64,
    /// Read + decode samples per second.
    pub samples_per_sec: f64,
    /// Seconds spent decoding, summed over threads.
    pub decode_secs: f64,
}

fn run(order: ReadOrder, cache: &'static str, threads: usize, p: &Pass) -> RunReport {
    RunReport {
        order: order.name(),
        cache,
        threads,
        samples: p.rate.samples,
        bytes: p.rate.bytes,
        secs: p.rate.secs,
        samples_per_sec: p.rate.samples_per_sec(),
        mb_per_sec: p.rate.mb_per_sec(),
        open_secs: p.open_secs,
    }
}

/// Builds the report of one source from its measurement.
pub fn source_report(
    src: &Opened,
    m: &Measured,
    s: &Settings,
    target: Option<f64>,
) -> SourceReport {
    let mut runs = Vec::new();
    for f in &m.figures {
        runs.push(run(f.order, "warm", f.threads, &f.warm));
        runs.push(run(f.order, "cold", f.threads, &f.cold));
    }
    let decode = (!m.decode.is_empty()).then(|| {
        let one = &m.decode[0];
        DecodeReport {
            secs_per_sample: if one.rate.samples == 0 {
                0.0
            } else {
                one.decode_secs / one.rate.samples as f64
            },
            images: m.decode.iter().map(|p| p.images).sum(),
            errors: m.decode.iter().map(|p| p.decode_errors).sum(),
            first_error: m.decode.iter().find_map(|p| p.first_error.clone()),
            runs: m
                .decode
                .iter()
                .zip([1, s.threads.max(1)])
                .map(|(p, threads)| DecodeRun {
                    threads,
                    samples: p.rate.samples,
                    bytes: p.rate.bytes,
                    secs: p.rate.secs,
                    samples_per_sec: p.rate.samples_per_sec(),
                    decode_secs: p.decode_secs,
                })
                .collect(),
        }
    });
    let n = s.threads.max(1);
    let find = |order: ReadOrder, threads: usize, cold: bool| -> Rate {
        m.figures
            .iter()
            .find(|f| f.order == order && f.threads == threads)
            .map(|f| if cold { f.cold.rate } else { f.warm.rate })
            .unwrap_or_default()
    };
    let metrics = Metrics {
        tree: src.is_tree(),
        shards: src.shards,
        threads: n,
        seq_cold_n: find(ReadOrder::Sequential, n, true),
        rand_warm_n: find(ReadOrder::Random, n, false),
        rand_cold_1: find(ReadOrder::Random, 1, true),
        rand_cold_n: find(ReadOrder::Random, n, true),
        decode_secs_per_sample: decode
            .as_ref()
            .filter(|d| d.runs.first().is_some_and(|r| r.samples > 0))
            .map(|d| d.secs_per_sample),
        target,
    };
    SourceReport {
        path: src.path.display().to_string(),
        kind: if src.is_tree() { "tree" } else { "dataset" },
        ram_backed: src.ram_backed,
        object_storage: src.shards != Shards::Local,
        samples: src.samples,
        files: src.files,
        bytes: src.bytes,
        runs,
        decode,
        diagnosis: diagnose(&metrics),
    }
}

/// A short label for a source in tables and plots: its kind and last path component.
pub fn label(s: &SourceReport) -> String {
    let name = std::path::Path::new(&s.path)
        .file_name()
        .map_or_else(|| s.path.clone(), |n| n.to_string_lossy().into_owned());
    let kind = match (s.kind, s.object_storage, s.ram_backed) {
        ("dataset", true, _) => "bucket",
        ("dataset", false, true) => "staged",
        ("dataset", false, false) => "shards",
        _ => "loose",
    };
    format!("{name} ({kind})")
}

/// Prints the text report.
pub fn print_text(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    for s in &r.sources {
        let what = if s.kind == "tree" {
            "files"
        } else {
            "shard files"
        };
        writeln!(
            out,
            "{} {}: {} samples in {} {what}, {}{}",
            s.kind,
            s.path,
            fmt_count(s.samples),
            fmt_count(s.files),
            crate::units::size(s.bytes),
            if s.object_storage {
                " (in object storage: every pass reads from the store, nothing is evicted)"
            } else if s.ram_backed {
                " (RAM-backed: eviction does nothing here)"
            } else {
                ""
            }
        )?;
        writeln!(
            out,
            "  {:<10} {:<5} {:>7} {:>11} {:>9} {:>9} {:>7}",
            "order", "cache", "threads", "samples/s", "MiB/s", "samples", "secs"
        )?;
        for run in &s.runs {
            writeln!(
                out,
                "  {:<10} {:<5} {:>7} {:>11} {:>9} {:>9} {:>7.2}",
                run.order,
                run.cache,
                run.threads,
                fmt_rate(run.samples_per_sec),
                fmt_rate(run.mb_per_sec * 1e6 / (1024.0 * 1024.0)),
                fmt_count(run.samples),
                run.secs
            )?;
        }
        if let Some(d) = &s.decode {
            for run in &d.runs {
                let mbps = if run.secs > 0.0 {
                    run.bytes as f64 / (1024.0 * 1024.0) / run.secs
                } else {
                    0.0
                };
                writeln!(
                    out,
                    "  {:<10} {:<5} {:>7} {:>11} {:>9} {:>9} {:>7.2}",
                    "+decode",
                    "warm",
                    run.threads,
                    fmt_rate(run.samples_per_sec),
                    fmt_rate(mbps),
                    fmt_count(run.samples),
                    run.secs
                )?;
            }
            writeln!(
                out,
                "  +decode: random order, read and decode; {:.2} ms decode CPU per sample, {} members decoded{}",
                d.secs_per_sample * 1e3,
                fmt_count(d.images),
                match &d.first_error {
                    Some(e) => format!(", {} failed (first: {e})", d.errors),
                    None => String::new(),
                }
            )?;
        }
        if let Some(open) = s.runs.iter().find_map(|r| r.open_secs) {
            writeln!(out, "  dataset open after eviction: {:.3} s", open)?;
        }
        writeln!(out, "  diagnosis: {}", s.diagnosis.line)?;
        writeln!(out)?;
    }
    if r.sources.len() > 1 {
        print_comparison(out, r)?;
    }
    writeln!(
        out,
        "{} s budget per pass, {} threads, seed {}; {:.1} s in all. Figures count only samples read and checksummed; cold = after posix_fadvise(DONTNEED) on every file read (inode and dentry caches stay warm).",
        r.budget_secs, r.threads, r.seed, r.elapsed_secs
    )?;
    Ok(())
}

/// Samples/s of each source side by side, N threads, with the ratio to the first.
fn print_comparison(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    let labels: Vec<String> = r.sources.iter().map(label).collect();
    let width = labels.iter().map(String::len).max().unwrap_or(0).max(12);
    write!(out, "samples/s, {} threads  ", r.threads)?;
    for l in &labels {
        write!(out, " {l:>width$}")?;
    }
    writeln!(out)?;
    let first = &r.sources[0];
    for run in first.runs.iter().filter(|x| x.threads == r.threads) {
        write!(out, "{:<10} {:<11}", run.order, run.cache)?;
        for s in &r.sources {
            let v = s
                .runs
                .iter()
                .find(|x| x.order == run.order && x.cache == run.cache && x.threads == run.threads)
                .map_or(0.0, |x| x.samples_per_sec);
            let cell = if std::ptr::eq(s, first) || run.samples_per_sec <= 0.0 {
                fmt_rate(v)
            } else {
                format!("{} ({:.1}x)", fmt_rate(v), v / run.samples_per_sec)
            };
            write!(out, " {cell:>width$}")?;
        }
        writeln!(out)?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::commands::bench::diagnose::TargetVerdict;

    /// Every key path of a JSON value: `a.b`, arrays as `a[].b`.
    fn key_paths(v: &serde_json::Value, prefix: &str, out: &mut BTreeSet<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    out.insert(p.clone());
                    key_paths(v, &p, out);
                }
            }
            serde_json::Value::Array(a) => {
                for v in a {
                    key_paths(v, &format!("{prefix}[]"), out);
                }
            }
            _ => {}
        }
    }

    fn full_report() -> Report {
        let run = RunReport {
            order: "random",
            cache: "cold",
            threads: 4,
            samples: 10,
            bytes: 1000,
            secs: 0.5,
            samples_per_sec: 20.0,
            mb_per_sec: 0.002,
            open_secs: Some(0.01),
        };
        let mut diagnosis = diagnose(&Metrics::default());
        diagnosis.target = Some(TargetVerdict {
            samples_per_sec: 1.0,
            keeps_up: false,
            workers: None,
            storage_limited: false,
            exceeds_threads: false,
        });
        Report {
            schema: SCHEMA,
            budget_secs: 2.0,
            threads: 4,
            seed: 0,
            decode: true,
            target: Some(1.0),
            elapsed_secs: 3.0,
            sources: vec![SourceReport {
                path: "p".into(),
                kind: "dataset",
                ram_backed: false,
                object_storage: false,
                samples: 10,
                files: 1,
                bytes: 1000,
                runs: vec![run],
                decode: Some(DecodeReport {
                    secs_per_sample: 0.001,
                    images: 10,
                    errors: 0,
                    first_error: None,
                    runs: vec![DecodeRun {
                        threads: 1,
                        samples: 10,
                        bytes: 1000,
                        secs: 0.5,
                        samples_per_sec: 20.0,
                        decode_secs: 0.01,
                    }],
                }),
                diagnosis,
            }],
        }
    }

    /// The JSON schema, key by key. A change here is a schema change: bump
    /// [`SCHEMA`] unless it only adds keys, and update docs/bench.md.
    #[test]
    fn json_schema_keys_are_pinned() {
        let v = serde_json::to_value(full_report()).unwrap();
        let mut got = BTreeSet::new();
        key_paths(&v, "", &mut got);
        let want: BTreeSet<String> = [
            "schema",
            "budget_secs",
            "threads",
            "seed",
            "decode",
            "target",
            "elapsed_secs",
            "sources",
            "sources[].path",
            "sources[].kind",
            "sources[].ram_backed",
            "sources[].object_storage",
            "sources[].samples",
            "sources[].files",
            "sources[].bytes",
            "sources[].runs",
            "sources[].runs[].order",
            "sources[].runs[].cache",
            "sources[].runs[].threads",
            "sources[].runs[].samples",
            "sources[].runs[].bytes",
            "sources[].runs[].secs",
            "sources[].runs[].samples_per_sec",
            "sources[].runs[].mb_per_sec",
            "sources[].runs[].open_secs",
            "sources[].decode",
            "sources[].decode.secs_per_sample",
            "sources[].decode.images",
            "sources[].decode.errors",
            "sources[].decode.first_error",
            "sources[].decode.runs",
            "sources[].decode.runs[].threads",
            "sources[].decode.runs[].samples",
            "sources[].decode.runs[].bytes",
            "sources[].decode.runs[].secs",
            "sources[].decode.runs[].samples_per_sec",
            "sources[].decode.runs[].decode_secs",
            "sources[].diagnosis",
            "sources[].diagnosis.bound",
            "sources[].diagnosis.remedy",
            "sources[].diagnosis.storage_samples_per_sec",
            "sources[].diagnosis.decode_samples_per_sec",
            "sources[].diagnosis.worker_samples_per_sec",
            "sources[].diagnosis.pipeline_samples_per_sec",
            "sources[].diagnosis.target",
            "sources[].diagnosis.target.samples_per_sec",
            "sources[].diagnosis.target.keeps_up",
            "sources[].diagnosis.target.workers",
            "sources[].diagnosis.target.storage_limited",
            "sources[].diagnosis.target.exceeds_threads",
            "sources[].diagnosis.line",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        let missing: Vec<_> = want.difference(&got).collect();
        let extra: Vec<_> = got.difference(&want).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "schema changed: missing {missing:?}, new {extra:?}"
        );
        assert_eq!(v["schema"], 1);
        assert_eq!(v["sources"][0]["diagnosis"]["bound"], "unknown");
    }

    #[test]
    fn bound_names_are_stable_snake_case() {
        use crate::commands::bench::diagnose::Bound;
        let names: Vec<String> = [
            Bound::OpensAndSeeks,
            Bound::DiskBandwidth,
            Bound::DecodeCpu,
            Bound::ReadCpu,
            Bound::Unknown,
        ]
        .iter()
        .map(|b| {
            serde_json::to_value(b)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
        assert_eq!(
            names,
            [
                "opens_and_seeks",
                "disk_bandwidth",
                "decode_cpu",
                "read_cpu",
                "unknown"
            ]
        );
    }

    #[test]
    fn text_report_shows_every_figure_and_the_diagnosis() {
        let r = full_report();
        let mut out = Vec::new();
        print_text(&mut out, &r).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("dataset p: 10 samples in 1 shard files"),
            "{text}"
        );
        assert!(text.contains("random     cold"), "{text}");
        assert!(text.contains("diagnosis: bound by unknown"), "{text}");
        assert!(text.contains("1.00 ms decode CPU per sample"), "{text}");
    }
}
