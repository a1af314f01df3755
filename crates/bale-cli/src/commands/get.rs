//! `bale get`: a member to stdout, or a sample's members to a directory.
//!
//! The dataset is opened with [`bale_reader::Dataset`] (every index checked
//! against the manifest); the sample is found by index or by key, and each
//! member is read with one positioned read and its checksum verified.
//!
//! Writing to files is [`bale_reader::extract`]'s: never through a
//! symlink, never a cut-off file, never a file of the dataset being read.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, bail};
use bale_reader::extract::{Targets, write_sample};
use bale_reader::{Dataset, Select};

use crate::args::get::GetArgs;
use crate::escape::quoted;

/// A sample read whole: its key and `(extension, bytes)` per member, in shard order.
#[derive(Debug)]
struct Fetched {
    key: String,
    members: Vec<(String, Vec<u8>)>,
}

impl Fetched {
    fn get(&self, ext: &str) -> Option<&[u8]> {
        self.members
            .iter()
            .find(|(e, _)| e == ext)
            .map(|(_, d)| d.as_slice())
    }

    fn exts(&self) -> String {
        let exts: Vec<String> = self.members.iter().map(|(e, _)| quoted(e)).collect();
        format!("[{}]", exts.join(", "))
    }
}

/// Runs `bale get`.
pub fn run(args: GetArgs) -> anyhow::Result<ExitCode> {
    let ds = Dataset::options()
        .storage_options(args.storage.options()?)
        .open(&args.path)?;
    let select = match (args.key, args.index) {
        (true, _) => Select::Key,
        (_, true) => Select::Index,
        _ => Select::Either,
    };
    let i = ds.select(&args.sample, select)?;
    let read = || -> anyhow::Result<Fetched> {
        let mut members = Vec::new();
        for m in ds.members(i)? {
            let data = ds.read_member(i, m.ext)?.unwrap_or_default();
            members.push((m.ext.to_owned(), data));
        }
        Ok(Fetched {
            key: ds.key(i)?.to_owned(),
            members,
        })
    };
    let sample = read().with_context(|| {
        format!(
            "cannot read sample {i} of {}",
            bale_format::shown(&args.path)
        )
    })?;
    let targets = Targets::new(&ds, args.force);
    match &args.ext {
        Some(ext) => write_member(&sample, ext, args.output.as_deref(), &targets),
        None => {
            let Some(out) = &args.output else {
                bail!(
                    "sample {} has members {}: name one with --ext EXT (to stdout), or give -o DIR to write them all",
                    quoted(&sample.key),
                    sample.exts()
                );
            };
            let written = write_sample(&sample.members, &sample.key, out, &targets)?;
            for p in written {
                eprintln!("wrote {}", bale_format::shown(&p));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn write_member(
    sample: &Fetched,
    ext: &str,
    output: Option<&Path>,
    targets: &Targets,
) -> anyhow::Result<ExitCode> {
    let Some(data) = sample.get(ext) else {
        bail!(
            "sample {} has no member {} (it has {})",
            quoted(&sample.key),
            quoted(ext),
            sample.exts()
        );
    };
    match output {
        Some(path) => {
            targets.write(path, data)?;
            eprintln!("wrote {}", bale_format::shown(path));
        }
        None => {
            let mut out = std::io::stdout().lock();
            if out.is_terminal() && std::str::from_utf8(data).is_err() {
                bail!(
                    "member {} of {} is binary and stdout is a terminal\nhint: redirect stdout, or use -o FILE",
                    quoted(ext),
                    quoted(&sample.key)
                );
            }
            out.write_all(data)?;
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
