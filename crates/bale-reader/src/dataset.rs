//! Opening a dataset and reading samples by index or key.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bale_format::manifest::parse_hex64;
use bale_format::read::{decompress_frame, verify_member};
use bale_format::{Compression, FormatError, MANIFEST_NAME, Manifest, SampleEntry, ShardIndex};
use memmap2::Mmap;

use crate::error::{ReaderError, Result};
use crate::iter::SampleIter;
use crate::plan::{EpochPlan, Order, Partition};
use crate::sample::{Buf, BufPool, Field, Fields, Sample, SmallStr};
use crate::stats::parse_label;

/// A member of a sample as the index records it ([`Dataset::members`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberInfo<'a> {
    /// The member's extension (`jpg`, `seg.png`, `cls`).
    pub ext: &'a str,
    /// Its size in bytes.
    pub size: u64,
}

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
    /// request per sample, or per run of samples in sequential plans; not for
    /// a sample within one 4 KiB block, whose page fault is that one read), so
    /// a cold random read fetches from storage only the sample's pages.
    /// [`Dataset::get_populated`] and [`Dataset::get_batch`] skip the hint
    /// for small samples (up to 16 KiB) while recent reads found their
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
    /// (advised `POSIX_FADV_RANDOM`: no read-ahead beyond each read). Read
    /// buffers are pooled and reused.
    Pread,
}

/// Options for opening a dataset: `Dataset::options().verify_on_read(true).open(dir)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetOptions {
    verify_on_read: bool,
    backing: Backing,
    read_chunk: usize,
    open_threads: usize,
}

impl Default for DatasetOptions {
    fn default() -> Self {
        DatasetOptions {
            verify_on_read: false,
            backing: Backing::default(),
            read_chunk: bale_format::stream::STREAM_BUFFER,
            open_threads: 0,
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

    /// Opens the dataset in `dir` with these options. See [`Dataset::open`].
    ///
    /// # Errors
    /// As [`Dataset::open`].
    pub fn open(&self, dir: impl AsRef<Path>) -> Result<Dataset> {
        Dataset::open_with(dir.as_ref(), self.clone())
    }
}

/// The lazily opened shard file.
#[derive(Debug)]
struct Handle {
    file: Option<File>,
    map: Option<Arc<Mmap>>,
}

#[derive(Debug)]
struct Shard {
    path: PathBuf,
    index: ShardIndex,
    handle: OnceLock<Handle>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    shards: Vec<Shard>,
    /// Global index of each shard's first sample, then the total.
    offsets: Vec<u64>,
    labels: Option<Vec<String>>,
    fields: Vec<String>,
    manifest: Manifest,
    options: DatasetOptions,
    pool: Arc<BufPool>,
    residency: Residency,
}

/// Whether small mapped samples are worth a `MADV_WILLNEED` before their
/// pages are touched, learnt from how long recent touches took.
///
/// The hint costs a system call (about 0.4 us, 15% of a warm 2 KB read
/// from Python) and pays only when the pages are not in memory: a sample
/// spanning two pages of a `MADV_RANDOM` map then takes one read from
/// storage instead of two synchronous ones. Whether a page is in memory is
/// unknown without another system call (`mincore`), but a touch that waited
/// for storage is slow: [`Residency::STORAGE_WAIT`] and more, against about
/// a microsecond for a minor fault (the kernel maps up to 16 neighbouring
/// cached pages per fault, so warm touches rarely fault at all). After such
/// a touch the next [`Residency::HINT_READS`] small samples are hinted;
/// once that many touches in a row were fast, hints stop until a slow one.
/// A read that turns cold after a warm stretch thus costs one extra I/O,
/// and a mostly cold or mixed dataset is hinted throughout. A slow touch
/// for another reason (preemption) only turns hints on for a while.
/// Samples larger than [`Residency::SMALL`] are always hinted: the call is
/// small next to reading them, and a read-ahead for many pages saves the
/// most.
#[derive(Debug)]
struct Residency {
    /// Small reads left to hint since the last touch that waited for storage.
    hint_left: AtomicU32,
}

impl Residency {
    /// A touch of a sample's pages taking this long waited for storage.
    const STORAGE_WAIT: Duration = Duration::from_micros(10);
    /// Small reads hinted after a touch that waited for storage.
    const HINT_READS: u32 = 256;
    /// Largest sample, in bytes, whose hint depends on recent touches.
    const SMALL: u64 = 16 << 10;

    fn new() -> Self {
        // A freshly opened dataset is likely cold: hint until shown otherwise.
        Residency {
            hint_left: AtomicU32::new(Self::HINT_READS),
        }
    }

    /// Whether to hint a mapped read of `len` bytes.
    fn hint(&self, len: u64) -> bool {
        len > Self::SMALL || self.hint_left.load(Ordering::Relaxed) > 0
    }

    /// Turns hints on for the next [`Residency::HINT_READS`] small reads.
    fn saw_cold(&self) {
        self.hint_left.store(Self::HINT_READS, Ordering::Relaxed);
    }

    /// Records how long touching a sample's pages took; true if it waited for storage.
    fn record(&self, took: Duration) -> bool {
        if took >= Self::STORAGE_WAIT {
            self.saw_cold();
            return true;
        }
        // Racy between threads, and harmless: it only shortens or lengthens the hinting.
        let left = self.hint_left.load(Ordering::Relaxed);
        if left > 0 {
            self.hint_left.store(left - 1, Ordering::Relaxed);
        }
        false
    }
}

/// Whether a read asks the kernel for its pages ahead (mapped shards).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hint {
    /// Always (the caller touches the pages later, or not at all).
    Always,
    /// As [`Residency`] decides (the caller touches the pages right away, timed).
    Learnt,
}

/// An open bale dataset: random access by index or key, and epoch iteration.
///
/// `Dataset` is `Send + Sync` and a clone is one reference count: share it
/// between threads, or clone it into each. It never writes, so any number of
/// threads and processes may read one dataset at once.
///
/// Opening reads the manifest and memory-maps every shard index (validated
/// once); shard files are opened on first read, so a process needs no file
/// descriptor per shard up front.
#[derive(Debug, Clone)]
pub struct Dataset {
    inner: Arc<Inner>,
}

impl Dataset {
    /// Options for opening a dataset; see [`DatasetOptions`].
    pub fn options() -> DatasetOptions {
        DatasetOptions::default()
    }

    /// Opens the dataset in `dir` with the default options.
    ///
    /// Reads `bale.json`, maps and validates every shard index (format
    /// version, structure, footer checksum), and checks each against the
    /// manifest (index checksum, sample count, shard length, compression) and
    /// each shard file's length against its index.
    ///
    /// # Errors
    /// [`FormatError::Incomplete`] (inside [`ReaderError::Format`]) when the
    /// directory has no manifest (a pack that did not finish); any format
    /// error naming the file; [`ReaderError::ManifestMismatch`] naming the shard.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir.as_ref(), DatasetOptions::default())
    }

    fn open_with(dir: &Path, options: DatasetOptions) -> Result<Self> {
        let manifest = Manifest::read(dir)?;
        let manifest_path = dir.join(MANIFEST_NAME);
        let n = manifest.shards.len();
        let threads = match options.open_threads {
            0 => std::thread::available_parallelism().map_or(1, |t| t.get()),
            t => t,
        }
        .min(n.div_ceil(32).max(1));
        let open_one = |i: usize| open_shard(dir, &manifest_path, &manifest, i);
        let shards: Vec<Result<Shard>> = if threads <= 1 {
            (0..n).map(open_one).collect()
        } else {
            let mut slots: Vec<Option<Result<Shard>>> = (0..n).map(|_| None).collect();
            std::thread::scope(|scope| {
                let per = n.div_ceil(threads);
                for (t, chunk) in slots.chunks_mut(per).enumerate() {
                    let open_one = &open_one;
                    scope.spawn(move || {
                        for (j, slot) in chunk.iter_mut().enumerate() {
                            *slot = Some(open_one(t * per + j));
                        }
                    });
                }
            });
            slots
                .into_iter()
                .map(|s| s.unwrap_or_else(|| unreachable_slot(dir)))
                .collect()
        };
        let shards = shards.into_iter().collect::<Result<Vec<_>>>()?;
        let mut offsets = Vec::with_capacity(n + 1);
        let mut total = 0u64;
        for s in &shards {
            offsets.push(total);
            total += s.index.len() as u64;
        }
        offsets.push(total);
        Ok(Dataset {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                shards,
                offsets,
                labels: manifest.labels.clone(),
                fields: manifest.fields.keys().cloned().collect(),
                manifest,
                options,
                pool: Arc::default(),
                residency: Residency::new(),
            }),
        })
    }

    /// The dataset directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        *self.inner.offsets.last().unwrap_or(&0)
    }

    /// Whether the dataset holds no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of shards.
    pub fn shard_count(&self) -> usize {
        self.inner.shards.len()
    }

    /// Number of samples in each shard, in dataset order.
    pub fn shard_sizes(&self) -> Vec<u64> {
        self.inner.offsets.windows(2).map(|w| w[1] - w[0]).collect()
    }

    /// The class names from the manifest, when the dataset has labels.
    pub fn labels(&self) -> Option<&[String]> {
        self.inner.labels.as_deref()
    }

    /// The class name of `label` (a [`Sample::label`]), when known.
    pub fn label_name(&self, label: i64) -> Option<&str> {
        let labels = self.inner.labels.as_ref()?;
        labels.get(usize::try_from(label).ok()?).map(String::as_str)
    }

    /// The field extensions the manifest lists, sorted.
    pub fn fields(&self) -> &[String] {
        &self.inner.fields
    }

    /// The manifest (`bale.json`) the dataset was opened with.
    pub fn manifest(&self) -> &Manifest {
        &self.inner.manifest
    }

    /// The members of sample `i` in shard order, from the index (nothing is
    /// read from the shard).
    ///
    /// # Errors
    /// [`ReaderError::IndexOutOfRange`].
    pub fn members(&self, i: u64) -> Result<impl Iterator<Item = MemberInfo<'_>>> {
        let (s, local) = self.locate(i)?;
        Ok(self.inner.shards[s]
            .index
            .members(local)
            .map(|m| MemberInfo {
                ext: m.ext,
                size: m.size,
            }))
    }

    /// The number, in the manifest, of the shard holding sample `i`.
    ///
    /// # Errors
    /// [`ReaderError::IndexOutOfRange`].
    pub fn shard_of(&self, i: u64) -> Result<usize> {
        self.locate(i).map(|(s, _)| s)
    }

    /// The bytes of member `ext` of sample `i`, or `None` when the sample has
    /// no such member. Only the member is read (for a `.tar.zst` shard, its
    /// sample's frame is decompressed), and its checksum is always checked
    /// when the index records checksums, whatever
    /// [`DatasetOptions::verify_on_read`] says.
    ///
    /// # Errors
    /// [`ReaderError::IndexOutOfRange`]; I/O errors, truncation and checksum
    /// mismatches naming the shard, key and member.
    pub fn read_member(&self, i: u64, ext: &str) -> Result<Option<Vec<u8>>> {
        let (s, local) = self.locate(i)?;
        let shard = &self.inner.shards[s];
        let index = &shard.index;
        let Some(m) = index.members(local).find(|m| m.ext == ext) else {
            return Ok(None);
        };
        let data = if index.compression() == Compression::Zstd {
            let sample = self.read_entry(s, local, Hint::Always)?;
            sample.field(ext).map(<[u8]>::to_vec).unwrap_or_default()
        } else {
            let e = index.sample(local);
            let at = if index.is_scattered() {
                Some(m.offset)
            } else {
                m.offset
                    .checked_sub(e.tar_offset)
                    .and_then(|d| e.file_offset.checked_add(d))
            };
            let at = at.ok_or_else(|| FormatError::Corrupt {
                path: shard.path.clone(),
                offset: e.file_offset,
                what: format!(
                    "member {}.{} lies before its sample",
                    index.key(local),
                    m.ext
                ),
            })?;
            match self.handle(s)? {
                Handle { map: Some(map), .. } => map_slice(map, &shard.path, at, m.size)?.to_vec(),
                Handle {
                    file: Some(file), ..
                } => bale_format::read::read_exact_at(file, &shard.path, at, m.size)?,
                _ => unreachable_handle(&shard.path)?,
            }
        };
        if index.has_checksums() {
            verify_member(&shard.path, index.key(local), &m, &data)?;
        }
        Ok(Some(data))
    }

    /// The options the dataset was opened with.
    pub fn open_options(&self) -> &DatasetOptions {
        &self.inner.options
    }

    /// The shard and the sample within it that global index `i` names.
    ///
    /// # Errors
    /// [`ReaderError::IndexOutOfRange`].
    pub fn locate(&self, i: u64) -> Result<(usize, usize)> {
        let offsets = &self.inner.offsets;
        if i >= self.len() {
            return Err(ReaderError::IndexOutOfRange {
                dir: self.inner.dir.clone(),
                index: i,
                len: self.len(),
            });
        }
        // The last shard whose first sample is <= i (skips empty shards).
        let s = offsets.partition_point(|&o| o <= i) - 1;
        Ok((s, (i - offsets[s]) as usize))
    }

    /// The key of sample `i`, without reading the sample.
    ///
    /// # Errors
    /// [`ReaderError::IndexOutOfRange`].
    pub fn key(&self, i: u64) -> Result<&str> {
        let (s, local) = self.locate(i)?;
        Ok(self.inner.shards[s].index.key(local))
    }

    /// Reads sample `i`: one positioned read (or a slice of the shard's map,
    /// see [`Backing`]), decompressing its frame for `.tar.zst` shards.
    ///
    /// # Errors
    /// [`ReaderError::IndexOutOfRange`]; I/O errors, truncated shards, bad
    /// zstd frames and (with `verify_on_read`) checksum mismatches, naming
    /// the shard file and offset; [`ReaderError::BadLabel`].
    pub fn get(&self, i: u64) -> Result<Sample> {
        let (s, local) = self.locate(i)?;
        self.read_local(s, local, false)
    }

    /// Reads sample `i` as [`Dataset::get`] does, and brings its bytes into
    /// memory before returning ([`Sample::populate`]): the page faults of a
    /// mapped sample happen in this call, not where its bytes are used
    /// (in a language binding, while holding a lock).
    ///
    /// For small mapped samples the `MADV_WILLNEED` hint is skipped while
    /// recent reads found their pages in memory (see [`Backing::Mmap`]):
    /// a warm read makes no system call.
    ///
    /// # Errors
    /// As [`Dataset::get`].
    pub fn get_populated(&self, i: u64) -> Result<Sample> {
        let (s, local) = self.locate(i)?;
        let sample = self.read_entry(s, local, Hint::Learnt)?;
        self.touch(&sample);
        Ok(sample)
    }

    /// Reads the samples `indices` (in that order; repeats allowed), each as
    /// [`Dataset::get_populated`] does, in two passes: every sample is
    /// located (and, when reads are cold, hinted to the kernel, so that
    /// their I/O is in flight at once) before any is touched. A touch that
    /// waits for storage while hints were off hints the rest of the batch.
    ///
    /// # Errors
    /// The first error of any sample, as [`Dataset::get`] (an index out of
    /// range is found before any read).
    pub fn get_batch(&self, indices: &[u64]) -> Result<Vec<Sample>> {
        let at = indices
            .iter()
            .map(|&i| self.locate(i))
            .collect::<Result<Vec<_>>>()?;
        if at.len() > 1 {
            self.prefetch(&at);
        }
        let mut hinted = self.inner.residency.hint(0);
        let mut out = Vec::with_capacity(at.len());
        for &(s, local) in &at {
            out.push(self.read_entry(s, local, Hint::Learnt)?);
        }
        for (k, sample) in out.iter().enumerate() {
            if self.touch(sample) && !hinted {
                out[k + 1..].iter().for_each(Sample::will_need);
                hinted = true;
            }
        }
        Ok(out)
    }

    /// Asks the CPU to load what reading the samples `at` touches: index
    /// records, then keys and member records, then the first 4 KiB of each
    /// member of a mapped plain shard, each stage for the whole batch
    /// before the next, so that the cache misses of a batch of random
    /// samples overlap. Pages not in memory are skipped (a prefetch never
    /// faults).
    fn prefetch(&self, at: &[(usize, usize)]) {
        let shards = &self.inner.shards;
        for &(s, local) in at {
            shards[s].index.prefetch_record(local);
        }
        for &(s, local) in at {
            shards[s].index.prefetch_key_and_members(local);
        }
        for &(s, local) in at {
            let shard = &shards[s];
            let Some(Handle { map: Some(map), .. }) = shard.handle.get() else {
                continue;
            };
            if shard.index.compression() == Compression::Zstd {
                continue;
            }
            let e = shard.index.sample(local);
            let scattered = shard.index.is_scattered();
            for m in shard.index.members(local) {
                let at = if scattered {
                    m.offset
                } else {
                    e.file_offset + m.offset.saturating_sub(e.tar_offset)
                };
                let bytes = usize::try_from(at)
                    .ok()
                    .and_then(|a| map.get(a..a.checked_add(m.size.min(4096) as usize)?));
                if let Some(bytes) = bytes {
                    bale_format::index::prefetch(bytes);
                }
            }
        }
    }

    /// Populates a sample, timing it for [`Residency`] when it is mapped;
    /// true if the touch waited for storage.
    ///
    /// Only the touch is timed, not the whole read: the shorter the window,
    /// the more rarely a preemption inside it passes for a wait on storage.
    /// (Parsing a label may fault in the sample's last page first; the
    /// touch of its first field's page still sees a cold sample that spans
    /// two pages, the only kind a hint helps.)
    fn touch(&self, sample: &Sample) -> bool {
        if !sample.is_mapped() {
            return false;
        }
        let t = Instant::now();
        sample.populate();
        self.inner.residency.record(t.elapsed())
    }

    /// Reads the sample with key `key`.
    ///
    /// Looks the key up in each shard's index in turn (a binary search of
    /// its hash table each): `O(shards * log samples)`, no memory held.
    ///
    /// # Errors
    /// [`ReaderError::UnknownKey`]; as [`Dataset::get`].
    pub fn get_by_key(&self, key: &str) -> Result<Sample> {
        for (s, shard) in self.inner.shards.iter().enumerate() {
            if let Some(local) = shard.index.find(key) {
                return self.read_local(s, local, false);
            }
        }
        Err(ReaderError::UnknownKey {
            dir: self.inner.dir.clone(),
            key: key.to_owned(),
        })
    }

    /// The global index of the sample with key `key`, if any (see [`Dataset::get_by_key`]).
    pub fn find(&self, key: &str) -> Option<u64> {
        self.inner.shards.iter().enumerate().find_map(|(s, shard)| {
            shard
                .index
                .find(key)
                .map(|l| self.inner.offsets[s] + l as u64)
        })
    }

    /// The order in which `partition` yields the samples in an epoch of `plan`.
    ///
    /// # Errors
    /// An invalid partition.
    pub fn order(&self, plan: EpochPlan, partition: Partition) -> Result<Order> {
        Order::new(plan, partition, &self.shard_sizes())
    }

    /// Iterates over an epoch: the samples `partition` gets under `plan`, in
    /// plan order. Add [`SampleIter::start_at`] to resume and
    /// [`SampleIter::prefetch`] to read ahead on background threads.
    ///
    /// Sequential and shard-shuffled plans read runs of consecutive samples
    /// with one large read each (see [`DatasetOptions::read_chunk`]);
    /// shuffled plans read each sample with one positioned read.
    ///
    /// # Errors
    /// An invalid partition.
    pub fn iter(&self, plan: EpochPlan, partition: Partition) -> Result<SampleIter> {
        Ok(SampleIter::new(self.clone(), self.order(plan, partition)?))
    }

    fn handle(&self, s: usize) -> Result<&Handle> {
        let shard = &self.inner.shards[s];
        if let Some(h) = shard.handle.get() {
            return Ok(h);
        }
        let h = open_handle(shard, self.inner.options.backing)?;
        // Another thread may have won the race; its handle is as good.
        Ok(shard.handle.get_or_init(|| h))
    }

    /// Sample `local` of shard `s`; with `populate`, a mapped sample's pages are read in now.
    pub(crate) fn read_local(&self, s: usize, local: usize, populate: bool) -> Result<Sample> {
        let sample = self.read_entry(s, local, Hint::Always)?;
        if populate {
            sample.populate();
        }
        Ok(sample)
    }

    /// Sample `local` of shard `s`, not populated.
    fn read_entry(&self, s: usize, local: usize, hint: Hint) -> Result<Sample> {
        let shard = &self.inner.shards[s];
        let e = shard.index.sample(local);
        let h = self.handle(s)?;
        let compression = shard.index.compression();
        if shard.index.is_scattered() {
            return self.read_scattered(s, local, &e, h);
        }
        let (buf, base) = match (&h.map, &h.file, compression) {
            (Some(map), _, Compression::None) => {
                map_slice(map, &shard.path, e.file_offset, e.file_len)?;
                if hint == Hint::Always || self.inner.residency.hint(e.file_len) {
                    will_need(map, e.file_offset, e.file_len);
                }
                (Buf::Map(Arc::clone(map)), e.file_offset as usize)
            }
            (Some(map), _, Compression::Zstd) => {
                let frame = map_slice(map, &shard.path, e.file_offset, e.file_len)?;
                will_need(map, e.file_offset, e.file_len);
                let data = decompress_frame(&shard.path, e.file_offset, frame, e.tar_len)?;
                (Buf::owned(data), 0)
            }
            (None, Some(file), _) => {
                let raw = self.pread(file, &shard.path, e.file_offset, e.file_len)?;
                match compression {
                    Compression::Zstd => {
                        let data = decompress_frame(&shard.path, e.file_offset, &raw, e.tar_len)?;
                        (Buf::owned(data), 0)
                    }
                    _ => (raw, 0),
                }
            }
            (None, None, _) => unreachable_handle(&shard.path)?,
            (Some(_), _, Compression::H5) => unreachable_handle(&shard.path)?,
        };
        self.build(s, local, &e, buf, base, None)
    }

    /// A sample of a scattered index (HDF5 shard): each member at its own
    /// absolute offset. Mapped: the members are slices of the map. Pread:
    /// one positioned read per member into one buffer.
    fn read_scattered(
        &self,
        s: usize,
        local: usize,
        e: &SampleEntry,
        h: &Handle,
    ) -> Result<Sample> {
        let shard = &self.inner.shards[s];
        match (&h.map, &h.file) {
            (Some(map), _) => {
                for m in shard.index.members(local) {
                    map_slice(map, &shard.path, m.offset, m.size)?;
                    will_need(map, m.offset, m.size);
                }
                self.build(s, local, e, Buf::Map(Arc::clone(map)), 0, None)
            }
            (None, Some(file)) => {
                let total = shard.index.sample_bytes(local);
                let n = usize::try_from(total).map_err(|_| FormatError::Limit {
                    path: shard.path.clone(),
                    what: format!("a sample of {total} bytes does not fit in memory"),
                })?;
                let mut starts = Vec::with_capacity(e.member_count as usize);
                let buf = self.inner.pool.filled(n, |buf| {
                    let mut at = 0usize;
                    for m in shard.index.members(local) {
                        let len = m.size as usize;
                        starts.push(at);
                        file.read_exact_at(&mut buf[at..at + len], m.offset)
                            .map_err(|err| {
                                ReaderError::from(FormatError::IoAt {
                                    path: shard.path.clone(),
                                    offset: m.offset,
                                    source: err,
                                })
                            })?;
                        at += len;
                    }
                    Ok::<(), ReaderError>(())
                })?;
                self.build(s, local, e, buf, 0, Some(&starts))
            }
            (None, None) => unreachable_handle(&shard.path),
        }
    }

    /// Samples `local..local + count` of shard `s`, read with one large read
    /// (or sliced from the map). A failed read is retried sample by sample,
    /// so an error names the sample it concerns and the others still arrive.
    pub(crate) fn read_run(
        &self,
        s: usize,
        local: usize,
        count: usize,
        populate: bool,
    ) -> Vec<Result<Sample>> {
        if self.inner.shards[s].index.is_scattered() {
            return (local..local + count)
                .map(|l| self.read_local(s, l, populate))
                .collect();
        }
        match self.try_read_run(s, local, count, populate) {
            Ok(v) => v,
            Err(_) => (local..local + count)
                .map(|l| self.read_local(s, l, populate))
                .collect(),
        }
    }

    fn try_read_run(
        &self,
        s: usize,
        local: usize,
        count: usize,
        populate: bool,
    ) -> Result<Vec<Result<Sample>>> {
        let shard = &self.inner.shards[s];
        let first = shard.index.sample(local);
        let last = shard.index.sample(local + count - 1);
        let span_start = first.file_offset;
        let span_len = (last.file_offset + last.file_len).saturating_sub(span_start);
        let h = self.handle(s)?;
        let compression = shard.index.compression();
        let buf = match (&h.map, &h.file) {
            (Some(map), _) => {
                map_slice(map, &shard.path, span_start, span_len)?;
                // Start the kernel reading the whole run at once, and the
                // next run of the shard too (the read-ahead a sequential
                // reader would get without `MADV_RANDOM`).
                will_need(map, span_start, span_len);
                let next = span_start + span_len;
                will_need(
                    map,
                    next,
                    span_len.min((map.len() as u64).saturating_sub(next)),
                );
                Buf::Map(Arc::clone(map))
            }
            (None, Some(file)) => self.pread(file, &shard.path, span_start, span_len)?,
            (None, None) => unreachable_handle(&shard.path)?,
        };
        // Offset of file byte `o` in `buf` (None if a corrupt index puts it before the run).
        let shift = |o: u64| match &buf {
            Buf::Map(_) => usize::try_from(o).ok(),
            Buf::Heap(_) => o
                .checked_sub(span_start)
                .and_then(|d| usize::try_from(d).ok()),
        };
        let mut out = Vec::with_capacity(count);
        for l in local..local + count {
            let e = shard.index.sample(l);
            let at = shift(e.file_offset);
            let outside = || {
                ReaderError::from(FormatError::Corrupt {
                    path: shard.path.clone(),
                    offset: e.file_offset,
                    what: format!(
                        "sample {:?} lies outside the run read for it",
                        shard.index.key(l)
                    ),
                })
            };
            let r = match (compression, at) {
                (_, None) => Err(outside()),
                (Compression::None | Compression::H5, Some(at)) => {
                    self.build(s, l, &e, buf.clone(), at, None)
                }
                (Compression::Zstd, Some(at)) => at
                    .checked_add(e.file_len as usize)
                    .and_then(|end| buf.get(at..end))
                    .ok_or_else(outside)
                    .and_then(|frame| {
                        decompress_frame(&shard.path, e.file_offset, frame, e.tar_len)
                            .map_err(ReaderError::from)
                    })
                    .and_then(|d| self.build(s, l, &e, Buf::owned(d), 0, None)),
            };
            if populate && let Ok(sample) = &r {
                sample.populate();
            }
            out.push(r);
        }
        Ok(out)
    }

    /// Builds a sample whose tar bytes start at `buf[base]`: fields as ranges,
    /// label parsed, checksums verified when asked. `starts`, when given,
    /// holds each member's start in `buf` (members read one by one).
    fn build(
        &self,
        s: usize,
        local: usize,
        e: &SampleEntry,
        buf: Buf,
        base: usize,
        starts: Option<&[usize]>,
    ) -> Result<Sample> {
        let shard = &self.inner.shards[s];
        let index = &shard.index;
        let key = index.key(local);
        let verify = self.inner.options.verify_on_read && index.has_checksums();
        let mut fields = Fields::with_capacity(e.member_count as usize);
        let mut label = None;
        for (k, m) in index.members(local).enumerate() {
            let start = match starts {
                Some(v) => v.get(k).copied().unwrap_or(usize::MAX),
                None => m.offset.saturating_sub(e.tar_offset) as usize,
            };
            let len = m.size as usize;
            let range = (|| {
                let a = base.checked_add(start)?;
                Some(a..a.checked_add(len)?)
            })();
            let data = range
                .and_then(|r| buf.get(r))
                .ok_or_else(|| FormatError::Corrupt {
                    path: shard.path.clone(),
                    offset: e.file_offset,
                    what: format!(
                        "member {key}.{} lies outside the bytes read for its sample",
                        m.ext
                    ),
                })?;
            if verify {
                verify_member(&shard.path, key, &m, data)?;
            }
            if m.ext == "cls" {
                label = Some(parse_label(data).ok_or_else(|| ReaderError::BadLabel {
                    path: shard.path.clone(),
                    key: key.to_owned(),
                    text: String::from_utf8_lossy(&data[..data.len().min(32)]).into_owned(),
                })?);
            }
            fields.push(Field {
                ext: SmallStr::new(m.ext),
                start,
                len,
            });
        }
        Ok(Sample {
            key: SmallStr::new(key),
            index: self.inner.offsets[s] + local as u64,
            label,
            buf,
            base,
            fields,
        })
    }

    /// Reads `len` bytes at `offset` into a pooled buffer.
    fn pread(&self, file: &File, path: &Path, offset: u64, len: u64) -> Result<Buf> {
        let n = usize::try_from(len).map_err(|_| FormatError::Limit {
            path: path.to_path_buf(),
            what: format!("a read of {len} bytes does not fit in memory"),
        })?;
        self.inner.pool.filled(n, |buf| {
            file.read_exact_at(buf, offset).map_err(|e| {
                ReaderError::from(if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    FormatError::Truncated {
                        path: path.to_path_buf(),
                        what: "sample data",
                        needed: offset + len,
                        len: file.metadata().map(|m| m.len()).unwrap_or(0),
                    }
                } else {
                    FormatError::IoAt {
                        path: path.to_path_buf(),
                        offset,
                        source: e,
                    }
                })
            })
        })
    }

    /// Asks the kernel to start reading samples `local..local + count` of
    /// shard `s` from storage, without waiting (`MADV_WILLNEED` on the map,
    /// `POSIX_FADV_WILLNEED` on the file). Only a hint: errors are left to
    /// the read itself.
    pub(crate) fn will_read(&self, s: usize, local: usize, count: usize) {
        let index = &self.inner.shards[s].index;
        if count == 0 || local + count > index.len() {
            return;
        }
        let first = index.sample(local);
        let last = index.sample(local + count - 1);
        let start = first.file_offset;
        let len = (last.file_offset + last.file_len).saturating_sub(start);
        match self.handle(s) {
            // Only ranges inside the map (a corrupt index is the read's error).
            Ok(Handle { map: Some(map), .. })
                if map_slice(map, &self.inner.shards[s].path, start, len).is_ok() =>
            {
                will_need(map, start, len);
            }
            Ok(Handle {
                file: Some(file), ..
            }) => {
                if let (Ok(o), Ok(l)) = (libc::off_t::try_from(start), libc::off_t::try_from(len)) {
                    // SAFETY: a plain syscall on an open descriptor; a failure only loses the hint.
                    unsafe {
                        libc::posix_fadvise(file.as_raw_fd(), o, l, libc::POSIX_FADV_WILLNEED)
                    };
                }
            }
            _ => {}
        }
    }

    /// Bytes of shard `s`'s index file.
    pub(crate) fn index_len(&self, s: usize) -> u64 {
        self.inner.shards[s].index.as_bytes().len() as u64
    }

    /// The global index of shard `s`'s first sample.
    pub(crate) fn first_of(&self, s: usize) -> u64 {
        self.inner.offsets[s]
    }

    /// Bytes to budget for reading sample `local` of shard `s` (its uncompressed size).
    pub(crate) fn sample_cost(&self, s: usize, local: usize) -> u64 {
        self.inner.shards[s].index.sample_bytes(local)
    }

    /// Largest read for a run of samples.
    pub(crate) fn read_chunk(&self) -> u64 {
        self.inner.options.read_chunk as u64
    }

    /// Whether samples are slices of shard maps.
    pub(crate) fn is_mapped(&self) -> bool {
        self.inner.options.backing == Backing::Mmap
    }
}

/// Asks the kernel to start reading `len` bytes of the map at `offset` (one
/// request for the whole range) unless they are cached; pages are then
/// faulted in without further I/O. A failure only loses the hint.
///
/// A range within one 4 KiB block is left alone: faulting its page in does
/// the same one-page read the hint would start (the maps are `MADV_RANDOM`:
/// no read-ahead either way), and the system call would cost more than the
/// read of a small cached sample.
pub(crate) fn will_need(map: &Mmap, offset: u64, len: u64) {
    if len == 0 || offset / 4096 == offset.saturating_add(len - 1) / 4096 {
        return;
    }
    if let (Ok(o), Ok(l)) = (usize::try_from(offset), usize::try_from(len))
        && l > 0
    {
        let _ = map.advise_range(memmap2::Advice::WillNeed, o, l);
    }
}

fn map_slice<'a>(map: &'a Mmap, path: &Path, offset: u64, len: u64) -> Result<&'a [u8]> {
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

fn unreachable_handle<T>(path: &Path) -> Result<T> {
    // A handle always holds a map or a file; reaching here is a bug, reported as an error.
    Err(ReaderError::from(FormatError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other("shard handle holds neither a file nor a map"),
    }))
}

fn unreachable_slot(dir: &Path) -> Result<Shard> {
    Err(ReaderError::from(FormatError::Io {
        path: dir.to_path_buf(),
        source: std::io::Error::other("an index opening thread did not finish"),
    }))
}

fn open_shard(dir: &Path, manifest_path: &Path, manifest: &Manifest, i: usize) -> Result<Shard> {
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
    let index = match ShardIndex::open_expecting(&index_path, entry.samples, entry.members) {
        Err(FormatError::IndexMismatch { what, .. }) => return mismatch(what),
        r => r?,
    };
    let recorded = parse_hex64(&entry.index_xxh3).unwrap_or_default();
    if index.checksum() != recorded {
        return mismatch(format!(
            "the index checksum is {:016x}, the manifest records {}",
            index.checksum(),
            entry.index_xxh3
        ));
    }
    if index.len() as u64 != entry.samples {
        return mismatch(format!(
            "the index holds {} samples, the manifest records {}",
            index.len(),
            entry.samples
        ));
    }
    if index.shard_len() != entry.bytes {
        return mismatch(format!(
            "the index describes a shard of {} bytes, the manifest records {}",
            index.shard_len(),
            entry.bytes
        ));
    }
    if index.compression() != entry.compression {
        return mismatch(format!(
            "the index says compression {}, the manifest {}",
            index.compression().as_str(),
            entry.compression.as_str()
        ));
    }
    let meta = std::fs::metadata(&path).map_err(|e| FormatError::Io {
        path: path.clone(),
        source: e,
    })?;
    if !meta.is_file() {
        return Err(FormatError::NotRegular {
            path,
            kind: bale_format::files::kind_of(&meta),
        }
        .into());
    }
    check_shard_len(&path, meta.len(), &index)?;
    Ok(Shard {
        path,
        index,
        handle: OnceLock::new(),
    })
}

fn check_shard_len(path: &Path, len: u64, index: &ShardIndex) -> Result<()> {
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

fn open_handle(shard: &Shard, backing: Backing) -> Result<Handle> {
    let path = &shard.path;
    let io = |e| {
        ReaderError::from(FormatError::Io {
            path: path.clone(),
            source: e,
        })
    };
    let file = bale_format::files::open_regular(path)?;
    let len = file.metadata().map_err(io)?.len();
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
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residency_hints_small_reads_until_enough_touches_are_fast() {
        let r = Residency::new();
        let fast = Duration::from_nanos(200);
        let slow = Residency::STORAGE_WAIT;
        assert!(r.hint(100), "a fresh dataset is taken for cold");
        for _ in 0..Residency::HINT_READS - 1 {
            assert!(!r.record(fast));
        }
        assert!(r.hint(100));
        assert!(!r.record(fast));
        assert!(!r.hint(100), "warm: small reads are not hinted");
        assert!(!r.hint(Residency::SMALL));
        assert!(
            r.hint(Residency::SMALL + 1),
            "large reads are always hinted"
        );
        assert!(r.record(slow));
        assert!(r.hint(100), "one touch that waited turns hints back on");
    }
}
