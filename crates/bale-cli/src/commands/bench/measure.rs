//! The measurement engine: read a tree or a dataset in some order with some
//! threads for a time budget, checksumming every byte it counts.
//!
//! Each figure (order x threads) is three passes, each bounded by the budget:
//! a warm-up pass that reads what the figure will read (and counts it), the
//! warm pass over the same samples, then after evicting those files from the
//! page cache (`posix_fadvise(POSIX_FADV_DONTNEED)`) the cold pass over them
//! again. Warm and cold passes never read past what the warm-up read, so the
//! warm pass reads only cached pages and the cold pass only evicted ones.
//!
//! - A tree: a sample is the files that share a key (WebDataset's rule, as
//!   `bale pack` groups them); reading it opens, reads and closes each file.
//!   Threads take the next sample of the order from a shared counter (as a
//!   loader's workers take batches from a sampler).
//! - A dataset: random order is `Dataset::get_populated` on a seeded
//!   permutation (what a loader that uses each sample at once calls),
//!   threads sharing a counter; sequential order is each thread iterating its
//!   worker share of a sequential epoch (`Dataset::iter`, large reads), as
//!   loader workers do. Before a cold pass the dataset is closed (unmapping
//!   shards), the manifest, shards and indexes are evicted, and the dataset
//!   reopened (the open time is reported apart). It is reopened before the
//!   warm pass too, so that both passes map the shards afresh (as a new
//!   loader worker does) and differ only in what the page cache holds.
//!
//! Memory: the list of files (a tree) or the open dataset's mapped indexes,
//! one permutation of `u64` per sample, and one sample's bytes per thread.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bale_format::Manifest;
use bale_reader::{Dataset, EpochPlan, Partition, Sample};
use rayon::prelude::*;

use super::decode::{Decoded, decode_member};
use super::diagnose::{Rate, Shards};

/// One file of a tree.
#[derive(Debug)]
pub struct TreeFile {
    path: PathBuf,
    ext: Box<str>,
    len: u64,
}

/// A plain tree of files grouped into samples.
#[derive(Debug)]
pub struct Tree {
    files: Vec<TreeFile>,
    /// Index in `files` of each sample's first file, then `files.len()`.
    starts: Vec<usize>,
}

/// What is measured.
#[derive(Debug)]
pub enum Subject {
    /// A plain tree of files.
    Tree(Tree),
    /// A bale dataset (`None` while closed for eviction).
    Dataset(Option<Dataset>),
}

/// A source and its totals.
#[derive(Debug)]
pub struct Opened {
    /// The directory.
    pub path: PathBuf,
    /// What it is.
    pub source: Subject,
    /// Samples.
    pub samples: u64,
    /// Files: loose files of a tree, shard files of a dataset.
    pub files: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// How to reach a dataset in object storage.
    pub storage: bale_storage::StorageOptions,
    /// On tmpfs or ramfs: eviction does nothing there.
    pub ram_backed: bool,
    /// Where the shards are read from: in object storage, a cold pass
    /// evicts nothing and a warm one finds nothing cached either.
    pub shards: Shards,
}

/// The order samples are read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOrder {
    /// Tree: walk order (sorted by name); dataset: shard order.
    Sequential,
    /// A seeded permutation of all samples.
    Random,
}

impl ReadOrder {
    /// The JSON name.
    pub fn name(self) -> &'static str {
        match self {
            ReadOrder::Sequential => "sequential",
            ReadOrder::Random => "random",
        }
    }
}

/// One measured pass.
#[derive(Debug, Clone, Default)]
pub struct Pass {
    /// Samples, bytes, seconds.
    pub rate: Rate,
    /// Samples read by each thread.
    pub per_thread: Vec<u64>,
    /// Seconds spent decoding, summed over threads.
    pub decode_secs: f64,
    /// Members decoded.
    pub images: u64,
    /// Members that did not decode.
    pub decode_errors: u64,
    /// The first decode error, with its sample.
    pub first_error: Option<String>,
    /// Seconds to reopen the dataset after eviction (cold dataset passes).
    pub open_secs: Option<f64>,
}

/// One figure's passes: warm and cold.
#[derive(Debug, Clone)]
pub struct Figure {
    /// The order.
    pub order: ReadOrder,
    /// Threads.
    pub threads: usize,
    /// The warm pass.
    pub warm: Pass,
    /// The cold pass.
    pub cold: Pass,
}

/// Everything measured on one source.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Sequential and random, N threads and 1.
    pub figures: Vec<Figure>,
    /// Random, warm, with decoding: 1 thread and N (with `--decode`).
    pub decode: Vec<Pass>,
}

/// Settings of a measurement.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Budget per pass.
    pub budget: Duration,
    /// N.
    pub threads: usize,
    /// Seed of the random order.
    pub seed: u64,
    /// Measure decoding too.
    pub decode: bool,
}

impl Opened {
    /// Opens `path`: a dataset when it holds `bale.json`, else a tree.
    ///
    /// # Errors
    /// A missing path, an unreadable directory, a dataset that does not open.
    pub fn open(path: &Path, storage: &bale_storage::StorageOptions) -> anyhow::Result<Opened> {
        if bale_storage::is_url(path) {
            // In object storage: nothing to evict (the page cache does not hold it).
            let ds = Dataset::options()
                .storage_options(storage.clone())
                .open(path)
                .with_context(|| format!("cannot open dataset {}", path.display()))?;
            let (shards, bytes) = shard_totals(ds.manifest());
            return Ok(Opened {
                path: path.to_owned(),
                samples: ds.len(),
                files: shards,
                bytes,
                storage: storage.clone(),
                source: Subject::Dataset(Some(ds)),
                ram_backed: false,
                shards: Shards::Bucket,
            });
        }
        let meta =
            std::fs::metadata(path).with_context(|| format!("cannot open {}", path.display()))?;
        anyhow::ensure!(meta.is_dir(), "{} is not a directory", path.display());
        let ram_backed = is_ram_backed(path);
        if Manifest::path_in(path).exists() {
            // Its shards may be URLs (`bale index` of tars in a bucket).
            let ds = Dataset::options()
                .storage_options(storage.clone())
                .open(path)
                .with_context(|| format!("cannot open dataset {}", path.display()))?;
            let (shards, bytes) = shard_totals(ds.manifest());
            let in_bucket = ds
                .manifest()
                .shards
                .iter()
                .any(|s| bale_storage::is_url(&Manifest::resolve(path, &s.file)));
            Ok(Opened {
                path: path.to_owned(),
                samples: ds.len(),
                files: shards,
                bytes,
                storage: storage.clone(),
                source: Subject::Dataset(Some(ds)),
                ram_backed,
                shards: if in_bucket {
                    Shards::LocalIndexOfBucket
                } else {
                    Shards::Local
                },
            })
        } else {
            let tree = walk_tree(path)?;
            Ok(Opened {
                path: path.to_owned(),
                samples: (tree.starts.len() - 1) as u64,
                files: tree.files.len() as u64,
                bytes: tree.files.iter().map(|f| f.len).sum(),
                storage: storage.clone(),
                source: Subject::Tree(tree),
                ram_backed,
                shards: Shards::Local,
            })
        }
    }

    /// Whether this is a plain tree.
    pub fn is_tree(&self) -> bool {
        matches!(self.source, Subject::Tree(_))
    }
}

/// The files of a dataset a cold pass evicts: manifest, shards and indexes.
fn dataset_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mpath = Manifest::path_in(dir);
    let m = Manifest::read(dir)?;
    let mut v = vec![mpath];
    // The local files only: a shard in object storage has no pages here.
    for s in &m.shards {
        for f in [&s.file, &s.index] {
            let p = Manifest::resolve(dir, f);
            if !bale_storage::is_url(&p) {
                v.push(p);
            }
        }
    }
    Ok(v)
}

/// A manifest's shard count and shard bytes (saturating: a hand-edited
/// manifest's sizes may add past 2**64).
fn shard_totals(m: &Manifest) -> (u64, u64) {
    (
        m.shards.len() as u64,
        m.shards.iter().fold(0u64, |a, s| a.saturating_add(s.bytes)),
    )
}

/// Walks a tree as `bale pack` would ([`bale_pack::walk_tree`]) and groups
/// its files into samples by key.
fn walk_tree(root: &Path) -> anyhow::Result<Tree> {
    let tree = bale_pack::walk_tree(root)?;
    let starts = tree.sample_starts();
    let files = tree
        .files
        .into_iter()
        .map(|f| TreeFile {
            path: f.path,
            ext: f.ext.into(),
            len: f.size,
        })
        .collect();
    Ok(Tree { files, starts })
}

/// Whether `path` is on tmpfs or ramfs (where `POSIX_FADV_DONTNEED` evicts
/// nothing); `false` when that cannot be told.
fn is_ram_backed(path: &Path) -> bool {
    bale_reader::stage::is_ram_backed(path).unwrap_or(false)
}

/// Drops `path`'s pages from the page cache.
fn evict(path: &Path) -> anyhow::Result<()> {
    let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    // SAFETY: the descriptor is open for the duration of the call.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        bail!(
            "posix_fadvise(DONTNEED) on {}: {}",
            path.display(),
            std::io::Error::from_raw_os_error(rc)
        );
    }
    Ok(())
}

/// What one thread did.
#[derive(Debug, Default)]
struct ThreadStats {
    samples: u64,
    bytes: u64,
    decode: Duration,
    images: u64,
    decode_errors: u64,
    first_error: Option<String>,
    hash: u64,
}

impl ThreadStats {
    /// Checksums (and with `decode`, decodes) one member.
    fn member(&mut self, key: &str, ext: &str, bytes: &[u8], decode: bool) {
        self.bytes += bytes.len() as u64;
        self.hash ^= bale_format::hash::xxh3_64(bytes);
        if decode {
            let t = Instant::now();
            let r = decode_member(ext, bytes);
            self.decode += t.elapsed();
            match r {
                Ok(Decoded::Image(..)) => self.images += 1,
                Ok(Decoded::Skipped) => {}
                Err(e) => {
                    self.decode_errors += 1;
                    if self.first_error.is_none() {
                        self.first_error = Some(format!("{key}.{ext}: {e:#}"));
                    }
                }
            }
        }
    }

    fn dataset_sample(&mut self, s: &Sample, decode: bool) {
        for (ext, bytes) in s.fields() {
            self.member(s.key(), ext, bytes, decode);
        }
        self.samples += 1;
    }
}

impl Tree {
    fn read_sample(
        &self,
        i: usize,
        buf: &mut Vec<u8>,
        st: &mut ThreadStats,
        decode: bool,
    ) -> anyhow::Result<()> {
        use std::io::Read;
        for f in &self.files[self.starts[i]..self.starts[i + 1]] {
            buf.clear();
            File::open(&f.path)
                .and_then(|mut h| h.read_to_end(buf))
                .with_context(|| format!("cannot read {}", f.path.display()))?;
            let name = f.path.to_string_lossy();
            st.member(&name, &f.ext, buf, decode);
        }
        st.samples += 1;
        Ok(())
    }

    /// The files of samples `order[..n]`.
    fn files_of<'a>(&'a self, order: &'a [u64], n: usize) -> impl Iterator<Item = &'a Path> {
        order[..n.min(order.len())].iter().flat_map(move |&i| {
            self.files[self.starts[i as usize]..self.starts[i as usize + 1]]
                .iter()
                .map(|f| f.path.as_path())
        })
    }
}

/// The caps of a pass: a global sample count (shared counter) or one per thread.
#[derive(Debug, Clone)]
enum Cap {
    None,
    Total(u64),
    PerThread(Vec<u64>),
}

impl Opened {
    /// Runs every pass of a measurement. `say` reports progress.
    ///
    /// # Errors
    /// A file that cannot be read or evicted, a dataset that does not reopen.
    pub fn measure(&mut self, s: &Settings, say: &dyn Fn(&str)) -> anyhow::Result<Measured> {
        let n = self.samples;
        let sequential: Vec<u64> = (0..n).collect();
        let random = bale_format::shuffle::permutation(n, s.seed);
        let mut thread_counts = vec![s.threads.max(1)];
        if s.threads > 1 {
            thread_counts.push(1);
        }
        let mut figures = Vec::new();
        for order in [ReadOrder::Sequential, ReadOrder::Random] {
            let list = match order {
                ReadOrder::Sequential => &sequential,
                ReadOrder::Random => &random,
            };
            for &threads in &thread_counts {
                say(&format!("{} {threads} thread(s): warm-up", order.name()));
                let warmup = self.pass(order, list, threads, &Cap::None, s, false)?;
                let cap = match (&self.source, order) {
                    (Subject::Dataset(_), ReadOrder::Sequential) => {
                        Cap::PerThread(warmup.per_thread.clone())
                    }
                    _ => Cap::Total(warmup.rate.samples),
                };
                say(&format!("{} {threads} thread(s): warm", order.name()));
                // A dataset is reopened before both passes, so that both map
                // their shards afresh and differ only in the page cache.
                self.refresh(list, warmup.rate.samples, false)?;
                let warm = self.pass(order, list, threads, &cap, s, false)?;
                say(&format!("{} {threads} thread(s): evicting", order.name()));
                let open_secs = self.refresh(list, warmup.rate.samples, true)?;
                say(&format!("{} {threads} thread(s): cold", order.name()));
                let mut cold = self.pass(order, list, threads, &cap, s, false)?;
                cold.open_secs = open_secs;
                figures.push(Figure {
                    order,
                    threads,
                    warm,
                    cold,
                });
            }
        }
        let mut decode = Vec::new();
        if s.decode {
            for &threads in thread_counts.iter().rev() {
                say(&format!("decode {threads} thread(s)"));
                decode.push(self.pass(ReadOrder::Random, &random, threads, &Cap::None, s, true)?);
            }
        }
        Ok(Measured { figures, decode })
    }

    /// With `evict`, evicts what a pass over `order[..n]` read. A dataset is
    /// closed (unmapping its shards), evicted (all its files) with `evict`,
    /// and reopened: the open time is returned.
    fn refresh(&mut self, order: &[u64], n: u64, evict_pages: bool) -> anyhow::Result<Option<f64>> {
        match &mut self.source {
            Subject::Tree(tree) => {
                if evict_pages {
                    let files: Vec<&Path> = tree.files_of(order, n as usize).collect();
                    files.par_iter().try_for_each(|p| evict(p))?;
                }
                Ok(None)
            }
            Subject::Dataset(ds) => {
                *ds = None;
                if evict_pages && !bale_storage::is_url(&self.path) {
                    for f in dataset_files(&self.path)? {
                        evict(&f)?;
                    }
                }
                let t = Instant::now();
                let opened = Dataset::options()
                    .storage_options(self.storage.clone())
                    .open(&self.path)
                    .with_context(|| format!("cannot reopen dataset {}", self.path.display()))?;
                let secs = t.elapsed().as_secs_f64();
                *ds = Some(opened);
                Ok(Some(secs))
            }
        }
    }

    /// One pass: `threads` threads read samples in `order` until the budget
    /// runs out, the cap is reached, or the samples end.
    fn pass(
        &self,
        order: ReadOrder,
        list: &[u64],
        threads: usize,
        cap: &Cap,
        s: &Settings,
        decode: bool,
    ) -> anyhow::Result<Pass> {
        let stop = AtomicBool::new(false);
        let next = AtomicU64::new(0);
        let total_cap = match cap {
            Cap::Total(c) => *c,
            _ => u64::MAX,
        };
        let error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
        let fail = |e: anyhow::Error| {
            stop.store(true, Ordering::Relaxed);
            let mut g = error.lock().unwrap_or_else(|p| p.into_inner());
            if g.is_none() {
                *g = Some(e);
            }
        };
        let start = Instant::now();
        let deadline = start + s.budget;
        // Past the budget, a thread stops once it has read a sample (a
        // loaded machine may start it late): every figure rests on some.
        let out_of_time =
            |read: u64| stop.load(Ordering::Relaxed) || (read > 0 && Instant::now() >= deadline);
        let stats: Vec<ThreadStats> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (next, fail, out_of_time) = (&next, &fail, &out_of_time);
                    scope.spawn(move || {
                        let mut st = ThreadStats::default();
                        match (&self.source, order) {
                            (Subject::Dataset(Some(ds)), ReadOrder::Sequential) => {
                                let my_cap = match cap {
                                    Cap::PerThread(v) => v.get(t).copied().unwrap_or(0),
                                    _ => u64::MAX,
                                };
                                let part = Partition::ALL.with_workers(t as u64, threads as u64);
                                let it = match ds.iter(EpochPlan::sequential(), part) {
                                    Ok(it) => it,
                                    Err(e) => {
                                        fail(e.into());
                                        return st;
                                    }
                                };
                                let mut it = it;
                                while st.samples < my_cap {
                                    // A read error is reported even when it
                                    // arrives after the budget: the sample was
                                    // read (ahead), and a figure over a
                                    // damaged dataset must not look clean.
                                    match it.next() {
                                        None => break,
                                        Some(Err(e)) => {
                                            fail(e.into());
                                            break;
                                        }
                                        Some(Ok(_)) if out_of_time(st.samples) => break,
                                        Some(Ok(sample)) => st.dataset_sample(&sample, decode),
                                    }
                                }
                            }
                            (source, _) => {
                                let mut buf = Vec::new();
                                loop {
                                    if out_of_time(st.samples) {
                                        break;
                                    }
                                    let k = next.fetch_add(1, Ordering::Relaxed);
                                    if k >= total_cap || k >= list.len() as u64 {
                                        break;
                                    }
                                    let i = list[k as usize];
                                    let r = match source {
                                        Subject::Tree(tree) => {
                                            tree.read_sample(i as usize, &mut buf, &mut st, decode)
                                        }
                                        Subject::Dataset(Some(ds)) => ds
                                            .get_populated(i)
                                            .map(|sample| st.dataset_sample(&sample, decode))
                                            .map_err(Into::into),
                                        Subject::Dataset(None) => {
                                            Err(anyhow::anyhow!("dataset is closed"))
                                        }
                                    };
                                    if let Err(e) = r {
                                        fail(e);
                                        break;
                                    }
                                }
                            }
                        }
                        st
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        let secs = start.elapsed().as_secs_f64();
        if let Some(e) = error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        let mut p = Pass {
            rate: Rate {
                samples: stats.iter().map(|s| s.samples).sum(),
                bytes: stats.iter().map(|s| s.bytes).sum(),
                secs,
            },
            per_thread: stats.iter().map(|s| s.samples).collect(),
            ..Pass::default()
        };
        let mut hash = 0;
        for st in stats {
            p.decode_secs += st.decode.as_secs_f64();
            p.images += st.images;
            p.decode_errors += st.decode_errors;
            if p.first_error.is_none() {
                p.first_error = st.first_error;
            }
            hash ^= st.hash;
        }
        std::hint::black_box(hash);
        Ok(p)
    }
}
