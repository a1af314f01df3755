//! `bale ls`: one line per sample, in dataset order.
//!
//! `INDEX<TAB>KEY<TAB>LABEL<TAB>EXT:SIZE,EXT:SIZE`, or with `--json` one JSON
//! object per line. Everything comes from the indexes except the label, read
//! from the sample's `.cls` member (one small positioned read per sample in a
//! plain tar; in a `.tar.zst`, the sample's frame is decompressed;
//! `--no-labels` skips it).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;

use anyhow::Context;
use bale_format::{Manifest, ShardIndex};
use serde::Serialize;

use crate::args::ls::LsArgs;
use crate::commands::stat::{parse_label, read_member};

#[derive(Debug, Serialize)]
struct MemberLine<'a> {
    ext: &'a str,
    size: u64,
}

#[derive(Debug, Serialize)]
struct SampleLine<'a> {
    index: u64,
    key: &'a str,
    shard: &'a str,
    /// The `.cls` value when it is an integer.
    label: Option<i64>,
    /// Its class name from the manifest.
    label_name: Option<&'a str>,
    members: Vec<MemberLine<'a>>,
}

/// Runs `bale ls`.
pub fn run(args: LsArgs) -> anyhow::Result<ExitCode> {
    let dir = args.path.as_path();
    let m = Manifest::read(dir)?;
    let names = m.labels.as_deref().unwrap_or_default();
    let mut out = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut global = 0u64;
    for entry in &m.shards {
        let idx = ShardIndex::open(Manifest::resolve(dir, &entry.index))?;
        let path = Manifest::resolve(dir, &entry.file);
        let file = if args.no_labels || !entry.fields.contains_key("cls") {
            None
        } else {
            Some(File::open(&path).with_context(|| format!("cannot open {}", path.display()))?)
        };
        for i in 0..idx.len() {
            let key = idx.key(i);
            let cls = match &file {
                Some(f) => read_member(f, &path, &idx, i, "cls")?,
                None => None,
            };
            let label = cls.as_deref().and_then(parse_label);
            let label_name = label
                .and_then(|l| usize::try_from(l).ok())
                .and_then(|l| names.get(l))
                .map(String::as_str);
            if args.json {
                let line = SampleLine {
                    index: global,
                    key,
                    shard: &entry.file,
                    label,
                    label_name,
                    members: idx
                        .members(i)
                        .map(|m| MemberLine {
                            ext: m.ext,
                            size: m.size,
                        })
                        .collect(),
                };
                serde_json::to_writer(&mut out, &line)?;
                writeln!(out)?;
            } else {
                let label_text = match (label_name, label, &cls) {
                    (Some(n), _, _) => n.to_owned(),
                    (None, Some(l), _) => l.to_string(),
                    (None, None, Some(raw)) => String::from_utf8_lossy(raw)
                        .trim()
                        .replace(['\t', '\n'], " "),
                    (None, None, None) => "-".to_owned(),
                };
                write!(out, "{global}\t{key}\t{label_text}\t")?;
                for (j, m) in idx.members(i).enumerate() {
                    if j > 0 {
                        out.write_all(b",")?;
                    }
                    write!(out, "{}:{}", m.ext, m.size)?;
                }
                writeln!(out)?;
            }
            global += 1;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
