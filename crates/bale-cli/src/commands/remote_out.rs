//! A command's output in object storage (`-o s3://bucket/prefix`).
//!
//! The command writes into a local spool directory (under `$TMPDIR`), as it
//! would into a local output. Each finished shard and its index are handed
//! to an upload thread ([`RemoteOut::send`]) and removed from the spool once
//! uploaded, so packing and uploading overlap and the spool holds at most
//! the shard being written and [`QUEUE`] finished ones. [`RemoteOut::finish`]
//! uploads what is left, then `bale.json`, last: the commit point. Dropped
//! unfinished (an error, Ctrl-C, SIGTERM), it undoes the run in the bucket
//! ([`bale_storage::Publisher::abort`]) and removes the spool.
//!
//! Memory: one upload at a time, each with at most
//! `parts_in_flight × part_size` bytes (4 × 32 MiB = 128 MiB by default;
//! storage options `upload_parts_in_flight`, `upload_part_mib`) in memory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::{Context, anyhow};
use bale_storage::{Publisher, StorageError, StorageOptions, WriteOptions};

/// The spool directories' name prefix; the creating process's id follows.
const SPOOL_PREFIX: &str = "bale-spool-";

/// Removes the spools of runs that were killed (SIGKILL leaves its spool):
/// directories named `bale-spool-PID-*` of this user whose process is gone.
fn clean_stale_spools(tmp: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SPOOL_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        // The entry itself, not a symlink's target, must be our directory.
        let Ok(meta) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid || pid <= 0 {
            continue;
        }
        // SAFETY: kill with signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Finished files waiting for the upload thread before a sender blocks.
const QUEUE: usize = 2;

/// See the module docs.
pub struct RemoteOut {
    publisher: Arc<Publisher>,
    spool: Option<tempfile::TempDir>,
    dir: PathBuf,
    tx: Option<SyncSender<String>>,
    worker: Option<JoinHandle<()>>,
    error: Arc<Mutex<Option<StorageError>>>,
    uploaded: Arc<Mutex<u64>>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for RemoteOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteOut")
            .field("url", &self.publisher.url())
            .field("spool", &self.dir)
            .finish_non_exhaustive()
    }
}

/// Whether `output` is a URL: the command writes to object storage.
pub fn is_remote(output: &Path) -> bool {
    bale_storage::is_url(output)
}

impl RemoteOut {
    /// Takes the prefix `url` (its lock and checks; with `force`, clears
    /// bale's objects there) and makes the spool. `cancel` is the command's
    /// Ctrl-C flag: it stops uploads between parts, and an upload error sets
    /// it so the command stops writing.
    ///
    /// # Errors
    /// As [`Publisher::open`]; a spool that cannot be made.
    pub fn open(
        url: &Path,
        storage: &StorageOptions,
        force: bool,
        cancel: Arc<AtomicBool>,
        alongside: Option<&[String]>,
    ) -> anyhow::Result<RemoteOut> {
        let url = url
            .to_str()
            .ok_or_else(|| anyhow!("{}: not a UTF-8 URL", url.display()))?;
        let opts = WriteOptions::from_options(storage, force)?;
        let publisher = Arc::new(match alongside {
            Some(names) => Publisher::open_alongside(url, storage, opts, names)?,
            None => Publisher::open(url, storage, opts)?,
        });
        clean_stale_spools(&std::env::temp_dir());
        let spool = tempfile::Builder::new()
            .prefix(&format!("{SPOOL_PREFIX}{}-", std::process::id()))
            .tempdir()
            .context("cannot make the local spool directory (under $TMPDIR) for the upload")?;
        let dir = spool.path().join("out");
        // The upload makes the dataset durable, not the spool's copy.
        bale_format::atomic::mark_scratch(spool.path());
        let (tx, rx) = sync_channel::<String>(QUEUE);
        let error = Arc::new(Mutex::new(None));
        let uploaded = Arc::new(Mutex::new(0u64));
        let worker = {
            let (publisher, error, uploaded, dir, cancel) = (
                Arc::clone(&publisher),
                Arc::clone(&error),
                Arc::clone(&uploaded),
                dir.clone(),
                Arc::clone(&cancel),
            );
            std::thread::Builder::new()
                .name("bale-upload".into())
                .spawn(move || upload_loop(&rx, &publisher, &dir, &cancel, &error, &uploaded))
                .context("cannot start the upload thread")?
        };
        Ok(RemoteOut {
            publisher,
            spool: Some(spool),
            dir,
            tx: Some(tx),
            worker: Some(worker),
            error,
            uploaded,
            stop: cancel,
        })
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
    /// The first upload error; a spool without `bale.json`.
    pub fn finish(mut self) -> anyhow::Result<u64> {
        self.join();
        if let Some(e) = self.take_error() {
            return Err(e.into());
        }
        let mut rest: Vec<String> = std::fs::read_dir(&self.dir)
            .with_context(|| format!("reading the spool {}", self.dir.display()))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| {
                n != bale_format::MANIFEST_NAME && !n.starts_with(bale_format::atomic::TEMP_PREFIX)
            })
            .collect();
        rest.sort();
        let never = AtomicBool::new(false);
        for name in &rest {
            let cancel: &AtomicBool = if self.stop.load(Ordering::Relaxed) {
                return Err(StorageError::Cancelled.into());
            } else {
                &never
            };
            let n = self
                .publisher
                .upload_file(&self.dir.join(name), name, cancel)?;
            *self.uploaded.lock().unwrap_or_else(|p| p.into_inner()) += n;
        }
        if self.stop.load(Ordering::Relaxed) {
            return Err(StorageError::Cancelled.into());
        }
        let manifest_path = self.dir.join(bale_format::MANIFEST_NAME);
        let manifest = std::fs::read(&manifest_path)
            .with_context(|| format!("reading {}", manifest_path.display()))?;
        let n = manifest.len() as u64;
        self.publisher.commit(manifest.into())?;
        let total = *self.uploaded.lock().unwrap_or_else(|p| p.into_inner()) + n;
        Ok(total)
    }

    /// Undoes the run in the bucket now, reporting what could not be removed.
    pub fn abort(mut self) -> anyhow::Result<()> {
        self.join();
        self.publisher
            .abort()
            .map_err(|e| anyhow!("{e}\nhint: what remains is cleared by a rerun with --force"))
    }

    fn join(&mut self) {
        self.tx = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl Drop for RemoteOut {
    fn drop(&mut self) {
        self.join();
        let _ = self.publisher.abort();
        self.spool.take();
    }
}

fn upload_loop(
    rx: &Receiver<String>,
    publisher: &Publisher,
    dir: &Path,
    cancel: &AtomicBool,
    error: &Mutex<Option<StorageError>>,
    uploaded: &Mutex<u64>,
) {
    for name in rx {
        let local = dir.join(&name);
        match publisher.upload_file(&local, &name, cancel) {
            Ok(n) => {
                *uploaded.lock().unwrap_or_else(|p| p.into_inner()) += n;
                // The bucket holds it now: the spool's copy can go.
                let _ = std::fs::remove_file(&local);
            }
            Err(e) => {
                if !matches!(e, StorageError::Cancelled) {
                    *error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                }
                // Stop the command: it would write for nothing.
                cancel.store(true, Ordering::SeqCst);
                return;
            }
        }
    }
}
