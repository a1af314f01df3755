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
//! each file is written under a temporary name beside it (`O_EXCL |
//! O_NOFOLLOW`), then renamed into place: without `--force` by a rename that
//! never replaces a file, with it by one that replaces the old file whole (a
//! new file: hard links to the old one keep the old bytes). A write that
//! fails leaves no cut-off file. Every target is checked before any is
//! written, and `--force` never
//! replaces a file of the dataset being read (its manifest, a shard or an
//! index, whatever path reaches it).

use std::collections::HashSet;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use bale_format::atomic::AtomicFile;
use bale_format::files::FileId;
use bale_format::{FormatError, MANIFEST_NAME, Manifest, files};
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
    let targets = Targets {
        force: args.force,
        dataset: dataset_files(&ds),
        dir: ds.dir().to_path_buf(),
    };
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
            let written = write_sample(&sample, out, &targets)?;
            for p in written {
                eprintln!("wrote {}", bale_format::shown(&p));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The files of the dataset: its manifest, shards and indexes (those that
/// are local files).
fn dataset_files(ds: &Dataset) -> HashSet<FileId> {
    let dir = ds.dir();
    let mut paths = vec![dir.join(MANIFEST_NAME)];
    for e in &ds.manifest().shards {
        paths.push(Manifest::resolve(dir, &e.file));
        paths.push(Manifest::resolve(dir, &e.index));
    }
    paths.iter().filter_map(|p| FileId::of(p)).collect()
}

/// What `get` may write to.
#[derive(Debug)]
struct Targets {
    /// `--force`: existing files may be replaced.
    force: bool,
    /// The dataset's own files, never replaced.
    dataset: HashSet<FileId>,
    /// The dataset's directory, for the error.
    dir: PathBuf,
}

impl Targets {
    /// Checks that `path` may be written: it does not exist (or, with
    /// `--force`, is a regular file that is none of the dataset's), and it
    /// is not a symlink.
    fn check(&self, path: &Path) -> anyhow::Result<()> {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return Ok(());
        };
        if meta.file_type().is_symlink() {
            bail!(
                "{} is a symlink; refusing to write through it",
                bale_format::shown(path)
            );
        }
        if !self.force {
            bail!(
                "{} already exists; use --force to overwrite it",
                bale_format::shown(path)
            );
        }
        if !meta.is_file() {
            bail!(
                "{} is {}; --force replaces regular files only (write to stdout to feed a pipe)",
                bale_format::shown(path),
                files::kind_of(&meta)
            );
        }
        if self.dataset.contains(&FileId::of_meta(&meta)) {
            bail!(
                "{} is a file of the dataset {} being read (its manifest, a shard or an index); \
                 refusing to overwrite it, even with --force",
                bale_format::shown(path),
                bale_format::shown(&self.dir)
            );
        }
        Ok(())
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
            targets.check(path)?;
            let f = staged(path, data)?;
            commit(f, targets.force)?;
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

/// `data` written to a temporary file beside `path` (removed if dropped
/// before [`commit`]): a write that fails (a full disk) leaves neither a
/// cut-off file under the name nor an old file cut.
fn staged(path: &Path, data: &[u8]) -> anyhow::Result<AtomicFile> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(data)
        .with_context(|| format!("cannot write {}", bale_format::shown(f.tmp_path())))?;
    Ok(f)
}

/// Puts a [`staged`] file in place: by a rename that never replaces a file,
/// or with `force` one that replaces it whole.
fn commit(f: AtomicFile, force: bool) -> anyhow::Result<()> {
    let path = f.dest().to_path_buf();
    let done = if force {
        f.commit_replacing()
    } else {
        f.commit()
    };
    done.map_err(|e| match e {
        FormatError::Exists { .. } => anyhow::anyhow!(
            "{} already exists; use --force to overwrite it",
            bale_format::shown(&path)
        ),
        e => e.into(),
    })
}

/// Writes every member of `sample` to `<dir>/<key>.<ext>`; returns the files
/// written. Every name and target is checked before any is written
/// ([`Targets::check`]), and directories are created one component at a
/// time, never through a symlink. A write that fails removes the files this
/// run created.
fn write_sample(sample: &Fetched, dir: &Path, targets: &Targets) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create {}", bale_format::shown(dir)))?;
    let rels: Vec<PathBuf> = sample
        .members
        .iter()
        .map(|(ext, _)| files::member_path(&sample.key, ext))
        .collect::<Result<_, _>>()?;
    for rel in &rels {
        files::create_parents(dir, rel)?;
        targets.check(&dir.join(rel))?;
    }
    // Every member is written under a temporary name first: a write that
    // fails changes nothing. Then each takes its name.
    let mut files = Vec::with_capacity(rels.len());
    for ((_, data), rel) in sample.members.iter().zip(&rels) {
        files.push(staged(&dir.join(rel), data)?);
    }
    let mut written = Vec::new();
    let mut created = Vec::new();
    let result = (|| {
        for f in files {
            let path = f.dest().to_path_buf();
            let existed = std::fs::symlink_metadata(&path).is_ok();
            commit(f, targets.force)?;
            if !existed {
                created.push(path.clone());
            }
            written.push(path);
        }
        Ok::<_, anyhow::Error>(())
    })();
    if let Err(e) = result {
        for p in &created {
            let _ = std::fs::remove_file(p);
        }
        return Err(e);
    }
    Ok(written)
}
