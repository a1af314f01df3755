//! `bale ls`: one line per sample, in dataset order.
//!
//! `INDEX<TAB>KEY<TAB>LABEL<TAB>EXT:SIZE,EXT:SIZE`, or with `--json` one JSON
//! object per line. The dataset is opened with [`bale_reader::Dataset`]
//! (every index checked against the manifest). Everything comes from the
//! indexes except the label, read from the sample's `.cls` member with its
//! checksum checked (one small positioned read per sample in a plain tar; in
//! a `.tar.zst`, the sample's frame is decompressed; `--no-labels` skips
//! it). Text from the data (keys, labels, extensions) is escaped: a control
//! character cannot forge a line or reach the terminal.

use std::io::{BufWriter, Write};
use std::process::ExitCode;

use bale_reader::Dataset;
use bale_reader::parse_label;
use serde::Serialize;

use crate::args::ls::LsArgs;
use crate::escape::field;

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
    let ds = Dataset::options()
        .storage_options(args.storage.options()?)
        .open(&args.path)?;
    let labelled = !args.no_labels && ds.fields().iter().any(|f| f == "cls");
    let mut out = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut unreadable = 0u64;
    let mut pass = bale_reader::Pass::new(&ds);
    for i in 0..ds.len() {
        pass.read(i)?;
        let key = ds.key(i)?;
        let cls = if labelled {
            ds.read_member(i, "cls")?
        } else {
            None
        };
        let label = cls.as_deref().and_then(parse_label);
        if cls.is_some() && label.is_none() {
            if unreadable == 0 {
                eprintln!(
                    "warning: sample {i} ({}) has a .cls member that is not a decimal integer \
                     ({}): no reader can use it as a label; `bale verify` reports every such sample",
                    crate::escape::quoted(key),
                    crate::escape::quoted(&String::from_utf8_lossy(
                        cls.as_deref().unwrap_or_default()
                    ))
                );
            }
            unreadable += 1;
        }
        let label_name = label.and_then(|l| ds.label_name(l));
        if args.json {
            let line = SampleLine {
                index: i,
                key,
                shard: &ds.manifest().shards[ds.shard_of(i)?].file,
                label,
                label_name,
                members: ds
                    .members(i)?
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
                (None, None, _) => "-".to_owned(),
            };
            write!(out, "{i}\t{}\t{}\t", field(key), field(&label_text))?;
            for (j, m) in ds.members(i)?.enumerate() {
                if j > 0 {
                    out.write_all(b",")?;
                }
                write!(out, "{}:{}", field(m.ext), m.size)?;
            }
            writeln!(out)?;
        }
    }
    out.flush()?;
    if unreadable > 1 {
        eprintln!("warning: {unreadable} samples have a .cls member that is not a decimal integer");
    }
    Ok(ExitCode::SUCCESS)
}
