//! Writing a dataset to object storage: [`Publisher`].
//!
//! The rules are those of a local output directory (docs/reliability.md),
//! carried over to a prefix in a bucket:
//! - **One writer.** A run takes the prefix's lock object (`.bale-tmp-lock`,
//!   created with a conditional PUT, `If-None-Match: *`); a second run is
//!   refused at once.
//! - **Nothing replaced by surprise.** A prefix that holds any object is
//!   refused unless `force`; with `force`, the old `bale.json` goes first,
//!   then the uploads and objects named like bale's output (direct children
//!   of the prefix only). Objects bale did not write are never deleted, and
//!   shards of bale's names are deleted only beside a manifest or a lock a
//!   killed run left (else they may be the user's). A run that writes
//!   beside others ([`Publisher::open_alongside`]: `bale index -o URL`)
//!   only checks at the open, and deletes the old objects when it has all
//!   it will upload ([`Publisher::replace_alongside`]). A run that adds to
//!   the dataset there ([`Publisher::open_append`]: `bale pack --append`)
//!   deletes nothing of it and replaces only its `bale.json`, at the
//!   commit, if it is still the version the run read.
//! - **Shards stream out in parts**, at most [`WriteOptions::parts_in_flight`]
//!   parts of [`WriteOptions::part_size`] bytes in memory at once. Each
//!   multipart upload is recorded in a small marker object under bale's
//!   temporary prefix while it is open, so that a rerun with `force` can
//!   abort it even after the first run was killed with SIGKILL.
//! - **`bale.json` last**, as the commit point ([`Publisher::commit`]): a
//!   reader never sees a manifest naming a missing or partial object. A
//!   manifest whose PUT landed after another run took the prefix over (the
//!   lock read again is not this run's last version) is withdrawn.
//! - **Failure undoes the run.** Dropped (or [`Publisher::abort`]ed) without
//!   a commit, the publisher aborts its open uploads and deletes every
//!   object it wrote, markers and lock included; the lock stays, with a
//!   note, when a request of the run got no answer and may still land
//!   (`--force` then waits it out before it writes).
//! - **What it wrote is there.** Just before and just after the manifest,
//!   a listing checks every object the run wrote, at its size: a late
//!   request of an earlier run that removed or replaced one fails the run,
//!   its manifest withdrawn.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use futures::StreamExt;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

use crate::error::{Result, StorageError, from_object_store};
use crate::options::StorageOptions;
use crate::runtime::{self, Pending};
use crate::store::Store;

mod clear;
mod commit;
mod delete;
mod lock;
mod undo;
mod upload;
mod wait;

use clear::*;
use commit::*;
use delete::*;
use lock::*;
use upload::*;
use wait::*;

/// The name of the lock object a writing run holds under the prefix.
pub const LOCK_NAME: &str = ".bale-tmp-lock";

/// The prefix of the marker objects that record open multipart uploads.
const UPLOAD_MARKER: &str = ".bale-tmp-upload-";

/// The manifest's name (written last).
const MANIFEST: &str = "bale.json";

/// How a [`Publisher`] writes.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Replace bale's objects under a prefix that holds some.
    pub force: bool,
    /// Bytes per part of a multipart upload (at least 5 MiB, S3's minimum;
    /// raised for files so large that 10,000 parts would not hold them).
    /// Files no larger than one part go up in a single PUT.
    pub part_size: usize,
    /// Parts uploading at once; with `part_size`, the memory bound of an upload.
    pub parts_in_flight: usize,
    /// URLs of the objects the run reads (its source's manifest, shards and
    /// indexes): `--force` refuses to delete any of them, however the
    /// output's URL spells the same object.
    pub inputs: Vec<String>,
    /// Set to stop the run (Ctrl-C): `--force` stops watching a lock at
    /// once, with [`StorageError::Cancelled`].
    pub cancel: Option<Arc<AtomicBool>>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            force: false,
            part_size: DEFAULT_PART_SIZE,
            parts_in_flight: DEFAULT_PARTS_IN_FLIGHT,
            inputs: Vec::new(),
            cancel: None,
        }
    }
}

/// The default part size: 32 MiB (storage option `upload_part_mib`): a
/// 1 GiB shard is 32 requests. On a local SeaweedFS, 8 and 32 MiB parts cost
/// the server the same CPU (docs/benchmarks.md).
pub const DEFAULT_PART_SIZE: usize = 32 << 20;

/// The default number of parts in flight per upload: 2, so 64 MiB of parts
/// in memory (storage option `upload_parts_in_flight`).
pub const DEFAULT_PARTS_IN_FLIGHT: usize = 2;

impl WriteOptions {
    /// The defaults, with the part size and parts in flight of the storage
    /// options `upload_part_mib` (5 to 5120) and `upload_parts_in_flight`
    /// (1 to 64) when they are set.
    ///
    /// # Errors
    /// [`StorageError::BadOption`] for a value out of range.
    pub fn from_options(options: &StorageOptions, force: bool) -> Result<WriteOptions> {
        let mut o = WriteOptions {
            force,
            ..WriteOptions::default()
        };
        if let Some(mib) = options.number("upload_part_mib", 5, 5120)? {
            o.part_size = mib << 20;
        }
        if let Some(n) = options.number("upload_parts_in_flight", 1, 64)? {
            o.parts_in_flight = n;
        }
        Ok(o)
    }
}

#[derive(Debug, Default)]
struct Written {
    /// Names this run created (objects and markers), in order.
    names: Vec<String>,
    /// Open multipart uploads: (name, upload id).
    open: Vec<(String, String)>,
    /// The size of each object this run wrote, where it knows it (not the
    /// server-side copies of `merge`), and the ETag the store answered its
    /// write with, where it gave one.
    sizes: std::collections::HashMap<String, (u64, Option<String>)>,
}

/// A run writing a dataset under a prefix in object storage; see the module docs.
pub struct Publisher {
    store: Store,
    client: Arc<dyn ObjectStore>,
    /// The client for DELETEs ([`Store::client_without_retries`]): this
    /// run sends each attempt itself, and knows which may still land.
    once: Arc<dyn ObjectStore>,
    /// The same, sending a DELETE per object, for S3 when a key holds a
    /// word the S3 client takes, anywhere in a bulk answer, for a server
    /// error ([`SERVER_ERROR_WORDS`]).
    once_single: Option<Arc<dyn ObjectStore>>,
    mp: Arc<dyn MultipartStore>,
    lister: Option<crate::uploads::S3Lister>,
    run: String,
    opts: WriteOptions,
    markers: AtomicU64,
    written: Mutex<Written>,
    /// Where the run is: writing, or ended by its commit or its undo.
    phase: Mutex<Phase>,
    /// Whether this run holds the lock object (on a store without
    /// conditional PUTs, taken by a GET and a plain PUT: best effort).
    locked: AtomicBool,
    /// Whether a lock object was there before this run's, left by a run
    /// that had claimed the prefix (see [`Publisher::claim`]) and ended
    /// without its manifest: the shards beside it are a run's.
    found_claim: bool,
    /// When the lock this run took over was last written (server time, ms
    /// since the epoch): the killed run's last refresh.
    found_at: Option<i64>,
    /// The lock object says the prefix is claimed: its checks passed, and
    /// the objects of bale's names under it are this run's to replace.
    claimed: Arc<AtomicBool>,
    /// Held while the lock object is written (a refresh, the claim), so
    /// that a refresh never puts back a body from before the claim.
    lock_write: Arc<Mutex<()>>,
    /// Writes the lock object only over the version this run wrote last.
    lock_writer: Arc<LockWriter>,
    /// The lock marks objects of an earlier run (inherited from a killed
    /// run's claimed lock, or from this run's claim until it has cleared
    /// the prefix): undoing this run keeps it, so that a rerun with --force
    /// can still clear them.
    marks_leftovers: AtomicBool,
    /// Another run took the lock over (`--force` on a run that had stopped
    /// refreshing it, seen by the heartbeat): this run may no longer write,
    /// commit or delete shared names.
    lost: Arc<AtomicBool>,
    heartbeat: Mutex<Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>>,
    /// The manifest this run sent, once it did.
    manifest: Mutex<Option<Bytes>>,
    /// No attempt to create the manifest got an answer: it may still land.
    manifest_unsure: AtomicBool,
    /// A write of this run (a PUT, a part, a copy) failed with no definite
    /// answer ([`may_land`]): it may still land, after the run has ended.
    unanswered: AtomicBool,
    /// The undo kept this run's lock over what it left ([`Publisher::kept_lock`]).
    kept_lock: AtomicBool,
    /// A DELETE of this run removed an object, or got no answer and may
    /// have ([`Publisher::delete_chunk`]).
    deleted_any: AtomicBool,
    /// Until when a DELETE of this run that got no answer may still land
    /// (its attempt's start plus one request timeout), when one did.
    deletes_land_by: Mutex<Option<std::time::Instant>>,
    /// The undo removed everything but the lock, kept only because a
    /// request of the run may still land ([`Publisher::kept_for_late`]).
    kept_for_late: AtomicBool,
    /// How long after its lock's last refresh a request of the run whose
    /// lock this run took over may land: its request timeout
    /// ([`LockBody::timeout`]), or the longer wait its note asked for
    /// ([`LockBody::unanswered`]).
    found_wait: std::time::Duration,
    /// What this run's lock carries over from the lock it took over
    /// ([`Carry`]); every write of the lock says it.
    carry: Arc<Mutex<Carry>>,
    /// What `--force` replaces under the prefix, and how far clearing it
    /// went ([`Publisher::ensure_cleared`]).
    clear: Mutex<Clear>,
    /// What the run does with what is under the prefix ([`Mode`]).
    mode: Mode,
}

/// What a run does with what is under its prefix.
enum Mode {
    /// A new dataset: the prefix is empty, or `--force` clears bale's
    /// objects there.
    Fresh,
    /// Beside others ([`Publisher::open_alongside`]): these names, replaced
    /// only by [`Publisher::replace_alongside`].
    Alongside(Vec<String>),
    /// Over the dataset there ([`Publisher::open_append`]): nothing of it
    /// is deleted; the commit replaces its `bale.json` only if it is still
    /// the one read (`version`, `old`), and an undo puts `old` back over a
    /// manifest of this run that landed.
    Append { version: UpdateVersion, old: Bytes },
}

/// Where a run is. It ends once: committed, or undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Opening the prefix or writing: neither committed nor undone.
    Running,
    /// Its manifest is committed ([`Publisher::commit`]): nothing is undone.
    Committed,
    /// [`Publisher::abort`] ran: it runs once (a second run would rewrite
    /// the lock it kept, and the note in it).
    Undone,
}

/// What [`Publisher::open_with`] opens for.
#[derive(Clone, Copy)]
pub(super) enum Want<'a> {
    Fresh,
    Alongside(&'a [String]),
    Append,
}

/// The dataset a run opened by [`Publisher::open_append`] adds to, as read
/// under the run's lock.
#[derive(Debug, Clone)]
pub struct Found {
    /// Its `bale.json`.
    pub manifest: Bytes,
    /// The name of every object under the prefix (relative to it), but the
    /// lock's: new shards are numbered after every shard name there.
    pub names: Vec<String>,
}

/// The metadata key (`x-amz-meta-bale-run` on S3) of the run that wrote a
/// manifest.
const RUN_METADATA: &str = "bale-run";

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("url", &self.store.url())
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Publisher {
    /// Takes the prefix at `url` for writing: its lock, then the checks of
    /// the module docs; with `force`, clears bale's objects there.
    ///
    /// # Errors
    /// [`StorageError::BadUrl`] for a URL bale cannot write (`https://`);
    /// [`StorageError::Exists`] when another run holds the lock or the
    /// prefix holds objects and `force` is off; request errors.
    pub fn open(url: &str, options: &StorageOptions, opts: WriteOptions) -> Result<Publisher> {
        Ok(Self::open_with(url, options, opts, Want::Fresh)?.0)
    }

    /// As [`Publisher::open`], for a run that adds to the dataset under the
    /// prefix (`bale pack --append`): the lock is taken as for a new
    /// dataset, but over a prefix that holds one, whose objects the run
    /// never deletes or rewrites. Returns the dataset found (its
    /// `bale.json` and the names there), or `None` for an empty prefix,
    /// which gets a new dataset as [`Publisher::open`] would. The commit
    /// then replaces `bale.json` only if it is still the version read: by
    /// a conditional PUT on its ETag (`If-Match`), after a read under the
    /// lock that compares it (for a store that ignores `If-Match`).
    ///
    /// # Errors
    /// As [`Publisher::open`] (a prefix with objects but no `bale.json` is
    /// refused as there); [`StorageError::BadOption`] with `force`.
    pub fn open_append(
        url: &str,
        options: &StorageOptions,
        opts: WriteOptions,
    ) -> Result<(Publisher, Option<Found>)> {
        if opts.force {
            return Err(StorageError::BadOption {
                key: "force".into(),
                what: "an append adds to the dataset there: it never replaces it".into(),
            });
        }
        Self::open_with(url, options, opts, Want::Append)
    }

    /// As [`Publisher::open`], for a command that writes its objects beside
    /// others (`bale index -o URL` beside the tars it indexes): only the
    /// objects `names` must be absent; with `force`, those (and open uploads
    /// of them) are replaced, and nothing else under the prefix is touched.
    ///
    /// # Errors
    /// As [`Publisher::open`].
    pub fn open_alongside(
        url: &str,
        options: &StorageOptions,
        opts: WriteOptions,
        names: &[String],
    ) -> Result<Publisher> {
        Ok(Self::open_with(url, options, opts, Want::Alongside(names))?.0)
    }

    fn open_with(
        url: &str,
        options: &StorageOptions,
        opts: WriteOptions,
        want: Want<'_>,
    ) -> Result<(Publisher, Option<Found>)> {
        let store = Store::open(url, options)?;
        let Some((mp, lister)) = store.multipart_client()? else {
            return Err(StorageError::BadUrl {
                url: url.to_owned(),
                what: "bale writes datasets to s3://, gs:// and az:// URLs; an https:// server is read-only to it".into(),
            });
        };
        let client = store.client()?;
        let once = store.client_without_retries()?;
        let once_single = if store.deletes_in_one_request() {
            Some(store.client_single_deletes()?)
        } else {
            None
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mut p = Publisher {
            store,
            client,
            once,
            once_single,
            deletes_land_by: Mutex::new(None),
            deleted_any: AtomicBool::new(false),
            kept_lock: AtomicBool::new(false),
            mp,
            lister,
            run: format!("{:x}-{:x}", std::process::id(), nanos & 0xffff_ffff_ffff),
            opts,
            markers: AtomicU64::new(0),
            written: Mutex::new(Written::default()),
            phase: Mutex::new(Phase::Running),
            locked: AtomicBool::new(false),
            found_claim: false,
            found_at: None,
            claimed: Arc::new(AtomicBool::new(false)),
            lock_write: Arc::new(Mutex::new(())),
            lock_writer: Arc::new(LockWriter::default()),
            marks_leftovers: AtomicBool::new(false),
            lost: Arc::new(AtomicBool::new(false)),
            heartbeat: Mutex::new(None),
            manifest: Mutex::new(None),
            manifest_unsure: AtomicBool::new(false),
            unanswered: AtomicBool::new(false),
            kept_for_late: AtomicBool::new(false),
            found_wait: std::time::Duration::ZERO,
            carry: Arc::default(),
            clear: Mutex::new(Clear::Nothing),
            mode: match want {
                Want::Alongside(names) => Mode::Alongside(names.to_vec()),
                Want::Fresh | Want::Append => Mode::Fresh,
            },
        };
        // A run that writes beside objects it leaves (an index of tars in
        // place) never claims the prefix, not even a killed run's claim it
        // takes over: kept fresh by its heartbeat, that claim would date the
        // tars it indexes as a run's leftovers, for a later --force to clear.
        p.take_lock(want)?;
        // Beside others, what is there is only checked now: the old
        // dataset stays whole until the run has all it will upload
        // (`replace_alongside`), so a run that fails before leaves it.
        let checked = match want {
            Want::Alongside(names) => p.check_names(names).map(|_| None),
            Want::Fresh => p.check_and_clear().map(|()| None),
            Want::Append => p.find_dataset(),
        };
        match checked {
            Ok(found) => Ok((p, found)),
            Err(e) => {
                let _ = p.abort();
                Err(e)
            }
        }
    }

    /// For [`Publisher::open_append`], under the lock: the dataset there,
    /// read with its version; an empty prefix is taken as
    /// [`Publisher::open`] takes it, a prefix with objects and no
    /// `bale.json` refused as there.
    fn find_dataset(&mut self) -> Result<Option<Found>> {
        let names: Vec<String> = self
            .list()?
            .into_iter()
            .filter(|n| n != LOCK_NAME)
            .collect();
        if !names.iter().any(|n| n == MANIFEST) {
            self.check_and_clear()?;
            return Ok(None);
        }
        let path = self.path(MANIFEST)?;
        let seen = read_seen(&self.client, &path)
            .map_err(|e| from_object_store(&self.url_of(MANIFEST), None, e))?
            .ok_or_else(|| StorageError::Changed {
                url: self.url_of(MANIFEST),
                what:
                    "it was listed, then gone: something deleted it while this run took the prefix"
                        .into(),
            })?;
        if seen.bytes.len() as u64 > bale_format::MAX_MANIFEST_BYTES {
            return Err(StorageError::TooLarge {
                url: self.url_of(MANIFEST),
                len: seen.bytes.len() as u64,
                cap: bale_format::MAX_MANIFEST_BYTES,
                what: "manifest",
            });
        }
        self.mode = Mode::Append {
            version: seen.version,
            old: seen.bytes.clone(),
        };
        Ok(Some(Found {
            manifest: seen.bytes,
            names,
        }))
    }

    /// The URL of the prefix.
    pub fn url(&self) -> &str {
        self.store.url()
    }

    /// Whether another run took the prefix over while this one wrote: what
    /// this run uploaded is that run's now, and undoing this one leaves it.
    pub fn taken_over(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    fn path(&self, name: &str) -> Result<ObjPath> {
        Ok(self.store.object(name)?.obj_path().clone())
    }

    fn url_of(&self, name: &str) -> String {
        format!("{}/{name}", self.store.url())
    }

    /// Whether the run was interrupted ([`WriteOptions::cancel`]).
    fn cancelled(&self) -> bool {
        self.opts
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::SeqCst))
    }

    /// Every object under the prefix, by name relative to it.
    fn list(&self) -> Result<Vec<String>> {
        Ok(self.list_meta()?.into_iter().map(|(n, ..)| n).collect())
    }

    /// Every object under the prefix, by name relative to it, with when it
    /// was written (server time, ms since the epoch).
    fn list_dated(&self) -> Result<Vec<(String, i64)>> {
        Ok(self
            .list_meta()?
            .into_iter()
            .map(|(n, at, ..)| (n, at))
            .collect())
    }

    /// Every object under the prefix, by name relative to it, with when it
    /// was written (server time, ms since the epoch), its size and ETag.
    fn list_meta(&self) -> Result<Vec<Listed>> {
        let prefix = self.store.prefix().clone();
        let client = Arc::clone(&self.client);
        let listed = runtime::block_on(async move {
            let mut names = Vec::new();
            let mut stream = client.list(Some(&prefix));
            while let Some(meta) = stream.next().await {
                let meta = meta?;
                let rel: Vec<String> = meta
                    .location
                    .prefix_match(&prefix)
                    .map(|parts| parts.map(|p| p.as_ref().to_owned()).collect())
                    .unwrap_or_default();
                if !rel.is_empty() {
                    names.push((
                        rel.join("/"),
                        meta.last_modified.timestamp_millis(),
                        meta.size,
                        meta.e_tag,
                    ));
                }
            }
            Ok::<_, object_store::Error>(names)
        })?;
        listed.map_err(|e| from_object_store(self.store.url(), None, e))
    }

    /// Notes `e` in [`Publisher::unanswered`] when the write it ended may
    /// still land; returns it.
    fn unanswered_if(&self, e: StorageError) -> StorageError {
        if may_land(&e) {
            self.unanswered.store(true, Ordering::SeqCst);
        }
        e
    }
}

/// An object as [`Publisher::list_meta`] lists it: its name under the
/// prefix, when it was written (server time, ms since the epoch), its size
/// and its ETag.
type Listed = (String, i64, u64, Option<String>);

/// Whether a write was refused outright (a 4xx, or the run stopped before
/// it went out): it did not land.
fn refused_outright(e: &StorageError) -> bool {
    matches!(
        e,
        StorageError::Credentials { .. }
            | StorageError::NoCredentials { .. }
            | StorageError::Denied { .. }
            | StorageError::BadUrl { .. }
            | StorageError::NotFound { .. }
            | StorageError::Cancelled
            | StorageError::Request {
                status: Some(400..=499),
                ..
            }
    )
}

/// Whether a failed request may still land on the server: it got no answer
/// (a timeout, a dropped connection) or a server error, not a refusal.
fn may_land(e: &StorageError) -> bool {
    matches!(
        e,
        StorageError::Request {
            status: None | Some(500..=599),
            ..
        }
    )
}

/// Whether a request got no answer at all (a timeout, a connection cut):
/// it may land later than one sent after it.
fn no_answer(e: &StorageError) -> bool {
    matches!(e, StorageError::Request { status: None, .. })
}

/// Whether a failed request is sent again, as the client would: no
/// answer, a server error ([`may_land`]), or a store that asks for it (408,
/// 429).
fn resendable(e: &StorageError) -> bool {
    may_land(e)
        || matches!(
            e,
            StorageError::Request {
                status: Some(408 | 429),
                ..
            }
        )
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = self.abort();
        self.stop_heartbeat();
    }
}

/// An object as read (the lock, the manifest): its body, its version, when
/// it was written (server time, ms since the epoch), and the run that wrote
/// it when its metadata says ([`RUN_METADATA`]).
struct Seen {
    bytes: Bytes,
    version: UpdateVersion,
    at: i64,
    run: Option<String>,
}

/// Reads the object at `path`, `None` when there is none.
fn read_seen(
    client: &Arc<dyn ObjectStore>,
    path: &ObjPath,
) -> std::result::Result<Option<Seen>, object_store::Error> {
    let (client, path) = (Arc::clone(client), path.clone());
    let got = runtime::block_on(async move {
        let r = client.get(&path).await?;
        let version = UpdateVersion {
            e_tag: r.meta.e_tag.clone(),
            version: r.meta.version.clone(),
        };
        let at = r.meta.last_modified.timestamp_millis();
        let run = r
            .attributes
            .get(&object_store::Attribute::Metadata(RUN_METADATA.into()))
            .map(|v| v.as_ref().to_owned());
        Ok::<_, object_store::Error>(Seen {
            bytes: r.bytes().await?,
            version,
            at,
            run,
        })
    })
    .map_err(|e| runtime_failure(&e))?;
    match got {
        Ok(l) => Ok(Some(l)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A failure of the runtime around a lock request, as a store error (the
/// lock's requests answer in those).
fn runtime_failure(e: &StorageError) -> object_store::Error {
    object_store::Error::Generic {
        store: "lock",
        source: Box::new(std::io::Error::other(e.to_string())),
    }
}

/// The version a write gave, for the next conditional write over it; `None`
/// when the store gave no ETag.
fn version_of(r: &object_store::PutResult) -> Option<UpdateVersion> {
    r.e_tag.clone().map(|e| UpdateVersion {
        e_tag: Some(e),
        version: r.version.clone(),
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_requests_without_a_definite_answer_may_land() {
        let req = |status| StorageError::Request {
            url: "s3://b/k".into(),
            range: None,
            status,
            what: String::new(),
        };
        assert!(may_land(&req(None)));
        assert!(may_land(&req(Some(503))));
        assert!(!may_land(&req(Some(403))));
        assert!(!may_land(&StorageError::Cancelled));
    }
}
