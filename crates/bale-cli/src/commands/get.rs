//! `bale get`: a member to stdout, or a sample's members to a directory.
//!
//! The dataset is opened with [`bale_reader::Dataset`] (every index checked
//! against the manifest); the sample is found by index or by key, and each
//! member is read with one positioned read and its checksum verified.
//!
//! Writing into a directory is defended against names that would escape it:
//! the key and extension must be plain relative names (no `..`, no absolute
//! path, as the index already guarantees), every directory on the way is
//! created or checked one component at a time and must not be a symlink, and
//! files are opened with `O_NOFOLLOW` (and `O_EXCL` unless `--force`).

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use bale_format::{FormatError, files};
use bale_reader::Dataset;

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

/// The global index of `sample`: a number below the sample count (unless
/// `force_key`), else a key.
fn locate(ds: &Dataset, sample: &str, force_key: bool) -> anyhow::Result<u64> {
    if !force_key
        && let Ok(n) = sample.parse::<u64>()
        && n < ds.len()
    {
        return Ok(n);
    }
    if let Some(i) = ds.find(sample) {
        return Ok(i);
    }
    if !force_key && sample.parse::<u64>().is_ok() {
        bail!(
            "no sample with key {}, and {sample} is not an index: the dataset has {} samples (0..{})",
            quoted(sample),
            ds.len(),
            ds.len()
        );
    }
    bail!(
        "no sample with key {} in {}",
        quoted(sample),
        ds.dir().display()
    )
}

/// Runs `bale get`.
pub fn run(args: GetArgs) -> anyhow::Result<ExitCode> {
    let ds = Dataset::options()
        .storage_options(args.storage.options()?)
        .open(&args.path)?;
    let i = locate(&ds, &args.sample, args.key)?;
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
    let sample =
        read().with_context(|| format!("cannot read sample {i} of {}", args.path.display()))?;
    match &args.ext {
        Some(ext) => write_member(&sample, ext, args.output.as_deref(), args.force),
        None => {
            let Some(out) = &args.output else {
                bail!(
                    "sample {} has members {}: name one with --ext EXT (to stdout), or give -o DIR to write them all",
                    quoted(&sample.key),
                    sample.exts()
                );
            };
            let written = write_sample(&sample, out, args.force)?;
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
    force: bool,
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
            let mut f = open_new(path, force)?;
            f.write_all(data)
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("wrote {}", path.display());
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

/// Creates `path` for writing, never through a symlink; an existing file
/// only with `force`.
fn open_new(path: &Path, force: bool) -> anyhow::Result<File> {
    files::create_file(path, force).map_err(|e| match e {
        FormatError::Exists { .. } => anyhow::anyhow!(
            "{} already exists; use --force to overwrite it",
            path.display()
        ),
        e => e.into(),
    })
}

/// Writes every member of `sample` to `<dir>/<key>.<ext>`; returns the files
/// written. Every name is checked before any is written, and directories are
/// created one component at a time, never through a symlink.
fn write_sample(sample: &Fetched, dir: &Path, force: bool) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let rels: Vec<PathBuf> = sample
        .members
        .iter()
        .map(|(ext, _)| files::member_path(&sample.key, ext))
        .collect::<Result<_, _>>()?;
    let mut written = Vec::new();
    for ((_, data), rel) in sample.members.iter().zip(&rels) {
        files::create_parents(dir, rel)?;
        let path = dir.join(rel);
        let mut f = open_new(&path, force)?;
        f.write_all(data)
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}
