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
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use bale_format::Manifest;
use bale_reader::Dataset;
use bale_reader::stats::{DatasetReport, ExtRow, Percentiles, SizeHistogram};
use indicatif::HumanCount;
use serde::Serialize;

use crate::args::stat::StatArgs;
use crate::escape::field;

/// Rows shown in the human tables unless `--all`.
const SHARD_ROWS: usize = 20;
const LABEL_ROWS: usize = 40;

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
    let storage = args.storage.options()?;
    let url = bale_storage::is_url(path);
    if !url {
        let meta = std::fs::metadata(path)
            .with_context(|| format!("cannot stat {}", bale_format::shown(path)))?;
        anyhow::ensure!(
            meta.is_dir(),
            "{} is not a directory",
            bale_format::shown(path)
        );
    }
    let mut out = std::io::stdout().lock();
    if url || Manifest::path_in(path).exists() {
        let s = Dataset::options()
            .storage_options(storage)
            .open(path)?
            .report(!args.no_labels)?;
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

/// A plain tree, walked as `bale pack` walks it ([`bale_pack::walk_tree`]).
fn tree_stat(root: &Path) -> anyhow::Result<TreeStat> {
    let tree = bale_pack::walk_tree(root)?;
    let mut hist = SizeHistogram::default();
    let mut exts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for f in &tree.files {
        hist.add(f.size);
        let e = exts.entry(f.ext.clone()).or_default();
        e.0 += 1;
        e.1 += f.size;
    }
    // `files` and the sizes count every regular file met, the ignored ones too.
    for (_, size) in &tree.ignored_files {
        hist.add(*size);
    }
    Ok(TreeStat {
        kind: "tree",
        path: root.display().to_string(),
        files: (tree.files.len() + tree.ignored_files.len()) as u64,
        bytes: tree.files.iter().map(|f| f.size).sum::<u64>()
            + tree.ignored_files.iter().map(|(_, s)| s).sum::<u64>(),
        samples: tree.sample_starts().len() as u64 - 1,
        extensions: exts
            .into_iter()
            .map(|(ext, (count, bytes))| ExtRow { ext, count, bytes })
            .collect(),
        file_bytes: hist.summary(),
        no_extension: tree.ignored.no_extension.count + tree.ignored.hidden.count,
        not_regular: tree.ignored.symlinks.count + tree.refused,
    })
}

/// The shard table's raw-bytes cell: `-` for a shard that has no tar stream
/// (`.h5`, or a plain tar whose index is scattered), recorded as 0.
fn raw_bytes(tar_bytes: u64, bytes: u64) -> String {
    if tar_bytes == 0 && bytes > 0 {
        "-".to_owned()
    } else {
        crate::units::size(tar_bytes)
    }
}

fn print_sizes(out: &mut impl Write, label: &str, p: &Percentiles) -> std::io::Result<()> {
    writeln!(
        out,
        "{label:<13}mean {}  p50 {}  p90 {}  p99 {}  max {}",
        crate::units::size(p.mean),
        crate::units::size(p.p50),
        crate::units::size(p.p90),
        crate::units::size(p.p99),
        crate::units::size(p.max)
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
            field(&e.ext),
            HumanCount(e.count).to_string(),
            crate::units::size(e.bytes),
            crate::units::size(mean)
        )?;
    }
    Ok(())
}

/// `n` with thousands separators and the noun in the right number.
fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", HumanCount(n), if n == 1 { one } else { many })
}

/// The options a dataset was made with (`created_by.options`), as
/// `key=value` pairs a reader takes in at a glance, not JSON: nested objects
/// give dotted keys (`image.resize=shorter:256`), strings lose their quotes,
/// lists are joined with commas, nulls and empty lists are left out.
fn options_line(options: &serde_json::Value) -> String {
    fn flat(prefix: &str, v: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value;
        match v {
            Value::Null => {}
            Value::Array(a) if a.is_empty() => {}
            Value::Object(m) => {
                for (k, v) in m {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    flat(&key, v, out);
                }
            }
            leaf => out.push(format!("{prefix}={}", scalar(leaf))),
        }
    }
    fn scalar(v: &serde_json::Value) -> String {
        use serde_json::Value;
        match v {
            Value::String(s) => s.clone(),
            Value::Array(a) => a.iter().map(scalar).collect::<Vec<_>>().join(","),
            Value::Object(_) => v.to_string(),
            other => other.to_string(),
        }
    }
    let mut out = Vec::new();
    match options {
        serde_json::Value::Object(_) => flat("", options, &mut out),
        serde_json::Value::Null => {}
        other => out.push(scalar(other)),
    }
    out.join(", ")
}

fn print_dataset(out: &mut impl Write, s: &DatasetReport, all: bool) -> std::io::Result<()> {
    writeln!(
        out,
        "dataset      {} (bale format {})",
        field(&s.path),
        field(&s.format_version)
    )?;
    let c = &s.created_by;
    let options = match options_line(&c.options) {
        o if o.is_empty() => String::new(),
        o => format!(" ({o})"),
    };
    writeln!(
        out,
        "made by      {} {} {}{}",
        field(&c.tool),
        field(&c.version),
        field(&c.command),
        field(&options)
    )?;
    writeln!(
        out,
        "samples      {} in {} ({})",
        HumanCount(s.samples),
        counted(s.shards, "shard", "shards"),
        counted(s.members, "member", "members")
    )?;
    if s.compression == "none" {
        writeln!(
            out,
            "bytes        {} in shards, {} in indexes",
            crate::units::size(s.bytes),
            crate::units::size(s.index_bytes)
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
            crate::units::size(s.bytes),
            s.compression,
            crate::units::size(s.tar_bytes),
            crate::units::size(s.index_bytes)
        )?;
    }
    if s.skipped > 0 {
        writeln!(
            out,
            "skipped      {} when packing",
            counted(s.skipped, "input file", "input files")
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
            field(&r.file),
            HumanCount(r.samples).to_string(),
            HumanCount(r.members).to_string(),
            crate::units::size(r.bytes),
            raw_bytes(r.tar_bytes, r.bytes),
            r.compression.as_str()
        )?;
    }
    if s.shard_table.len() > rows {
        writeln!(
            out,
            "... {} more (--all to show them)",
            counted((s.shard_table.len() - rows) as u64, "shard", "shards")
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
            "labels ({}; .cls members read: {how})",
            counted(l.classes.len() as u64, "class", "classes")
        )?;
        let rows = if all { l.classes.len() } else { LABEL_ROWS };
        for c in l.classes.iter().take(rows) {
            writeln!(
                out,
                "{:>6}  {:<30} {:>10}",
                c.label,
                field(c.name.as_deref().unwrap_or("-")),
                HumanCount(c.count).to_string()
            )?;
        }
        if l.classes.len() > rows {
            writeln!(
                out,
                "... {} more (--all to show them)",
                counted((l.classes.len() - rows) as u64, "class", "classes")
            )?;
        }
        if l.unlabeled > 0 {
            writeln!(
                out,
                "{} no .cls member",
                counted(l.unlabeled, "sample has", "samples have")
            )?;
        }
        if l.unparsed > 0 {
            writeln!(
                out,
                "{} not integers",
                counted(l.unparsed, ".cls member is", ".cls members are")
            )?;
        }
    }
    Ok(())
}

fn print_tree(out: &mut impl Write, s: &TreeStat) -> std::io::Result<()> {
    writeln!(
        out,
        "tree         {} (not a bale dataset: no bale.json)",
        field(&s.path)
    )?;
    writeln!(
        out,
        "files        {} ({}), forming {}",
        HumanCount(s.files),
        crate::units::size(s.bytes),
        counted(s.samples, "sample", "samples")
    )?;
    print_sizes(out, "file size", &s.file_bytes)?;
    if s.no_extension > 0 {
        writeln!(
            out,
            "skipped      {} without an extension (or hidden)",
            counted(s.no_extension, "file", "files")
        )?;
    }
    if s.not_regular > 0 {
        writeln!(
            out,
            "skipped      {} (symlinks...)",
            counted(
                s.not_regular,
                "entry that is not a regular file",
                "entries that are not regular files"
            )
        )?;
    }
    writeln!(out)?;
    print_exts(out, &s.extensions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_read_as_key_value_pairs_not_json() {
        let v = serde_json::json!({
            "shard_size": 1073741824u64,
            "shuffle": true,
            "labels": "dir",
            "seed": null,
            "image": {"resize": "shorter:256", "format": "jpeg:90"},
            "exts": ["jpg", "png"],
            "include": [],
        });
        // serde_json's map keeps keys sorted.
        assert_eq!(
            options_line(&v),
            "exts=jpg,png, image.format=jpeg:90, image.resize=shorter:256, labels=dir, \
             shard_size=1073741824, shuffle=true"
        );
        assert_eq!(options_line(&serde_json::Value::Null), "");
        assert_eq!(options_line(&serde_json::json!({})), "");
    }

    #[test]
    fn counts_keep_separators_and_agree_with_their_noun() {
        assert_eq!(counted(1, "shard", "shards"), "1 shard");
        assert_eq!(counted(1_281_167, "sample", "samples"), "1,281,167 samples");
    }
}
