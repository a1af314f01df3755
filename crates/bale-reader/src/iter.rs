//! Reading an epoch: [`SampleIter`], with optional background prefetch.
//!
//! Reading is split into *jobs*: a run of consecutive samples of one shard
//! read with one large read (sequential and shard-shuffled plans), or one
//! sample (shuffled plans, and the samples a resumed reservoir holds). Jobs
//! come in the partition's read order; without prefetch the iterator runs
//! them itself, with prefetch a pool of threads runs them ahead and the
//! iterator puts their results back in order. Shard-shuffled plans then mix
//! the samples through the bounded reservoir of [`crate::plan`].
//!
//! Reads in flight hide storage latency: a batch of single-sample reads is
//! first hinted to the kernel as a whole (`MADV_WILLNEED` /
//! `POSIX_FADV_WILLNEED`: the I/O starts, nothing is held in memory), then
//! read one by one; without prefetch threads the iterator also hints the
//! next job while its caller consumes the current one. So a cold shuffled
//! epoch keeps tens of reads in flight even on the caller's thread alone
//! (docs/benchmarks.md has the figures). A cold run of a mapped shard is
//! instead read through the file when it is read, and the kernel reads on
//! ahead of it (`Handle::read_in_order` in `dataset/shard.rs`).

use std::collections::{BTreeMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use crate::dataset::{Dataset, StartedPieces};
use crate::error::{ReaderError, Result};
use crate::fork::ForkGuard;
use crate::plan::{EpochPlan, Order, Partition};
use crate::reservoir::Reservoir;
use crate::sample::Sample;

/// Most single-sample reads batched into one job (so prefetch threads hand
/// samples over in groups, not one by one). With prefetch, a batch is also
/// at most the sample budget over the thread count, so every thread gets work.
const BATCH: u64 = 32;

/// A run of consecutive samples of one shard: `count` samples from
/// `local` of shard `shard`, global index `global` first.
#[derive(Debug, Clone, Copy)]
struct Piece {
    global: u64,
    shard: usize,
    local: usize,
    count: usize,
    bytes: u64,
}

/// One unit of reading: one run read with one large read, or a batch of
/// single-sample reads.
#[derive(Debug, Clone, Default)]
struct Job {
    pieces: Vec<Piece>,
    /// Samples in the job.
    count: usize,
    /// Uncompressed bytes of the samples (for the prefetch budget).
    bytes: u64,
}

/// Produces the jobs of a partition in read order.
#[derive(Debug)]
struct JobGen {
    ds: Dataset,
    order: Order,
    singles: VecDeque<u64>,
    pos: u64,
    end: u64,
    max_samples: u64,
    max_bytes: u64,
    /// Most single-sample reads in one job.
    batch: u64,
}

impl JobGen {
    /// Moves the remaining jobs out, leaving this generator exhausted.
    fn take(&mut self) -> JobGen {
        let rest = JobGen {
            ds: self.ds.clone(),
            order: self.order.clone(),
            singles: std::mem::take(&mut self.singles),
            pos: self.pos,
            end: self.end,
            max_samples: self.max_samples,
            max_bytes: self.max_bytes,
            batch: self.batch,
        };
        self.pos = self.end;
        rest
    }

    fn next_job(&mut self) -> Option<Job> {
        let mut job = Job::default();
        loop {
            let (g, run, single) = if let Some(&g) = self.singles.front() {
                (g, 1, true)
            } else if self.pos < self.end {
                let run = self.order.run_within(self.pos, self.max_samples);
                (self.order.at(self.pos), run, false)
            } else {
                break;
            };
            // A run is a job of its own; single reads batch up to BATCH samples.
            if job.count > 0 && (run > 1 || job.count as u64 >= self.batch) {
                break;
            }
            let piece = self.piece_at(g, run);
            if job.count > 0 && job.bytes + piece.bytes > self.max_bytes {
                break;
            }
            if single {
                self.singles.pop_front();
            } else {
                self.pos += piece.count as u64;
            }
            job.count += piece.count;
            job.bytes += piece.bytes;
            job.pieces.push(piece);
            if run > 1 {
                break;
            }
        }
        (job.count > 0).then_some(job)
    }

    /// Up to `run` samples from global index `g` (which exist and lie in one
    /// shard), cut so that their bytes stay within `max_bytes` (at least one sample).
    fn piece_at(&self, g: u64, run: u64) -> Piece {
        // `g` comes from an order over this dataset's shard sizes: in range.
        let (shard, local) = self.ds.locate(g).unwrap_or((0, 0));
        let mut count = 0usize;
        let mut bytes = 0u64;
        while (count as u64) < run {
            let b = self.ds.sample_cost(shard, local + count);
            if count > 0 && bytes + b > self.max_bytes {
                break;
            }
            bytes += b;
            count += 1;
        }
        Piece {
            global: g,
            shard,
            local,
            count,
            bytes,
        }
    }
}

/// Asks the kernel to start reading every sample of `job` (see [`Dataset::will_read`]).
fn hint_job(ds: &Dataset, job: &Job) {
    for p in &job.pieces {
        ds.will_read(p.shard, p.local, p.count);
    }
}

fn run_job(ds: &Dataset, job: &Job, populate: bool) -> Vec<Result<Sample>> {
    // A batch of single-sample reads: ask the kernel for all of them first,
    // so their I/O is in flight at once instead of one read after another
    // (runs already ask for themselves and for the run after them).
    if job.pieces.len() > 1 {
        hint_job(ds, job);
    }
    let mut out = Vec::with_capacity(job.count);
    for p in &job.pieces {
        if p.count == 1 {
            // Touched and timed, so that a warm cache turns the hints of
            // later samples off (a system call each that finds every page
            // in memory).
            out.push(ds.read_touched(p.shard, p.local));
        } else {
            out.extend(ds.read_run(p.shard, p.local, p.count, populate));
        }
    }
    out
}

/// Runs jobs on the calling thread, one job ahead: while the caller
/// consumes a job's samples, the next job's reads are already in flight
/// (hinted to the kernel, not read: no memory is held for them).
#[derive(Debug)]
struct Inline {
    jobs: JobGen,
    queue: VecDeque<Result<Sample>>,
    ahead: Option<Job>,
}

impl Inline {
    fn new(jobs: JobGen) -> Self {
        Inline {
            jobs,
            queue: VecDeque::new(),
            ahead: None,
        }
    }

    fn next(&mut self) -> Option<Result<Sample>> {
        loop {
            if let Some(x) = pop_ahead(&mut self.queue) {
                return Some(x);
            }
            let job = self.ahead.take().or_else(|| self.jobs.next_job())?;
            self.ahead = self.jobs.next_job();
            if let Some(next) = &self.ahead {
                hint_job(&self.jobs.ds, next);
            }
            self.queue.extend(run_job(&self.jobs.ds, &job, false));
        }
    }
}

/// How many samples behind the one handed out the iterator asks the CPU for
/// ([`Sample::prefetch`]): far enough that the loads finish while the caller
/// works on the samples between, near enough that they are still in its
/// core's caches when it reads that sample (docs/benchmarks.md).
const PREFETCH_DISTANCE: usize = 2;

/// The next sample of `q`; asks the CPU for the first bytes of the one
/// [`PREFETCH_DISTANCE`] behind it.
fn pop_ahead(q: &mut VecDeque<Result<Sample>>) -> Option<Result<Sample>> {
    let x = q.pop_front();
    if let Some(Ok(s)) = q.get(PREFETCH_DISTANCE - 1) {
        s.prefetch();
    }
    x
}

#[derive(Debug)]
struct PrefetchState {
    jobs: JobGen,
    peeked: Option<Job>,
    next_seq: u64,
    in_samples: u64,
    in_bytes: u64,
    stop: bool,
}

#[derive(Debug)]
struct PrefetchShared {
    state: Mutex<PrefetchState>,
    cv: Condvar,
    max_samples: u64,
    max_bytes: u64,
}

impl PrefetchShared {
    fn lock(&self) -> MutexGuard<'_, PrefetchState> {
        // A poisoned lock only means a thread panicked while holding it; the
        // state is plain counters and stays consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Debug)]
struct Done {
    seq: u64,
    results: Vec<Result<Sample>>,
    samples: u64,
    bytes: u64,
}

/// Runs jobs on background threads, within a budget of samples and bytes,
/// and hands their results back in order.
#[derive(Debug)]
struct Prefetcher {
    /// The process that started the threads.
    fork: ForkGuard,
    shared: Arc<PrefetchShared>,
    rx: Receiver<Done>,
    threads: Vec<JoinHandle<()>>,
    reorder: BTreeMap<u64, Done>,
    next_seq: u64,
    current: VecDeque<Result<Sample>>,
    /// Budget held by the job being consumed.
    held: (u64, u64),
}

impl Prefetcher {
    fn start(
        jobs: JobGen,
        threads: usize,
        max_samples: u64,
        max_bytes: u64,
    ) -> std::result::Result<Self, JobGen> {
        let ds = jobs.ds.clone();
        let shared = Arc::new(PrefetchShared {
            state: Mutex::new(PrefetchState {
                jobs,
                peeked: None,
                next_seq: 0,
                in_samples: 0,
                in_bytes: 0,
                stop: false,
            }),
            cv: Condvar::new(),
            max_samples,
            max_bytes,
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut handles = Vec::with_capacity(threads);
        for t in 0..threads {
            let (shared, tx, ds) = (Arc::clone(&shared), tx.clone(), ds.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("bale-prefetch-{t}"))
                .spawn(move || worker(&shared, &tx, &ds));
            if let Ok(h) = spawned {
                handles.push(h);
            }
        }
        if handles.is_empty() {
            // No thread could be started: the caller reads inline instead.
            return Err(shared.lock().jobs.take());
        }
        Ok(Prefetcher {
            fork: ForkGuard::new(),
            shared,
            rx,
            threads: handles,
            reorder: BTreeMap::new(),
            next_seq: 0,
            current: VecDeque::new(),
            held: (0, 0),
        })
    }

    fn next(&mut self) -> Option<Result<Sample>> {
        loop {
            if let Some(x) = pop_ahead(&mut self.current) {
                return Some(x);
            }
            // In a forked child the threads are gone: waiting for them
            // would never end (nor would the lock a thread held). Said
            // once, then nothing more comes (a reservoir pulling on would
            // fill itself with the error).
            if self.fork.in_child() {
                return self.fork.tell_once();
            }
            if self.held != (0, 0) {
                let mut st = self.shared.lock();
                st.in_samples -= self.held.0;
                st.in_bytes -= self.held.1;
                self.held = (0, 0);
                drop(st);
                self.shared.cv.notify_all();
            }
            let done = loop {
                if let Some(d) = self.reorder.remove(&self.next_seq) {
                    break d;
                }
                match self.rx.recv() {
                    Ok(d) => {
                        self.reorder.insert(d.seq, d);
                    }
                    // Every thread has finished: nothing more will come.
                    Err(_) => return None,
                }
            };
            self.next_seq += 1;
            self.held = (done.samples, done.bytes);
            self.current.extend(done.results);
        }
    }
}

fn worker(shared: &PrefetchShared, tx: &Sender<Done>, ds: &Dataset) {
    loop {
        let (seq, job) = {
            let mut st = shared.lock();
            loop {
                if st.stop {
                    return;
                }
                if st.peeked.is_none() {
                    st.peeked = st.jobs.next_job();
                }
                let Some(job) = st.peeked.as_ref() else {
                    return;
                };
                let idle = st.in_samples == 0 && st.in_bytes == 0;
                let fits = st.in_samples + job.count as u64 <= shared.max_samples
                    && st.in_bytes + job.bytes <= shared.max_bytes;
                if idle || fits {
                    let (count, bytes) = (job.count as u64, job.bytes);
                    st.in_samples += count;
                    st.in_bytes += bytes;
                    let seq = st.next_seq;
                    st.next_seq += 1;
                    if let Some(job) = st.peeked.take() {
                        break (seq, job);
                    }
                }
                st = shared.cv.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        };
        let populate = ds.is_mapped();
        let mut results = catch_unwind(AssertUnwindSafe(|| run_job(ds, &job, populate)))
            .unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".into());
                job.pieces
                    .iter()
                    .flat_map(|p| p.global..p.global + p.count as u64)
                    .map(|index| {
                        Err(ReaderError::Prefetch {
                            index,
                            what: what.clone(),
                        })
                    })
                    .collect()
            });
        // The caller drops these samples on its own thread.
        crate::sample::share_maps(&mut results);
        let done = Done {
            seq,
            results,
            samples: job.count as u64,
            bytes: job.bytes,
        };
        if tx.send(done).is_err() {
            return;
        }
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        if self.fork.in_child() {
            // A forked child: the threads (and any lock they held, the
            // channel's or a read buffer pool's) are the parent's; joining
            // them would never return, nor might dropping what they touched.
            self.threads.drain(..).for_each(std::mem::forget);
            std::mem::forget(std::mem::replace(&mut self.rx, crossbeam_channel::never()));
            std::mem::forget(std::mem::take(&mut self.reorder));
            std::mem::forget(std::mem::take(&mut self.current));
            return;
        }
        self.shared.lock().stop = true;
        self.shared.cv.notify_all();
        for h in self.threads.drain(..) {
            // A thread finishes its current read and exits; a panic was
            // already turned into errors.
            let _ = h.join();
        }
    }
}

/// Runs the jobs of a dataset in object storage: the requests of the next
/// jobs are in flight (on the storage runtime) while the caller consumes
/// the current one, within a budget of bytes; samples are built on the
/// caller's thread, in order.
#[derive(Debug)]
struct Remote {
    /// The process that started the requests (on its storage runtime).
    fork: ForkGuard,
    jobs: JobGen,
    ahead: VecDeque<(Job, StartedPieces)>,
    ahead_bytes: u64,
    /// Pieces (requests, before coalescing) of the jobs ahead.
    ahead_pieces: usize,
    budget: u64,
    queue: VecDeque<Result<Sample>>,
}

fn pieces_of(job: &Job) -> Vec<(usize, usize, usize)> {
    job.pieces
        .iter()
        .map(|p| (p.shard, p.local, p.count))
        .collect()
}

impl Remote {
    fn new(jobs: JobGen, budget: u64) -> Self {
        Remote {
            fork: ForkGuard::new(),
            jobs,
            ahead: VecDeque::new(),
            ahead_bytes: 0,
            ahead_pieces: 0,
            budget: budget.max(1),
            queue: VecDeque::new(),
        }
    }

    /// Starts jobs until the byte budget or the request budget
    /// ([`crate::DatasetOptions::max_requests`]) is spent; at least one job
    /// is always in flight.
    fn fill(&mut self) {
        let max_requests = self.jobs.ds.max_requests();
        while self.ahead.is_empty()
            || (self.ahead_bytes < self.budget && self.ahead_pieces < max_requests)
        {
            let Some(job) = self.jobs.next_job() else {
                break;
            };
            let started = self.jobs.ds.start_pieces(&pieces_of(&job));
            self.ahead_bytes += job.bytes;
            self.ahead_pieces += job.pieces.len();
            self.ahead.push_back((job, started));
        }
    }

    fn next(&mut self) -> Option<Result<Sample>> {
        loop {
            if let Some(x) = self.queue.pop_front() {
                return Some(x);
            }
            // The requests in flight run on the parent's runtime, which a
            // forked child does not run: their answers would never come.
            if self.fork.in_child() {
                return self.fork.tell_once();
            }
            self.fill();
            let (job, started) = self.ahead.pop_front()?;
            self.ahead_bytes -= job.bytes;
            self.ahead_pieces -= job.pieces.len();
            self.fill();
            let samples = self.jobs.ds.finish_pieces(&pieces_of(&job), started);
            self.queue.extend(samples);
        }
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if self.fork.in_child() {
            // Aborting the parent's requests would reach into a runtime
            // this process does not run.
            std::mem::forget(std::mem::take(&mut self.ahead));
        }
    }
}

#[derive(Debug)]
enum Feed {
    Inline(Inline),
    Threads(Box<Prefetcher>),
    Remote(Box<Remote>),
}

impl Feed {
    fn next(&mut self) -> Option<Result<Sample>> {
        match self {
            Feed::Inline(i) => i.next(),
            Feed::Threads(p) => p.next(),
            Feed::Remote(r) => r.next(),
        }
    }
}

#[derive(Debug)]
struct Engine {
    source: Feed,
    mix: Option<Reservoir<Result<Sample>>>,
}

/// Background read-ahead settings (see [`SampleIter::prefetch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Prefetch {
    threads: usize,
    max_samples: u64,
    max_bytes: u64,
}

impl Prefetch {
    /// The most of a `budget` one job may hold: a `1 / (threads + 1)`
    /// share (at least 1), so that each thread reads a job while the
    /// caller consumes another, instead of waiting for the caller to
    /// release the whole budget.
    fn job_share(&self, budget: u64) -> u64 {
        (budget / (self.threads as u64 + 1)).max(1)
    }
}

/// The most read-ahead threads [`SampleIter::prefetch`] starts: a read
/// from memory or a disk is not sped up by more, and each holds a stack
/// and a share of the budget (a count mistyped as `2**40` must not try to
/// start that many).
pub const MAX_PREFETCH_THREADS: usize = 64;

/// An epoch of samples for one partition, in plan order (see [`Dataset::iter`]).
///
/// Yields `Result<Sample>`: a sample that cannot be read is an error in its
/// place, and iteration continues with the next one, so the iterator always
/// yields exactly [`SampleIter::len`] items. `Send + Sync`; dropping it stops
/// its prefetch threads (each finishes at most its current read).
///
/// ```
/// use bale_reader::{Dataset, EpochPlan, Partition};
/// # let dir = tempfile::tempdir()?;
/// # bale_reader::testing::TestDataset::new(10, 3).write(dir.path())?;
/// let ds = Dataset::open(dir.path())?;
/// let plan = EpochPlan::shuffled(42, 0);
/// let part = Partition::new(0, 2).with_workers(1, 2); // rank 0 of 2, worker 1 of 2
/// let all: Vec<u64> = ds.iter(plan, part)?.map(|s| s.map(|s| s.index())).collect::<Result<_, _>>()?;
/// // Resume after 1 sample on 2 threads, at most 8 samples or 1 MiB read ahead.
/// let rest: Vec<u64> = ds.iter(plan, part)?.start_at(1)?.prefetch(2, 8, 1 << 20)
///     .map(|s| s.map(|s| s.index())).collect::<Result<_, _>>()?;
/// assert_eq!(rest, all[1..]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SampleIter {
    ds: Dataset,
    order: Order,
    position: u64,
    prefetch: Option<Prefetch>,
    engine: Option<Engine>,
}

impl SampleIter {
    pub(crate) fn new(ds: Dataset, order: Order) -> Self {
        SampleIter {
            ds,
            order,
            position: 0,
            prefetch: None,
            engine: None,
        }
    }

    /// Starts (or restarts) the epoch at item `k` of this partition's
    /// sequence: the iterator then yields exactly what an uninterrupted one
    /// yields after its first `k` items. Save [`SampleIter::position`] in a
    /// checkpoint and pass it here to resume.
    ///
    /// # Errors
    /// [`ReaderError::StartPastEnd`] when `k > self.len()`.
    pub fn start_at(mut self, k: u64) -> Result<Self> {
        if k > self.order.len() {
            return Err(ReaderError::StartPastEnd {
                offset: k,
                len: self.order.len(),
            });
        }
        self.engine = None;
        self.position = k;
        Ok(self)
    }

    /// Reads ahead on `threads` background threads, keeping at most
    /// `max_samples` samples and `max_bytes` bytes (uncompressed) read but
    /// not yet yielded, the sample being yielded's read included. A single
    /// read larger than the budget still proceeds, alone. Samples come out
    /// in plan order. `threads == 0` turns prefetch off; budgets of 0 count
    /// as 1. Shard-shuffled plans hold their reservoir on top of this.
    /// A job (one run read with one large read, or a batch of at most 32
    /// single-sample reads in shuffled plans) holds at most a
    /// `1 / (threads + 1)` share of each budget, so that every thread has a
    /// job to read while the caller consumes another.
    ///
    /// Applies from the current position on (read-ahead so far is discarded).
    /// More than [`MAX_PREFETCH_THREADS`] threads count as that many.
    pub fn prefetch(mut self, threads: usize, max_samples: usize, max_bytes: u64) -> Self {
        self.prefetch = (threads > 0).then(|| Prefetch {
            threads: threads.min(MAX_PREFETCH_THREADS),
            max_samples: (max_samples as u64).max(1),
            max_bytes: max_bytes.max(1),
        });
        self.engine = None;
        self
    }

    /// Number of items the epoch yields for this partition (from its start,
    /// whatever [`SampleIter::start_at`] says).
    pub fn len(&self) -> u64 {
        self.order.len()
    }

    /// Whether the epoch yields nothing for this partition.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Number of items yielded so far, counted from the start of the epoch
    /// (so `start_at(k)` then `n` items gives `k + n`).
    pub fn position(&self) -> u64 {
        self.position
    }

    /// The order of the epoch, as global indices.
    pub fn order(&self) -> &Order {
        &self.order
    }

    fn engine(&mut self) -> Result<&mut Engine> {
        if self.engine.is_none() {
            let start = self.order.read_start(self.position)?;
            let (ds, prefetch) = (&self.ds, self.prefetch);
            let jobs = JobGen {
                ds: ds.clone(),
                order: self.order.clone(),
                singles: start.singles.into(),
                pos: start.pos,
                end: self.order.end_pos(),
                max_samples: prefetch.map_or(u64::MAX, |p| p.job_share(p.max_samples)),
                max_bytes: ds
                    .read_chunk()
                    .min(prefetch.map_or(u64::MAX, |p| p.job_share(p.max_bytes))),
                batch: prefetch.map_or(BATCH, |p| p.job_share(p.max_samples).min(BATCH)),
            };
            let inline = |jobs| Feed::Inline(Inline::new(jobs));
            let source = match prefetch {
                // In object storage, requests in flight hide the latency, not threads.
                _ if ds.is_remote() => Feed::Remote(Box::new(Remote::new(
                    jobs,
                    prefetch.map_or(ds.read_ahead(), |p| p.max_bytes),
                ))),
                None => inline(jobs),
                Some(p) => match Prefetcher::start(jobs, p.threads, p.max_samples, p.max_bytes) {
                    Ok(pf) => Feed::Threads(Box::new(pf)),
                    Err(jobs) => inline(jobs),
                },
            };
            let mix = start.reservoir.map(|r| Reservoir {
                buf: Vec::with_capacity(r.cap.min(1 << 16)),
                cap: r.cap,
                rng: r.rng,
            });
            self.engine = Some(Engine { source, mix });
        }
        match self.engine.as_mut() {
            Some(e) => Ok(e),
            None => Err(ReaderError::Prefetch {
                index: 0,
                what: "the reader could not start".into(),
            }),
        }
    }
}

impl Iterator for SampleIter {
    type Item = Result<Sample>;

    fn next(&mut self) -> Option<Result<Sample>> {
        if self.position >= self.order.len() {
            return None;
        }
        let item = match self.engine() {
            Err(e) => Some(Err(e)),
            Ok(engine) => match &mut engine.mix {
                None => engine.source.next(),
                Some(r) => {
                    let source = &mut engine.source;
                    r.step(|| {
                        // A sample held by the reservoir gets a buffer of its
                        // own, so it does not keep the whole run it was read with.
                        source.next().map(|x| {
                            x.map(|mut s| {
                                s.compact();
                                s
                            })
                        })
                    })
                }
            },
        };
        match item {
            Some(x) => {
                self.position += 1;
                Some(x)
            }
            None => {
                // The source ended early: the reading threads could not deliver.
                let index = self
                    .order
                    .iter_from(self.position)
                    .ok()
                    .and_then(|mut i| i.next())
                    .unwrap_or(0);
                self.position = self.order.len();
                self.engine = None;
                Some(Err(ReaderError::Prefetch {
                    index,
                    what: "the reading threads stopped before the end of the epoch".into(),
                }))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.order.len() - self.position).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

impl ExactSizeIterator for SampleIter {}

impl Dataset {
    /// Iterates over an epoch: the samples `partition` gets under `plan`, in
    /// plan order. Add [`SampleIter::start_at`] to resume and
    /// [`SampleIter::prefetch`] to read ahead on background threads.
    ///
    /// Sequential and shard-shuffled plans read runs of consecutive samples
    /// with one large read each (see [`crate::DatasetOptions::read_chunk`]);
    /// shuffled plans read each sample with one positioned read.
    ///
    /// # Errors
    /// An invalid partition.
    pub fn iter(&self, plan: EpochPlan, partition: Partition) -> Result<SampleIter> {
        Ok(SampleIter::new(self.clone(), self.order(plan, partition)?))
    }

    /// Iterates over a resumed epoch: the samples `partition` gets under
    /// `plan` at `place` ([`crate::resume::Resume::place`]), from its
    /// `start` on.
    ///
    /// # Errors
    /// An invalid partition, or a place that does not fit this dataset.
    pub fn iter_at(
        &self,
        plan: EpochPlan,
        partition: Partition,
        place: &crate::resume::Place,
    ) -> Result<SampleIter> {
        let order = Order::resumed(plan, partition, &self.shard_sizes(), place)?;
        SampleIter::new(self.clone(), order).start_at(place.start)
    }

    /// Iterates over the samples `order` yields (an order made over this
    /// dataset's shard sizes, e.g. [`Order::of_indices`] for a source of a mix).
    ///
    /// # Errors
    /// [`ReaderError::InvalidOption`] when the order was made for other shard sizes.
    pub fn iter_order(&self, order: Order) -> Result<SampleIter> {
        if !order.fits(&self.shard_sizes()) {
            return Err(ReaderError::InvalidOption {
                name: "order",
                what: format!(
                    "made for other shard sizes than those of {}",
                    self.dir().display()
                ),
            });
        }
        Ok(SampleIter::new(self.clone(), order))
    }
}
