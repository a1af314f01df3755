//! Where bale datasets live: a local directory, or a prefix in object
//! storage (`s3://`, `gs://`, `az://`, `https://`) reached through the
//! `object_store` crate.
//!
//! Every command and both readers reach a dataset's files through this
//! crate: [`Location::parse`] tells a URL from a path; a URL opens as a
//! [`Store`], whose [`Object`]s are read with ranged GETs
//! ([`Object::get_range`]), many at once with neighbours coalesced
//! ([`get_ranges`]), sequentially with read-ahead ([`Chunks`]), or through
//! the format's positioned-read interface ([`WindowReader`]). [`Cache`] keeps
//! whole shards on a local disk shared by the processes of a node.
//!
//! ```no_run
//! use bale_storage::{Store, StorageOptions};
//! let mut options = StorageOptions::new();
//! options.set("aws_endpoint_url", "http://127.0.0.1:8333").set("allow_http", "true");
//! let store = Store::open("s3://bucket/datasets/train", &options)?;
//! let manifest = store.object("bale.json")?.get_sized(2, 64 << 20, "manifest")?;
//! let shard = store.object("shard-000000.tar")?;
//! let first_header = shard.get_range(0..512)?;
//! # Ok::<(), bale_storage::StorageError>(())
//! ```
//!
//! # Processes and `fork`
//!
//! Requests run on a tokio runtime that this crate owns, created lazily in
//! each process on first use. A process forked from one that used it
//! (PyTorch DataLoader workers under `fork`) never touches the parent's
//! runtime, clients or connections: it notices the new process id and makes
//! its own. Blocking calls may be made from any thread, inside another
//! async runtime too.
//!
//! # Faults
//!
//! Requests are retried with exponential backoff on 5xx answers, timeouts
//! and dropped connections (`object_store`'s retry, at most
//! [`options::DEFAULT_MAX_RETRIES`] retries and none started after
//! [`options::DEFAULT_RETRY_TIMEOUT`], unless the options say otherwise);
//! then the error names the URL, the byte range and the status. A missing
//! object is [`StorageError::NotFound`]; refused credentials are
//! [`StorageError::Credentials`].
#![deny(missing_docs)]

pub mod cache;
mod defaults;
mod error;
mod fetch;
mod location;
pub mod options;
mod runtime;
mod store;
mod uploads;
pub mod write;

/// Taken by the tests that fork this test process and by the tests whose
/// outcome depends on which descriptors hold a `flock`. A forked child holds
/// a copy of every descriptor the other tests' threads have open, with their
/// locks, until it exits: a cache test that found its released file still
/// locked by such a child failed once in CI.
#[cfg(test)]
pub(crate) fn fork_guard() -> std::sync::MutexGuard<'static, ()> {
    static GUARD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    GUARD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub use cache::{Cache, CacheOptions, CachedFile};
pub use error::{Result, StorageError};
pub use fetch::{Chunks, Coalesce, WindowReader, get_ranges, get_sized_many, start_ranges};
pub use location::{Location, SCHEMES, is_url, url_scheme};
pub use options::StorageOptions;
pub use runtime::Pending;
pub use store::{Object, Store, may_name_object};
pub use write::{Found, LOCK_NAME, Publisher, WriteOptions};

static NOTICE: std::sync::OnceLock<fn(&str)> = std::sync::OnceLock::new();

/// Sets where this crate tells of a long wait the user should know of
/// (`--force` watching another run's lock before it takes a prefix over):
/// the CLI prints it to stderr. Unset, nothing is said. The first call wins.
pub fn set_notice(f: fn(&str)) {
    let _ = NOTICE.set(f);
}

/// Tells `message` through [`set_notice`]'s function, if one was set.
pub(crate) fn notice(message: &str) {
    if let Some(f) = NOTICE.get() {
        f(message);
    }
}

/// The object at `url` (`s3://bucket/prefix/name`).
///
/// # Errors
/// As [`Store::open`] and [`Store::object`].
pub fn object_at(url: &str, options: &StorageOptions) -> Result<Object> {
    let Some((parent, name)) = url.trim_end_matches('/').rsplit_once('/') else {
        return Err(StorageError::BadUrl {
            url: url.to_owned(),
            what: "no object name in the URL".into(),
        });
    };
    if let Ok(parsed) = url::Url::parse(url)
        && let Some(what) = store::empty_segment(&parsed)
    {
        return Err(StorageError::BadUrl {
            url: error::shown_text(url),
            what,
        });
    }
    if parent.ends_with(':') || parent.ends_with(":/") {
        return Err(StorageError::BadUrl {
            url: url.to_owned(),
            what: "no object name after the bucket".into(),
        });
    }
    Store::open(parent, options)?.object(name)
}

/// Makes every file opened by path in `bale-format` (the scan of `bale
/// index`, the checks of `bale verify`, indexes, manifests) reach URLs
/// through this crate, with `options`: an object is read with ranged GETs
/// of at least 64 KiB (so the headers of small members share requests).
pub fn install_url_opener(options: &StorageOptions) {
    let options = options.clone();
    bale_format::read_at::set_url_opener(std::sync::Arc::new(move |url: &str| {
        let object = object_at(url, &options)?;
        let len = object.head()?;
        let object = object.expect_size(len);
        let reader: Box<dyn bale_format::read_at::ReadAt> =
            Box::new(WindowReader::new(&object, len, 64 << 10));
        Ok((reader, len))
    }));
}
