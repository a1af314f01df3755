//! Copying one file into the staging folder: under a temporary name, checked
//! against the manifest, then renamed into place. A file already in place is
//! kept when it passes the same check. And the threads that run the copies.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bale_format::atomic::AtomicFile;
use bale_format::files::open_regular;
use bale_format::hash::Xxh3;
use bale_format::hex64;
use bale_format::shown;
use bale_format::verify::{self, Level, NameRules};
use bale_format::{FormatError, Manifest};

use super::StageProgress;
use super::plan::{
    Planned, What, in_place, open_index, regular_len, source_mismatch, wrong_length,
};
use crate::error::{ReaderError, Result, StageErrorKind};

/// Copy buffer.
const COPY_BUF: usize = 256 << 10;

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Copied, this many bytes.
    Copied(u64),
    /// Already in place and checked, this many bytes.
    Kept(u64),
}

/// What every file's copy needs to know.
pub(crate) struct Ctx<'a> {
    /// The dataset.
    pub src: &'a Path,
    /// The staging folder.
    pub target: &'a Path,
    /// The dataset's manifest.
    pub manifest: &'a Manifest,
    /// Files the staging folder's marker listed before this run: bale wrote
    /// them, so a damaged one may be replaced. Any other file is never replaced.
    pub owned: &'a BTreeSet<String>,
    /// How tar names match index keys (for the member check).
    pub rules: NameRules,
    /// Where progress goes.
    pub progress: &'a dyn StageProgress,
    /// How to reach a source in object storage.
    pub storage: &'a bale_storage::StorageOptions,
}

/// Counts the bytes a member check reads as progress.
struct Counting<'a>(&'a dyn StageProgress);

impl verify::Visitor for Counting<'_> {
    fn progress(&mut self, bytes: u64) {
        self.0.bytes(bytes);
    }
}

/// Stages one file: keeps it when it is in place and passes its check,
/// copies it otherwise. Indexes must be staged before their shards (a shard
/// without a whole-file checksum is checked member by member against its
/// staged index).
///
/// # Errors
/// A source file that differs from the manifest; a copy that fails its
/// check; I/O errors; a file in the way that bale did not write.
pub(crate) fn stage_file(ctx: &Ctx<'_>, p: &Planned) -> Result<Outcome> {
    let dest = ctx.target.join(&p.rel);
    if in_place(ctx.target, p) {
        if check_staged(ctx, p, true).is_ok() {
            return Ok(Outcome::Kept(p.len));
        }
        // The check counted its bytes; the copy counts them again.
        ctx.progress.more(p.len);
    }
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
    }
    match p.what {
        What::Index { xxh3 } => copy_index(ctx, p, xxh3, &dest)?,
        What::Shard { xxh3 } => {
            copy_shard(ctx, p, xxh3, &dest)?;
            if xxh3.is_none() {
                // No whole-file checksum: check every member against the index.
                let entry = &ctx.manifest.shards[p.shard];
                let r =
                    verify::check_shard_with(ctx.target, entry, Level::Full, ctx.rules, &mut ());
                if let Some(problem) = r.problems.iter().find(|x| x.is_error()) {
                    return Err(ReaderError::Stage {
                        path: dest,
                        what: format!("the staged copy is damaged: {problem}"),
                        kind: StageErrorKind::Damaged,
                    });
                }
            }
        }
    }
    Ok(Outcome::Copied(p.len))
}

/// Checks a staged file against the manifest: an index by its counts,
/// checksum and shard length; a shard by its length, and with `hash_shards`
/// by its whole-file checksum (or, without one, member by member against its
/// staged index). Returns what is wrong.
pub(crate) fn check_staged(ctx: &Ctx<'_>, p: &Planned, hash_shards: bool) -> Result<(), String> {
    let dest = ctx.target.join(&p.rel);
    let entry = &ctx.manifest.shards[p.shard];
    match p.what {
        What::Index { xxh3 } => {
            let r = open_index(&dest, entry, xxh3).map(|_| ());
            ctx.progress.bytes(p.len);
            r.map_err(|e| e.to_string())
        }
        What::Shard { xxh3 } => {
            match regular_len(&dest) {
                Some(len) if len == entry.bytes => {}
                Some(len) => {
                    return Err(format!(
                        "{} has {len} bytes, the manifest records {}",
                        shown(&dest),
                        entry.bytes
                    ));
                }
                None => return Err(format!("{} is missing", shown(&dest))),
            }
            if !hash_shards {
                return Ok(());
            }
            match xxh3 {
                Some(want) => {
                    let got =
                        hash_file(&dest, entry.bytes, ctx.progress).map_err(|e| e.to_string())?;
                    if got != want {
                        return Err(format!(
                            "{} does not match the manifest's checksum (recorded {}, the file hashes to {})",
                            shown(&dest),
                            hex64(want),
                            hex64(got)
                        ));
                    }
                    Ok(())
                }
                None => {
                    let r = verify::check_shard_with(
                        ctx.target,
                        entry,
                        Level::Full,
                        ctx.rules,
                        &mut Counting(ctx.progress),
                    );
                    match r.problems.iter().find(|x| x.is_error()) {
                        Some(problem) => Err(problem.to_string()),
                        None => Ok(()),
                    }
                }
            }
        }
    }
}

/// Hashes the first `len` bytes of the regular file at `path`; fails when it is shorter.
fn hash_file(path: &Path, len: u64, progress: &dyn StageProgress) -> Result<u64> {
    let mut f = open_regular(path)?.take(len);
    let mut h = Xxh3::new();
    let mut buf = vec![0u8; COPY_BUF];
    let mut n_total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| FormatError::IoAt {
            path: path.to_path_buf(),
            offset: n_total,
            source: e,
        })?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        n_total += n as u64;
        progress.bytes(n as u64);
    }
    if n_total != len {
        return Err(wrong_length(path, n_total, len));
    }
    Ok(h.digest())
}

/// Copies an index: the source is opened and checked against the manifest
/// first, then exactly its validated bytes are written (in their stored form:
/// compressed for a `.tar.zst` shard, as the writers store them); the copy is
/// checked again before it is renamed into place.
fn copy_index(ctx: &Ctx<'_>, p: &Planned, xxh3: u64, dest: &Path) -> Result<()> {
    let entry = &ctx.manifest.shards[p.shard];
    let from = ctx.src.join(&p.rel);
    let idx = open_index(&from, entry, xxh3).map_err(|e| source_mismatch(&from, e))?;
    let bytes = bale_format::index_file_bytes(idx.as_bytes());
    let mut out = AtomicFile::create(dest)?;
    out.write_all(&bytes)
        .and_then(|()| out.flush())
        .map_err(|e| io_error(out.tmp_path(), e))?;
    ctx.progress.bytes(bytes.len() as u64);
    if let Err(e) = open_index(out.tmp_path(), entry, xxh3) {
        return Err(ReaderError::Stage {
            path: dest.to_path_buf(),
            what: format!("the copy of {} is damaged: {e}", shown(&from)),
            kind: StageErrorKind::Damaged,
        });
    }
    commit(ctx, p, out)
}

/// Copies a shard: a regular file of the recorded length, of which exactly
/// that many bytes are read, hashed on the way when the manifest records
/// the shard's checksum.
fn copy_shard(ctx: &Ctx<'_>, p: &Planned, xxh3: Option<u64>, dest: &Path) -> Result<()> {
    let entry = &ctx.manifest.shards[p.shard];
    let from = ctx.src.join(&p.rel);
    if let Some(url) = from.to_str().filter(|u| bale_storage::is_url(Path::new(u))) {
        return download_shard(ctx, p, xxh3, dest, url);
    }
    let input = open_regular(&from).map_err(|e| source_mismatch(&from, e.into()))?;
    let len = input.metadata().map_err(|e| io_error(&from, e))?.len();
    if len != entry.bytes {
        return Err(wrong_length(&from, len, entry.bytes));
    }
    let mut input = input.take(entry.bytes);
    let mut out = create_sized(dest, entry.bytes)?;
    let mut h = xxh3.map(|_| Xxh3::new());
    let mut buf = vec![0u8; COPY_BUF];
    let mut n_total = 0u64;
    loop {
        let n = input.read(&mut buf).map_err(|e| FormatError::IoAt {
            path: from.clone(),
            offset: n_total,
            source: e,
        })?;
        if n == 0 {
            break;
        }
        if let Some(h) = &mut h {
            h.update(&buf[..n]);
        }
        out.write_all(&buf[..n]).map_err(|e| FormatError::IoAt {
            path: out.tmp_path().to_path_buf(),
            offset: n_total,
            source: e,
        })?;
        n_total += n as u64;
        ctx.progress.bytes(n as u64);
    }
    if n_total != entry.bytes {
        return Err(wrong_length(&from, n_total, entry.bytes));
    }
    if let (Some(want), Some(h)) = (xxh3, h) {
        let got = h.digest();
        if got != want {
            return Err(ReaderError::Stage {
                path: from.clone(),
                what: format!(
                    "{} does not match the manifest's checksum (recorded {}, copied bytes hash to {})",
                    shown(&from),
                    hex64(want),
                    hex64(got)
                ),
                kind: StageErrorKind::SourceMismatch,
            });
        }
    }
    commit(ctx, p, out)
}

/// Copies a shard from object storage: parallel ranged GETs of
/// [`DOWNLOAD_CHUNK`] bytes ([`DOWNLOAD_AHEAD`] in flight), written and
/// hashed in order, checked as [`copy_shard`] checks a local copy.
fn download_shard(
    ctx: &Ctx<'_>,
    p: &Planned,
    xxh3: Option<u64>,
    dest: &Path,
    url: &str,
) -> Result<()> {
    let entry = &ctx.manifest.shards[p.shard];
    let object = bale_storage::object_at(url, ctx.storage)?.expect_size(entry.bytes);
    let mut out = create_sized(dest, entry.bytes)?;
    let mut h = xxh3.map(|_| Xxh3::new());
    let mut n_total = 0u64;
    for chunk in bale_storage::Chunks::new(&object, 0..entry.bytes, DOWNLOAD_CHUNK, DOWNLOAD_AHEAD)
    {
        let (_, bytes) = chunk?;
        if let Some(h) = &mut h {
            h.update(&bytes);
        }
        out.write_all(&bytes).map_err(|e| FormatError::IoAt {
            path: out.tmp_path().to_path_buf(),
            offset: n_total,
            source: e,
        })?;
        n_total += bytes.len() as u64;
        ctx.progress.bytes(bytes.len() as u64);
    }
    // The copy was sized up front: a download that came up short would
    // otherwise pass for whole, its end zeros.
    if n_total != entry.bytes {
        return Err(wrong_length(Path::new(url), n_total, entry.bytes));
    }
    if let (Some(want), Some(h)) = (xxh3, h) {
        let got = h.digest();
        if got != want {
            return Err(ReaderError::Stage {
                path: PathBuf::from(url),
                what: format!(
                    "{url} does not match the manifest's checksum (recorded {}, downloaded bytes hash to {})",
                    hex64(want),
                    hex64(got)
                ),
                kind: StageErrorKind::SourceMismatch,
            });
        }
    }
    commit(ctx, p, out)
}

/// The temporary file of a shard's copy, its size set to the shard's
/// `bytes` before any is written (a sparse file: no memory or disk is taken
/// until the bytes arrive). On a tmpfs mounted `huge=within_size` (as
/// `--mount` mounts one), only a 2 MiB stretch that lies within the file's
/// size gets a 2 MiB page: a file that grew write by write would get none.
/// Until it is committed the copy is under its temporary name, so a copy
/// cut short is never taken for a whole one.
fn create_sized(dest: &Path, bytes: u64) -> Result<AtomicFile> {
    let mut out = AtomicFile::create(dest)?;
    out.file()
        .set_len(bytes)
        .map_err(|e| io_error(out.tmp_path(), e))?;
    Ok(out)
}

/// Bytes of one ranged GET of a staged download.
const DOWNLOAD_CHUNK: u64 = 8 << 20;
/// Ranged GETs in flight per shard download.
const DOWNLOAD_AHEAD: usize = 8;

/// Renames a checked copy into place: over a file bale wrote before (a
/// damaged copy it redoes), never over any other.
fn commit(ctx: &Ctx<'_>, p: &Planned, out: AtomicFile) -> Result<()> {
    if ctx.owned.contains(&p.rel) {
        out.commit_replacing()?;
    } else {
        out.commit()?;
    }
    Ok(())
}

fn io_error(path: &Path, source: std::io::Error) -> ReaderError {
    FormatError::Io {
        path: path.to_path_buf(),
        source,
    }
    .into()
}

/// Runs `f` on `0..n` on up to `threads` threads, which take the next item
/// from a shared counter; returns the results in item order, or the first
/// error (the other threads then take no new item).
pub(crate) fn run_parallel<T: Send>(
    n: usize,
    threads: usize,
    f: impl Fn(usize) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..n).map(|_| None).collect());
    let first_error: Mutex<Option<ReaderError>> = Mutex::new(None);
    let work = || {
        while !stop.load(Ordering::Relaxed) {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break;
            }
            match f(i) {
                Ok(v) => results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(v),
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    first_error
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get_or_insert(e);
                }
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads.clamp(1, n.max(1)) {
            // A thread that cannot be started leaves its share to the others.
            let _ = std::thread::Builder::new()
                .name("bale-stage".into())
                .spawn_scoped(s, work);
        }
        work();
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    Ok(results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .flatten()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_results_come_in_order_and_the_first_error_stops_the_rest() {
        for threads in [1, 2, 8] {
            let v = run_parallel(100, threads, |i| Ok(i * 2)).unwrap();
            assert_eq!(v, (0..100).map(|i| i * 2).collect::<Vec<_>>());
        }
        assert!(run_parallel(0, 4, |_| Ok(())).unwrap().is_empty());
        let ran = AtomicUsize::new(0);
        let r = run_parallel(10_000, 2, |i| {
            ran.fetch_add(1, Ordering::Relaxed);
            if i == 3 {
                Err(ReaderError::InvalidOption {
                    name: "test",
                    what: "item 3".into(),
                })
            } else {
                Ok(())
            }
        });
        assert!(r.unwrap_err().to_string().contains("item 3"));
        assert!(ran.load(Ordering::Relaxed) < 10_000);
    }
}
