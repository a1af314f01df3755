//! A shard as the reader holds it: its index, checked against the manifest,
//! and its file, opened (mapped or not) on first read.

use super::*;

/// The lazily opened shard file.
#[derive(Debug)]
pub(super) struct Handle {
    pub(super) file: Option<File>,
    pub(super) map: Option<Arc<Mmap>>,
    /// The regions read around so far ([`super::ReadAround`]).
    pub(super) regions: super::around::Regions,
    /// What runs read in order asked for ahead of the reader.
    pub(super) ahead: super::around::Ahead,
}

#[derive(Debug)]
pub(super) struct Shard {
    /// The shard file, or the object's URL.
    pub(super) path: PathBuf,
    pub(super) index: ShardIndex,
    /// The local file (or, for a shard in object storage, its cached copy).
    pub(super) handle: OnceLock<Handle>,
    /// The object, for a dataset in object storage.
    pub(super) remote: Option<RemoteShard>,
    /// The local file as the dataset found it when it opened (the file is
    /// opened on first read, which may come much later).
    pub(super) found: Option<FileId>,
}

/// What tells one file at a path from another put there later: a shard
/// renamed over it (a `bale pack --force` into the dataset's folder) has
/// another change time (`ctime`, which a rename sets and no tool carries
/// over, `rsync -a` included); one written in place another modification
/// time too. Not the device and inode: a FUSE mount (gcsfuse,
/// mountpoint-s3) may number a file anew after the kernel forgot it, and
/// an automounted NFS share may come back under another device. A file
/// replaced within the file system's clock step of the one it replaces
/// (milliseconds; writing a shard takes longer) is not told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileId {
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileId {
    pub(super) fn of(meta: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        FileId {
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

impl Shard {
    /// The shard of object storage `object` (at `path`), with its `index`.
    pub(super) fn in_bucket(
        path: PathBuf,
        index: ShardIndex,
        object: bale_storage::Object,
    ) -> Self {
        Shard {
            path,
            index,
            handle: OnceLock::new(),
            remote: Some(RemoteShard {
                object,
                uncached: Default::default(),
            }),
            found: None,
        }
    }

    /// The tar bytes of entry `e` of this `.tar.zst` shard, from its zstd
    /// `frame` (checked against the entry's offset and length).
    pub(super) fn decompress(&self, e: &SampleEntry, frame: &[u8]) -> Result<Vec<u8>> {
        Ok(decompress_frame(
            &self.path,
            e.file_offset,
            frame,
            e.tar_len,
            self.index.zstd_dict(),
        )?)
    }
}

impl Shard {
    /// `e`, an error reading this local shard; or, when the file at the
    /// path is no longer the one the dataset opened (another size, other
    /// modification or change times, or none at all) and `e` is one that a
    /// changed file also gives (damage of one sample's bytes, a read past
    /// the end), [`ReaderError::ShardReplaced`] or
    /// [`ReaderError::ShardRemoved`]: a shard written over or cut short under
    /// the reader never passes for a damaged sample
    /// ([`ReaderError::is_sample_damage`]). Only called on errors: it costs
    /// a `stat` of the path (and of the open descriptor, with
    /// [`Backing::Pread`]).
    pub(super) fn explain(&self, e: ReaderError) -> ReaderError {
        let damage = e.is_sample_damage()
            || matches!(
                e,
                ReaderError::Format(FormatError::Truncated { .. } | FormatError::IoAt { .. })
            );
        match self.changed().filter(|_| damage) {
            Some(changed) => changed,
            None => e,
        }
    }

    /// The error of a local shard that is no longer the file the dataset
    /// opened, if it is not: [`ReaderError::ShardRemoved`] when nothing is at
    /// the path, [`ReaderError::ShardReplaced`] when another file is (or,
    /// with [`Backing::Pread`], when the open file was written over).
    pub(super) fn changed(&self) -> Option<ReaderError> {
        let found = self.found?;
        let changed = |m: &std::io::Result<std::fs::Metadata>| {
            m.as_ref().is_ok_and(|m| FileId::of(m) != found)
        };
        let path = || self.path.clone();
        match std::fs::metadata(&self.path) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Some(ReaderError::ShardRemoved { path: path() });
            }
            m if changed(&m) => return Some(ReaderError::ShardReplaced { path: path() }),
            _ => {}
        }
        // With `Backing::Pread`, the open file itself (written over in place).
        if let Some(Handle { file: Some(f), .. }) = self.handle.get()
            && changed(&f.metadata())
        {
            return Some(ReaderError::ShardReplaced { path: path() });
        }
        None
    }
}

/// A shard in object storage.
#[derive(Debug)]
pub(super) struct RemoteShard {
    pub(super) object: bale_storage::Object,
    /// Set when the cache could not make room for the shard: it is read
    /// from the bucket from then on.
    pub(super) uncached: std::sync::atomic::AtomicBool,
}

impl Handle {
    /// Asks the kernel to start reading `len` bytes at `offset` of the
    /// shard (`MADV_WILLNEED` on the map, `POSIX_FADV_WILLNEED` on the
    /// file), in one request. Only a hint: a failure loses nothing.
    pub(super) fn will_need(&self, offset: u64, len: u64) {
        match (&self.map, &self.file) {
            (Some(map), _) => will_need(map, offset, len),
            (None, Some(file)) => {
                if let (Ok(o), Ok(l)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len))
                {
                    // SAFETY: a plain syscall on an open descriptor; a failure only loses the hint.
                    unsafe {
                        libc::posix_fadvise(file.as_raw_fd(), o, l, libc::POSIX_FADV_WILLNEED)
                    };
                }
            }
            (None, None) => {}
        }
    }
}

/// Ranges shorter than this are asked for with `MADV_WILLNEED` alone:
/// [`Handle::bring_in`].
const PULL_MIN: u64 = 64 << 10;

/// The piece a pulled run is read in, into a buffer of each thread that
/// pulls: small enough to stay in the core's cache ([`pull`]).
const PULL_CHUNK: usize = 256 << 10;

impl Handle {
    /// Brings `len` bytes at `offset` of the shard at `path` into the page
    /// cache for a run about to be read in order; true when that needs no
    /// hint of the run after it: [`Handle::bring_in`], and when that does
    /// nothing, [`Handle::will_need`] (false).
    pub(super) fn read_in_order(&self, path: &Path, offset: u64, len: u64) -> bool {
        if self.bring_in(path, offset, len) != Brought::Not {
            return true;
        }
        self.will_need(offset, len);
        false
    }

    /// Brings `len` bytes at `offset` of a mapped shard (at `path`) into the
    /// page cache now, for a run read in order or a region read around.
    ///
    /// A range of [`PULL_MIN`] bytes or more is left alone when every page
    /// is in the page cache (`mincore`: [`Brought::There`]), and otherwise
    /// read through the file here, once: positioned reads of [`PULL_CHUNK`]
    /// into a buffer that is thrown away ([`Brought::Read`]). The kernel's
    /// read path brings the pages in large folios and reads on ahead of a
    /// sequential reader by itself, where `MADV_WILLNEED` on a `MADV_RANDOM`
    /// map fills the cache a 4 KiB page at a time (docs/benchmarks.md, "Runs
    /// read through the file"). [`Brought::Not`], with nothing done, for a
    /// shorter range, a file handle, or a pull that fails (the path no
    /// longer opens as a regular file of the map's length): the caller then
    /// asks the kernel. The reads themselves always go through the map, so
    /// this is only a hint.
    pub(super) fn bring_in(&self, path: &Path, offset: u64, len: u64) -> Brought {
        let Some(map) = self.map.as_ref().filter(|_| self.pulls(len)) else {
            return Brought::Not;
        };
        match resident(map, offset, len) {
            Some(true) => Brought::There,
            Some(false) if pull(path, map.len() as u64, offset, len) => Brought::Read,
            _ => Brought::Not,
        }
    }

    /// Whether a run of `len` bytes is left to [`Handle::read_in_order`]
    /// when it is read, rather than hinted ahead of time.
    pub(super) fn pulls(&self, len: u64) -> bool {
        self.map.is_some() && len >= PULL_MIN
    }
}

/// What [`Handle::bring_in`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Brought {
    /// Every page was in memory already.
    There,
    /// The range was read in through the file (it was not all in memory).
    Read,
    /// Nothing: the caller asks the kernel for the range.
    Not,
}

/// Whether every page of `len` bytes at `offset` of `map` is in memory
/// (`mincore`); `None` when the range is outside the map or the call fails.
fn resident(map: &Mmap, offset: u64, len: u64) -> Option<bool> {
    // The system's page size (not a smaller step): `mincore` takes a
    // page-aligned address and reports one byte per page.
    // SAFETY: a plain libc call with no pointer arguments.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|&p| p > 0)?;
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    if end > map.len() || start >= end {
        return None;
    }
    let first = start - start % page;
    let pages = (end - first).div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `first..end` lies in the map (checked above), whose start is
    // page-aligned, so `first` is too; `vec` holds one byte per page of it.
    let r = unsafe {
        libc::mincore(
            map.as_ptr().add(first) as *mut libc::c_void,
            end - first,
            vec.as_mut_ptr(),
        )
    };
    (r == 0).then(|| vec.iter().all(|b| b & 1 != 0))
}

/// Reads `len` bytes at `offset` of the file at `path` and throws them
/// away, to bring them into the page cache; false (nothing more read) when
/// the path does not open as a regular file of `file_len` bytes (replaced,
/// removed: the map still reads the file it was made from) or a read fails.
///
/// The pages come in smaller than 2 MiB: each pull is a new read-ahead
/// stream, which the kernel starts on small pages. A pull through a map of
/// its own advised `MADV_HUGEPAGE` gets 2 MiB pages and is faster, but on a
/// VM that hands free memory back to its host, the first touch of those
/// pages can cost more than the pull saves (docs/benchmarks.md, "Cold reads
/// pulled in 2 MiB pages").
fn pull(path: &Path, file_len: u64, offset: u64, len: u64) -> bool {
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let Ok(file) = bale_format::files::open_regular(path) else {
        return false;
    };
    if file.metadata().map(|m| m.len()).ok() != Some(file_len) {
        return false;
    }
    let end = offset.saturating_add(len).min(file_len);
    BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        buf.resize(PULL_CHUNK, 0);
        let mut at = offset;
        while at < end {
            let n = usize::try_from(end - at).map_or(PULL_CHUNK, |n| n.min(PULL_CHUNK));
            match file.read_at(&mut buf[..n], at) {
                Ok(0) | Err(_) => return false,
                Ok(k) => at += k as u64,
            }
        }
        true
    })
}

pub(super) fn map_slice<'a>(map: &'a Mmap, path: &Path, offset: u64, len: u64) -> Result<&'a [u8]> {
    let range = usize::try_from(offset)
        .ok()
        .and_then(|o| Some(o..o.checked_add(usize::try_from(len).ok()?)?));
    range.and_then(|r| map.get(r)).ok_or_else(|| {
        ReaderError::from(FormatError::Truncated {
            path: path.to_path_buf(),
            what: "sample data",
            needed: offset.saturating_add(len),
            len: map.len() as u64,
        })
    })
}

pub(super) fn unreachable_handle<T>(path: &Path) -> Result<T> {
    // A handle always holds a map or a file; reaching here is a bug, reported as an error.
    Err(ReaderError::from(FormatError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other("shard handle holds neither a file nor a map"),
    }))
}

pub(super) fn unreachable_slot(dir: &Path) -> Result<Shard> {
    Err(ReaderError::from(FormatError::Io {
        path: dir.to_path_buf(),
        source: std::io::Error::other("an index opening thread did not finish"),
    }))
}

pub(super) fn open_shard(
    dir: &Path,
    manifest_path: &Path,
    manifest: &Manifest,
    i: usize,
    options: &DatasetOptions,
) -> Result<Shard> {
    let entry = &manifest.shards[i];
    let index_path = Manifest::resolve(dir, &entry.index);
    let path = Manifest::resolve(dir, &entry.file);
    let mismatch = |what: String| {
        Err(ReaderError::ManifestMismatch {
            manifest: manifest_path.to_path_buf(),
            shard: i,
            path: index_path.clone(),
            what,
        })
    };
    // The shard as it is before its index is read (opened, so that a
    // network file system revalidates what it says of it): one put at the
    // path after this, however the two files' replacements interleave with
    // these reads, is told apart on the shard's first read.
    let found = if bale_storage::is_url(&path) {
        None
    } else {
        let file = bale_format::files::open_regular(&path)?;
        Some(file.metadata().map_err(|e| FormatError::Io {
            path: path.clone(),
            source: e,
        })?)
    };
    // With `Backing::Pread` nothing is mapped: the index is read into
    // memory, so that a file cut short later is no `SIGBUS` either.
    let open = match options.backing {
        Backing::Mmap => ShardIndex::open_expecting,
        Backing::Pread => ShardIndex::read_expecting,
    };
    let index = match open(&index_path, entry.samples, entry.members) {
        Err(FormatError::IndexMismatch { what, .. }) => return mismatch(what),
        r => r?,
    };
    check_against_manifest(manifest_path, manifest, i, &index, &index_path)?;
    if let Some(url) = path.to_str().filter(|_| bale_storage::is_url(&path)) {
        // A tar in a bucket indexed into a local directory (`bale index s3://...`).
        let object = bale_storage::object_at(url, &options.storage)?.expect_size(entry.bytes);
        return Ok(Shard::in_bucket(path, index, object));
    }
    let Some(meta) = found else {
        return unreachable_handle(&path);
    };
    check_shard_len(&path, meta.len(), &index)?;
    Ok(Shard {
        path,
        index,
        handle: OnceLock::new(),
        remote: None,
        found: Some(FileId::of(&meta)),
    })
}

/// Checks shard `i`'s index against what the manifest records about it:
/// counts, checksum, the shard length it describes, compression.
pub(super) fn check_against_manifest(
    manifest_path: &Path,
    manifest: &Manifest,
    i: usize,
    index: &ShardIndex,
    index_path: &Path,
) -> Result<()> {
    match manifest.shards[i].index_mismatch(index) {
        Some(what) => Err(ReaderError::ManifestMismatch {
            manifest: manifest_path.to_path_buf(),
            shard: i,
            path: index_path.to_path_buf(),
            what,
        }),
        None => Ok(()),
    }
}

pub(super) fn check_shard_len(path: &Path, len: u64, index: &ShardIndex) -> Result<()> {
    if len != index.shard_len() {
        return Err(ReaderError::from(FormatError::Truncated {
            path: path.to_path_buf(),
            what: "the shard the index describes",
            needed: index.shard_len(),
            len,
        }));
    }
    Ok(())
}

pub(super) fn open_handle(shard: &Shard, backing: Backing) -> Result<Handle> {
    let path = &shard.path;
    let io = |e| {
        ReaderError::from(FormatError::Io {
            path: path.clone(),
            source: e,
        })
    };
    let file = match bale_format::files::open_regular(path) {
        // Gone since the dataset opened (a `--force` repack into fewer shards).
        Err(FormatError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound && shard.found.is_some() =>
        {
            return Err(ReaderError::ShardRemoved { path: path.clone() });
        }
        r => r?,
    };
    let meta = file.metadata().map_err(io)?;
    let len = meta.len();
    // Another file than the one found at the open: replaced, even at the
    // same length, or cut short (then its length says nothing of the index).
    if shard.found.is_some_and(|f| f != FileId::of(&meta)) {
        return Err(ReaderError::ShardReplaced { path: path.clone() });
    }
    check_shard_len(path, len, &shard.index)?;
    match backing {
        Backing::Pread => {
            // Every read says exactly what it needs: no read-ahead beyond it,
            // which random reads of a dataset larger than memory would waste.
            // SAFETY: a plain syscall on an open descriptor; a failure only loses the hint.
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
            Ok(Handle {
                file: Some(file),
                map: None,
                regions: super::around::Regions::new(len),
                ahead: super::around::Ahead::default(),
            })
        }
        Backing::Mmap => {
            // SAFETY: a read-only map of a file bale never modifies in place
            // (it writes new files and renames them); its length was checked
            // against the index above, and every access is bounds-checked
            // against the map. A file truncated by another program while
            // mapped raises SIGBUS: the documented trade-off of `Backing::Mmap`.
            let map = unsafe { Mmap::map(&file) }.map_err(io)?;
            // No read-around on page faults: each read asks for exactly its
            // bytes with `will_need` (one I/O per sample or run, nothing wasted
            // when the dataset is larger than memory). A failure only loses the hint.
            let _ = map.advise(memmap2::Advice::Random);
            // The map keeps the file alive: no descriptor is held.
            Ok(Handle {
                file: None,
                map: Some(Arc::new(map)),
                regions: super::around::Regions::new(len),
                ahead: super::around::Ahead::default(),
            })
        }
    }
}
