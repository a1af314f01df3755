//! Opening a dataset and reading samples by index or key.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use bale_format::read::{decompress_frame, verify_member};
use bale_format::{Compression, FormatError, MANIFEST_NAME, Manifest, SampleEntry, ShardIndex};
use memmap2::Mmap;

use crate::error::{ReaderError, Result};
use crate::plan::{EpochPlan, Order, Partition};
use crate::sample::{Buf, BufPool, Field, Fields, Sample, SmallStr};
use crate::sample::{parse_label, will_need};

mod around;
use around::READ_AROUND_PIECE;
mod options;
mod read;
mod remote;
mod residency;
mod shard;

pub use options::{Backing, DatasetOptions, READ_AROUND, ReadAround};
pub(crate) use remote::StartedPieces;
use residency::{Hint, Residency};
use shard::{
    Brought, Handle, Shard, map_slice, open_handle, open_shard, unreachable_handle,
    unreachable_slot,
};

/// A member of a sample as the index records it ([`Dataset::members`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberInfo<'a> {
    /// The member's extension (`jpg`, `seg.png`, `cls`).
    pub ext: &'a str,
    /// Its size in bytes.
    pub size: u64,
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
    /// Whether cold reads of local shards fetch their region ([`ReadAround`]).
    read_around: bool,
    /// Whether no shard is compressed: a read's bytes are the shard's own.
    plain: bool,
    /// Where the objects are, for a dataset in object storage.
    store: Option<bale_storage::Store>,
    /// The node-local cache of its shards, when asked for.
    cache: Option<bale_storage::Cache>,
}

/// How [`Dataset::select`] takes the name of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    /// A key, or an index when unambiguous.
    Either,
    /// A key.
    Key,
    /// An index.
    Index,
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
    /// `dir` may be a URL (`s3://bucket/prefix`, `gs://`, `az://`,
    /// `https://`): the manifest and every index are then fetched whole
    /// (manifest at most 64 MiB; an index object whose size its counts
    /// cannot give is refused before it is downloaded) and checked the same
    /// way, on the heap rather than mapped; each shard object's size is
    /// checked on every read (with the ETag of its first answer). A sample
    /// is one ranged GET; see [`DatasetOptions::storage_options`] and the
    /// other options for object storage.
    ///
    /// # Errors
    /// [`FormatError::Incomplete`] (inside [`ReaderError::Format`]) when the
    /// directory has no manifest (a pack that did not finish); any format
    /// error naming the file; [`ReaderError::ManifestMismatch`] naming the shard.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(dir.as_ref(), DatasetOptions::default())
    }

    fn open_with(dir: &Path, options: DatasetOptions) -> Result<Self> {
        if let bale_storage::Location::Url(url) = bale_storage::Location::parse(dir)? {
            return remote::open_remote(&url, options);
        }
        let manifest = Manifest::read(dir)?;
        let manifest_path = dir.join(MANIFEST_NAME);
        let n = manifest.shards.len();
        let threads = match options.open_threads {
            0 => std::thread::available_parallelism().map_or(1, |t| t.get()),
            t => t,
        }
        .min(n.div_ceil(32).max(1));
        let open_one = |i: usize| open_shard(dir, &manifest_path, &manifest, i, &options);
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
        // Shards in a bucket (tars indexed in place) are read as a remote
        // dataset's, through the cache when one is asked for.
        let (store, cache) = match shards.iter().find_map(|s| s.remote.as_ref()) {
            Some(r) => (
                Some(bale_storage::Store::open(
                    r.object
                        .url()
                        .rsplit_once('/')
                        .map_or(r.object.url(), |(d, _)| d),
                    &options.storage,
                )?),
                // Only the shards in the bucket go through the cache.
                remote::open_cache(
                    &options,
                    shards
                        .iter()
                        .zip(&manifest.shards)
                        .filter(|(s, _)| s.remote.is_some())
                        .map(|(_, e)| e.bytes)
                        .max()
                        .unwrap_or(0),
                )?,
            ),
            None => (None, None),
        };
        Ok(Self::assemble(
            dir.to_path_buf(),
            shards,
            manifest,
            options,
            store,
            cache,
        ))
    }

    /// The dataset of opened, checked shards.
    fn assemble(
        dir: PathBuf,
        shards: Vec<Shard>,
        manifest: Manifest,
        options: DatasetOptions,
        store: Option<bale_storage::Store>,
        cache: Option<bale_storage::Cache>,
    ) -> Self {
        let n = shards.len();
        let mut offsets = Vec::with_capacity(n + 1);
        let mut total = 0u64;
        for s in &shards {
            offsets.push(total);
            total += s.index.len() as u64;
        }
        offsets.push(total);
        let bytes: u64 = shards.iter().map(|s| s.index.shard_len()).sum();
        let read_around = around::decide(options.read_around, bytes, || {
            crate::stage::mem_available().ok()
        });
        let plain = shards
            .iter()
            .all(|s| s.index.compression() != Compression::Zstd);
        Dataset {
            inner: Arc::new(Inner {
                dir,
                shards,
                offsets,
                labels: manifest.labels.clone(),
                fields: manifest.fields.keys().cloned().collect(),
                manifest,
                options,
                pool: Arc::default(),
                residency: Residency::new(),
                read_around,
                plain,
                store,
                cache,
            }),
        }
    }

    /// The dataset directory (or, for a dataset in object storage, its URL).
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

    /// The global indices of every sample with key `key`, in dataset order:
    /// more than one only in a dataset whose shards share keys (which the
    /// writers refuse and `bale verify` reports).
    pub fn find_all(&self, key: &str) -> Vec<u64> {
        let shards = self.inner.shards.iter().enumerate();
        shards
            .filter_map(|(s, shard)| {
                shard
                    .index
                    .find(key)
                    .map(|l| self.inner.offsets[s] + l as u64)
            })
            .collect()
    }

    /// The global index of the sample `sample` names, taken as `by` says:
    /// the sample with that key, or the sample at that index. With
    /// [`Select::Either`], a string that is a key and also the index of
    /// another sample is refused, as is a key more than one sample has.
    ///
    /// # Errors
    /// [`ReaderError::NoSuchSample`], naming what to say instead.
    pub fn select(&self, sample: &str, by: Select) -> Result<u64> {
        let fail = |what: String| Err(ReaderError::NoSuchSample { what });
        let len = self.len();
        let as_index = sample.parse::<u64>().ok();
        if by == Select::Index {
            return match as_index {
                Some(n) if n < len => Ok(n),
                _ => fail(format!(
                    "--index: {sample:?} is not a sample index: the dataset has {len} samples (0..{len})"
                )),
            };
        }
        let keys = self.find_all(sample);
        if keys.len() > 1 {
            let list: Vec<String> = keys.iter().map(u64::to_string).collect();
            return fail(format!(
                "the key {sample:?} names {} samples of {} (indices {}): its keys are not unique; name one with --index",
                keys.len(),
                bale_format::shown(self.dir()),
                list.join(", ")
            ));
        }
        let index = as_index.filter(|n| *n < len);
        match (keys.first(), index) {
            (Some(&k), Some(n)) if by == Select::Either && k != n => fail(format!(
                "{sample:?} is ambiguous: it is the key of sample {k} and the index of sample {n} (key {:?}); \
                 say --key or --index",
                self.key(n)?
            )),
            (Some(&k), _) => Ok(k),
            (None, Some(n)) if by == Select::Either => Ok(n),
            (None, _) if by == Select::Either && as_index.is_some() => fail(format!(
                "no sample with key {sample:?}, and {sample} is not an index: the dataset has {len} samples (0..{len})"
            )),
            (None, _) => fail(format!(
                "no sample with key {sample:?} in {}",
                bale_format::shown(self.dir())
            )),
        }
    }

    /// The global index of the sample with key `key`, if any (the first, in a
    /// dataset whose keys are not unique: see [`Dataset::find_all`]).
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

    /// Drops shard `s`'s mapped pages, of its file and of its index, from
    /// this process's resident memory. They stay in the page cache (a later
    /// read faults them back in, with no I/O while they are cached), and
    /// samples still held read the same bytes. A pass over every sample calls
    /// it as it leaves a shard, so that its resident memory is one shard's,
    /// not the dataset's. A hint: nothing happens for what is not mapped.
    ///
    /// # Panics
    /// If `s >= self.shard_count()`.
    pub fn release(&self, s: usize) {
        let shard = &self.inner.shards[s];
        shard.index.release_pages();
        if let Some(shard::Handle { map: Some(map), .. }) = shard.handle.get() {
            // SAFETY: a read-only shared map of a file bale never modifies in
            // place: dropping its pages loses no write, and the next read of
            // them sees the same bytes.
            let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        }
    }

    /// Bytes of shard `s`'s index file.
    pub(crate) fn index_len(&self, s: usize) -> u64 {
        self.inner.shards[s].index.stored_len()
    }

    /// The global index of shard `s`'s first sample.
    pub(crate) fn first_of(&self, s: usize) -> u64 {
        self.inner.offsets[s]
    }

    /// Bytes to budget for reading sample `local` of shard `s` (its uncompressed size).
    pub(crate) fn sample_cost(&self, s: usize, local: usize) -> u64 {
        self.inner.shards[s].index.sample_bytes(local)
    }

    /// Requests in flight per batch or iterator, for a dataset in object storage.
    pub(crate) fn max_requests(&self) -> usize {
        self.inner.options.max_requests
    }

    /// Bytes a remote epoch iterator keeps requested ahead.
    pub(crate) fn read_ahead(&self) -> u64 {
        self.inner.options.read_ahead
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

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::testing::TestDataset;

    /// A shuffled epoch reads one sample at a time; on a warm cache its
    /// touches are fast, so it learns to stop hinting each sample (a
    /// `MADV_WILLNEED` per sample that finds every page there).
    #[test]
    fn a_shuffled_epoch_on_a_warm_cache_turns_per_sample_hints_off() {
        let dir = tempfile::tempdir().unwrap();
        let spec = TestDataset::new(4 * u64::from(Residency::HINT_READS), 1);
        spec.write(dir.path()).unwrap();
        for e in std::fs::read_dir(dir.path()).unwrap() {
            std::fs::read(e.unwrap().path()).unwrap();
        }
        // On the reader thread, and on the caller's (no prefetch).
        for threads in [1, 0] {
            let ds = Dataset::open(dir.path()).unwrap();
            assert!(
                ds.inner.residency.hint(),
                "a fresh dataset is taken for cold"
            );
            // A touch preempted for 10 us just after a major fault of the
            // thread passes for a wait on storage and turns hints on again:
            // on a busy machine, give it a few epochs.
            let learnt = (0..5).any(|epoch| {
                let it = ds
                    .iter(EpochPlan::shuffled(7, epoch), Partition::ALL)
                    .unwrap();
                let it = if threads > 0 {
                    it.prefetch(threads, 64, 1 << 20)
                } else {
                    it
                };
                let mut n = 0;
                for s in it {
                    let s = s.unwrap();
                    assert_eq!(s.field("bin"), Some(&spec.payload(s.index())[..]));
                    n += 1;
                }
                assert_eq!(n, spec.len());
                !ds.inner.residency.hint()
            });
            assert!(
                learnt,
                "{threads} thread(s): still hinting every sample after five warm epochs"
            );
        }
    }

    /// Samples built on a reader thread share a handle to their shard's
    /// map per job: the caller dropping them counts on the job's handle,
    /// not on the map's own count, which the reader thread counts on.
    #[test]
    fn samples_from_a_reader_thread_count_on_their_jobs_handle_not_the_shards_map() {
        let dir = tempfile::tempdir().unwrap();
        let spec = TestDataset::new(600, 1);
        spec.write(dir.path()).unwrap();
        let ds = Dataset::open(dir.path()).unwrap();
        for plan in [EpochPlan::sequential(), EpochPlan::shuffled(3, 0)] {
            let held: Vec<Sample> = ds
                .iter(plan, Partition::ALL)
                .unwrap()
                .prefetch(1, 64, 1 << 20)
                .map(|s| s.unwrap())
                .collect();
            assert_eq!(held.len(), 600);
            for s in &held {
                assert!(s.is_mapped());
                assert_eq!(s.field("bin"), Some(&spec.payload(s.index())[..]));
            }
            let map = ds.inner.shards[0]
                .handle
                .get()
                .unwrap()
                .map
                .as_ref()
                .unwrap();
            // Jobs of at most 64 / 2 samples: at least 19 of them.
            let counts = Arc::strong_count(map);
            assert!(
                (2..=1 + 600 / 19).contains(&counts),
                "{plan:?}: 600 samples held, the shard's map counted {counts} times"
            );
        }
    }
}
