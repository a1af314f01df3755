//! How a dataset is opened: [`DatasetOptions`] and [`Backing`].

use std::path::{Path, PathBuf};

use bale_storage::{CacheOptions, StorageOptions};

use super::Dataset;
use crate::error::Result;

/// How sample bytes reach memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Backing {
    /// Each shard is memory-mapped (read-only) the first time it is read, and
    /// a sample of a plain tar shard is a slice of the map: no copy, no heap,
    /// and no file descriptor kept open. Compressed shards decompress their
    /// frame straight from the map. The default: it is the faster for random
    /// reads with a warm page cache, and for sequential epochs (see
    /// docs/benchmarks.md).
    ///
    /// The map is advised `MADV_RANDOM` (no read-around on page faults) and
    /// reads ask for exactly their bytes with `MADV_WILLNEED` (one I/O
    /// request per sample; not for a sample within one 4 KiB block, whose
    /// page fault is that one read), so a cold random read of a dataset
    /// larger than memory fetches from storage only the sample's pages. A
    /// run of samples in a sequential plan, 64 KiB or more and not all in
    /// memory (`mincore`), is read through the shard file once before the map
    /// reads it, and the kernel reads on ahead of it (shorter runs are asked
    /// for with `MADV_WILLNEED`). A dataset that fits in memory is read
    /// around instead (see [`ReadAround`]): the first cold read in each
    /// 8 MiB region reads the whole region through the file before it
    /// returns.
    /// [`Dataset::get_populated`] and [`Dataset::get_batch`] skip the hint
    /// while recent reads found their
    /// pages in memory (see `Residency`), where it would be a system call
    /// that does nothing.
    ///
    /// **Trade-off**: if a shard file is truncated while it is mapped (bale
    /// never does that: it replaces files by renaming), touching the lost
    /// pages raises `SIGBUS` and kills the process instead of returning an
    /// error. Use [`Backing::Pread`] where other programs may rewrite shards in place.
    #[default]
    Mmap,
    /// One positioned read (`pread`) per sample into a buffer of its own
    /// (one per run of samples for sequential plans). Errors are always
    /// errors, never signals; a file descriptor stays open per shard read
    /// (advised `POSIX_FADV_RANDOM`: no read-ahead beyond each read, except
    /// the regions of [`ReadAround`]). Read buffers are pooled and reused.
    /// The shards' indexes are read into memory when the dataset opens
    /// rather than mapped, so an index cut short later is no signal either.
    Pread,
}

/// Whether a cold read of a local shard also asks the kernel for the region
/// of [`READ_AROUND`] bytes around it, once per region and open dataset.
///
/// A random epoch over a dataset that fits in the page cache reads every
/// byte of it sooner or later: fetching it in large requests the first time
/// a region is touched costs one sequential read instead of one small read
/// per sample (for 1.9 KB samples, tens of times fewer requests). A dataset
/// larger than memory would evict those pages before they are used, so it
/// is read sample by sample, exactly as [`Backing::Mmap`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ReadAround {
    /// Read around when the dataset's shards fit in half of the memory
    /// available (`MemAvailable`) at open. The default.
    #[default]
    Auto,
    /// Always read around cold reads.
    Always,
    /// Read exactly each sample's bytes.
    Never,
}

/// The region [`ReadAround`] fetches: the aligned block of this many bytes
/// holding the read.
pub const READ_AROUND: u64 = 8 << 20;

/// Options for opening a dataset: `Dataset::options().verify_on_read(true).open(dir)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetOptions {
    pub(super) verify_on_read: bool,
    pub(super) backing: Backing,
    pub(super) read_around: ReadAround,
    pub(super) read_chunk: usize,
    pub(super) open_threads: usize,
    pub(super) storage: StorageOptions,
    pub(super) max_requests: usize,
    pub(super) coalesce_gap: u64,
    pub(super) read_ahead: u64,
    pub(super) cache: Option<CacheOptions>,
}

impl Default for DatasetOptions {
    fn default() -> Self {
        DatasetOptions {
            verify_on_read: false,
            backing: Backing::default(),
            read_around: ReadAround::default(),
            read_chunk: bale_format::STREAM_BUFFER,
            open_threads: 0,
            storage: StorageOptions::new(),
            max_requests: 16,
            coalesce_gap: 256 << 10,
            read_ahead: 64 << 20,
            cache: None,
        }
    }
}

impl DatasetOptions {
    /// The defaults: no verification, [`Backing::Mmap`], 4 MiB reads, one open thread per core.
    pub fn new() -> Self {
        Self::default()
    }

    /// Check every member's checksum against the index on every read
    /// (default `false`). A mismatch is a [`FormatError::ChecksumMismatch`]
    /// naming the shard, key, member and offset. Shards indexed without
    /// checksums are read unchecked.
    pub fn verify_on_read(mut self, verify: bool) -> Self {
        self.verify_on_read = verify;
        self
    }

    /// How sample bytes reach memory (default [`Backing::Mmap`]).
    pub fn backing(mut self, backing: Backing) -> Self {
        self.backing = backing;
        self
    }

    /// Whether cold reads of local shards fetch the region around them
    /// (default [`ReadAround::Auto`]).
    pub fn read_around(mut self, read_around: ReadAround) -> Self {
        self.read_around = read_around;
        self
    }

    /// Largest single read for runs of consecutive samples in sequential and
    /// shard-shuffled iteration, in bytes (default 4 MiB; a sample larger
    /// than this is read whole).
    pub fn read_chunk(mut self, bytes: usize) -> Self {
        self.read_chunk = bytes.max(1);
        self
    }

    /// Threads that open and validate the shard indexes (default 0: one per core).
    pub fn open_threads(mut self, threads: usize) -> Self {
        self.open_threads = threads;
        self
    }

    /// Options for reaching object storage when the dataset is a URL, on
    /// top of the standard environment (see [`StorageOptions`]). Default none.
    pub fn storage_options(mut self, options: StorageOptions) -> Self {
        self.storage = options;
        self
    }

    /// Requests in flight at once for a dataset in object storage: per
    /// [`Dataset::get_batch`] call, and per iterator's read-ahead (default 16).
    pub fn max_requests(mut self, n: usize) -> Self {
        self.max_requests = n.max(1);
        self
    }

    /// Samples of one shard read by one [`Dataset::get_batch`] whose byte
    /// ranges lie at most this far apart are read with one request (the gap
    /// is read and dropped; default 256 KiB). 0 joins only adjacent ranges.
    pub fn coalesce_gap(mut self, bytes: u64) -> Self {
        self.coalesce_gap = bytes;
        self
    }

    /// Bytes an epoch iterator over a dataset in object storage keeps
    /// requested ahead of the sample it yields (default 64 MiB): the bound
    /// on its memory, together with [`DatasetOptions::read_chunk`] (one
    /// request's size). [`crate::SampleIter::prefetch`]'s byte budget
    /// replaces it for that iterator.
    pub fn read_ahead(mut self, bytes: u64) -> Self {
        self.read_ahead = bytes.max(1);
        self
    }

    /// Keeps whole shards of a dataset in object storage in a local cache
    /// directory of at most `limit` bytes, shared by the processes of a node
    /// (see [`bale_storage::cache`]): a shard is downloaded (and checked)
    /// when first read, then read from the local copy. Default none.
    pub fn cache(mut self, dir: impl Into<PathBuf>, limit: u64) -> Self {
        self.cache = Some(CacheOptions {
            dir: dir.into(),
            limit,
        });
        self
    }

    /// Opens the dataset in `dir` with these options. See [`Dataset::open`].
    ///
    /// # Errors
    /// As [`Dataset::open`].
    pub fn open(&self, dir: impl AsRef<Path>) -> Result<Dataset> {
        Dataset::open_with(dir.as_ref(), self.clone())
    }
}
