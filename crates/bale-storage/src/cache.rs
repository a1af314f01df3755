//! A local cache of whole objects (shards and indexes), shared by the
//! processes of a node.
//!
//! Layout of the cache directory:
//!
//! - `bc-<key>.<ext>`: one cached object, named by the xxh3 of its URL, size
//!   and checksum (so a new version of a dataset never reads an old file);
//! - `bale-cache.ledger`: JSON, the files the cache created, each with its
//!   device, inode, size and last use;
//! - `bale-cache.lock`: taken (`flock`) while the ledger changes.
//!
//! **Invariant:** eviction deletes only files the ledger lists, and only
//! when the file under that name is still the one the cache created (same
//! device, inode and size). Nothing else in the directory is ever touched,
//! whatever its name.
//!
//! A fill downloads under a temporary name (`.bale-tmp-<pid>-<n>-bc-...`),
//! is checked by the caller's check, synced, and renamed into place without
//! replacing anything. A process reading a cached file holds a shared
//! `flock` on it; eviction skips files so held (a non-blocking exclusive
//! lock fails) and picks the least recently used of the others. When
//! nothing can be evicted to make room, [`Cache::get_or_fill`] returns
//! `Ok(None)`: the caller reads from the bucket instead (no waiting, no
//! deadlock).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{Result, StorageError};

/// Where the cache lives and how much it may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheOptions {
    /// The cache directory (created when missing). May hold other files:
    /// they are never touched.
    pub dir: PathBuf,
    /// Most bytes of cached files (fills in flight may pass it by one
    /// object per reading thread).
    pub limit: u64,
}

const LEDGER: &str = "bale-cache.ledger";
const LOCK: &str = "bale-cache.lock";
const PREFIX: &str = "bc-";

/// One file the cache created.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Entry {
    dev: u64,
    ino: u64,
    size: u64,
    /// Last use, in nanoseconds since the epoch.
    used: u128,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Ledger {
    format: String,
    entries: BTreeMap<String, Entry>,
}

/// A cached file, open and locked shared: it is not evicted while held.
#[derive(Debug)]
pub struct CachedFile {
    /// The open file.
    pub file: File,
    /// Its path.
    pub path: PathBuf,
}

/// The cache (see the module docs). Cheap to clone; holds no file open.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
    limit: u64,
}

static FILLS: AtomicU64 = AtomicU64::new(0);

fn now() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn flock(file: &File, op: libc::c_int) -> io::Result<bool> {
    loop {
        // SAFETY: a plain syscall on an open descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EWOULDBLOCK) => return Ok(false),
            _ => return Err(e),
        }
    }
}

impl Cache {
    /// Opens (creating the directory when missing) the cache `o` describes.
    ///
    /// # Errors
    /// [`StorageError::Cache`] when the directory cannot be made or is not one.
    pub fn open(o: &CacheOptions) -> Result<Cache> {
        let err = |what: String| StorageError::Cache {
            path: o.dir.clone(),
            what,
        };
        match fs::metadata(&o.dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(err("exists and is not a directory".into())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(&o.dir).map_err(|e| err(format!("cannot create it: {e}")))?;
            }
            Err(e) => return Err(err(e.to_string())),
        }
        Ok(Cache {
            dir: o.dir.clone(),
            limit: o.limit,
        })
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    fn err(&self, path: &Path, what: impl std::fmt::Display) -> StorageError {
        StorageError::Cache {
            path: path.to_path_buf(),
            what: what.to_string(),
        }
    }

    /// The ledger, locked: changes are written back by [`Locked::save`].
    fn lock(&self) -> Result<Locked<'_>> {
        let path = self.dir.join(LOCK);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| self.err(&path, e))?;
        flock(&file, libc::LOCK_EX).map_err(|e| self.err(&path, e))?;
        let ledger_path = self.dir.join(LEDGER);
        let mut ledger: Ledger = match fs::read(&ledger_path) {
            Ok(b) => serde_json::from_slice(&b).unwrap_or_default(),
            Err(_) => Ledger::default(),
        };
        // Only names the cache gives its files: a ledger edited to list
        // `../x` or `/home/...` never reaches a path outside the directory.
        ledger.entries.retain(|name, _| is_cache_name(name));
        Ok(Locked {
            cache: self,
            _lock: file,
            ledger,
        })
    }

    /// The file cached under `key` (any text naming the object's version:
    /// URL, size, checksum) with extension `ext`, filled by `fill` when
    /// missing. `fill` writes the object's `size` bytes into the file it is
    /// given and checks them (an error discards the file). Returns `None`
    /// when the cache cannot make room (everything held by readers): read
    /// from the bucket then.
    ///
    /// # Errors
    /// `fill`'s error; [`StorageError::Cache`] for the cache's own I/O.
    pub fn get_or_fill(
        &self,
        key: &str,
        ext: &str,
        size: u64,
        fill: impl FnOnce(&File) -> Result<()>,
    ) -> Result<Option<CachedFile>> {
        let name = format!(
            "{PREFIX}{:016x}.{ext}",
            bale_format::checksum(format!("{key}\0{size}").as_bytes())
        );
        let path = self.dir.join(&name);
        {
            let mut l = self.lock()?;
            if let Some(f) = l.open_entry(&name)? {
                l.save()?;
                return Ok(Some(f));
            }
            if !l.make_room(size)? {
                return Ok(None);
            }
        }
        let tmp = self.dir.join(format!(
            "{}{}-{}-{name}",
            bale_format::atomic::TEMP_PREFIX,
            std::process::id(),
            FILLS.fetch_add(1, Ordering::Relaxed)
        ));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| self.err(&tmp, e))?;
        let filled = fill(&file).and_then(|()| {
            file.sync_all().map_err(|e| self.err(&tmp, e))?;
            let len = file.metadata().map_err(|e| self.err(&tmp, e))?.len();
            if len != size {
                return Err(self.err(&tmp, format!("filled {len} bytes, expected {size}")));
            }
            Ok(())
        });
        if let Err(e) = filled {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        let mut l = self.lock()?;
        match bale_format::files::rename_noreplace(&tmp, &path) {
            Ok(()) => {
                let meta = file.metadata().map_err(|e| self.err(&path, e))?;
                l.ledger.entries.insert(
                    name.clone(),
                    Entry {
                        dev: meta.dev(),
                        ino: meta.ino(),
                        size,
                        used: now(),
                    },
                );
                bale_format::atomic::sync_dir(&self.dir);
            }
            Err(_) => {
                // Another process filled it first: use theirs.
                let _ = fs::remove_file(&tmp);
            }
        }
        let got = l.open_entry(&name)?;
        l.save()?;
        Ok(got)
    }
}

/// Whether `name` is one the cache gives its files: `bc-<16 hex>.<ext>`,
/// a plain file name in the cache directory.
fn is_cache_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(PREFIX) else {
        return false;
    };
    let Some((hex, ext)) = rest.split_once('.') else {
        return false;
    };
    hex.len() == 16
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
        && !ext.is_empty()
        && ext
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_')
        && !ext.contains("..")
}

/// The ledger while the cache's lock is held.
struct Locked<'a> {
    cache: &'a Cache,
    _lock: File,
    ledger: Ledger,
}

impl Locked<'_> {
    /// Whether the file at `name` is still the one the ledger recorded.
    fn is_ours(&self, name: &str) -> Option<std::fs::Metadata> {
        let e = self.ledger.entries.get(name)?;
        let meta = fs::symlink_metadata(self.cache.dir.join(name)).ok()?;
        (meta.is_file() && meta.dev() == e.dev && meta.ino() == e.ino && meta.len() == e.size)
            .then_some(meta)
    }

    /// Opens a listed entry, locked shared, and marks it used; drops a
    /// listing whose file is gone or was replaced.
    fn open_entry(&mut self, name: &str) -> Result<Option<CachedFile>> {
        if !self.ledger.entries.contains_key(name) {
            return Ok(None);
        }
        if self.is_ours(name).is_none() {
            self.ledger.entries.remove(name);
            return Ok(None);
        }
        let path = self.cache.dir.join(name);
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| self.cache.err(&path, e))?;
        flock(&file, libc::LOCK_SH).map_err(|e| self.cache.err(&path, e))?;
        if let Some(e) = self.ledger.entries.get_mut(name) {
            e.used = now();
        }
        Ok(Some(CachedFile { file, path }))
    }

    /// Evicts least recently used entries no reader holds until `size`
    /// more bytes fit; false when they cannot.
    fn make_room(&mut self, size: u64) -> Result<bool> {
        if size > self.cache.limit {
            return Ok(false);
        }
        let gone: Vec<String> = self
            .ledger
            .entries
            .keys()
            .filter(|n| self.is_ours(n).is_none())
            .cloned()
            .collect();
        for n in gone {
            self.ledger.entries.remove(&n);
        }
        let mut total: u64 = self.ledger.entries.values().map(|e| e.size).sum();
        if total + size <= self.cache.limit {
            return Ok(true);
        }
        let mut by_use: Vec<(u128, String)> = self
            .ledger
            .entries
            .iter()
            .map(|(n, e)| (e.used, n.clone()))
            .collect();
        by_use.sort();
        for (_, name) in by_use {
            if total + size <= self.cache.limit {
                break;
            }
            let path = self.cache.dir.join(&name);
            let Ok(file) = File::open(&path) else {
                continue;
            };
            // Held by a reader: not evicted.
            if !flock(&file, libc::LOCK_EX | libc::LOCK_NB).unwrap_or(false) {
                continue;
            }
            let same = file
                .metadata()
                .ok()
                .zip(self.is_ours(&name))
                .is_some_and(|(a, b)| a.dev() == b.dev() && a.ino() == b.ino());
            if !same {
                continue;
            }
            if fs::remove_file(&path).is_ok()
                && let Some(e) = self.ledger.entries.remove(&name)
            {
                total -= e.size;
            }
        }
        self.save()?;
        Ok(total + size <= self.cache.limit)
    }

    fn save(&self) -> Result<()> {
        let path = self.cache.dir.join(LEDGER);
        let tmp = self.cache.dir.join(format!(
            "{}{}-{LEDGER}",
            bale_format::atomic::TEMP_PREFIX,
            std::process::id()
        ));
        let bytes = serde_json::to_vec(&Ledger {
            format: "bale-cache 1".into(),
            entries: self.ledger.entries.clone(),
        })
        .map_err(|e| self.cache.err(&path, e))?;
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| self.cache.err(&tmp, e))?;
        f.write_all(&bytes).map_err(|e| self.cache.err(&tmp, e))?;
        drop(f);
        fs::rename(&tmp, &path).map_err(|e| self.cache.err(&path, e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn fill_with(bytes: &'static [u8]) -> impl FnOnce(&File) -> Result<()> {
        move |f: &File| {
            f.write_all_at(bytes, 0).unwrap();
            Ok(())
        }
    }

    #[test]
    fn fills_reuses_evicts_lru_and_never_touches_other_files() {
        let _fork = crate::fork_guard();
        let dir = tempfile::tempdir().unwrap();
        let mine = dir.path().join("bc-0000000000000000.tar");
        fs::write(&mine, b"the user's file, named like a cache file").unwrap();
        fs::write(dir.path().join("notes.txt"), b"keep").unwrap();
        let cache = Cache::open(&CacheOptions {
            dir: dir.path().to_path_buf(),
            limit: 10,
        })
        .unwrap();
        let a = cache
            .get_or_fill("a", "tar", 4, fill_with(b"aaaa"))
            .unwrap()
            .unwrap();
        assert_eq!(fs::read(&a.path).unwrap(), b"aaaa");
        let a_path = a.path.clone();
        drop(a);
        // Reused: the fill is not called.
        let again = cache
            .get_or_fill("a", "tar", 4, |_| panic!("filled twice"))
            .unwrap()
            .unwrap();
        assert_eq!(again.path, a_path);
        let b = cache
            .get_or_fill("b", "tar", 4, fill_with(b"bbbb"))
            .unwrap()
            .unwrap();
        // Both held: no room for c.
        assert!(
            cache
                .get_or_fill("c", "tar", 4, fill_with(b"cccc"))
                .unwrap()
                .is_none()
        );
        drop(again);
        // a released (and least recently used): evicted for c.
        let c = cache
            .get_or_fill("c", "tar", 4, fill_with(b"cccc"))
            .unwrap()
            .unwrap();
        assert!(!a_path.exists());
        assert_eq!(fs::read(&c.path).unwrap(), b"cccc");
        assert_eq!(fs::read(&b.path).unwrap(), b"bbbb");
        drop((b, c));
        // A fill that fails its check leaves nothing behind.
        let failed = cache.get_or_fill("d", "tar", 4, |_| {
            Err(StorageError::Cache {
                path: "x".into(),
                what: "bad bytes".into(),
            })
        });
        assert!(failed.is_err());
        // Larger than the limit: no room, at once.
        assert!(
            cache
                .get_or_fill("e", "tar", 11, fill_with(b""))
                .unwrap()
                .is_none()
        );
        // Many evictions later, the user's files are still there.
        for k in 0..5 {
            let key = format!("k{k}");
            drop(
                cache
                    .get_or_fill(&key, "tar", 5, fill_with(b"12345"))
                    .unwrap(),
            );
        }
        assert!(mine.exists());
        assert!(dir.path().join("notes.txt").exists());
        let leftovers: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".bale-tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn a_forged_ledger_cannot_point_eviction_outside_the_cache() {
        let _fork = crate::fork_guard();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim.tar");
        fs::write(&victim, b"keep").unwrap();
        let meta = fs::metadata(&victim).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let entry = |used: u64| serde_json::json!({"dev": meta.dev(), "ino": meta.ino(), "size": 4, "used": used});
        let forged = serde_json::json!({
            "format": "bale-cache 1",
            "entries": {
                victim.to_str().unwrap(): entry(0),
                format!("../{}/victim.tar", outside.path().file_name().unwrap().to_str().unwrap()): entry(1),
            }
        });
        fs::write(dir.path().join(LEDGER), forged.to_string()).unwrap();
        let cache = Cache::open(&CacheOptions {
            dir: dir.path().to_path_buf(),
            limit: 8,
        })
        .unwrap();
        for k in 0..4 {
            drop(
                cache
                    .get_or_fill(&format!("k{k}"), "tar", 4, fill_with(b"1234"))
                    .unwrap(),
            );
        }
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        assert!(is_cache_name("bc-0123456789abcdef.tar.zst"));
        for bad in [
            "bc-0123456789abcdef",
            "bc-0123456789abcdeg.tar",
            "bc-01.tar",
            "x/bc-0123456789abcdef.tar",
            "bc-0123456789abcdef./x",
        ] {
            assert!(!is_cache_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_cache_file_replaced_by_someone_else_is_not_deleted() {
        let _fork = crate::fork_guard();
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(&CacheOptions {
            dir: dir.path().to_path_buf(),
            limit: 8,
        })
        .unwrap();
        let a = cache
            .get_or_fill("a", "tar", 4, fill_with(b"aaaa"))
            .unwrap()
            .unwrap();
        let path = a.path.clone();
        drop(a);
        // Someone puts their own file under the cache's name.
        fs::remove_file(&path).unwrap();
        fs::write(&path, b"theirs").unwrap();
        for k in 0..4 {
            drop(
                cache
                    .get_or_fill(&format!("k{k}"), "tar", 4, fill_with(b"1234"))
                    .unwrap(),
            );
        }
        assert_eq!(fs::read(&path).unwrap(), b"theirs");
    }
}
