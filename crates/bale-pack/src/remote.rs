//! A command's output in object storage (`-o s3://bucket/prefix`), and the
//! merge of parts in a bucket ([`merge_remote`]).
//!
//! The command writes into a local spool directory (under `$TMPDIR`), as it
//! would into a local output. Each finished shard and its index are handed
//! to an upload thread ([`RemoteOutput::send`]) and removed from the spool once
//! uploaded, so packing and uploading overlap and the spool holds at most
//! the shard being written, [`QUEUE`] finished ones waiting and [`UPLOADERS`]
//! uploading. [`RemoteOutput::finish`]
//! uploads what is left, then `bale.json`, last: the commit point. Dropped
//! unfinished (an error, Ctrl-C, SIGTERM), it undoes the run in the bucket
//! ([`bale_storage::Publisher::abort`]) and removes the spool.
//!
//! Memory: [`UPLOADERS`] uploads at a time, in all at most
//! `UPLOADERS × parts_in_flight × part_size` bytes (2 × 2 × 32 MiB = 128 MiB
//! by default; storage options `upload_parts_in_flight`, `upload_part_mib`)
//! in memory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bale_storage::{Found, Publisher, StorageError, StorageOptions, WriteOptions};

use crate::error::{PackError, Result};
use crate::left::{Failed, Left, LockReason, Old, Run, Undo};

/// The spool directories' name prefix; the creating process's id follows.
const SPOOL_PREFIX: &str = "bale-spool-";

/// Removes the spools of runs that were killed (SIGKILL leaves its spool):
/// directories named `bale-spool-*` of this user whose lock no process holds.
/// A live run holds its spool's lock ([`bale_format::files::DirLock`], an
/// `flock` that ends with its process, however it ends), also when it runs
/// in another PID namespace that shares `$TMPDIR`.
fn clean_stale_spools(tmp: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(SPOOL_PREFIX) {
            continue;
        }
        // The entry itself, not a symlink's target, must be our directory.
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid {
            continue;
        }
        if let Ok(lock) = bale_format::files::DirLock::try_lock(&e.path()) {
            let _ = std::fs::remove_dir_all(e.path());
            drop(lock);
        }
    }
}

/// A new spool under `$TMPDIR`, locked; stale ones are removed first.
fn make_spool() -> Result<(tempfile::TempDir, bale_format::files::DirLock)> {
    let tmp = std::env::temp_dir();
    clean_stale_spools(&tmp);
    let mut attempts = 0;
    loop {
        let spool = tempfile::Builder::new()
            .prefix(&format!("{SPOOL_PREFIX}{}-", std::process::id()))
            .tempdir()
            .map_err(|e| PackError::io(&tmp, e))?;
        // Another run's clean-up may take (and remove) a spool in the moment
        // between its creation and its lock: then make another.
        match bale_format::files::DirLock::try_lock(spool.path()) {
            Ok(lock) => return Ok((spool, lock)),
            Err(_) if attempts < 5 => attempts += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Finished files waiting for an upload thread before a sender blocks.
const QUEUE: usize = 2;
/// Upload threads: files uploading at once.
const UPLOADERS: usize = 2;

/// A run into object storage that did not commit ([`RemoteOutput::finish`]).
#[derive(Debug)]
pub struct Unfinished {
    /// Why.
    pub error: PackError,
    /// The output, still to undo.
    pub output: RemoteOutput,
}

/// See the module docs.
pub struct RemoteOutput {
    publisher: Arc<Publisher>,
    spool: Option<tempfile::TempDir>,
    /// Held while the run lives: the spool is not stale.
    _spool_lock: bale_format::files::DirLock,
    dir: PathBuf,
    tx: Option<SyncSender<String>>,
    workers: Vec<JoinHandle<()>>,
    error: Arc<Mutex<Option<StorageError>>>,
    uploaded: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for RemoteOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteOutput")
            .field("url", &self.publisher.url())
            .field("spool", &self.dir)
            .finish_non_exhaustive()
    }
}

/// Whether `output` is a URL: the command writes to object storage.
pub fn is_remote(output: &Path) -> bool {
    bale_storage::is_url(output)
}

impl RemoteOutput {
    /// Takes the prefix `url` (its lock and checks; with `force`, clears
    /// bale's objects there) and makes the spool. `cancel` is the command's
    /// Ctrl-C flag: it stops uploads between parts, and an upload error sets
    /// it so the command stops writing.
    ///
    /// # Errors
    /// As [`Publisher::open`] ([`PackError::Storage`]); a spool that cannot be made.
    pub fn open(
        url: &Path,
        storage: &StorageOptions,
        force: bool,
        cancel: Arc<AtomicBool>,
        alongside: Option<&[String]>,
        inputs: Vec<String>,
    ) -> Result<RemoteOutput> {
        let take = |url: &str, opts| match alongside {
            Some(names) => Publisher::open_alongside(url, storage, opts, names),
            None => Publisher::open(url, storage, opts),
        };
        Self::take(url, storage, force, cancel, inputs, |u, o| {
            take(u, o).map(|p| (p, None))
        })
        .map(|(r, _)| r)
    }

    /// As [`RemoteOutput::open`] for `bale pack --append`: takes the prefix
    /// over the dataset there ([`Publisher::open_append`]), and returns what
    /// it found (`None`: an empty prefix, for a new dataset).
    ///
    /// # Errors
    /// As [`RemoteOutput::open`].
    pub fn open_append(
        url: &Path,
        storage: &StorageOptions,
        cancel: Arc<AtomicBool>,
    ) -> Result<(RemoteOutput, Option<Found>)> {
        Self::take(url, storage, false, cancel, Vec::new(), |u, o| {
            Publisher::open_append(u, storage, o)
        })
    }

    fn take(
        url: &Path,
        storage: &StorageOptions,
        force: bool,
        cancel: Arc<AtomicBool>,
        inputs: Vec<String>,
        open: impl FnOnce(
            &str,
            WriteOptions,
        ) -> std::result::Result<(Publisher, Option<Found>), StorageError>,
    ) -> Result<(RemoteOutput, Option<Found>)> {
        let url = url
            .to_str()
            .ok_or_else(|| PackError::Option(format!("{}: not a UTF-8 URL", url.display())))?;
        let mut opts = WriteOptions::from_options(storage, force)?;
        opts.inputs = inputs;
        opts.cancel = Some(Arc::clone(&cancel));
        // What killed runs left in the spool goes whatever this run's fate
        // (a refused rerun included).
        clean_stale_spools(&std::env::temp_dir());
        let (publisher, found) = open(url, opts)?;
        let publisher = Arc::new(publisher);
        let (spool, spool_lock) = make_spool()?;
        let dir = spool.path().join("out");
        // The upload makes the dataset durable, not the spool's copy.
        bale_format::atomic::mark_scratch(spool.path());
        let (tx, rx) = sync_channel::<String>(QUEUE);
        let error = Arc::new(Mutex::new(None));
        let uploaded = Arc::new(AtomicU64::new(0));
        let rx = Arc::new(Mutex::new(rx));
        let mut workers = Vec::new();
        for i in 0..UPLOADERS {
            let (rx, publisher, error, uploaded, dir, cancel) = (
                Arc::clone(&rx),
                Arc::clone(&publisher),
                Arc::clone(&error),
                Arc::clone(&uploaded),
                dir.clone(),
                Arc::clone(&cancel),
            );
            let w = std::thread::Builder::new()
                .name(format!("bale-upload-{i}"))
                .spawn(move || upload_loop(&rx, &publisher, &dir, &cancel, &error, &uploaded))
                .map_err(|e| PackError::io(std::env::temp_dir(), e))?;
            workers.push(w);
        }
        Ok((
            RemoteOutput {
                publisher,
                spool: Some(spool),
                _spool_lock: spool_lock,
                dir,
                tx: Some(tx),
                workers,
                error,
                uploaded,
                stop: cancel,
            },
            found,
        ))
    }

    /// The local directory the command writes into.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The prefix's URL.
    pub fn url(&self) -> &str {
        self.publisher.url()
    }

    /// Queues the finished file `name` of the spool for upload; blocks while
    /// [`QUEUE`] files wait.
    pub fn send(&self, name: &str) {
        if let Some(tx) = &self.tx {
            // A closed queue means the upload thread stopped on an error,
            // which `finish` reports.
            let _ = tx.send(name.to_owned());
        }
    }

    /// The upload error that stopped the upload thread, if one did.
    pub fn take_error(&self) -> Option<StorageError> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Waits for the queued uploads, uploads the spool's other files, then
    /// `bale.json`, last. Returns the bytes uploaded.
    ///
    /// # Errors
    /// The first upload error ([`PackError::Storage`]); a spool without
    /// `bale.json`; the commit's. The output comes back with the error, for
    /// the caller to undo the run and say what that left
    /// ([`RemoteOutput::abort`], [`RemoteOutput::taken_over`]).
    pub fn finish(mut self) -> std::result::Result<u64, Box<Unfinished>> {
        match self.try_finish() {
            Ok(n) => Ok(n),
            Err(error) => Err(Box::new(Unfinished {
                error,
                output: self,
            })),
        }
    }

    fn try_finish(&mut self) -> Result<u64> {
        self.join();
        if let Some(e) = self.take_error() {
            return Err(e.into());
        }
        if self.stop.load(Ordering::Relaxed) {
            return Err(StorageError::Cancelled.into());
        }
        // A run beside others (`bale index -o URL`) replaces the old
        // dataset's objects only now, with all it uploads at hand. From
        // then on it finishes (its indexes are small): stopping at the
        // first Ctrl-C would leave neither the old dataset nor the new
        // one. A second Ctrl-C still exits at once.
        let replaced = self.publisher.replace_alongside()?;
        let never = AtomicBool::new(false);
        let stop: &AtomicBool = if replaced { &never } else { &self.stop };
        let mut rest: Vec<String> = std::fs::read_dir(&self.dir)
            .map_err(|e| PackError::io(&self.dir, e))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| {
                n != bale_format::MANIFEST_NAME && !n.starts_with(bale_format::atomic::TEMP_PREFIX)
            })
            .collect();
        rest.sort();
        for name in &rest {
            // Ctrl-C stops an upload between parts.
            let n = self
                .publisher
                .upload_file(&self.dir.join(name), name, stop)?;
            self.uploaded.fetch_add(n, Ordering::Relaxed);
        }
        if stop.load(Ordering::Relaxed) {
            return Err(StorageError::Cancelled.into());
        }
        let manifest_path = self.dir.join(bale_format::MANIFEST_NAME);
        let manifest =
            std::fs::read(&manifest_path).map_err(|e| PackError::io(&manifest_path, e))?;
        let n = manifest.len() as u64;
        self.publisher.commit(manifest.into())?;
        Ok(self.uploaded.load(Ordering::Relaxed) + n)
    }

    /// Undoes the run in the bucket now.
    ///
    /// # Errors
    /// The first object that could not be removed (a rerun with `--force`
    /// clears what remains).
    pub fn abort(mut self) -> Result<()> {
        self.join();
        Ok(self.publisher.abort()?)
    }

    /// Whether what `--force` would replace under the prefix is still
    /// there, untouched: the run has not written anything yet
    /// ([`Publisher::kept_old`]).
    pub fn kept_old(&self) -> bool {
        self.publisher.kept_old()
    }

    /// Whether the run began to remove what `--force` replaces under the
    /// prefix ([`Publisher::removed_old`]).
    pub fn removed_old(&self) -> bool {
        self.publisher.removed_old()
    }

    /// Undoes the run in the bucket now, as [`RemoteOutput::abort`], and
    /// says what that left.
    pub fn undo(mut self, run: Run, interrupted: bool) -> Left {
        self.join();
        undo(&self.publisher, run, interrupted)
    }

    fn join(&mut self) {
        self.tx = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Undoes `publisher`'s run and says what that left: the old dataset as
/// it was, gone or partly, a lock kept, or another run's objects.
fn undo(publisher: &Publisher, run: Run, interrupted: bool) -> Left {
    // Taken before the undo, which replaces nothing.
    let (kept_old, removed_old) = (publisher.kept_old(), publisher.removed_old());
    let untouched_old = publisher.kept_old_after_failed_clear();
    let undone = publisher.abort();
    let undo = match undone {
        Ok(()) if publisher.taken_over() => Undo::TakenOver,
        Ok(()) if kept_old => Undo::NothingWritten,
        Ok(()) if publisher.kept_lock() => Undo::LockKept(LockReason::OldDatasetLeft),
        Ok(()) => Undo::Removed,
        Err(e) if publisher.kept_for_late() => {
            Undo::LockKept(LockReason::LateWrites(e.to_string()))
        }
        Err(e) => Undo::Unfinished(e.to_string()),
    };
    let old = if removed_old {
        Old::Removed
    } else if untouched_old {
        Old::ClearFailed
    } else {
        Old::None
    };
    Left {
        output: publisher.url().to_owned(),
        remote: true,
        run,
        interrupted,
        undo,
        old,
    }
}

impl Drop for RemoteOutput {
    fn drop(&mut self) {
        self.join();
        let _ = self.publisher.abort();
        self.spool.take();
    }
}

fn upload_loop(
    rx: &Mutex<Receiver<String>>,
    publisher: &Publisher,
    dir: &Path,
    cancel: &AtomicBool,
    error: &Mutex<Option<StorageError>>,
    uploaded: &AtomicU64,
) {
    loop {
        let next = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok(name) = next else {
            return;
        };
        let local = dir.join(&name);
        match publisher.upload_file(&local, &name, cancel) {
            Ok(n) => {
                uploaded.fetch_add(n, Ordering::Relaxed);
                // The bucket holds it now: the spool's copy can go.
                let _ = std::fs::remove_file(&local);
            }
            Err(e) => {
                // Once the command is cancelled (Ctrl-C, SIGTERM), it removes
                // what it wrote, queued files included: a failure then is the
                // cancellation's, not an error to report in its place.
                let cancelled =
                    matches!(e, StorageError::Cancelled) || cancel.load(Ordering::SeqCst);
                if !cancelled {
                    // The first error is the cause; a second uploader's
                    // is most likely a consequence.
                    error
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert(e);
                }
                // Stop the command: it would write for nothing.
                cancel.store(true, Ordering::SeqCst);
                return;
            }
        }
    }
}

/// Joins the parts written by `bale pack --part I/N -o URL` (`parts`, their
/// URLs, in any order) into the prefix `output` of the same bucket: each
/// part's objects are checked against its manifest (shard sizes, index
/// checksums), copied on the server to their merged names
/// ([`Publisher::copy_from`]: no shard byte passes through this machine),
/// and the merged manifest is written last. The parts are left whole. The
/// merged objects are the bytes [`crate::merge`] writes for the same parts.
///
/// # Errors
/// [`PackError::Merge`] naming the part and the problem; [`PackError::Option`]
/// when the output is one of the parts; [`PackError::Cancelled`] when
/// `cancel` is set; storage errors. On error, the objects this run copied
/// are deleted and no manifest is written; [`Failed::left`] says what is
/// under `output`.
pub(crate) fn merge_remote(
    parts: &[String],
    output: &str,
    storage: &StorageOptions,
    opts: &crate::MergeOptions,
    cancel: &Arc<AtomicBool>,
) -> std::result::Result<crate::MergeSummary, Failed> {
    let start = std::time::Instant::now();
    let (publisher, stores, order, plan) = take_merge(parts, output, storage, opts, cancel)
        .map_err(|error| {
            // Before the output was taken (--force watching a lock, a part
            // that cannot be read): nothing was written there.
            let interrupted = error.is_cancel();
            let undo = if !interrupted
                && (error.left_output_untouched() || matches!(error, PackError::Merge { .. }))
            {
                Undo::Refused
            } else {
                Undo::Untouched
            };
            Failed::new(
                error,
                Left {
                    output: output.to_owned(),
                    remote: true,
                    run: Run::Merge,
                    interrupted,
                    undo,
                    old: Old::None,
                },
            )
        })?;
    let copied = (|| -> Result<()> {
        for f in &plan.files {
            if cancel.load(Ordering::Relaxed) {
                return Err(PackError::Cancelled);
            }
            publisher.copy_from(&stores[order[f.part]], &f.from, &f.to)?;
        }
        Ok(publisher.commit(plan.manifest.to_bytes().into())?)
    })();
    if let Err(error) = copied {
        // A Ctrl-C too: what the undo left is said after "interrupted".
        let interrupted = error.is_cancel();
        return Err(Failed::new(
            error,
            undo(&publisher, Run::Merge, interrupted),
        ));
    }
    let m = &plan.manifest;
    Ok(crate::MergeSummary {
        output: output.to_owned(),
        parts: plan.count,
        shards: m.shards.len() as u64,
        samples: m.samples,
        bytes: m.bytes,
        renamed: 0,
        copied: plan.files.len() as u64,
        skipped: m.skipped,
        seconds: start.elapsed().as_secs_f64(),
        recovered: 0,
    })
}

/// The checks of [`merge_remote`], then its output taken: the publisher,
/// the parts' stores, their order in the plan, and the plan.
fn take_merge(
    parts: &[String],
    output: &str,
    storage: &StorageOptions,
    opts: &crate::MergeOptions,
    cancel: &Arc<AtomicBool>,
) -> Result<(
    Publisher,
    Vec<bale_storage::Store>,
    Vec<usize>,
    crate::MergePlan,
)> {
    use bale_format::{Manifest, ShardIndex, parse_hex64};
    use bale_storage::Store;

    let merr = |url: &str, what: String| PackError::Merge {
        path: PathBuf::from(url),
        what,
    };
    let mut stores = Vec::new();
    let mut read = Vec::new();
    for url in parts {
        if url.trim_end_matches('/') == output.trim_end_matches('/') {
            return Err(PackError::Option(format!(
                "the output {output} is one of the parts; merge into a new prefix"
            )));
        }
        let store = Store::open(url, storage)?;
        let bytes =
            match store
                .object(bale_format::MANIFEST_NAME)?
                .get_sized(2, 64 << 20, "manifest")
            {
                Ok(b) => b,
                Err(StorageError::NotFound { .. }) => {
                    return Err(merr(
                        url,
                        "it has no bale.json: the part did not finish (or is not a part)".into(),
                    ));
                }
                Err(e) => return Err(e.into()),
            };
        let manifest = Manifest::from_slice(&bytes, Path::new(&format!("{url}/bale.json")))?;
        read.push((PathBuf::from(url), manifest));
        stores.push(store);
    }
    let manifests: Vec<Manifest> = read.iter().map(|(_, m)| m.clone()).collect();
    let mut plan = crate::plan_merge(read)?;
    // The plan sorted the parts by index: each one's store again.
    let order: Vec<usize> = plan
        .parts
        .iter()
        .map(|d| parts.iter().position(|p| Path::new(p) == d).unwrap_or(0))
        .collect();
    let mut indexes = Vec::new();
    let mut shard_urls = Vec::new();
    for &i in &order {
        let (store, manifest) = (&stores[i], &manifests[i]);
        for s in &manifest.shards {
            let shard = store.object(&s.file)?;
            shard_urls.push(shard.url().to_string());
            let len = shard.head()?;
            if len != s.bytes {
                return Err(merr(
                    store.url(),
                    format!(
                        "{} is {len} bytes, its manifest says {}",
                        shard.url(),
                        s.bytes
                    ),
                ));
            }
            let index = store.object(&s.index)?;
            let bytes = index.get_sized(0, 1 << 34, "index")?;
            let parsed = ShardIndex::from_bytes(bytes.to_vec(), index.url())?;
            if Some(parsed.checksum()) != parse_hex64(&s.index_xxh3) {
                return Err(merr(
                    store.url(),
                    format!(
                        "{} does not match the checksum in its manifest",
                        index.url()
                    ),
                ));
            }
            indexes.push(parsed);
        }
    }
    crate::merge::check_shared_keys(
        &mut plan,
        &indexes.iter().collect::<Vec<_>>(),
        |k| shard_urls[k].clone(),
        opts.allow_duplicate_keys,
    )?;
    drop(indexes);
    // Every copy must be one the server can make, checked before the output
    // is taken (with --force, cleared).
    let out_store = Store::open(output, storage)?;
    if let Some(far) = stores.iter().find(|s| !s.same_client(&out_store)) {
        return Err(merr(
            far.url(),
            format!(
                "bale merge copies on the server, which reaches only objects of the output's \
                 bucket and endpoint ({output}); merge parts of one bucket, or download them \
                 and merge locally"
            ),
        ));
    }
    let mut write = WriteOptions::from_options(storage, opts.force)?;
    write.cancel = Some(Arc::clone(cancel));
    write.inputs = stores
        .iter()
        .zip(&manifests)
        .flat_map(|(store, m)| {
            let names = m.shards.iter().flat_map(|s| [&s.file, &s.index]);
            std::iter::once(format!("{}/{}", store.url(), bale_format::MANIFEST_NAME))
                .chain(names.map(|n| format!("{}/{n}", store.url())))
        })
        .collect();
    let publisher = Publisher::open(output, storage, write)?;
    Ok((publisher, stores, order, plan))
}
