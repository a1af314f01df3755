//! Epoch plans and partitions: which global sample indices a loader process
//! yields in one epoch, and in what order.
//!
//! Everything here is arithmetic on sample counts; no byte is read. The same
//! [`EpochPlan`], [`Partition`] and shard sizes give the same [`Order`] on every
//! machine (the random draws use [`bale_format::shuffle`], whose algorithm is
//! part of the format).
//!
//! # How an epoch is built
//!
//! 1. **The epoch list** `L` holds every sample once:
//!    - [`EpochPlan::Sequential`]: `0, 1, ..., N-1` (shard by shard);
//!    - [`EpochPlan::Shuffled`]: `permutation(N, derive_seed(seed, [epoch]))`;
//!    - [`EpochPlan::ShardShuffled`]: the shards in the order
//!      `permutation(S, derive_seed(seed, [epoch]))`, each shard's samples in
//!      shard order.
//! 2. **Ranks** take contiguous, balanced blocks of `L`: rank `r` of `W` gets
//!    positions `[r*T/W, (r+1)*T/W)`, where `T = N`. Blocks differ in length by
//!    at most one. With [`Partition::even`], `T = ceil(N/W)*W` and position `p`
//!    holds `L[p mod N]`: the list is padded by **repeating its first
//!    `T - N` samples** (fewer than `W`; as PyTorch's `DistributedSampler` with
//!    `drop_last=False`), so every rank yields exactly `ceil(N/W)` samples and
//!    nothing is dropped.
//! 3. **Workers** split their rank's block the same way: worker `w` of `K` gets
//!    the `w`-th of `K` contiguous balanced sub-blocks (lengths differ by at most
//!    one; `even` does not apply between workers of one rank, whose streams the
//!    loader merges).
//! 4. **Mixing** ([`EpochPlan::ShardShuffled`] only): the partition reads its
//!    block in order and yields through a bounded reservoir of `buffer`
//!    samples: fill the reservoir, yield a uniformly drawn slot (filled again
//!    from the block), and drain it randomly at the end. The draws come from
//!    `SplitMix64(derive_seed(seed, [epoch, rank, world_size, worker, num_workers]))`.
//!
//! Contiguous blocks are how partitioning stays "by shard" for sequential and
//! shard-shuffled plans: a partition reads whole shards, except at most one
//! partial shard at each end of its block that it shares with a neighbour, so
//! its reads stay large and sequential, and the counts stay balanced even when
//! there are fewer shards than `world_size * num_workers` (the blocks then fall
//! inside shards, which is sample-level partitioning in contiguous runs).
//!
//! **Resume**: [`Order::iter_from`]`(k)` yields exactly what [`Order::iter`]
//! yields after skipping `k` items; for the shard-shuffled reservoir it replays
//! the first `k` draws on indices only (no data is read). A checkpoint taken
//! at one world size and resumed at another cuts what the epoch had left
//! instead of the whole list ([`crate::resume`], [`Order::resumed`]).

use std::sync::Arc;

use bale_format::shuffle::{derive_seed, permutation};

use crate::error::{ReaderError, Result};
use crate::reservoir::Reservoir;
use crate::resume::{Cut, Mixing, Place, Rest};

/// How one epoch orders the samples. See the [module docs](self) for the exact algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EpochPlan {
    /// Shard by shard, each shard in order: the plan for large sequential reads.
    Sequential,
    /// A full random permutation of the dataset, for random-access reading
    /// (one positioned read per sample).
    Shuffled {
        /// The run's seed.
        seed: u64,
        /// The epoch number: each epoch has its own permutation.
        epoch: u64,
    },
    /// Shards in random order, read sequentially, samples mixed in a bounded
    /// buffer: the plan for streaming from slow disks.
    ShardShuffled {
        /// The run's seed.
        seed: u64,
        /// The epoch number.
        epoch: u64,
        /// Reservoir size in samples (0 behaves as 1: no mixing). Each
        /// partition holds up to this many samples in memory.
        buffer: usize,
    },
}

impl EpochPlan {
    /// The reservoir of a shard-shuffled plan, whose draws a resume
    /// replays; `None` for the other plans.
    pub fn mixing(self) -> Option<Mixing> {
        match self {
            EpochPlan::ShardShuffled {
                seed,
                epoch,
                buffer,
            } => Some(Mixing {
                buffer,
                seed,
                epoch,
            }),
            _ => None,
        }
    }

    /// [`EpochPlan::Sequential`].
    pub fn sequential() -> Self {
        EpochPlan::Sequential
    }

    /// [`EpochPlan::Shuffled`] with this seed and epoch.
    pub fn shuffled(seed: u64, epoch: u64) -> Self {
        EpochPlan::Shuffled { seed, epoch }
    }

    /// [`EpochPlan::ShardShuffled`] with this seed, epoch and buffer size.
    pub fn shard_shuffled(seed: u64, epoch: u64, buffer: usize) -> Self {
        EpochPlan::ShardShuffled {
            seed,
            epoch,
            buffer,
        }
    }

    /// Whether the plan reads shards sequentially (all but [`EpochPlan::Shuffled`]).
    pub fn is_streaming(&self) -> bool {
        !matches!(self, EpochPlan::Shuffled { .. })
    }
}

/// Which share of each epoch a process (a rank, and one of its loader workers) yields.
///
/// Ranks and workers compose: the rank's share is split again among its
/// workers. The default is the whole dataset (`rank 0 of 1, worker 0 of 1`).
/// See the [module docs](self) for how shares are cut and what `even` repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Partition {
    /// This process's rank, `0..world_size`.
    pub rank: u64,
    /// Number of ranks (distributed processes).
    pub world_size: u64,
    /// This loader worker, `0..num_workers`.
    pub worker: u64,
    /// Number of loader workers per rank.
    pub num_workers: u64,
    /// Every rank yields exactly `ceil(N / world_size)` samples, the first
    /// `ceil(N / world_size) * world_size - N` samples of the epoch list being
    /// yielded twice (so distributed training never waits at the end of an
    /// epoch for a rank with one sample more).
    pub even: bool,
}

impl Default for Partition {
    fn default() -> Self {
        Self::ALL
    }
}

impl Partition {
    /// The whole dataset: rank 0 of 1, worker 0 of 1, not even.
    pub const ALL: Partition = Partition {
        rank: 0,
        world_size: 1,
        worker: 0,
        num_workers: 1,
        even: false,
    };

    /// Rank `rank` of `world_size`, one worker.
    pub fn new(rank: u64, world_size: u64) -> Self {
        Partition {
            rank,
            world_size,
            ..Self::ALL
        }
    }

    /// The same partition, split among `num_workers` loader workers, as worker `worker`.
    pub fn with_workers(self, worker: u64, num_workers: u64) -> Self {
        Partition {
            worker,
            num_workers,
            ..self
        }
    }

    /// The same partition with [`Partition::even`] set.
    pub fn with_even(self, even: bool) -> Self {
        Partition { even, ..self }
    }

    /// Checks `rank < world_size` and `worker < num_workers`.
    ///
    /// # Errors
    /// [`ReaderError::InvalidPartition`] saying what is wrong.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(ReaderError::InvalidPartition { what });
        if self.world_size == 0 {
            return bad("world_size is 0".into());
        }
        if self.rank >= self.world_size {
            return bad(format!(
                "rank {} is not below world_size {}",
                self.rank, self.world_size
            ));
        }
        if self.num_workers == 0 {
            return bad("num_workers is 0".into());
        }
        if self.worker >= self.num_workers {
            return bad(format!(
                "worker {} is not below num_workers {}",
                self.worker, self.num_workers
            ));
        }
        Ok(())
    }

    /// The positions `[start, end)` of the (padded) epoch list this partition
    /// gets, for a dataset of `n` samples. Assumes a valid partition.
    pub(crate) fn range(&self, n: u64) -> (u64, u64) {
        self.cut().range(n, self.rank, self.worker)
    }

    /// The cut this partition is one part of.
    pub fn cut(&self) -> Cut {
        Cut::new(self.world_size, self.num_workers, self.even)
    }
}

/// The epoch list `L`: position -> global sample index.
#[derive(Debug)]
enum Base {
    /// `L[p] = p`.
    Identity,
    /// Shards in a given order: `starts[k]` is the position of the first sample
    /// of the `k`-th shard in the order (`starts` has one more entry, `N`), and
    /// `first[k]` its global index.
    Shards { starts: Vec<u64>, first: Vec<u64> },
    /// An explicit permutation.
    Perm(Vec<u64>),
    /// An explicit list of global indices (a source's share of a mix),
    /// runs of consecutive indices read as runs.
    List(Vec<u64>),
}

#[derive(Debug)]
struct OrderInner {
    plan: EpochPlan,
    partition: Partition,
    base: Base,
    /// Global index of each shard's first sample, and `N` last.
    offsets: Vec<u64>,
    n: u64,
    /// Items of the list the partition cuts (its positions wrap modulo
    /// this): the epoch list's, or the rest's of a resumed stage.
    cycle: u64,
    /// A resumed stage's positions of the epoch list, in order.
    rest: Option<Arc<Rest>>,
    start: u64,
    end: u64,
    /// Reservoir size and seed (shard-shuffled plans).
    mix: Option<(usize, u64)>,
}

/// The longest run an explicit list is scanned for at once: large enough for
/// one large read, small enough that scanning again for each job stays cheap.
const LIST_RUN: u64 = 4096;

/// The shard offsets of `shard_sizes` (global index of each shard's first
/// sample), and the total last.
fn offsets(shard_sizes: &[u64]) -> Result<Vec<u64>> {
    let mut offsets = Vec::with_capacity(shard_sizes.len() + 1);
    let mut n = 0u64;
    for &s in shard_sizes {
        offsets.push(n);
        n = n.checked_add(s).ok_or_else(|| ReaderError::InvalidOption {
            name: "shard_sizes",
            what: "the total number of samples overflows u64".into(),
        })?;
    }
    offsets.push(n);
    Ok(offsets)
}

/// The sequence of global sample indices one [`Partition`] yields in one
/// epoch of an [`EpochPlan`]: the plan without the data.
///
/// Cheap to clone (shared). A PyTorch `Sampler` can be built on it directly.
///
/// ```
/// use bale_reader::{EpochPlan, Order, Partition};
/// // Two shards of 3 and 2 samples, rank 1 of 2.
/// let order = Order::new(EpochPlan::Sequential, Partition::new(1, 2), &[3, 2]).unwrap();
/// assert_eq!(order.iter().collect::<Vec<_>>(), vec![2, 3, 4]);
/// ```
#[derive(Debug, Clone)]
pub struct Order {
    inner: Arc<OrderInner>,
}

/// Where the reads of a partition resume: first `singles` (samples to fetch
/// one by one, in this order), then positions `pos..end` of the epoch list.
#[derive(Debug)]
pub(crate) struct ReadStart {
    pub singles: Vec<u64>,
    pub pos: u64,
    pub reservoir: Option<Reservoir<()>>,
}

impl Order {
    /// The order for a dataset whose shards hold `shard_sizes` samples each.
    ///
    /// # Errors
    /// An invalid partition.
    pub fn new(plan: EpochPlan, partition: Partition, shard_sizes: &[u64]) -> Result<Self> {
        Self::resumed(plan, partition, shard_sizes, &Place::FRESH)
    }

    /// The order of `partition` in a resumed epoch: the stage and rest that
    /// [`crate::resume::Resume::place`] gave (its `start` is the caller's,
    /// for [`Order::iter_from`]).
    ///
    /// # Errors
    /// An invalid partition, or a rest with positions past the epoch list.
    pub fn resumed(
        plan: EpochPlan,
        partition: Partition,
        shard_sizes: &[u64],
        place: &Place,
    ) -> Result<Self> {
        partition.validate()?;
        let offsets = offsets(shard_sizes)?;
        let n = *offsets.last().unwrap_or(&0);
        let base = match plan {
            EpochPlan::Sequential => Base::Identity,
            EpochPlan::Shuffled { seed, epoch } => {
                Base::Perm(permutation(n, derive_seed(seed, &[epoch])))
            }
            EpochPlan::ShardShuffled { seed, epoch, .. } => {
                let order = permutation(shard_sizes.len() as u64, derive_seed(seed, &[epoch]));
                let mut starts = Vec::with_capacity(order.len() + 1);
                let mut first = Vec::with_capacity(order.len());
                let mut pos = 0u64;
                for &s in &order {
                    starts.push(pos);
                    first.push(offsets[s as usize]);
                    pos += shard_sizes[s as usize];
                }
                starts.push(pos);
                Base::Shards { starts, first }
            }
        };
        Self::build(plan, partition, offsets, base, n, plan.mixing(), place)
    }

    /// The order that yields `indices` (global indices of a dataset whose
    /// shards hold `shard_sizes` samples), in order, cut by `partition`
    /// (and resumed at `place`): a source's share of a mixed epoch. Runs of
    /// consecutive indices within a shard are read with one read.
    ///
    /// # Errors
    /// An invalid partition, or an index past the dataset.
    pub fn of_indices(
        indices: Vec<u64>,
        partition: Partition,
        shard_sizes: &[u64],
        place: &Place,
    ) -> Result<Self> {
        partition.validate()?;
        let offsets = offsets(shard_sizes)?;
        let n = *offsets.last().unwrap_or(&0);
        if let Some(&bad) = indices.iter().find(|&&i| i >= n) {
            return Err(ReaderError::InvalidOption {
                name: "indices",
                what: format!("index {bad} is past the dataset's {n} samples"),
            });
        }
        let len = indices.len() as u64;
        Self::build(
            EpochPlan::Sequential,
            partition,
            offsets,
            Base::List(indices),
            len,
            None,
            place,
        )
    }

    fn build(
        plan: EpochPlan,
        partition: Partition,
        offsets: Vec<u64>,
        base: Base,
        list_len: u64,
        mixing: Option<Mixing>,
        place: &Place,
    ) -> Result<Self> {
        let cycle = match &place.rest {
            Some(r) => {
                if let Some(bad) = r.ranges().find(|x| x.end > list_len) {
                    return Err(ReaderError::InvalidResume {
                        what: format!(
                            "positions {bad:?} of the rest are past the epoch's {list_len}"
                        ),
                    });
                }
                r.len()
            }
            None => list_len,
        };
        let (start, end) = partition.range(cycle);
        let p = partition;
        let mix = mixing.map(|m| {
            let seed = m.seed_of(p.cut(), p.rank, p.worker, place.stage);
            (m.buffer.max(1), seed)
        });
        let n = *offsets.last().unwrap_or(&0);
        Ok(Order {
            inner: Arc::new(OrderInner {
                plan,
                partition,
                base,
                offsets,
                n,
                cycle,
                rest: place.rest.clone(),
                start,
                end,
                mix,
            }),
        })
    }

    /// The plan.
    pub fn plan(&self) -> EpochPlan {
        self.inner.plan
    }

    /// The partition.
    pub fn partition(&self) -> Partition {
        self.inner.partition
    }

    /// Number of samples this partition yields in the epoch.
    pub fn len(&self) -> u64 {
        self.inner.end - self.inner.start
    }

    /// Whether the partition yields nothing this epoch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of samples in the dataset.
    pub fn dataset_len(&self) -> u64 {
        self.inner.n
    }

    /// The global indices, in the order they are yielded.
    pub fn iter(&self) -> OrderIter {
        OrderIter {
            order: self.clone(),
            pos: self.inner.start,
            mix: self.inner.mix.map(|(cap, seed)| Reservoir::new(cap, seed)),
            left: self.len(),
        }
    }

    /// The global indices from the `k`-th on: exactly what [`Order::iter`]
    /// yields after its first `k` items.
    ///
    /// # Errors
    /// [`ReaderError::StartPastEnd`] when `k > self.len()`.
    pub fn iter_from(&self, k: u64) -> Result<OrderIter> {
        let start = self.read_start(k)?;
        let mut it = OrderIter {
            order: self.clone(),
            pos: start.pos,
            mix: None,
            left: self.len() - k,
        };
        if let Some(res) = start.reservoir {
            // The buffer grows as it fills: a `buffer` far past the
            // dataset's size asks for no memory it will not use.
            let mut r = Reservoir {
                buf: Vec::with_capacity(res.cap.min(1 << 16)),
                cap: res.cap,
                rng: res.rng,
            };
            // The replayed buffer, in slot order, then reads from `pos`.
            r.buf.extend(start.singles);
            it.mix = Some(r);
        }
        Ok(it)
    }

    /// The epoch list's position of item `p` of the padded list the
    /// partition cuts, and how many items from `p` on hold consecutive
    /// positions (within the list, before it wraps, before the end).
    fn list_pos(&self, p: u64) -> (u64, u64) {
        let inner = &*self.inner;
        let cycle = inner.cycle.max(1);
        let q = p % cycle;
        let limit = (cycle - q).min(inner.end.saturating_sub(p)).max(1);
        match &inner.rest {
            Some(r) => (r.at(q), limit.min(r.run(q))),
            None => (q, limit),
        }
    }

    /// The global index at position `p` of the padded epoch list (`p < end`).
    pub(crate) fn at(&self, p: u64) -> u64 {
        let inner = &*self.inner;
        let (lp, _) = self.list_pos(p);
        match &inner.base {
            Base::Identity => lp,
            Base::Shards { starts, first } => {
                let k = starts.partition_point(|&s| s <= lp) - 1;
                first[k] + (lp - starts[k])
            }
            Base::Perm(v) | Base::List(v) => v[lp as usize],
        }
    }

    /// How many positions from `p` on (`p < end`) map to consecutive global
    /// indices of one shard: the run a single large read can serve.
    #[cfg(test)]
    pub(crate) fn run_len(&self, p: u64) -> u64 {
        self.run_within(p, u64::MAX)
    }

    /// [`Order::run_len`], at most `max` (at least 1): an explicit list is
    /// scanned no further than that.
    pub(crate) fn run_within(&self, p: u64, max: u64) -> u64 {
        let inner = &*self.inner;
        let (lp, limit) = self.list_pos(p);
        let limit = limit.min(max.max(1));
        let run = match &inner.base {
            Base::Identity => {
                let s = inner.offsets.partition_point(|&o| o <= lp);
                inner.offsets[s] - lp
            }
            Base::Shards { starts, .. } => {
                let k = starts.partition_point(|&s| s <= lp);
                starts[k] - lp
            }
            Base::Perm(_) => 1,
            Base::List(v) => {
                let (i, g) = (lp as usize, v[lp as usize]);
                let shard_end = inner.offsets[inner.offsets.partition_point(|&o| o <= g)];
                // Scanned afresh for each job: at most LIST_RUN ahead.
                let most = limit.min(shard_end - g).min(LIST_RUN) as usize;
                let mut c = 1;
                while c < most && v.get(i + c) == Some(&(g + c as u64)) {
                    c += 1;
                }
                c as u64
            }
        };
        run.min(limit)
    }

    /// Whether the order was made for shards of these sizes.
    pub(crate) fn fits(&self, shard_sizes: &[u64]) -> bool {
        let o = &self.inner.offsets;
        o.len() == shard_sizes.len() + 1
            && o.windows(2)
                .zip(shard_sizes)
                .all(|(w, &s)| w[1] - w[0] == s)
    }

    /// The end position (exclusive) of this partition in the padded epoch list.
    pub(crate) fn end_pos(&self) -> u64 {
        self.inner.end
    }

    /// Where reading resumes so that the `k`-th yielded item is the next.
    pub(crate) fn read_start(&self, k: u64) -> Result<ReadStart> {
        if k > self.len() {
            return Err(ReaderError::StartPastEnd {
                offset: k,
                len: self.len(),
            });
        }
        let inner = &*self.inner;
        match inner.mix {
            None => Ok(ReadStart {
                singles: Vec::new(),
                pos: inner.start + k,
                reservoir: None,
            }),
            Some((cap, seed)) => {
                let mut r = Reservoir::<u64>::new(cap, seed);
                let mut pos = inner.start;
                for _ in 0..k {
                    r.step(|| {
                        (pos < inner.end).then(|| {
                            pos += 1;
                            self.at(pos - 1)
                        })
                    });
                }
                Ok(ReadStart {
                    singles: std::mem::take(&mut r.buf),
                    pos,
                    reservoir: Some(Reservoir {
                        buf: Vec::new(),
                        cap: r.cap,
                        rng: r.rng,
                    }),
                })
            }
        }
    }
}

/// The global indices of an [`Order`], in yield order.
#[derive(Debug)]
pub struct OrderIter {
    order: Order,
    pos: u64,
    mix: Option<Reservoir<u64>>,
    left: u64,
}

impl Iterator for OrderIter {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let end = self.order.end_pos();
        match &mut self.mix {
            None => {
                let p = self.pos;
                self.pos += 1;
                Some(self.order.at(p))
            }
            Some(r) => {
                let (order, pos) = (&self.order, &mut self.pos);
                r.step(|| {
                    (*pos < end).then(|| {
                        *pos += 1;
                        order.at(*pos - 1)
                    })
                })
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.left).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

impl ExactSizeIterator for OrderIter {}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(plan: EpochPlan, part: Partition, sizes: &[u64]) -> Vec<u64> {
        Order::new(plan, part, sizes).unwrap().iter().collect()
    }

    #[test]
    fn sequential_blocks_are_contiguous_and_balanced() {
        let sizes = [4, 0, 3, 3];
        assert_eq!(
            all(EpochPlan::Sequential, Partition::ALL, &sizes),
            (0..10).collect::<Vec<_>>()
        );
        assert_eq!(
            all(EpochPlan::Sequential, Partition::new(0, 3), &sizes),
            vec![0, 1, 2]
        );
        assert_eq!(
            all(EpochPlan::Sequential, Partition::new(1, 3), &sizes),
            vec![3, 4, 5]
        );
        assert_eq!(
            all(EpochPlan::Sequential, Partition::new(2, 3), &sizes),
            vec![6, 7, 8, 9]
        );
        // Worker 1 of 2 within rank 2 of 3.
        let p = Partition::new(2, 3).with_workers(1, 2);
        assert_eq!(all(EpochPlan::Sequential, p, &sizes), vec![8, 9]);
    }

    #[test]
    fn even_repeats_the_first_samples_of_the_epoch_list() {
        let sizes = [5];
        let lists: Vec<_> = (0..3)
            .map(|r| {
                all(
                    EpochPlan::Sequential,
                    Partition::new(r, 3).with_even(true),
                    &sizes,
                )
            })
            .collect();
        assert_eq!(lists, vec![vec![0, 1], vec![2, 3], vec![4, 0]]);
        // More ranks than samples: the list cycles.
        let lists: Vec<_> = (0..4)
            .map(|r| {
                all(
                    EpochPlan::Sequential,
                    Partition::new(r, 4).with_even(true),
                    &[2],
                )
            })
            .collect();
        assert_eq!(lists, vec![vec![0], vec![1], vec![0], vec![1]]);
    }

    #[test]
    fn runs_stop_at_shard_boundaries_and_partition_ends() {
        let o = Order::new(EpochPlan::Sequential, Partition::new(0, 2), &[4, 0, 3, 3]).unwrap();
        assert_eq!((o.run_len(0), o.run_len(3), o.run_len(4)), (4, 1, 1));
        let o = Order::new(EpochPlan::Sequential, Partition::ALL, &[4, 0, 3, 3]).unwrap();
        assert_eq!((o.run_len(4), o.run_len(5), o.run_len(7)), (3, 2, 3));
        let o = Order::new(EpochPlan::shuffled(1, 0), Partition::ALL, &[4, 6]).unwrap();
        assert_eq!(o.run_len(0), 1);
    }

    #[test]
    fn shard_shuffled_reads_whole_shards_in_a_seeded_order() {
        let sizes = [3, 3, 3, 3];
        let o = Order::new(EpochPlan::shard_shuffled(7, 0, 1), Partition::ALL, &sizes).unwrap();
        let got: Vec<u64> = o.iter().collect();
        // buffer 1: no mixing, so the list is whole shards in the seeded order.
        let shard_order = permutation(4, derive_seed(7, &[0]));
        let want: Vec<u64> = shard_order.iter().flat_map(|&s| s * 3..s * 3 + 3).collect();
        assert_eq!(got, want);
        let o2 = Order::new(EpochPlan::shard_shuffled(7, 1, 1), Partition::ALL, &sizes).unwrap();
        assert_ne!(
            got,
            o2.iter().collect::<Vec<_>>(),
            "another epoch, another order"
        );
    }

    #[test]
    fn reservoir_mixes_within_its_bound() {
        let sizes = [100];
        let got = all(EpochPlan::shard_shuffled(3, 0, 10), Partition::ALL, &sizes);
        assert_ne!(got, (0..100).collect::<Vec<_>>());
        // The k-th yielded sample was read among the first k + 10.
        for (k, &i) in got.iter().enumerate() {
            assert!(i < k as u64 + 10, "sample {i} yielded at {k}");
        }
        let mut sorted = got.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn invalid_partitions_are_refused() {
        for p in [
            Partition::new(2, 2),
            Partition::new(0, 0),
            Partition::ALL.with_workers(1, 1),
            Partition::ALL.with_workers(0, 0),
        ] {
            let err = Order::new(EpochPlan::Sequential, p, &[1]).unwrap_err();
            assert!(matches!(err, ReaderError::InvalidPartition { .. }), "{err}");
        }
    }

    #[test]
    fn empty_dataset_yields_nothing() {
        for plan in [
            EpochPlan::Sequential,
            EpochPlan::shuffled(1, 1),
            EpochPlan::shard_shuffled(1, 1, 4),
        ] {
            for even in [false, true] {
                let o = Order::new(plan, Partition::new(1, 3).with_even(even), &[0, 0]).unwrap();
                assert_eq!(o.iter().count(), 0);
                assert_eq!(o.len(), 0);
            }
        }
    }
}
