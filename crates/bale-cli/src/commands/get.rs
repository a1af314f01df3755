//! `bale get`: a member to stdout, or a sample's members to a directory.
//!
//! The sample is found by index (walking the manifest's per-shard sample
//! counts) or by key (each shard index's key lookup table, shard by shard).
//! Members are read with one positioned read and their checksums verified.
//!
//! Writing into a directory is defended against names that would escape it:
//! the key and extension must be plain relative names (no `..`, no absolute
//! path, as the index already guarantees), every directory on the way is
//! created or checked one component at a time and must not be a symlink, and
//! files are opened with `O_NOFOLLOW` (and `O_EXCL` unless `--force`).

use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use bale_format::{Manifest, Sample, ShardReader};

use crate::args::get::GetArgs;

/// Where a sample lives.
#[derive(Debug)]
struct Found {
    shard: usize,
    local: usize,
    global: u64,
}

fn locate(dir: &Path, m: &Manifest, sample: &str, force_key: bool) -> anyhow::Result<Found> {
    if !force_key
        && let Ok(n) = sample.parse::<u64>()
        && n < m.samples
    {
        let mut start = 0u64;
        for (s, e) in m.shards.iter().enumerate() {
            if n < start + e.samples {
                return Ok(Found {
                    shard: s,
                    local: (n - start) as usize,
                    global: n,
                });
            }
            start += e.samples;
        }
    }
    let mut start = 0u64;
    for (s, e) in m.shards.iter().enumerate() {
        let idx = bale_format::ShardIndex::open(Manifest::resolve(dir, &e.index))?;
        if let Some(i) = idx.find(sample) {
            return Ok(Found {
                shard: s,
                local: i,
                global: start + i as u64,
            });
        }
        start += e.samples;
    }
    if !force_key && sample.parse::<u64>().is_ok() {
        bail!(
            "no sample with key {sample:?}, and {sample} is not an index: the dataset has {} samples (0..{})",
            m.samples,
            m.samples
        );
    }
    bail!("no sample with key {sample:?} in {}", dir.display())
}

/// Runs `bale get`.
pub fn run(args: GetArgs) -> anyhow::Result<ExitCode> {
    let dir = args.path.as_path();
    let m = Manifest::read(dir)?;
    let found = locate(dir, &m, &args.sample, args.key)?;
    let entry = &m.shards[found.shard];
    let reader = ShardReader::open(
        Manifest::resolve(dir, &entry.file),
        Manifest::resolve(dir, &entry.index),
    )?;
    let sample = reader
        .read(found.local, true)
        .with_context(|| format!("cannot read sample {} of {}", found.global, dir.display()))?;
    match &args.ext {
        Some(ext) => write_member(&sample, ext, args.output.as_deref(), args.force),
        None => {
            let Some(out) = &args.output else {
                let exts: Vec<&str> = sample.members.iter().map(|(e, _)| e.as_str()).collect();
                bail!(
                    "sample {:?} has members {exts:?}: name one with --ext EXT (to stdout), or give -o DIR to write them all",
                    sample.key
                );
            };
            let written = write_sample(&sample, out, args.force)?;
            for p in written {
                eprintln!("wrote {}", p.display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn write_member(
    sample: &Sample,
    ext: &str,
    output: Option<&Path>,
    force: bool,
) -> anyhow::Result<ExitCode> {
    let Some(data) = sample.get(ext) else {
        let exts: Vec<&str> = sample.members.iter().map(|(e, _)| e.as_str()).collect();
        bail!(
            "sample {:?} has no member {ext:?} (it has {exts:?})",
            sample.key
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
                    "member {ext:?} of {:?} is binary and stdout is a terminal\nhint: redirect stdout, or use -o FILE",
                    sample.key
                );
            }
            out.write_all(data)?;
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens `path` for writing without following a symlink at its last
/// component; refuses an existing file unless `force`.
fn open_new(path: &Path, force: bool) -> anyhow::Result<File> {
    let mut o = OpenOptions::new();
    o.write(true).custom_flags(libc::O_NOFOLLOW);
    if force {
        o.create(true).truncate(true);
    } else {
        o.create_new(true);
    }
    o.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => {
            anyhow::anyhow!(
                "{} already exists; use --force to overwrite it",
                path.display()
            )
        }
        _ if e.raw_os_error() == Some(libc::ELOOP) => {
            anyhow::anyhow!(
                "{} is a symlink; refusing to write through it",
                path.display()
            )
        }
        _ => anyhow::Error::new(e).context(format!("cannot create {}", path.display())),
    })
}

/// The relative path `<key>.<ext>` as checked components, or why it would escape.
fn safe_relative(key: &str, ext: &str) -> anyhow::Result<PathBuf> {
    let name = format!("{key}.{ext}");
    let rel = Path::new(&name);
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => out.push(p),
            _ => bail!("refusing to write {name:?}: it would escape the output directory"),
        }
    }
    if ext.contains('/') || out.as_os_str().is_empty() {
        bail!("refusing to write {name:?}: it would escape the output directory");
    }
    Ok(out)
}

/// Writes every member of `sample` to `<dir>/<key>.<ext>`; returns the files written.
fn write_sample(sample: &Sample, dir: &Path, force: bool) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    // Check every name before writing any.
    let rels: Vec<PathBuf> = sample
        .members
        .iter()
        .map(|(ext, _)| safe_relative(&sample.key, ext))
        .collect::<anyhow::Result<_>>()?;
    for ((_, data), rel) in sample.members.iter().zip(&rels) {
        // Walk (and create) the parent directories one component at a time,
        // refusing symlinks, so nothing lands outside `dir`.
        let mut at = dir.to_path_buf();
        let parents: Vec<_> = rel
            .parent()
            .map(|p| p.components().collect())
            .unwrap_or_default();
        for c in parents {
            at.push(c);
            match std::fs::symlink_metadata(&at) {
                Ok(md) if md.file_type().is_symlink() => {
                    bail!(
                        "{} is a symlink; refusing to write through it",
                        at.display()
                    )
                }
                Ok(md) if md.is_dir() => {}
                Ok(_) => bail!("{} exists and is not a directory", at.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::create_dir(&at)
                        .with_context(|| format!("cannot create {}", at.display()))?;
                }
                Err(e) => {
                    return Err(
                        anyhow::Error::new(e).context(format!("cannot stat {}", at.display()))
                    );
                }
            }
        }
        let path = dir.join(rel);
        let mut f = open_new(&path, force)?;
        f.write_all(data)
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_names_are_refused() {
        assert_eq!(
            safe_relative("a/b", "jpg").unwrap(),
            PathBuf::from("a/b.jpg")
        );
        for (k, e) in [
            ("../x", "jpg"),
            ("/etc/passwd", "x"),
            ("a", "b/../../c"),
            ("a/../../b", "x"),
        ] {
            assert!(safe_relative(k, e).is_err(), "{k} {e}");
        }
    }
}
