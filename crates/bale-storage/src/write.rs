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
const MIN_PART_SIZE: usize = 5 << 20;
const MAX_PARTS: u64 = 10_000;

/// What a marker object records: an open multipart upload.
#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    name: String,
    upload_id: String,
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
    committed: AtomicBool,
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
    /// [`Publisher::abort`] ran: it runs once (a second run would rewrite
    /// the lock it kept, and the note in it).
    aborted: AtomicBool,
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

/// What [`Publisher::open_with`] opens for.
#[derive(Clone, Copy)]
enum Want<'a> {
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

/// What `--force` replaces under a prefix, and how far clearing it went.
enum Clear {
    /// Nothing to clear.
    Nothing,
    /// Found when the run opened the prefix, to clear before its first
    /// write: the listing, and the objects of bale's names in it.
    Pending(Vec<String>, Vec<String>),
    /// Clearing failed: the run may not write. `had`: there were objects of
    /// bale's names to delete; `removed`: a DELETE of the clear removed
    /// one, or got no answer and may have; `why`: the error, for every
    /// later caller (`None`: the run was interrupted).
    Failed {
        had: bool,
        removed: bool,
        why: Option<String>,
    },
    /// Cleared. `removed`: there were objects of bale's names to delete.
    Done { removed: bool },
}

/// Whether a run still holds its lock ([`Publisher::lock_hold`]).
#[derive(PartialEq)]
enum Hold {
    Held,
    Lost,
    Unknown,
}

/// Who wrote the `bale.json` under a prefix ([`Publisher::manifest_owner`]).
enum Owner {
    /// This run.
    Ours,
    /// Another bale run (its id in the metadata), at this version.
    Run(UpdateVersion),
    /// Someone or something that left no run id (and not this run's bytes).
    Unmarked,
    /// There is none.
    Absent,
    /// It could not be read.
    Unknown,
}

/// How many times a run sends its manifest's create before it gives up
/// on learning its outcome.
const MANIFEST_ATTEMPTS: usize = 3;

/// What [`Publisher::withdraw_manifest`] found.
enum Withdrawn {
    /// This run's manifest is gone (deleted now, or never landed).
    Yes,
    /// The manifest there is another run's.
    Another,
    /// It could not tell.
    Unknown,
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
            committed: AtomicBool::new(false),
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
            aborted: AtomicBool::new(false),
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
        p.take_lock(!matches!(want, Want::Alongside(_)))?;
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

    /// Records `name` as written by this run (to delete if it is undone).
    fn record(&self, name: &str) {
        let mut w = lock(&self.written);
        if !w.names.iter().any(|n| n == name) {
            w.names.push(name.to_owned());
        }
    }

    /// Records that object `name` was written whole, `len` bytes long, and
    /// the ETag the store answered with.
    fn record_size(&self, name: &str, len: u64, e_tag: Option<String>) {
        if name != LOCK_NAME && name != MANIFEST && !name.starts_with(UPLOAD_MARKER) {
            lock(&self.written)
                .sizes
                .insert(name.to_owned(), (len, e_tag));
        }
    }

    /// Checks, by one listing of the prefix, that every object this run
    /// wrote is there, at the size it wrote and with the ETag its write was
    /// answered with. A request of a run that ended before this one took
    /// the prefix over (its undo's DELETE, a PUT of its own shard) may land
    /// late, after this run wrote the same name.
    fn check_written(&self) -> Result<()> {
        let (names, sizes) = {
            let w = lock(&self.written);
            (w.names.clone(), w.sizes.clone())
        };
        let listed: std::collections::HashMap<String, (u64, Option<String>)> = self
            .list_meta()?
            .into_iter()
            .map(|(n, _, size, e_tag)| (n, (size, e_tag)))
            .collect();
        for n in names
            .iter()
            .filter(|n| *n != LOCK_NAME && *n != MANIFEST && !n.starts_with(UPLOAD_MARKER))
        {
            let want = sizes.get(n);
            // A listing may lag behind a write on some stores, and some
            // spell an ETag there otherwise than in a write's answer: what
            // it misses or shows otherwise is asked for by name.
            let have = match listed.get(n) {
                Some(have) if want.is_none_or(|want| same_object(want, have)) => continue,
                _ => self.head_meta(n)?,
            };
            let what = match (have, want) {
                (None, _) => "it is gone".to_owned(),
                (Some((have, _)), Some((want, _))) if have != *want => {
                    format!("it is {have} bytes, where this run wrote {want}")
                }
                (Some(have), Some(want)) if !same_object(want, &have) => format!(
                    "its ETag is {}, where this run's write was answered with {}",
                    have.1.as_deref().unwrap_or_default(),
                    want.1.as_deref().unwrap_or_default()
                ),
                _ => continue,
            };
            return Err(StorageError::Changed {
                url: self.url_of(n),
                what: format!(
                    "this run wrote it, and {what}: something removed or replaced it since, most likely a request that got no answer and landed late (an earlier run's undo or upload, or a resent DELETE of this run's clear)"
                ),
            });
        }
        Ok(())
    }

    /// The size and ETag of object `name` by a HEAD; `None` when it is gone.
    fn head_meta(&self, name: &str) -> Result<Option<(u64, Option<String>)>> {
        let path = self.path(name)?;
        let client = Arc::clone(&self.client);
        match runtime::block_on(async move { client.head(&path).await })? {
            Ok(meta) => Ok(Some((meta.size, meta.e_tag))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(from_object_store(&self.url_of(name), None, e)),
        }
    }

    fn url_of(&self, name: &str) -> String {
        format!("{}/{name}", self.store.url())
    }

    /// Creates the lock object, or with `--force` takes over that of a run
    /// that ended without releasing it; with `claims`, the killed run's
    /// claim carries over.
    fn take_lock(&mut self, claims: bool) -> Result<()> {
        let path = self.path(LOCK_NAME)?;
        let client = Arc::clone(&self.client);
        let first = self.own_lock_body(false);
        let payload = PutPayload::from(first.clone());
        let created = runtime::block_on(async move {
            client
                .put_opts(&path, payload, PutOptions::from(PutMode::Create))
                .await
        })?;
        // A store without conditional PUTs gets the same protocol, best
        // effort: a lock found by a GET is another run's, and the lock is
        // written by a plain PUT (then refreshed, watched and checked alike).
        let (existed, conditional) = match created {
            Ok(r) => {
                self.lock_writer.wrote(&r);
                (false, true)
            }
            // The client sends a create again when its answer was lost; if
            // the first landed, the retry finds this run's own lock (its
            // body names the run).
            Err(object_store::Error::AlreadyExists { .. }) => match self.seen_lock()? {
                Some(l) if l.bytes.as_ref() == first.as_bytes() => {
                    // Without an ETag no write can be conditional on it.
                    if l.version.e_tag.is_some() {
                        self.lock_writer.expect(l.version);
                    }
                    (false, true)
                }
                _ => (true, true),
            },
            Err(object_store::Error::NotImplemented { .. }) => (self.get_lock()?.is_some(), false),
            Err(e) => return Err(from_object_store(&self.url_of(LOCK_NAME), None, e)),
        };
        if existed {
            if !self.opts.force {
                return Err(StorageError::Exists {
                    url: self.store.url().to_owned(),
                    what: format!(
                        "another bale run is writing here, or one was killed before it finished (its lock object {LOCK_NAME} remains); if none is running, pass --force to clear what it left"
                    ),
                });
            }
            // --force takes over the lock of a run that ended without
            // releasing it (SIGKILL), never that of a live run, which
            // refreshes it every LOCK_BEAT.
            let before = self.seen_lock()?;
            // A run that ended with requests unanswered said so in its lock:
            // they may still land, and are waited out before this run
            // writes anything the same names.
            let unanswered = before
                .as_ref()
                .and_then(|l| LockBody::parse(&l.bytes).unanswered());
            let wait = LOCK_STALE + unanswered.unwrap_or_default();
            crate::notice(&format!(
                "{}: another bale run's lock object ({LOCK_NAME}) is there; watching it for {} s before --force takes the prefix over{}",
                self.store.url(),
                secs_text(wait),
                if unanswered.is_some() {
                    " (that run said requests of it may still land)"
                } else {
                    ""
                }
            ));
            self.watch(wait)?;
            let now = self.seen_lock()?;
            if now.as_ref().map(|l| &l.bytes) != before.as_ref().map(|l| &l.bytes) {
                return Err(StorageError::Exists {
                    url: self.store.url().to_owned(),
                    what: format!(
                        "another bale run is writing here now (its lock object {LOCK_NAME} changed within {} s); --force clears only what a run that ended left",
                        secs_text(wait)
                    ),
                });
            }
            // The killed run's claim carries over: what it left stays
            // marked if this run stops before it has cleared it. Its last
            // refresh dates what it can have written.
            self.found_at = now.as_ref().map(|l| l.at);
            let said = now.as_ref().map(|l| LockBody::parse(&l.bytes));
            // Its requests may land up to its request timeout after it
            // sent them, and it sent none later than one beat after that
            // refresh: objects dated so late are still its own.
            let its_timeout = said
                .as_ref()
                .map_or(std::time::Duration::ZERO, LockBody::timeout);
            self.found_wait = (wait - LOCK_STALE).max(its_timeout);
            self.inherit_claim(claims && said.as_ref().is_some_and(|b| b.claimed));
            if let (Some(l), Some(said)) = (&now, &said) {
                // What that run's lock carried from one it took over in
                // turn (a run stopped before it cleared anything) holds.
                let old = said.carry();
                let wait_ms = self.found_wait.as_millis() as i64;
                // One beat after its last refresh (it may have sent a
                // request just before its next), its timeout, and the
                // second to which a store may round the time of a write.
                let in_flight = l.at + LOCK_BEAT.as_millis() as i64 + wait_ms + 1_000;
                *lock(&self.carry) = Carry {
                    leftovers_until: self.found_claim.then(|| {
                        old.leftovers_until
                            .unwrap_or(l.at + LEFTOVER_MARGIN_MS + wait_ms)
                    }),
                    in_flight_until: Some(
                        old.in_flight_until.map_or(in_flight, |o| o.max(in_flight)),
                    ),
                };
            }
            let body = self.own_lock_body(self.found_claim);
            // Over the very version watched: another --force taking it over
            // at the same time makes one of the two fail here.
            if let Some(l) = now.filter(|l| conditional && l.version.e_tag.is_some()) {
                self.lock_writer.expect(l.version);
            }
            self.write_lock(body).map_err(|_| StorageError::Exists {
                url: self.store.url().to_owned(),
                what: "another bale run took this prefix over at the same time; it is writing here now".into(),
            })?;
        } else if !conditional {
            self.write_lock(self.own_lock_body(false))?;
        }
        self.record(LOCK_NAME);
        self.locked.store(true, Ordering::SeqCst);
        self.start_heartbeat()?;
        if existed {
            self.wait_out_in_flight()?;
        }
        Ok(())
    }

    /// This run's request timeout, as its lock records it.
    fn timeout_ms(&self) -> u64 {
        run_timeout_ms(&self.store)
    }

    /// What this run's lock carries over ([`Carry`]).
    fn carried(&self) -> Carry {
        *lock(&self.carry)
    }

    /// This run's lock body, at beat 0 ([`LockBody::new`]), `claimed` or not.
    fn own_lock_body(&self, claimed: bool) -> String {
        LockBody::new(&self.run, 0, claimed, self.timeout_ms(), self.carried()).render()
    }

    /// Whether the run was interrupted ([`WriteOptions::cancel`]).
    fn cancelled(&self) -> bool {
        self.opts
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::SeqCst))
    }

    /// Once this run has taken over the lock of a run that ended without
    /// releasing it (killed, or stalled past [`LOCK_STALE`]): waits until
    /// a request that run sent before it ended has landed, or timed out,
    /// before this run looks at what is there and writes. A killed run
    /// leaves no note of what it had in flight; its lock's last refresh
    /// and request timeout bound it. Both ends are dated by the store's
    /// clock (the old lock's last write and this run's), so a lock left
    /// long ago costs no wait.
    fn wait_out_in_flight(&self) -> Result<()> {
        let Some(old_at) = self.found_at else {
            return Ok(());
        };
        let Some(until) = self.carried().in_flight_until else {
            return Ok(());
        };
        let Some(mine) = self.seen_lock()? else {
            return Ok(());
        };
        let left = until.saturating_sub(mine.at);
        if left <= 0 {
            return Ok(());
        }
        let left = std::time::Duration::from_millis(left as u64);
        crate::notice(&format!(
            "{}: waiting {} s before this run looks at what is there: a request of the run that left the lock, or of a killed run before it, may land until then (that lock was last refreshed {} s ago and records a request timeout of {} s)",
            self.store.url(),
            left.as_secs().max(1),
            ((mine.at - old_at).max(0) / 1000),
            self.found_wait.as_secs()
        ));
        self.watch(left)
    }

    /// Sleeps `wait` (the watch of another run's lock), in steps that see a
    /// cancel at once.
    fn watch(&self, wait: std::time::Duration) -> Result<()> {
        let end = std::time::Instant::now() + wait;
        loop {
            if self.cancelled() {
                return Err(StorageError::Cancelled);
            }
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            std::thread::sleep(left.min(std::time::Duration::from_millis(50)));
        }
    }

    /// Writes this run's lock body through [`LockWriter`]: over the version
    /// this run wrote last. Another writer meanwhile (a run that took the
    /// prefix over) makes this run lost.
    fn write_lock(&self, body: String) -> Result<()> {
        match self
            .lock_writer
            .write(&self.client, &self.path(LOCK_NAME)?, body)
        {
            Ok(()) => Ok(()),
            Err(LockWriteError::Lost) => {
                self.lost.store(true, Ordering::SeqCst);
                Err(self.lost_error())
            }
            Err(LockWriteError::Other(e)) => {
                Err(from_object_store(&self.url_of(LOCK_NAME), None, e))
            }
        }
    }

    /// The lock object as it is now ([`Seen`]), `None` when there is none.
    fn seen_lock(&self) -> Result<Option<Seen>> {
        read_seen(&self.client, &self.path(LOCK_NAME)?)
            .map_err(|e| from_object_store(&self.url_of(LOCK_NAME), None, e))
    }

    /// The lock object's bytes, `None` when there is none.
    fn get_lock(&self) -> Result<Option<Bytes>> {
        match self.get(LOCK_NAME) {
            Ok(b) => Ok(Some(b)),
            Err(StorageError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether the lock object still names this run.
    fn owns_lock(&self) -> Result<bool> {
        let body = self.get_lock()?.map(|b| LockBody::parse(&b));
        Ok(body.as_ref().and_then(LockBody::owner) == Some(self.run.as_str()))
    }

    /// Refreshes the lock every [`LOCK_BEAT`] while the run lives, so that
    /// `--force` elsewhere can tell a live run from one that was killed;
    /// notices when another run took it over.
    fn start_heartbeat(&self) -> Result<()> {
        let stop = Arc::new(AtomicBool::new(false));
        let me = HeartbeatCtx {
            store: self.store.clone(),
            client: Arc::clone(&self.client),
            run: self.run.clone(),
            claimed: Arc::clone(&self.claimed),
            lock_write: Arc::clone(&self.lock_write),
            lock_writer: Arc::clone(&self.lock_writer),
            lost: Arc::clone(&self.lost),
            stop: Arc::clone(&stop),
            path: self.path(LOCK_NAME)?,
            carry: Arc::clone(&self.carry),
        };
        let handle = std::thread::Builder::new()
            .name("bale-lock".into())
            .spawn(move || me.run())
            .map_err(|e| {
                StorageError::Runtime(format!("cannot start the lock's heartbeat: {e}"))
            })?;
        *lock(&self.heartbeat) = Some((stop, handle));
        Ok(())
    }

    fn stop_heartbeat(&self) {
        let beat = lock(&self.heartbeat).take();
        if let Some((stop, handle)) = beat {
            stop.store(true, Ordering::SeqCst);
            let _ = handle.join();
        }
    }

    fn check_not_lost(&self) -> Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(self.lost_error());
        }
        Ok(())
    }

    fn lost_error(&self) -> StorageError {
        StorageError::Exists {
            url: self.store.url().to_owned(),
            what: "another bale run took this prefix over (--force) while this one was writing; nothing of this run was committed, and what it uploaded now belongs to the other run".into(),
        }
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

    fn check_and_clear(&self) -> Result<()> {
        let mut dated: Vec<(String, i64)> = self
            .list_dated()?
            .into_iter()
            .filter(|(n, _)| n != LOCK_NAME)
            .collect();
        dated.sort();
        let names: Vec<String> = dated.iter().map(|(n, _)| n.clone()).collect();
        if names.is_empty() {
            // Nothing a killed run left: the lock dates what this run
            // writes by its own refreshes.
            lock(&self.carry).leftovers_until = None;
            self.claim()?;
            self.marks_leftovers.store(false, Ordering::SeqCst);
            return Ok(());
        }
        if !self.opts.force {
            let what = if names.iter().any(|n| n == MANIFEST) {
                format!(
                    "it already holds a dataset ({MANIFEST} and {} other objects); pass --force to replace bale's objects there (objects bale did not write are kept)",
                    names.len() - 1
                )
            } else {
                format!(
                    "it already holds {} objects (the first: {:?}); pass --force to replace bale's objects there (objects bale did not write are kept)",
                    names.len(),
                    names[0]
                )
            };
            return Err(StorageError::Exists {
                url: self.store.url().to_owned(),
                what,
            });
        }
        let doomed: Vec<String> = names
            .iter()
            .filter(|n| !n.contains('/') && (*n == MANIFEST || bale_format::is_bale_file_name(n)))
            .cloned()
            .collect();
        self.refuse_inputs(&doomed)?;
        // Tars `bale index` indexed in place are the user's: refused before
        // anything is removed, as is a manifest that cannot tell; so are
        // shard names with neither a manifest nor a killed run's lock.
        if names.iter().any(|n| n == MANIFEST) {
            self.refuse_adopted(&names)?;
        } else if !self.found_claim {
            self.refuse_unclaimed(&names, None)?;
        } else if let (Some(at), Some(until)) = (self.found_at, self.carried().leftovers_until) {
            // A claim covers what its run can have written: nothing later
            // than its last refresh, one refresh, its request timeout and a
            // margin after (or what its lock carried from a run before).
            let late: Vec<String> = dated
                .iter()
                .filter(|(_, t)| *t > until)
                .map(|(n, _)| n.clone())
                .collect();
            self.refuse_unclaimed(&late, Some(at))?;
        }
        // What is there goes only when the run writes its first object
        // ([`Publisher::ensure_cleared`]): a run that fails before (a bad
        // input, Ctrl-C while it walks the input) leaves it whole.
        *lock(&self.clear) = Clear::Pending(names, doomed);
        Ok(())
    }

    /// Clears what [`Publisher::check_and_clear`] found, once, before the
    /// run's first write; a second caller waits for the first.
    ///
    /// # Errors
    /// The clear's (every later call fails too: the prefix is not clear).
    fn ensure_cleared(&self) -> Result<()> {
        let mut state = lock(&self.clear);
        let (names, doomed) = match &*state {
            Clear::Nothing | Clear::Done { .. } => return Ok(()),
            Clear::Failed { why: None, .. } => return Err(StorageError::Cancelled),
            Clear::Failed { why: Some(why), .. } => {
                return Err(StorageError::Exists {
                    url: self.store.url().to_owned(),
                    what: format!("clearing what was there before this run failed: {why}"),
                });
            }
            Clear::Pending(names, doomed) => (names, doomed),
        };
        let had = !doomed.is_empty();
        let dataset = names.iter().any(|n| n == MANIFEST);
        let cleared = self.clear(names, doomed);
        *state = match &cleared {
            Ok(()) => Clear::Done { removed: had },
            Err(e) => {
                let removed = had && self.deleted_any.load(Ordering::SeqCst);
                // A whole dataset the clear never touched is its manifest's:
                // this run's lock need not stay over it.
                if dataset && !removed && !self.found_claim {
                    self.marks_leftovers.store(false, Ordering::SeqCst);
                }
                Clear::Failed {
                    had,
                    removed,
                    why: (!matches!(e, StorageError::Cancelled)).then(|| e.to_string()),
                }
            }
        };
        cleared
    }

    /// Whether the undo removed everything this run wrote but its lock,
    /// kept (with a note) only because a request of the run may still land:
    /// the undo's error then says so, and nothing else went wrong.
    pub fn kept_for_late(&self) -> bool {
        self.kept_for_late.load(Ordering::SeqCst)
    }

    /// Whether this run found objects of a dataset or a killed run under
    /// the prefix that `--force` would replace, and has not removed them
    /// (it fails or stops before its first write): they are as they were.
    pub fn kept_old(&self) -> bool {
        matches!(&*lock(&self.clear), Clear::Pending(_, doomed) if !doomed.is_empty())
    }

    /// Whether the undo kept this run's lock object under the prefix, over
    /// objects it could not delete or that a clear left (they stay a run's,
    /// which `--force` clears).
    pub fn kept_lock(&self) -> bool {
        self.kept_lock.load(Ordering::SeqCst)
    }

    /// Whether this run's clear of what `--force` replaces under the prefix
    /// failed before it removed any of it: what was there is as it was.
    pub fn kept_old_after_failed_clear(&self) -> bool {
        matches!(
            *lock(&self.clear),
            Clear::Failed {
                had: true,
                removed: false,
                ..
            }
        )
    }

    /// Whether this run began to remove what `--force` replaces under the
    /// prefix (a dataset, or what a killed run left): after a failure, it
    /// is gone, or partly.
    pub fn removed_old(&self) -> bool {
        matches!(
            *lock(&self.clear),
            Clear::Failed { removed: true, .. } | Clear::Done { removed: true }
        )
    }

    /// Deletes what `--force` replaces under the prefix: `names` is the
    /// listing, `doomed` the objects of bale's names in it.
    fn clear(&self, names: &[String], doomed: &[String]) -> Result<()> {
        // Claimed before anything is deleted: a run killed while it clears
        // leaves what remains marked as a run's.
        self.claim()?;
        // The manifest first: from then on the prefix is not a dataset.
        if names.iter().any(|n| n == MANIFEST) {
            self.delete(MANIFEST)?;
        }
        // Uploads a killed run left open (S3 lists them; elsewhere the
        // markers below name them): only beside a dataset or a killed run's
        // claim, since an upload of the user's own shard-000000.tar may be
        // going on in a prefix that is neither.
        let ours = names.iter().any(|n| n == MANIFEST) || self.found_claim;
        for (name, id) in self.open_uploads()? {
            if ours && !name.contains('/') && bale_format::is_bale_file_name(&name) {
                self.abort_upload(&name, &id)?;
            }
        }
        for n in names.iter().filter(|n| n.starts_with(UPLOAD_MARKER)) {
            // A marker gone since the listing was removed with its upload
            // (by the run that wrote it, ending).
            let bytes = match self.get(n) {
                Ok(b) => b,
                Err(StorageError::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            // The marker itself says bale opened the upload, whatever its
            // name: abort it (on stores without a listing of open uploads,
            // nothing else could find it again).
            if let Ok(m) = serde_json::from_slice::<Marker>(&bytes) {
                self.abort_upload(&m.name, &m.upload_id)?;
            }
            self.delete(n)?;
        }
        let rest: Vec<&str> = doomed
            .iter()
            .filter(|n| *n != MANIFEST && !n.starts_with(UPLOAD_MARKER))
            .map(String::as_str)
            .collect();
        if rest.len() > DELETES_PER_REQUEST {
            crate::notice(&format!(
                "{}: removing the {} objects --force replaces there ({DELETES_PER_REQUEST} to a request)",
                self.store.url(),
                rest.len()
            ));
        }
        self.delete_all(&rest, true)?;
        // An attempt of a DELETE above that got no answer lands before this
        // run writes, not over what it writes.
        self.wait_out_own_deletes("it writes")?;
        // Cleared: from here, undoing the run deletes what it wrote itself,
        // and the lock dates what this run writes by its own refreshes. Said
        // in the lock at once, before this run writes: killed after its first
        // shard, the killed run's older bound would refuse that shard as the
        // user's.
        if lock(&self.carry).leftovers_until.take().is_some() {
            self.claim()?;
        }
        self.marks_leftovers.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Refuses `--force` when an object it would delete is one the run
    /// reads ([`WriteOptions::inputs`]): `convert s3://b/ds -o s3://b/ds`,
    /// or a dataset whose manifest names tars under the output prefix.
    fn refuse_inputs(&self, names: &[String]) -> Result<()> {
        if self.opts.inputs.is_empty() {
            return Ok(());
        }
        for n in names {
            let url = self.url_of(n);
            let Some(key) = crate::store::object_key(&url) else {
                continue;
            };
            if self
                .opts
                .inputs
                .iter()
                .any(|i| crate::store::may_name_object(i, &key))
            {
                return Err(StorageError::Exists {
                    url,
                    what: "this run reads it (an object of its source), and --force never \
                           deletes an input; write to another prefix"
                        .into(),
                });
            }
        }
        Ok(())
    }

    /// Marks the lock object claimed: this run's checks of the prefix passed,
    /// and until its manifest the objects of bale's names there are a run's.
    /// A run killed before this (while it listed a large prefix, or one it
    /// refused) leaves an unclaimed lock, which tells `--force` nothing about
    /// the objects beside it.
    fn claim(&self) -> Result<()> {
        let _writing = lock(&self.lock_write);
        // A run whose lock another took over owns nothing here.
        self.check_not_lost()?;
        if self.locked.load(Ordering::SeqCst) && !self.owns_lock()? {
            self.lost.store(true, Ordering::SeqCst);
            return Err(self.lost_error());
        }
        self.claimed.store(true, Ordering::SeqCst);
        self.marks_leftovers.store(true, Ordering::SeqCst);
        self.write_lock(self.own_lock_body(true))
    }

    /// Takes over the claim of the lock this run replaced (`found`).
    fn inherit_claim(&mut self, found: bool) {
        self.found_claim = found;
        self.claimed.store(found, Ordering::SeqCst);
        self.marks_leftovers.store(found, Ordering::SeqCst);
    }

    /// Refuses `--force` over a prefix whose manifest `bale index` wrote
    /// when it lists one of the objects `--force` would delete (a tar named
    /// like bale's shards, indexed in place: the user's), or whose manifest
    /// is not JSON (then whose the tars are cannot be told). Read
    /// leniently: only `created_by.command` and `shards[].file`.
    fn refuse_adopted(&self, names: &[String]) -> Result<()> {
        let refuse = |what: String| StorageError::Exists {
            url: self.store.url().to_owned(),
            what,
        };
        let bytes = self.manifest_bytes()?;
        let listed = bale_format::indexed_in_place(&bytes).map_err(|why| {
            refuse(format!(
                "its {MANIFEST}: {why}; --force cannot tell whether the tars there are \
                 bale's output or tars `bale index` indexed in place (the user's), so it \
                 removes nothing. Write to another prefix, or delete {MANIFEST} and the \
                 objects named like bale's output there by hand if they are yours to remove"
            ))
        })?;
        if let Some(tar) = names
            .iter()
            .filter(|n| !n.contains('/') && bale_format::is_bale_file_name(n))
            .find(|n| {
                listed
                    .iter()
                    .flatten()
                    .any(|f| self.entry_names(f, n, false))
            })
        {
            return Err(refuse(format!(
                "{tar} is a tar that `bale index` indexed in place, the user's and not bale's \
                 output, so --force does not remove it; write to another prefix"
            )));
        }
        // A committed dataset's objects are the ones its manifest lists (a
        // --force before it cleared every other name of bale's): a shard
        // name it does not list was put there later, by someone else.
        // Listing grants the deletion, so a URL entry must name the very
        // object.
        let own = bale_format::listed_files(&bytes);
        let unlisted: Vec<&String> = names
            .iter()
            .filter(|n| {
                !n.contains('/')
                    && *n != MANIFEST
                    && !n.starts_with(".bale-tmp-")
                    && bale_format::is_bale_file_name(n)
                    && !own.iter().any(|f| self.entry_names(f, n, true))
            })
            .collect();
        if let Some(n) = self.first_not_bales(&unlisted)? {
            return Err(refuse(format!(
                "{n} is named like bale's output, but the {MANIFEST} there does not list it: \
                 it is not the old dataset's, so --force does not remove it; move it (or \
                 delete it by hand if it is a leftover of bale's), or write to another prefix"
            )));
        }
        Ok(())
    }

    /// The prefix's `bale.json`, read whole (within the manifests' bound).
    fn manifest_bytes(&self) -> Result<Bytes> {
        self.store
            .object(MANIFEST)?
            .get_sized(0, bale_format::MAX_MANIFEST_BYTES, "manifest")
    }

    /// Whether the manifest entry `f` names the object `n` of the prefix:
    /// relative to it (`n` or `./n`), or by a URL. Loosely, any URL whose key
    /// could be this object's (to protect what it names); `exact`, only one
    /// of this very store and key (to grant its deletion).
    fn entry_names(&self, f: &str, n: &str, exact: bool) -> bool {
        let f = f.strip_prefix("./").unwrap_or(f);
        if !crate::is_url(std::path::Path::new(f)) {
            return f == n;
        }
        let Some(key) = crate::store::object_key(&self.url_of(n)) else {
            return false;
        };
        if !exact {
            return crate::store::may_name_object(f, &key);
        }
        crate::Store::open(f, self.store.options())
            .is_ok_and(|other| other.same_client(&self.store))
            && crate::store::object_key(f).as_deref() == Some(key.as_str())
    }

    /// Of `names` (objects under the prefix), the first that is not bale's
    /// for certain: a tar first, else an `.idx` that does not begin as one
    /// of bale's indexes ([`Publisher::is_bale_index`]); `None` when every
    /// one is an index of bale's.
    fn first_not_bales<'a>(&self, names: &[&'a String]) -> Result<Option<&'a String>> {
        if let Some(tar) = names.iter().find(|n| !n.ends_with(".idx")) {
            return Ok(Some(tar));
        }
        for n in names {
            if !self.is_bale_index(n)? {
                return Ok(Some(n));
            }
        }
        Ok(None)
    }

    /// Refuses `--force` over a prefix without a manifest when it holds an
    /// object named like bale's shards (`shard-000000.tar` is a common
    /// WebDataset name) and no run of bale's left its lock there: then the
    /// object may be the user's. So is an object named like bale's indexes
    /// that does not begin as one (`shard-000000.idx` is also the name of a
    /// DALI tar index). bale's own indexes and temporary objects are cleared
    /// without that.
    fn refuse_unclaimed(&self, names: &[String], claimed_at: Option<i64>) -> Result<()> {
        let shards: Vec<&String> = names
            .iter()
            .filter(|n| {
                !n.contains('/')
                    && !n.starts_with(".bale-tmp-")
                    && bale_format::is_bale_file_name(n)
            })
            .collect();
        let Some(tar) = self.first_not_bales(&shards)? else {
            return Ok(());
        };
        let why = match claimed_at {
            None => {
                format!("no lock object ({LOCK_NAME}) of a killed bale run that had claimed it")
            }
            Some(_) => format!(
                "it was written after the bale run whose lock object ({LOCK_NAME}) is there \
                 had stopped"
            ),
        };
        let named = if tar.ends_with(".idx") {
            "named like bale's indexes but is not one"
        } else {
            "named like bale's shards"
        };
        Err(StorageError::Exists {
            url: self.url_of(tar),
            what: format!(
                "it is {named}, but the prefix has no {MANIFEST}, and {why}: it \
                 may be yours, so --force removes nothing; delete it by hand if it is a leftover \
                 of bale's, or write to another prefix"
            ),
        })
    }

    /// Whether object `name` begins as one of bale's indexes
    /// ([`bale_format::is_index_head`]); one gone since the listing counts
    /// as bale's (nothing of it is left to delete).
    fn is_bale_index(&self, name: &str) -> Result<bool> {
        let object = self.store.object(name)?;
        let size = match object.head() {
            Ok(size) => size,
            Err(StorageError::NotFound { .. }) => return Ok(true),
            Err(e) => return Err(e),
        };
        let head = match object.get_range(0..size.min(8)) {
            Ok(head) => head,
            Err(StorageError::NotFound { .. }) => return Ok(true),
            Err(e) => return Err(e),
        };
        Ok(bale_format::is_index_head(&head))
    }

    /// For a run opened with [`Publisher::open_alongside`], with all it
    /// will upload at hand: checks the names again (the prefix may have
    /// changed since the open) and deletes those there, the old `bale.json`
    /// first, and with `force` aborts open uploads of them. Nothing for
    /// other runs.
    ///
    /// Returns whether the run writes beside others (and so replaced what
    /// was there).
    ///
    /// # Errors
    /// As [`Publisher::open_alongside`]'s checks; request errors; another
    /// run having taken the prefix over.
    pub fn replace_alongside(&self) -> Result<bool> {
        let Mode::Alongside(names) = &self.mode else {
            return Ok(false);
        };
        // The scan may have taken hours, and a run that stalled meanwhile
        // (its lock's refreshes with it) may have been taken over by a
        // --force run that has committed since: what is there is that
        // run's dataset now, and not this one's to delete.
        {
            let _writing = lock(&self.lock_write);
            self.check_not_lost()?;
            if self.locked.load(Ordering::SeqCst) && !self.owns_lock()? {
                self.lost.store(true, Ordering::SeqCst);
                return Err(self.lost_error());
            }
        }
        self.check_and_clear_names(names)?;
        Ok(true)
    }

    fn check_and_clear_names(&self, names: &[String]) -> Result<()> {
        let mut present = self.check_names(names)?;
        // Never what this run wrote itself.
        let written = lock(&self.written).names.clone();
        present.retain(|n| !written.contains(n));
        // The manifest first, then the rest, as few requests as the store
        // takes.
        let (manifest, rest): (Vec<&str>, Vec<&str>) = present
            .iter()
            .map(String::as_str)
            .partition(|n| *n == MANIFEST);
        for group in [manifest, rest] {
            if group.is_empty() {
                continue;
            }
            // The heartbeat sees a takeover within its beat.
            self.check_not_lost()?;
            self.delete_all(&group, true)?;
        }
        if self.opts.force {
            for (name, id) in self.open_uploads()? {
                if names.contains(&name) {
                    self.abort_upload(&name, &id)?;
                }
            }
        }
        // A DELETE above sent twice lands before the run writes the same
        // names, not over them.
        self.wait_out_own_deletes("it writes")
    }

    /// Which of `names` are there, each one that `force` may replace;
    /// refused without `force`, or when one is not bale's (a `bale.json` no
    /// bale run wrote, another tool's `.idx`) or is an input of the run.
    fn check_names(&self, names: &[String]) -> Result<Vec<String>> {
        let listed: std::collections::HashSet<String> = self.list()?.into_iter().collect();
        let present: Vec<&String> = names.iter().filter(|n| listed.contains(*n)).collect();
        // A bale.json no bale run wrote is not an old dataset to replace.
        if present.iter().any(|n| *n == MANIFEST)
            && let Err(why) = bale_format::indexed_in_place(&self.manifest_bytes()?)
        {
            return Err(StorageError::Exists {
                url: self.url_of(MANIFEST),
                what: format!(
                    "it cannot be taken for an old dataset of bale's: {why}, so even \
                     --force does not replace it; move it, or index into a local directory"
                ),
            });
        }
        // bale's indexes may be replaced, never another tool's object of the
        // same name (DALI's tar indexer writes `<tar>.idx` too).
        let indexes: Vec<&String> = present
            .iter()
            .copied()
            .filter(|n| n.ends_with(".idx"))
            .collect();
        if let Some(n) = self.first_not_bales(&indexes)? {
            return Err(StorageError::Exists {
                url: self.url_of(n),
                what: "it is where bale would write an index, but it is not one of bale's \
                       indexes (a DALI tar index has this name too), so even --force does \
                       not replace it; move it, or index into a local directory"
                    .into(),
            });
        }
        if let Some(first) = present.first()
            && !self.opts.force
        {
            return Err(StorageError::Exists {
                url: self.url_of(first),
                what: "it exists; pass --force to replace it (only the objects this command writes are replaced)".into(),
            });
        }
        let present: Vec<String> = present.iter().map(|n| (*n).clone()).collect();
        if self.opts.force {
            self.refuse_inputs(&present)?;
        }
        Ok(present)
    }

    /// The open multipart uploads under the prefix, as (name relative to
    /// it, upload id); empty where the store cannot list them (only S3 can).
    fn open_uploads(&self) -> Result<Vec<(String, String)>> {
        let Some(lister) = self.lister.clone() else {
            return Ok(Vec::new());
        };
        let prefix = format!("{}/", self.store.prefix().as_ref())
            .trim_start_matches('/')
            .to_owned();
        let p2 = prefix.clone();
        let open = runtime::block_on(async move { lister.list(&p2).await })??;
        Ok(open
            .into_iter()
            .filter_map(|u| Some((u.key.strip_prefix(&prefix)?.to_owned(), u.id)))
            .collect())
    }

    fn get(&self, name: &str) -> Result<Bytes> {
        self.store.object(name)?.get_sized(0, 1 << 20, "marker")
    }

    /// Deletes object `name` ([`Publisher::delete_all`]).
    fn delete(&self, name: &str) -> Result<()> {
        self.delete_all(&[name], false)
    }

    /// Deletes the objects `names`, up to [`DELETES_PER_REQUEST`] to a
    /// request: one bulk DeleteObjects on S3 (`--force` over 100,000
    /// objects is 100 requests, not 100,000); stores without one get a
    /// DELETE per object from the client, several at once. Every chunk is
    /// tried (an `interruptible` call stops before the next chunk once the
    /// run is interrupted: a clear; an undo goes on); returns the first
    /// error.
    fn delete_all(&self, names: &[&str], interruptible: bool) -> Result<()> {
        let mut first = None;
        for chunk in names.chunks(DELETES_PER_REQUEST) {
            if interruptible && self.cancelled() {
                return Err(first.unwrap_or(StorageError::Cancelled));
            }
            if let Err(e) = self.delete_chunk(chunk) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Deletes `names` (at most [`DELETES_PER_REQUEST`]), sending each
    /// attempt itself: the names not yet deleted are sent again, up to the
    /// options' `max_retries` more times within `retry_timeout`, with their
    /// backoff. An attempt that got no answer (a timeout, a connection cut
    /// off after the request went out) may still land after a later one was
    /// answered: over what this run or a later one writes under those
    /// names. Such an attempt is remembered ([`Publisher::deletes_land_by`],
    /// waited out before the run's first write after its clear) and makes
    /// an undone run keep its lock with a note, as a failed DELETE does.
    fn delete_chunk(&self, names: &[&str]) -> Result<()> {
        let retry = self.store.options().retry()?;
        let timeout = self.store.options().request_timeout();
        let first = std::time::Instant::now();
        let mut backoff = retry.backoff.init_backoff;
        let mut tries = 0;
        let mut left: Vec<&str> = names.to_vec();
        loop {
            let paths = left
                .iter()
                .map(|n| self.path(n))
                .collect::<Result<Vec<_>>>()?;
            // A successful bulk answer lists every key it deleted: one that
            // holds such a word would read as a server error.
            let single = self.once_single.as_ref().filter(|_| {
                paths
                    .iter()
                    .any(|p| SERVER_ERROR_WORDS.iter().any(|w| p.as_ref().contains(w)))
            });
            // `once_single` is there exactly when `once` deletes in bulk.
            let one_request = single.is_none() && self.once_single.is_some();
            let client = Arc::clone(single.unwrap_or(&self.once));
            let sent = std::time::Instant::now();
            // In a task of its own: the S3 client panics on a bulk answer
            // that names a key the request did not, which is then this
            // request's error, not the end of the process.
            let answers = runtime::block_on(async move {
                tokio::spawn(async move {
                    client
                        .delete_stream(futures::stream::iter(paths.into_iter().map(Ok)).boxed())
                        .collect::<Vec<object_store::Result<ObjPath>>>()
                        .await
                })
                .await
            })?;
            let (failed, e, unanswered) = match answers {
                Ok(answers) => self.delete_failures(&left, answers),
                // Answered, but not so that it tells what was deleted: as
                // a server error, sent again.
                Err(_) => (
                    left.clone(),
                    Some(StorageError::Request {
                        url: self.many_url(&left),
                        range: None,
                        status: Some(502),
                        what: "the store's answer to the DELETE could not be read (it named an object the request did not)".into(),
                    }),
                    false,
                ),
            };
            // Anything but a definite refusal may have deleted some.
            if unanswered || failed.len() < left.len() || e.as_ref().is_some_and(may_land) {
                self.deleted_any.store(true, Ordering::SeqCst);
            }
            let Some(e) = e else {
                return Ok(());
            };
            // An answer, even an error, says the store is done with it.
            if unanswered {
                self.unanswered.store(true, Ordering::SeqCst);
                // One request timeout from when the attempt went out: for
                // a client that sends one DELETE per object (several at
                // once), the last may have gone out just before the answers
                // were in, not when the chunk began.
                let out = if left.len() == 1 || one_request {
                    sent
                } else {
                    std::time::Instant::now()
                };
                let by = out + timeout;
                let mut until = lock(&self.deletes_land_by);
                *until = Some(until.map_or(by, |u| u.max(by)));
            }
            let again = resendable(&e)
                && tries < retry.max_retries
                && first.elapsed() + backoff <= retry.retry_timeout;
            if !again {
                // Unanswered, it may still land: on what a later run writes
                // under that name, unless that run waits it out.
                return Err(self.unanswered_if(e));
            }
            left = failed;
            tries += 1;
            std::thread::sleep(backoff);
            backoff = backoff
                .mul_f64(retry.backoff.base)
                .min(retry.backoff.max_backoff);
        }
    }

    /// Which of `sent` a delete request's `answers` left undeleted, the
    /// error that stands for them (the first that no attempt can mend, a
    /// refusal; else one with no answer, which may land; else the first),
    /// and whether any of them got no answer.
    /// The client answers once per name, in order, or once for a request
    /// that failed as a whole (then for all of its names).
    fn delete_failures<'a>(
        &self,
        sent: &[&'a str],
        answers: Vec<object_store::Result<ObjPath>>,
    ) -> (Vec<&'a str>, Option<StorageError>, bool) {
        let whole = answers.len() != sent.len();
        let mut failed = Vec::new();
        let mut errors = Vec::new();
        for (i, a) in answers.into_iter().enumerate() {
            match a {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    let url = if whole {
                        self.many_url(sent)
                    } else {
                        failed.push(sent[i]);
                        self.url_of(sent[i])
                    };
                    errors.push(from_object_store(&url, None, e));
                }
            }
        }
        if whole {
            failed = sent.to_vec();
            if errors.is_empty() {
                errors.push(StorageError::Request {
                    url: self.many_url(sent),
                    range: None,
                    status: None,
                    what: "the store answered for fewer objects than the DELETE named".into(),
                });
            }
        }
        let unanswered = errors.iter().any(no_answer);
        let pick = errors
            .iter()
            .position(|e| !resendable(e))
            .or_else(|| errors.iter().position(no_answer));
        let e = match pick {
            Some(i) => Some(errors.swap_remove(i)),
            None => errors.into_iter().next(),
        };
        (failed, e, unanswered)
    }

    /// The URL of a request for `names`: the first object's, and how many
    /// more it named.
    fn many_url(&self, names: &[&str]) -> String {
        match names.len() {
            0 | 1 => self.url_of(names.first().copied().unwrap_or_default()),
            n => format!("{} (and {} more objects)", self.url_of(names[0]), n - 1),
        }
    }

    /// Waits until every DELETE of this run that got no answer has landed or
    /// timed out ([`Publisher::delete`]): after the clear, before the run
    /// writes under the names it cleared (`before`: "it writes"), and after
    /// the lock's DELETE, before the run ends (then a Ctrl-C that began an
    /// undo does not end the wait: a second one ends the process).
    fn wait_out_own_deletes(&self, before: &str) -> Result<()> {
        let Some(by) = *lock(&self.deletes_land_by) else {
            return Ok(());
        };
        let left = by.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        crate::notice(&format!(
            "{}: a DELETE of this run got no answer at first and may still land: waiting {} s (one request timeout from it) before {before}",
            self.store.url(),
            left.as_secs().max(1)
        ));
        if before == ENDS {
            std::thread::sleep(left);
            return Ok(());
        }
        self.watch(left)
    }

    fn abort_upload(&self, name: &str, id: &str) -> Result<()> {
        let path = self.path(name)?;
        let mp = Arc::clone(&self.mp);
        let id = id.to_owned();
        match runtime::block_on(async move { mp.abort_multipart(&path, &id).await })? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.unanswered_if(from_object_store(&self.url_of(name), None, e))),
        }
    }

    /// Writes `bytes` as object `name` in one PUT.
    ///
    /// # Errors
    /// Request errors, naming the object's URL.
    pub fn put(&self, name: &str, bytes: Bytes) -> Result<()> {
        self.put_mode(name, bytes, PutMode::Overwrite)
    }

    /// Writes `bytes` as object `name` in mode `mode`. The manifest carries
    /// this run's id in its metadata ([`RUN_METADATA`]): manifests are
    /// deterministic, so two runs of the same input write the same bytes,
    /// and only that tells this run's apart.
    fn put_mode(&self, name: &str, bytes: Bytes, mode: PutMode) -> Result<()> {
        if name != LOCK_NAME {
            self.check_not_lost()?;
            self.ensure_cleared()?;
        }
        let path = self.path(name)?;
        self.record(name);
        let client = Arc::clone(&self.client);
        let payload = PutPayload::from(bytes.clone());
        let create = matches!(mode, PutMode::Create);
        let mut opts = PutOptions::from(mode);
        if name == MANIFEST {
            opts.attributes.insert(
                object_store::Attribute::Metadata(RUN_METADATA.into()),
                self.run.clone().into(),
            );
        }
        match runtime::block_on(async move { client.put_opts(&path, payload, opts).await })? {
            Ok(r) => {
                self.record_size(name, bytes.len() as u64, r.e_tag);
                Ok(())
            }
            // A store without conditional PUTs (the lock is then a mark
            // only): the object must still be absent, checked by a HEAD.
            Err(object_store::Error::NotImplemented { .. }) if create => {
                match self.store.object(name)?.head() {
                    Ok(_) => Err(StorageError::Exists {
                        url: self.url_of(name),
                        what: "another run wrote it meanwhile".into(),
                    }),
                    Err(StorageError::NotFound { .. }) => {
                        self.put_mode(name, bytes, PutMode::Overwrite)
                    }
                    Err(e) => Err(e),
                }
            }
            Err(object_store::Error::AlreadyExists { .. }) => Err(StorageError::Exists {
                url: self.url_of(name),
                what: "another run wrote it meanwhile".into(),
            }),
            Err(object_store::Error::Precondition { .. }) => Err(StorageError::Changed {
                url: self.url_of(name),
                what: "it is no longer the version this run read".into(),
            }),
            Err(e) => Err(self.unanswered_if(from_object_store(&self.url_of(name), None, e))),
        }
    }

    /// Uploads the local file `local` as object `name`: one PUT when it fits
    /// in a part, else a multipart upload with at most
    /// [`WriteOptions::parts_in_flight`] parts in memory. Returns its size.
    ///
    /// # Errors
    /// [`StorageError::Io`] reading the file; request errors;
    /// [`StorageError::Cancelled`] when `cancel` is set between parts (the
    /// upload is then aborted).
    pub fn upload_file(&self, local: &Path, name: &str, cancel: &AtomicBool) -> Result<u64> {
        let io = |e: std::io::Error| StorageError::Io {
            path: local.to_path_buf(),
            source: e,
        };
        let mut file = File::open(local).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        self.ensure_cleared()?;
        let part = part_size(self.opts.part_size, len);
        if len <= part as u64 {
            let mut buf = Vec::with_capacity(len as usize);
            file.read_to_end(&mut buf).map_err(io)?;
            if buf.len() as u64 != len {
                return Err(io(std::io::Error::other(format!(
                    "it changed size while being uploaded ({len} then {} bytes)",
                    buf.len()
                ))));
            }
            if cancel.load(Ordering::Relaxed) {
                return Err(StorageError::Cancelled);
            }
            self.put(name, Bytes::from(buf))?;
            return Ok(len);
        }
        let path = self.path(name)?;
        let url = self.url_of(name);
        let mp = Arc::clone(&self.mp);
        let p2 = path.clone();
        let id = runtime::block_on(async move { mp.create_multipart(&p2).await })?
            .map_err(|e| from_object_store(&url, None, e))?;
        let marker = format!(
            "{UPLOAD_MARKER}{}-{}",
            self.run,
            self.markers.fetch_add(1, Ordering::Relaxed)
        );
        lock(&self.written).open.push((name.to_owned(), id.clone()));
        let record = serde_json::to_vec(&Marker {
            name: name.to_owned(),
            upload_id: id.clone(),
        })
        .unwrap_or_default();
        self.put(&marker, Bytes::from(record))?;
        let parts = self
            .send_parts(&mut file, len, part, &path, &id, &url, local, cancel)
            .map_err(|e| self.unanswered_if(e))?;
        let mp = Arc::clone(&self.mp);
        let (p2, id2) = (path.clone(), id.clone());
        let done = runtime::block_on(async move { mp.complete_multipart(&p2, &id2, parts).await })?
            .map_err(|e| self.unanswered_if(from_object_store(&url, None, e)))?;
        lock(&self.written).open.retain(|(_, i)| *i != id);
        self.record(name);
        self.record_size(name, len, done.e_tag);
        self.delete(&marker)?;
        Ok(len)
    }

    #[allow(clippy::too_many_arguments)]
    fn send_parts(
        &self,
        file: &mut File,
        len: u64,
        part: usize,
        path: &ObjPath,
        id: &str,
        url: &str,
        local: &Path,
        cancel: &AtomicBool,
    ) -> Result<Vec<PartId>> {
        let mut pending: VecDeque<Pending<object_store::Result<PartId>>> = VecDeque::new();
        let mut parts = Vec::new();
        let mut sent = 0u64;
        let mut idx = 0usize;
        let take = |p: Pending<object_store::Result<PartId>>, parts: &mut Vec<PartId>| {
            let r = p.wait()?;
            parts.push(r.map_err(|e| from_object_store(url, None, e))?);
            Ok::<_, StorageError>(())
        };
        while sent < len {
            if cancel.load(Ordering::Relaxed) {
                return Err(StorageError::Cancelled);
            }
            self.check_not_lost()?;
            let n = (len - sent).min(part as u64) as usize;
            let mut buf = vec![0u8; n];
            file.read_exact(&mut buf).map_err(|e| StorageError::Io {
                path: local.to_path_buf(),
                source: e,
            })?;
            while pending.len() >= self.opts.parts_in_flight.max(1) {
                if let Some(p) = pending.pop_front() {
                    take(p, &mut parts)?;
                }
            }
            let mp = Arc::clone(&self.mp);
            let (path, id) = (path.clone(), id.to_owned());
            let payload = PutPayload::from(Bytes::from(buf));
            let i = idx;
            pending.push_back(Pending::spawn(async move {
                mp.put_part(&path, &id, i, payload).await
            })?);
            sent += n as u64;
            idx += 1;
        }
        while let Some(p) = pending.pop_front() {
            take(p, &mut parts)?;
        }
        Ok(parts)
    }

    /// Copies object `name` of `src` (another prefix reached with the same
    /// client: the same bucket) to `dst` under this prefix, on the server:
    /// no bytes pass through this machine.
    ///
    /// # Errors
    /// [`StorageError::BadUrl`] when `src` is not reached by this prefix's
    /// client; request errors.
    pub fn copy_from(&self, src: &Store, name: &str, dst: &str) -> Result<()> {
        if !src.same_client(&self.store) {
            return Err(StorageError::BadUrl {
                url: src.url().to_owned(),
                what: format!(
                    "a server-side copy reaches only objects of the output's bucket and endpoint ({})",
                    self.store.url()
                ),
            });
        }
        self.ensure_cleared()?;
        let from = src.object(name)?.obj_path().clone();
        let to = self.path(dst)?;
        self.record(dst);
        let client = Arc::clone(&self.client);
        runtime::block_on(async move { client.copy(&from, &to).await })?.map_err(|e| {
            self.unanswered_if(from_object_store(
                &src.object(name)
                    .map(|o| o.url().to_owned())
                    .unwrap_or_default(),
                None,
                e,
            ))
        })
    }

    /// Notes `e` in [`Publisher::unanswered`] when the write it ended may
    /// still land; returns it.
    fn unanswered_if(&self, e: StorageError) -> StorageError {
        if may_land(&e) {
            self.unanswered.store(true, Ordering::SeqCst);
        }
        e
    }

    /// Writes the manifest, last: the dataset exists from now on. Releases
    /// the lock.
    ///
    /// # Errors
    /// Request errors; [`StorageError::Exists`] when a manifest appeared
    /// meanwhile (another run without the lock). On error, nothing is
    /// committed and [`Publisher::abort`] still undoes the run.
    pub fn commit(&self, manifest: Bytes) -> Result<()> {
        self.ensure_cleared()?;
        // The lock is refreshed until the manifest's outcome is known: a
        // slow PUT of it must not make this live run look killed to --force.
        if self.locked.load(Ordering::SeqCst) && !self.owns_lock()? {
            self.lost.store(true, Ordering::SeqCst);
            return Err(self.lost_error());
        }
        // One write over this run's own version: a lock that another run
        // wrote meanwhile (even one putting this run's name back) fails it.
        if self.locked.load(Ordering::SeqCst) {
            let _writing = lock(&self.lock_write);
            self.write_lock(self.own_lock_body(self.claimed.load(Ordering::SeqCst)))?;
        }
        // Every object the manifest names must be there, as written, before
        // it is (and again after: see below).
        self.check_written()
            .map_err(|e| late_request(e, self.store.url(), "nothing of this run is committed"))?;
        *lock(&self.manifest) = Some(manifest.clone());
        let created = self.create_manifest(&manifest);
        self.stop_heartbeat();
        if let Err(e) = created {
            // The PUT may have landed all the same (an answer lost): if
            // another run took the prefix over meanwhile, undoing this
            // one (which then owns nothing) would leave it.
            if self.locked.load(Ordering::SeqCst) && self.lock_hold() == Hold::Lost {
                self.withdraw_manifest();
            }
            return Err(e);
        }
        // The run may have stalled (its refreshes with it) for longer than
        // --force elsewhere watches a lock, while its manifest's PUT was in
        // flight: another run may have taken the prefix over and deleted
        // this run's shards. Then the manifest would name what is gone, so
        // it goes.
        // A lock that cannot be checked now does not confirm it either: the
        // manifest goes, and the run fails (a rerun settles it).
        let hold = if self.locked.load(Ordering::SeqCst) {
            self.lock_hold()
        } else {
            Hold::Held
        };
        if hold == Hold::Unknown {
            let what = match self.withdraw_manifest() {
                Withdrawn::Yes => format!(
                    "this run could not confirm that it still held the prefix after its {MANIFEST} (its lock could not be read or written), so it withdrew its {MANIFEST}; nothing of it is committed, run it again"
                ),
                _ => format!(
                    "this run could not confirm that it still held the prefix after its {MANIFEST} (its lock could not be read or written), nor withdraw its {MANIFEST}; check with `bale verify {}`",
                    self.store.url()
                ),
            };
            return Err(StorageError::Exists {
                url: self.store.url().to_owned(),
                what,
            });
        }
        if hold == Hold::Lost {
            let what = match self.withdraw_manifest() {
                Withdrawn::Yes => format!(
                    "another bale run took this prefix over (--force) while this run's {MANIFEST} was being written; this run withdrew its {MANIFEST}, so nothing of it is committed"
                ),
                Withdrawn::Another => format!(
                    "another bale run took this prefix over (--force) while this run's {MANIFEST} was being written; the {MANIFEST} there now is the other run's"
                ),
                Withdrawn::Unknown => format!(
                    "another bale run took this prefix over (--force) while this run's {MANIFEST} was being written, and this run could not withdraw it: its {MANIFEST} may name objects the other run deleted; check with `bale verify {}`",
                    self.store.url()
                ),
            };
            return Err(StorageError::Exists {
                url: self.store.url().to_owned(),
                what,
            });
        }
        // A request of an earlier run that lands between the check above
        // and the manifest: the manifest would name what is gone, so it goes.
        if let Err(e) = self.check_written() {
            let done = match self.withdraw_manifest() {
                Withdrawn::Yes => {
                    format!("this run withdrew its {MANIFEST}, so nothing of it is committed")
                }
                _ => format!(
                    "this run could not withdraw its {MANIFEST}; check with `bale verify {}`",
                    self.store.url()
                ),
            };
            return Err(late_request(e, self.store.url(), &done));
        }
        self.committed.store(true, Ordering::SeqCst);
        // Committed whatever befalls the lock: its DELETE sent twice is
        // waited out, so that the first attempt lands before the run ends,
        // not on the lock of a run that starts next.
        if self.delete(LOCK_NAME).is_ok() {
            let _ = self.wait_out_own_deletes(ENDS);
        }
        Ok(())
    }

    /// Creates the manifest, until its outcome is known. A create refused
    /// because a `bale.json` is there: this run's own (an earlier attempt
    /// landed, its answer lost), done; a stale bale run's (its PUT landed
    /// late, while this run holds the lock and has cleared what it named),
    /// replaced by this one over the version seen; anything else (someone's
    /// own object), refused. When no attempt gets an answer, the manifest
    /// may still land: [`Publisher::abort`] then keeps what it would name.
    fn create_manifest(&self, manifest: &Bytes) -> Result<()> {
        if let Mode::Append { version, old } = &self.mode {
            return self.replace_manifest(manifest, version, old);
        }
        let mut last = None;
        for _ in 0..MANIFEST_ATTEMPTS {
            match self.put_mode(MANIFEST, manifest.clone(), PutMode::Create) {
                Ok(()) => return Ok(()),
                Err(e @ StorageError::Exists { .. }) => match self.manifest_owner() {
                    Owner::Ours => return Ok(()),
                    Owner::Run(version)
                        if self.locked.load(Ordering::SeqCst) && self.lock_hold() == Hold::Held =>
                    {
                        match self.put_mode(MANIFEST, manifest.clone(), PutMode::Update(version)) {
                            Ok(()) => return Ok(()),
                            Err(e) => last = Some(e),
                        }
                    }
                    Owner::Run(_) | Owner::Unmarked => return Err(e),
                    // Removed since, or unreadable: the next attempt tells.
                    Owner::Unknown | Owner::Absent => last = Some(e),
                },
                // Refused outright (a 4xx): this attempt did not land, but
                // an earlier one without an answer still may.
                Err(e) if refused_outright(&e) => {
                    if last.is_some() {
                        self.manifest_unsure.store(true, Ordering::SeqCst);
                    }
                    return Err(e);
                }
                Err(e) => last = Some(e),
            }
        }
        self.manifest_unsure.store(true, Ordering::SeqCst);
        Err(last.unwrap_or(StorageError::Runtime("no attempt was made".into())))
    }

    /// Replaces the `bale.json` of the dataset an append adds to
    /// ([`Mode::Append`]) by `manifest`, only if it is still the one the run
    /// read (`version`, `old`): compared by a read under the lock first
    /// (a store may ignore `If-Match`), then written by a PUT conditional on
    /// its ETag (where the read gave none, the read's comparison alone).
    /// Sent again until its outcome is known, as [`Self::create_manifest`].
    fn replace_manifest(
        &self,
        manifest: &Bytes,
        version: &UpdateVersion,
        old: &Bytes,
    ) -> Result<()> {
        let changed = || {
            StorageError::Changed {
            url: self.url_of(MANIFEST),
            what: "it is no longer the one this run read and adds to (something replaced or removed it meanwhile), so this run did not replace it; nothing of this run is committed; run the append again over the dataset as it is now".into(),
        }
        };
        let mut last = None;
        // An attempt got no definite answer: it may still land.
        let mut may_have_landed = false;
        for _ in 0..MANIFEST_ATTEMPTS {
            match read_seen(&self.client, &self.path(MANIFEST)?) {
                Ok(Some(seen)) if seen.bytes == *old && same_version(&seen.version, version) => {}
                Ok(_) => {
                    // An earlier attempt of this run landed, its answer
                    // lost; or someone else's write did.
                    if matches!(self.manifest_owner(), Owner::Ours) {
                        return Ok(());
                    }
                    if may_have_landed {
                        self.manifest_unsure.store(true, Ordering::SeqCst);
                    }
                    return Err(changed());
                }
                Err(e) => {
                    last = Some(from_object_store(&self.url_of(MANIFEST), None, e));
                    continue;
                }
            }
            let mode = if version.e_tag.is_some() {
                PutMode::Update(version.clone())
            } else {
                PutMode::Overwrite
            };
            match self.put_mode(MANIFEST, manifest.clone(), mode) {
                Ok(()) => return Ok(()),
                // Changed since the read above, or this very PUT, sent
                // again by the client, landed the first time: the next
                // round tells.
                Err(e @ StorageError::Changed { .. }) => last = Some(e),
                Err(e) if refused_outright(&e) => {
                    if may_have_landed {
                        self.manifest_unsure.store(true, Ordering::SeqCst);
                    }
                    return Err(e);
                }
                Err(e) => {
                    may_have_landed |= may_land(&e);
                    last = Some(e);
                }
            }
        }
        if matches!(self.manifest_owner(), Owner::Ours) {
            return Ok(());
        }
        if may_have_landed {
            self.manifest_unsure.store(true, Ordering::SeqCst);
        }
        Err(last.unwrap_or_else(changed))
    }

    /// Puts back the `bale.json` an append read (`old`) over this run's
    /// own, which landed: the dataset is as it was before the run.
    fn restore_manifest(&self, old: &Bytes) -> Result<()> {
        let path = self.path(MANIFEST)?;
        let client = Arc::clone(&self.client);
        let payload = PutPayload::from(old.clone());
        match runtime::block_on(async move { client.put(&path, payload).await })? {
            Ok(_) => Ok(()),
            Err(e) => Err(self.unanswered_if(from_object_store(&self.url_of(MANIFEST), None, e))),
        }
    }

    /// Whether this run still holds the lock ([`LockRef::hold`]).
    fn lock_hold(&self) -> Hold {
        match self.path(LOCK_NAME) {
            Ok(path) => LockRef {
                store: &self.store,
                client: &self.client,
                path: &path,
                run: &self.run,
                claimed: &self.claimed,
                lock_write: &self.lock_write,
                lock_writer: &self.lock_writer,
                lost: &self.lost,
                carry: &self.carry,
            }
            .hold(0),
            Err(_) => Hold::Unknown,
        }
    }

    /// Who wrote the `bale.json` under the prefix: by the run id in its
    /// metadata; where the store kept none, this run when the bytes are its
    /// own and it still holds the lock (no other run can have written it).
    fn manifest_owner(&self) -> Owner {
        let Ok(path) = self.path(MANIFEST) else {
            return Owner::Unknown;
        };
        match read_seen(&self.client, &path) {
            Ok(Some(Seen { run: Some(run), .. })) if run == self.run => Owner::Ours,
            Ok(Some(Seen {
                run: Some(_),
                version,
                ..
            })) => Owner::Run(version),
            Ok(Some(Seen { bytes, .. })) => {
                if !self.lost.load(Ordering::SeqCst)
                    && lock(&self.manifest).as_ref() == Some(&bytes)
                    && self.owns_lock().unwrap_or(false)
                {
                    Owner::Ours
                } else {
                    Owner::Unmarked
                }
            }
            Ok(None) => Owner::Absent,
            Err(_) => Owner::Unknown,
        }
    }

    /// Deletes the manifest under the prefix if it is this run's.
    fn withdraw_manifest(&self) -> Withdrawn {
        if let Mode::Append { old, .. } = &self.mode {
            // Over the dataset it adds to: the old manifest back.
            return match self.manifest_owner() {
                Owner::Ours if self.restore_manifest(old).is_ok() => Withdrawn::Yes,
                Owner::Run(_) | Owner::Unmarked | Owner::Absent => Withdrawn::Another,
                _ => Withdrawn::Unknown,
            };
        }
        match self.manifest_owner() {
            Owner::Ours if self.delete(MANIFEST).is_ok() => Withdrawn::Yes,
            Owner::Run(_) | Owner::Unmarked => Withdrawn::Another,
            Owner::Absent => Withdrawn::Yes,
            _ => Withdrawn::Unknown,
        }
    }

    /// Undoes the run, unless it committed: aborts its open uploads and
    /// deletes every object it wrote (markers and lock last). Runs once;
    /// `Drop` calls it too.
    ///
    /// # Errors
    /// The first request that failed (the others are still tried): the
    /// object it names may remain, and `--force` on a rerun clears it.
    pub fn abort(&self) -> Result<()> {
        if self.committed.load(Ordering::SeqCst) || self.aborted.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.stop_heartbeat();
        let (open, mut names) = {
            let mut w = lock(&self.written);
            (std::mem::take(&mut w.open), std::mem::take(&mut w.names))
        };
        let mut first = None;
        // The upload ids are this run's alone: abort them in any case.
        let mut aborts_unanswered = false;
        for (name, id) in &open {
            if let Err(e) = self.abort_upload(name, id) {
                aborts_unanswered |= may_land(&e);
                first.get_or_insert(e);
            }
        }
        // Shared names (shards, indexes, the lock) are deleted only while
        // this run holds the lock: a run that took over (or that committed
        // after taking over) owns them now. Markers carry this run's id.
        // A lock that cannot be checked proves nothing: those names stay
        // (--force clears them), since another run may own them now.
        let owner = !self.locked.load(Ordering::SeqCst)
            || match self.lock_hold() {
                Hold::Held => true,
                Hold::Lost => false,
                Hold::Unknown => {
                    first.get_or_insert(StorageError::Exists {
                        url: self.url_of(LOCK_NAME),
                        what: "this run could not read or write its lock, so it cannot tell whether another run took the prefix over: it kept the objects it wrote there; clear them with --force".into(),
                    });
                    false
                }
            };
        if !owner {
            names.retain(|n| n.starts_with(UPLOAD_MARKER));
        }
        // The manifest first (a PUT whose answer was lost may have landed:
        // it must never outlive a shard it names), then the objects, then
        // the markers (each group in as few requests as the store takes),
        // the lock last.
        let mut groups: [Vec<&str>; 4] = Default::default();
        for n in &names {
            let at = if n == MANIFEST {
                0
            } else if n == LOCK_NAME {
                3
            } else if n.starts_with(UPLOAD_MARKER) {
                2
            } else {
                1
            };
            groups[at].push(n);
        }
        // Set when a bale.json is there, or may still land, that may be
        // this run's: the objects it may name stay with it, and the lock
        // over them.
        let mut keep = false;
        // A request that failed without a definite answer may still land.
        let mut unanswered = false;
        if self.manifest_unsure.load(Ordering::SeqCst) && owner {
            keep = true;
            first.get_or_insert(StorageError::Exists {
                url: self.url_of(MANIFEST),
                what: "no attempt to write it got an answer, and it may still land: this run kept the objects it wrote, and its lock over them, so that it never names missing ones; check the prefix with `bale verify`, and clear it with --force if it is not whole".into(),
            });
        }
        for group in groups {
            let Some(&n) = group.first() else {
                continue;
            };
            if keep && !n.starts_with(UPLOAD_MARKER) {
                continue;
            }
            // A manifest there is deleted only when it is this run's: the
            // run's create may have been refused (someone else's is there).
            if n == MANIFEST {
                if let Mode::Append { old, .. } = &self.mode {
                    // The old dataset's manifest is never deleted: this
                    // run's, if it landed, gives way to it again.
                    match self.manifest_owner() {
                        Owner::Ours if owner => {
                            if let Err(e) = self.restore_manifest(old) {
                                unanswered |= may_land(&e);
                                first.get_or_insert(e);
                                keep = true;
                            }
                        }
                        Owner::Unknown => {
                            keep = true;
                            first.get_or_insert(StorageError::Exists {
                                url: self.url_of(MANIFEST),
                                what: "this run could not tell whether it is its own, so it left it and the objects it wrote beside it; check the prefix with `bale verify`".into(),
                            });
                        }
                        _ => {}
                    }
                    continue;
                }
                match self.manifest_owner() {
                    Owner::Ours => {}
                    // A stale run's, landed late while this run held the
                    // lock: it names what this run cleared.
                    Owner::Run(_) if owner && self.locked.load(Ordering::SeqCst) => {}
                    Owner::Run(_) | Owner::Unmarked | Owner::Absent => continue,
                    Owner::Unknown => {
                        keep = true;
                        first.get_or_insert(StorageError::Exists {
                            url: self.url_of(MANIFEST),
                            what: "this run could not tell whether it is its own, so it left it and the objects it wrote beside it; check the prefix with `bale verify`, and clear it with --force if it is not whole".into(),
                        });
                        continue;
                    }
                }
            }
            // The lock stays over objects that could not be deleted, or
            // that an earlier run left and this one did not clear: it tells
            // a rerun with --force that they are a run's.
            // So does it over a write of this run that got no answer: it
            // may land after the run ended, and is then still a run's.
            let late = unanswered || aborts_unanswered || self.unanswered.load(Ordering::SeqCst);
            if n == LOCK_NAME
                && (first.is_some() || late || self.marks_leftovers.load(Ordering::SeqCst))
            {
                if late && owner && self.locked.load(Ordering::SeqCst) {
                    first = Some(self.note_unanswered(first));
                }
                self.kept_lock.store(owner, Ordering::SeqCst);
                continue;
            }
            if let Err(e) = self.delete_all(&group, false) {
                unanswered |= may_land(&e);
                first.get_or_insert(e);
                // A manifest that stays keeps what it names.
                keep |= n == MANIFEST;
            } else if n == LOCK_NAME {
                // The lock's DELETE sent twice: its first attempt lands
                // before the run ends, not on a lock a next run created.
                // A Ctrl-C ends the wait, with the error it gives.
                if let Err(e) = self.wait_out_own_deletes(ENDS) {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Publisher {
    /// Says in the lock that this run's undo sent requests that got no
    /// answer and may still land: `--force` then waits one request timeout
    /// more before it takes the prefix over, so that they land before it
    /// writes, not over what it wrote. Returns `first`, the undo's error,
    /// with what a rerun does.
    fn note_unanswered(&self, first: Option<StorageError>) -> StorageError {
        let wait = std::time::Duration::from_millis(self.timeout_ms());
        let body = LockBody::note(
            &self.run,
            self.claimed.load(Ordering::SeqCst),
            wait.as_millis() as u64,
            self.carried(),
        )
        .render();
        let noted = {
            let _writing = lock(&self.lock_write);
            self.write_lock(body).is_ok()
        };
        let Some(e) = first else {
            self.kept_for_late.store(true, Ordering::SeqCst);
            let then = if noted {
                format!(
                    "; a rerun with --force waits {} s more than usual before it takes the prefix over",
                    secs_text(wait)
                )
            } else {
                String::new()
            };
            return StorageError::Exists {
                url: self.url_of(LOCK_NAME),
                what: format!(
                    "a request of this run (an upload or a DELETE) got no answer, or a server error, and may still land: the run removed what it wrote but kept its lock object{then}"
                ),
            };
        };
        if !noted {
            return e;
        }
        StorageError::Exists {
            url: self.store.url().to_owned(),
            what: format!(
                "{e}; a request of this run got no answer, or a server error, and may still land, so a rerun with --force waits {} s more than usual before it takes the prefix over",
                secs_text(wait)
            ),
        }
    }
}

/// What [`Publisher::wait_out_own_deletes`] waits before at the end of a
/// run.
const ENDS: &str = "it ends";

/// An object as [`Publisher::list_meta`] lists it: its name under the
/// prefix, when it was written (server time, ms since the epoch), its size
/// and its ETag.
type Listed = (String, i64, u64, Option<String>);

/// Whether an object seen (`have`: size, ETag) is the one written (`want`):
/// the same size, and the same ETag where both have one (quotes and case
/// aside).
fn same_object(want: &(u64, Option<String>), have: &(u64, Option<String>)) -> bool {
    let tag = |t: &str| {
        t.trim_start_matches("W/")
            .trim_matches('"')
            .to_ascii_lowercase()
    };
    want.0 == have.0
        && match (&want.1, &have.1) {
            (Some(w), Some(h)) => tag(w) == tag(h),
            _ => true,
        }
}

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

/// Whether `seen` is the version `read`: the same ETag (and version id)
/// where the store gave them.
fn same_version(seen: &UpdateVersion, read: &UpdateVersion) -> bool {
    let tag = |t: &Option<String>| {
        t.as_deref().map(|t| {
            t.trim_start_matches("W/")
                .trim_matches('"')
                .to_ascii_lowercase()
        })
    };
    (read.e_tag.is_none() || tag(&seen.e_tag) == tag(&read.e_tag))
        && (read.version.is_none() || seen.version == read.version)
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

/// `d` in seconds as a message says it: whole seconds as they are, others
/// to a tenth (a lock's 2,500 ms are "2.5 s", not "2 s").
fn secs_text(d: std::time::Duration) -> String {
    if d.subsec_millis() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{:.1}", d.as_secs_f64())
    }
}

/// The words whose presence anywhere in a 200 answer makes the S3 client
/// take it for a server error (S3 answers some failures so).
const SERVER_ERROR_WORDS: [&str; 2] = ["InternalError", "SlowDown"];

/// The most objects one DELETE request names: S3's bulk DeleteObjects
/// takes 1,000 keys.
const DELETES_PER_REQUEST: usize = 1000;

/// The longest wait a lock's note of unanswered requests makes `--force` take.
const MAX_UNANSWERED_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = self.abort();
        self.stop_heartbeat();
    }
}

/// How much later than a killed run's last refresh of its lock an object
/// may have been written and still be that run's: one refresh, and a margin.
const LEFTOVER_MARGIN_MS: i64 = LOCK_BEAT.as_millis() as i64 + 5_000;

/// How often a writing run refreshes its lock object.
const LOCK_BEAT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long `--force` watches a lock object before taking it over: a live
/// run refreshes it several times meanwhile.
const LOCK_STALE: std::time::Duration = std::time::Duration::from_secs(7);

/// The lock object's body, as a run writes it and as any bale reads it:
/// the run, where it runs, a beat count that changes at each refresh,
/// whether the run claimed the prefix, its request timeout, what it carries
/// over ([`Carry`]), and the note of an undo whose requests got no answer.
///
/// Read leniently, key by key, as every bale before read it: a key that is
/// missing, or whose value is not of its type, reads as unsaid, and so does
/// every key of a body that is not a JSON object. Another run's lock is
/// read, not trusted: its waits are capped ([`MAX_UNANSWERED_WAIT`]).
/// Written with its keys in the order bale always wrote them (sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct LockBody {
    #[serde(
        default,
        deserialize_with = "lenient::u64",
        skip_serializing_if = "Option::is_none"
    )]
    beat: Option<u64>,
    /// Only a JSON `true` says so.
    #[serde(default, deserialize_with = "lenient::flag")]
    claimed: bool,
    #[serde(
        default,
        deserialize_with = "lenient::any",
        skip_serializing_if = "Option::is_none"
    )]
    host: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient::i64",
        skip_serializing_if = "Option::is_none"
    )]
    in_flight_until_ms: Option<i64>,
    #[serde(
        default,
        deserialize_with = "lenient::i64",
        skip_serializing_if = "Option::is_none"
    )]
    leftovers_until_ms: Option<i64>,
    #[serde(
        default,
        deserialize_with = "lenient::any",
        skip_serializing_if = "Option::is_none"
    )]
    pid: Option<u32>,
    /// The run's request timeout: a request it sent may land that long
    /// after, even once the run is killed ([`LockBody::timeout`]). Read
    /// from any number that is not negative (one too large for a u64 is
    /// capped).
    #[serde(
        default,
        deserialize_with = "lenient::millis",
        skip_serializing_if = "Option::is_none"
    )]
    request_timeout_ms: Option<u64>,
    #[serde(
        default,
        deserialize_with = "lenient::any",
        skip_serializing_if = "Option::is_none"
    )]
    run: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient::any",
        skip_serializing_if = "Option::is_none"
    )]
    tool: Option<String>,
    /// Set by the note of a run that ended with requests that got no
    /// answer ([`Publisher::note_unanswered`]): `--force` waits that much more.
    #[serde(
        default,
        deserialize_with = "lenient::u64",
        skip_serializing_if = "Option::is_none"
    )]
    unanswered_wait_ms: Option<u64>,
}

impl LockBody {
    /// The body of run `run` at refresh `beat`, `claimed` or not, with its
    /// request timeout `timeout_ms` and what it carries over.
    fn new(run: &str, beat: u64, claimed: bool, timeout_ms: u64, carry: Carry) -> LockBody {
        LockBody {
            beat: Some(beat),
            claimed,
            host: Some(hostname()),
            in_flight_until_ms: carry.in_flight_until,
            leftovers_until_ms: carry.leftovers_until,
            pid: Some(std::process::id()),
            request_timeout_ms: Some(timeout_ms),
            run: Some(run.to_owned()),
            tool: Some("bale".to_owned()),
            unanswered_wait_ms: None,
        }
    }

    /// The body of a lock whose run ended with requests that got no answer
    /// ([`Publisher::note_unanswered`]): `--force` waits `wait_ms` more
    /// (and counts it as the run's request timeout too).
    fn note(run: &str, claimed: bool, wait_ms: u64, carry: Carry) -> LockBody {
        LockBody {
            unanswered_wait_ms: Some(wait_ms),
            ..LockBody::new(run, 0, claimed, wait_ms, carry)
        }
    }

    /// Reads a lock object's body (see the type's docs: never fails).
    fn parse(bytes: &[u8]) -> LockBody {
        match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(v @ serde_json::Value::Object(_)) => serde_json::from_value(v).unwrap_or_default(),
            _ => LockBody::default(),
        }
    }

    /// The body as written: compact JSON.
    fn render(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The run the lock names.
    fn owner(&self) -> Option<&str> {
        self.run.as_deref()
    }

    /// What the lock carries over ([`Carry`]).
    fn carry(&self) -> Carry {
        Carry {
            leftovers_until: self.leftovers_until_ms,
            in_flight_until: self.in_flight_until_ms,
        }
    }

    /// How long after the lock's last write a request of its run may still
    /// land (its `request_timeout_ms`, at most [`MAX_UNANSWERED_WAIT`]). A
    /// lock that does not say (a bale from before it did) counts as the
    /// default timeout.
    fn timeout(&self) -> std::time::Duration {
        self.request_timeout_ms
            .map(std::time::Duration::from_millis)
            .or_else(|| crate::options::parse_duration(crate::options::DEFAULT_TIMEOUT))
            .unwrap_or(std::time::Duration::from_secs(60))
            .min(MAX_UNANSWERED_WAIT)
    }

    /// How much longer than usual the lock's note asks `--force` to wait
    /// (at most [`MAX_UNANSWERED_WAIT`]); `None` when it has no such note.
    fn unanswered(&self) -> Option<std::time::Duration> {
        self.unanswered_wait_ms
            .map(|ms| std::time::Duration::from_millis(ms).min(MAX_UNANSWERED_WAIT))
    }
}

/// The readers of [`LockBody`]'s keys: each takes any JSON value, and reads
/// one not of its type as unsaid.
mod lenient {
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    type Read<T, E> = std::result::Result<T, E>;

    /// A value of type `T`, if it is one.
    pub fn any<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
        d: D,
    ) -> Read<Option<T>, D::Error> {
        Ok(serde_json::from_value(Value::deserialize(d)?).ok())
    }

    /// An integer that fits in a u64.
    pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Read<Option<u64>, D::Error> {
        Ok(Value::deserialize(d)?.as_u64())
    }

    /// An integer that fits in an i64.
    pub fn i64<'de, D: Deserializer<'de>>(d: D) -> Read<Option<i64>, D::Error> {
        Ok(Value::deserialize(d)?.as_i64())
    }

    /// `true`, and nothing else.
    pub fn flag<'de, D: Deserializer<'de>>(d: D) -> Read<bool, D::Error> {
        Ok(Value::deserialize(d)?.as_bool() == Some(true))
    }

    /// Any number that is not negative, in whole milliseconds, capped at
    /// `u64::MAX`.
    pub fn millis<'de, D: Deserializer<'de>>(d: D) -> Read<Option<u64>, D::Error> {
        Ok(Value::deserialize(d)?
            .as_f64()
            .filter(|ms| *ms >= 0.0)
            .map(|ms| ms.min(u64::MAX as f64) as u64))
    }
}

/// What a run's lock carries over from the lock of a killed run it took
/// over (server times, ms since the epoch), so that a run taking this one's
/// over in turn still knows them: this run may stop (refused, Ctrl-C,
/// killed) before it cleared anything, and its lock, written later than
/// the killed run's, would otherwise date the user's objects put there
/// since as leftovers, and shorten the wait for the killed run's requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Carry {
    /// Objects of bale's names dated up to this are the killed run's
    /// leftovers; carried until this run has cleared them.
    leftovers_until: Option<i64>,
    /// A request of the killed run may land until then.
    in_flight_until: Option<i64>,
}

/// A run's request timeout as its lock records it (at most
/// [`MAX_UNANSWERED_WAIT`]).
fn run_timeout_ms(store: &Store) -> u64 {
    store
        .options()
        .request_timeout()
        .min(MAX_UNANSWERED_WAIT)
        .as_millis() as u64
}

struct HeartbeatCtx {
    store: Store,
    client: Arc<dyn ObjectStore>,
    run: String,
    claimed: Arc<AtomicBool>,
    lock_write: Arc<Mutex<()>>,
    lock_writer: Arc<LockWriter>,
    lost: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    path: ObjPath,
    carry: Arc<Mutex<Carry>>,
}

impl HeartbeatCtx {
    fn run(self) {
        let mut beat = 0u64;
        loop {
            let until = std::time::Instant::now() + LOCK_BEAT;
            while std::time::Instant::now() < until {
                if self.stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            // A failed refresh is retried at the next beat; a lock another
            // run took over ends the heartbeat.
            beat += 1;
            let mine = LockRef {
                store: &self.store,
                client: &self.client,
                path: &self.path,
                run: &self.run,
                claimed: &self.claimed,
                lock_write: &self.lock_write,
                lock_writer: &self.lock_writer,
                lost: &self.lost,
                carry: &self.carry,
            };
            if mine.hold(beat) == Hold::Lost {
                return;
            }
        }
    }
}

/// A run's lock object and what writes it, borrowed from a
/// [`Publisher`] or its heartbeat.
struct LockRef<'a> {
    store: &'a Store,
    client: &'a Arc<dyn ObjectStore>,
    path: &'a ObjPath,
    run: &'a str,
    claimed: &'a AtomicBool,
    lock_write: &'a Mutex<()>,
    lock_writer: &'a LockWriter,
    lost: &'a AtomicBool,
    carry: &'a Mutex<Carry>,
}

impl LockRef<'_> {
    /// Whether the run still holds its lock: the lock names it, and a write
    /// of its body (refresh `beat`) over the version it wrote last lands
    /// (the store compares it). [`Hold::Lost`] when another run took it
    /// over (its name there, or the lock removed by that run's commit), and
    /// the run is marked lost; [`Hold::Unknown`] when the lock could not be
    /// read or written: nothing is concluded, and a lock that cannot be
    /// read is not written (a plain write would bring back a removed one).
    fn hold(&self, beat: u64) -> Hold {
        if self.lost.load(Ordering::SeqCst) {
            return Hold::Lost;
        }
        let owner = match self
            .store
            .object(LOCK_NAME)
            .and_then(|o| o.get_sized(0, 1 << 20, "lock"))
        {
            Ok(b) => LockBody::parse(&b).run,
            Err(StorageError::NotFound { .. }) => None,
            Err(_) => return Hold::Unknown,
        };
        let held = if owner.as_deref() != Some(self.run) {
            Hold::Lost
        } else {
            let _writing = lock(self.lock_write);
            let body = LockBody::new(
                self.run,
                beat,
                self.claimed.load(Ordering::SeqCst),
                run_timeout_ms(self.store),
                *lock(self.carry),
            )
            .render();
            match self.lock_writer.write(self.client, self.path, body) {
                Ok(()) => Hold::Held,
                Err(LockWriteError::Lost) => Hold::Lost,
                Err(LockWriteError::Other(_)) => Hold::Unknown,
            }
        };
        if held == Hold::Lost {
            self.lost.store(true, Ordering::SeqCst);
        }
        held
    }
}

/// Writes a run's lock object over the version it wrote last (`If-Match` on
/// its ETag), so that nothing of this run's lands over another run's lock:
/// a write of this run that stalled while another took the prefix over is
/// refused by the store. Where the store gives no ETag, or has no
/// conditional PUTs, it writes plainly (the owner checks by GET remain).
#[derive(Default)]
struct LockWriter {
    state: Mutex<LockVersion>,
}

#[derive(Default)]
struct LockVersion {
    /// The version of the body this run wrote last, when known.
    tag: Option<UpdateVersion>,
    /// The body of a write whose outcome is unknown (an error after the
    /// request may have landed).
    unsure: Option<String>,
    /// The store refused a conditional write as not implemented.
    plain: bool,
}

enum LockWriteError {
    /// Another writer changed or removed the lock since this run's write.
    Lost,
    Other(object_store::Error),
}

impl LockWriter {
    /// Records the result of a write of `body` made outside [`Self::write`].
    fn wrote(&self, r: &object_store::PutResult) {
        lock(&self.state).tag = version_of(r);
    }

    /// The next write goes over version `v` (a lock this run takes over).
    fn expect(&self, v: UpdateVersion) {
        lock(&self.state).tag = Some(v);
    }

    fn write(
        &self,
        client: &Arc<dyn ObjectStore>,
        path: &ObjPath,
        body: String,
    ) -> std::result::Result<(), LockWriteError> {
        let mut st = lock(&self.state);
        let mode = match (&st.tag, st.plain) {
            (Some(t), false) => PutMode::Update(t.clone()),
            _ => PutMode::Overwrite,
        };
        let put =
            |mode: PutMode| -> std::result::Result<object_store::PutResult, object_store::Error> {
                let (client, path) = (Arc::clone(client), path.clone());
                let payload = PutPayload::from(body.clone());
                match runtime::block_on(async move {
                    client
                        .put_opts(&path, payload, PutOptions::from(mode))
                        .await
                }) {
                    Ok(r) => r,
                    Err(e) => Err(runtime_failure(&e)),
                }
            };
        let mut result = put(mode);
        if matches!(result, Err(object_store::Error::Precondition { .. })) {
            // A write of this run whose answer was lost may have landed: an
            // earlier one (`unsure`), or this very one, which the client sent
            // again and the store refused, its version having moved. Then
            // the lock is that body (it names the run and its beat), and
            // this run's still.
            let unsure = st.unsure.take();
            if let Ok(Some(seen)) = read_seen(client, path) {
                if seen.bytes.as_ref() == body.as_bytes() {
                    st.tag = Some(seen.version).filter(|v| v.e_tag.is_some());
                    return Ok(());
                }
                if unsure.is_some_and(|u| seen.bytes.as_ref() == u.as_bytes()) {
                    result = put(PutMode::Update(seen.version));
                }
            }
        }
        if matches!(result, Err(object_store::Error::NotImplemented { .. })) {
            st.plain = true;
            result = put(PutMode::Overwrite);
        }
        match result {
            Ok(r) => {
                st.tag = version_of(&r);
                st.unsure = None;
                Ok(())
            }
            Err(
                object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. },
            ) => Err(LockWriteError::Lost),
            Err(e) => {
                st.unsure = Some(body);
                Err(LockWriteError::Other(e))
            }
        }
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

/// A failure of [`Publisher::check_written`], with what the run did about
/// it and what the user can do.
fn late_request(e: StorageError, prefix: &str, done: &str) -> StorageError {
    match e {
        StorageError::Changed { url, what } => StorageError::Changed {
            url,
            what: format!("{what}; {done}; run it again with --force"),
        },
        other => StorageError::Exists {
            url: prefix.to_owned(),
            what: format!(
                "this run could not check that the objects it wrote are there ({other}); {done}; run it again"
            ),
        },
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

/// The part size for a file of `len` bytes: `want`, at least S3's minimum,
/// raised so that the file fits in 10,000 parts.
fn part_size(want: usize, len: u64) -> usize {
    let floor = len.div_ceil(MAX_PARTS) as usize;
    want.max(MIN_PART_SIZE).max(floor)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    // The lock's readers and writers as the tests below have always called them.
    fn lock_body(run: &str, beat: u64, claimed: bool, timeout_ms: u64, carry: Carry) -> String {
        LockBody::new(run, beat, claimed, timeout_ms, carry).render()
    }
    fn lock_note(run: &str, claimed: bool, wait_ms: u64, carry: Carry) -> String {
        LockBody::note(run, claimed, wait_ms, carry).render()
    }
    fn lock_owner(bytes: &[u8]) -> Option<String> {
        LockBody::parse(bytes).run
    }
    fn lock_claimed(bytes: &[u8]) -> bool {
        LockBody::parse(bytes).claimed
    }
    fn lock_carry(bytes: &[u8]) -> Carry {
        LockBody::parse(bytes).carry()
    }
    fn lock_timeout(bytes: &[u8]) -> std::time::Duration {
        LockBody::parse(bytes).timeout()
    }
    fn lock_unanswered(bytes: &[u8]) -> Option<std::time::Duration> {
        LockBody::parse(bytes).unanswered()
    }

    /// Bodies an earlier bale wrote (its `lock_body` and `lock_note`), to the
    /// byte.
    const OLD_BODY: &str = r#"{"beat":3,"claimed":true,"host":"vm","pid":8118,"request_timeout_ms":6000,"run":"run-1","tool":"bale"}"#;
    const OLD_CARRYING: &str = r#"{"beat":3,"claimed":false,"host":"vm","in_flight_until_ms":1700000060456,"leftovers_until_ms":1700000000123,"pid":8118,"request_timeout_ms":6000,"run":"run-1","tool":"bale"}"#;
    const OLD_NOTE: &str = r#"{"beat":0,"claimed":true,"host":"vm","in_flight_until_ms":1700000060456,"leftovers_until_ms":1700000000123,"pid":8118,"request_timeout_ms":9000,"run":"run-1","tool":"bale","unanswered_wait_ms":9000}"#;

    const OLD_CARRY: Carry = Carry {
        leftovers_until: Some(1_700_000_000_123),
        in_flight_until: Some(1_700_000_060_456),
    };

    #[test]
    fn a_lock_body_is_written_as_bale_always_wrote_it() {
        let on = |b: LockBody| LockBody {
            pid: Some(8118),
            host: Some("vm".into()),
            ..b
        };
        let body = on(LockBody::new("run-1", 3, true, 6_000, Carry::default()));
        assert_eq!(body.render(), OLD_BODY);
        let carrying = on(LockBody::new("run-1", 3, false, 6_000, OLD_CARRY));
        assert_eq!(carrying.render(), OLD_CARRYING);
        let note = on(LockBody::note("run-1", true, 9_000, OLD_CARRY));
        assert_eq!(note.render(), OLD_NOTE);
        // And read back as written.
        for b in [body, carrying, note] {
            assert_eq!(LockBody::parse(b.render().as_bytes()), b);
        }
    }

    #[test]
    fn an_old_lock_body_reads_as_it_always_did() {
        let secs = std::time::Duration::from_secs;
        let body = LockBody::parse(OLD_BODY.as_bytes());
        assert_eq!(body.owner(), Some("run-1"));
        assert!(body.claimed);
        assert_eq!(body.carry(), Carry::default());
        assert_eq!(body.timeout(), secs(6));
        assert_eq!(body.unanswered(), None);
        assert_eq!((body.beat, body.pid), (Some(3), Some(8118)));
        assert_eq!(
            (body.host.as_deref(), body.tool.as_deref()),
            (Some("vm"), Some("bale"))
        );
        let carrying = LockBody::parse(OLD_CARRYING.as_bytes());
        assert!(!carrying.claimed);
        assert_eq!(carrying.carry(), OLD_CARRY);
        let note = LockBody::parse(OLD_NOTE.as_bytes());
        assert_eq!(note.owner(), Some("run-1"));
        assert_eq!(note.carry(), OLD_CARRY);
        assert_eq!(note.timeout(), secs(9));
        assert_eq!(note.unanswered(), Some(secs(9)));
        // The hand-written locks of the end-to-end tests, as bales before
        // this one wrote them (no timeout, no claim).
        let old = LockBody::parse(br#"{"run": "old", "beat": 1}"#);
        assert_eq!(old.owner(), Some("old"));
        assert!(!old.claimed);
        assert_eq!(old.timeout(), secs(60));
    }

    #[test]
    fn a_lock_body_reads_each_key_on_its_own() {
        // A key of another type reads as unsaid, and the others still read.
        let odd = LockBody::parse(
            br#"{"run": "r", "claimed": "yes", "beat": -1, "pid": "x", "unanswered_wait_ms": -1,
                "leftovers_until_ms": 1.5, "in_flight_until_ms": 7, "request_timeout_ms": 2500.9}"#,
        );
        assert_eq!(odd.owner(), Some("r"));
        assert!(!odd.claimed);
        assert_eq!((odd.beat, odd.pid, odd.unanswered()), (None, None, None));
        assert_eq!(
            odd.carry(),
            Carry {
                leftovers_until: None,
                in_flight_until: Some(7)
            }
        );
        assert_eq!(odd.timeout(), std::time::Duration::from_millis(2500));
        // A number where the run's name goes names no run.
        assert_eq!(
            LockBody::parse(br#"{"run": 5, "claimed": true}"#).owner(),
            None
        );
        // The last of a key said twice counts, as JSON readers take it.
        assert_eq!(
            LockBody::parse(br#"{"run": "a", "run": "b"}"#).owner(),
            Some("b")
        );
        // Not a JSON object: nothing said, every key at its default.
        for garbage in [
            &b"not json"[..],
            b"",
            b"null",
            b"[\"run-1\", 3, true]",
            b"\"run-1\"",
            b"{\"run\": \"cut",
        ] {
            let b = LockBody::parse(garbage);
            assert_eq!(
                b,
                LockBody::default(),
                "{:?}",
                String::from_utf8_lossy(garbage)
            );
            assert_eq!(b.owner(), None);
            assert!(!b.claimed);
            assert_eq!(b.carry(), Carry::default());
            assert_eq!(b.timeout(), std::time::Duration::from_secs(60));
            assert_eq!(b.unanswered(), None);
        }
    }

    #[test]
    fn parts_are_at_least_five_mib_and_never_more_than_ten_thousand() {
        assert_eq!(part_size(1, 10), MIN_PART_SIZE);
        assert_eq!(part_size(8 << 20, 100 << 20), 8 << 20);
        let huge = 200u64 << 30;
        let p = part_size(8 << 20, huge);
        assert!(huge.div_ceil(p as u64) <= MAX_PARTS);
        assert!(p > 8 << 20);
    }

    #[test]
    fn a_locks_note_of_unanswered_requests_is_read_back_and_capped() {
        let note = lock_note("run-1", true, 6_000, Carry::default());
        assert_eq!(lock_owner(note.as_bytes()).as_deref(), Some("run-1"));
        assert!(lock_claimed(note.as_bytes()));
        assert_eq!(
            lock_unanswered(note.as_bytes()),
            Some(std::time::Duration::from_secs(6))
        );
        // Another run's lock is read, not trusted: no wait past the cap.
        let huge = lock_note("run-2", false, u64::MAX, Carry::default());
        assert_eq!(lock_unanswered(huge.as_bytes()), Some(MAX_UNANSWERED_WAIT));
        for plain in [
            lock_body("run-3", 4, false, 6_000, Carry::default()),
            r#"{"unanswered_wait_ms": -1}"#.to_owned(),
            r#"{"unanswered_wait_ms": "60000"}"#.to_owned(),
            "not json".to_owned(),
        ] {
            assert_eq!(lock_unanswered(plain.as_bytes()), None, "{plain}");
        }
    }

    #[test]
    fn a_lock_says_how_long_its_runs_requests_may_take() {
        let secs = std::time::Duration::from_secs;
        let body = lock_body("run-1", 3, true, 6_000, Carry::default());
        assert_eq!(lock_timeout(body.as_bytes()), secs(6));
        // A note says the same timeout.
        assert_eq!(
            lock_timeout(lock_note("run-1", false, 9_000, Carry::default()).as_bytes()),
            secs(9)
        );
        // Read, not trusted: capped; a lock that does not say (or cannot be
        // read) counts as the default timeout, not as none.
        let huge = lock_body("run-2", 0, false, u64::MAX, Carry::default());
        assert_eq!(lock_timeout(huge.as_bytes()), MAX_UNANSWERED_WAIT);
        for huge in [
            r#"{"request_timeout_ms": 1e300}"#,
            r#"{"request_timeout_ms": 18446744073709551617}"#,
        ] {
            assert_eq!(lock_timeout(huge.as_bytes()), MAX_UNANSWERED_WAIT, "{huge}");
        }
        for silent in [
            r#"{"run": "old", "beat": 1}"#,
            r#"{"request_timeout_ms": -5}"#,
            "not json",
        ] {
            assert_eq!(lock_timeout(silent.as_bytes()), secs(60), "{silent}");
        }
    }

    #[test]
    fn a_lock_carries_over_what_it_took_over() {
        let carry = Carry {
            leftovers_until: Some(1_700_000_000_123),
            in_flight_until: Some(1_700_000_060_456),
        };
        let body = lock_body("run-1", 2, true, 6_000, carry);
        assert_eq!(lock_carry(body.as_bytes()), carry);
        let note = lock_note("run-1", true, 6_000, carry);
        assert_eq!(lock_carry(note.as_bytes()), carry);
        // Nothing carried: nothing said, and nothing read back.
        let plain = lock_body("run-2", 0, false, 6_000, Carry::default());
        assert!(!plain.contains("until"), "{plain}");
        assert_eq!(lock_carry(plain.as_bytes()), Carry::default());
        assert_eq!(lock_carry(b"not json"), Carry::default());
    }

    #[test]
    fn waits_are_said_to_a_tenth_of_a_second() {
        let ms = std::time::Duration::from_millis;
        assert_eq!(secs_text(ms(6000)), "6");
        assert_eq!(secs_text(ms(9500)), "9.5");
        assert_eq!(secs_text(ms(2500)), "2.5");
    }

    #[test]
    fn an_object_is_the_one_written_by_size_and_etag() {
        let o = |size, tag: Option<&str>| (size, tag.map(str::to_owned));
        let want = o(100, Some("\"9b2cf535f27731c974343645a3985328\""));
        // Quotes, case and a weak mark aside, as stores spell them.
        assert!(same_object(
            &want,
            &o(100, Some("9B2CF535F27731C974343645A3985328"))
        ));
        assert!(same_object(
            &want,
            &o(100, Some("W/\"9b2cf535f27731c974343645a3985328\""))
        ));
        // Without an ETag on one side, the size alone.
        assert!(same_object(&want, &o(100, None)));
        assert!(same_object(&o(100, None), &o(100, Some("x"))));
        assert!(!same_object(&want, &o(101, None)));
        // The same size, another ETag: replaced.
        assert!(!same_object(
            &want,
            &o(100, Some("\"0cc175b9c0f1b6a831c399e269772661\""))
        ));
    }

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
