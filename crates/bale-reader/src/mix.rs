//! Several datasets read as one epoch, in set proportions.
//!
//! A mix of `S` sources (datasets of `n_0 .. n_S` samples) with weights
//! `w_i` has an epoch of `E` samples, `E` given or `sum n_i` by default (as
//! MosaicML Streaming's epoch when its streams have proportions). Source
//! `i` gives `c_i = floor(E * p_i)` of them, `p_i = w_i / sum w`; the
//! `E - sum c_i` left over go one each to the sources with the largest
//! fractional parts `E * p_i - c_i` (the first source on ties). So the
//! counts are exact and the same on every machine: MDS's `proportion` is
//! `p_i`, its `repeat` is `c_i / n_i` and its `choose` is `c_i`.
//!
//! Which samples of a source an epoch takes:
//! - without replacement, the `t`-th draw of source `i` is sample
//!   `perm_i[t mod n_i]` (shuffled; `perm_i` a permutation of the source
//!   for the epoch) or `(epoch * c_i + t) mod n_i` (sequential, so that
//!   successive epochs walk through a source they take a part of): every
//!   sample of the source is taken `floor(c_i / n_i)` or `ceil(c_i / n_i)`
//!   times, as MDS's `repeat`;
//! - with replacement (shuffled only), each draw is an independent uniform
//!   sample of the source, as `WeightedRandomSampler(replacement=True)`.
//!
//! The epoch list is `E` pairs (source, index). Shuffled: the source of
//! each position is a seeded random permutation of the `c_i` copies of
//! each source; sequential: the sources take turns by smooth weighted round
//! robin, so that every prefix of the list holds each source within one
//! sample of its proportion. That list is cut among ranks and workers (and
//! resumed, [`crate::resume`]) as a dataset's epoch list is, so a rank's
//! share holds each source in proportion too.
//!
//! Memory: 12 bytes per sample of the epoch for the list, plus one
//! permutation of the largest source (8 bytes a sample) while it is made.

use bale_format::shuffle::{SplitMix64, derive_seed, permutation, shuffle};

use crate::dataset::Dataset;
use crate::error::{ReaderError, Result};
use crate::iter::SampleIter;
use crate::plan::{EpochPlan, Order, Partition};
use crate::resume::Place;
use crate::sample::Sample;

/// A part of the seeds of mixes, so that they differ from those of the
/// sources' own plans.
const MIX: u64 = 0x6d69_7800;

/// How a mix draws the samples of a source within an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sampling {
    /// Passes over the source: no sample is taken twice before every
    /// sample of the source is taken once.
    WithoutReplacement,
    /// Independent uniform draws (shuffled mixes only).
    WithReplacement,
}

/// The order of a mixed epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MixPlan {
    /// Sources in turns, each source's samples in order (from where the
    /// epochs before left off, for a source an epoch takes a part of).
    Sequential {
        /// The epoch.
        epoch: u64,
    },
    /// Sources and samples in a seeded random order.
    Shuffled {
        /// The run's seed.
        seed: u64,
        /// The epoch.
        epoch: u64,
    },
}

/// The proportions of a mix: how many samples of each source an epoch takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mix {
    sizes: Vec<u64>,
    counts: Vec<u64>,
    sampling: Sampling,
}

impl Mix {
    /// A mix of sources of `sizes` samples with `weights` (proportions of
    /// the epoch, normalised to sum to 1), of `samples` samples per epoch
    /// (default: the sources' total).
    ///
    /// # Errors
    /// [`ReaderError::InvalidOption`] for no source, a weight that is not
    /// a finite number >= 0, weights that sum to 0, or a source of no
    /// samples with a weight above 0.
    pub fn new(
        sizes: &[u64],
        weights: &[f64],
        samples: Option<u64>,
        sampling: Sampling,
    ) -> Result<Mix> {
        let bad = |what: String| {
            Err(ReaderError::InvalidOption {
                name: "weights",
                what,
            })
        };
        if sizes.is_empty() || sizes.len() != weights.len() {
            return bad(format!(
                "{} sources and {} weights: give one weight per source, at least one",
                sizes.len(),
                weights.len()
            ));
        }
        if sizes.len() > u32::MAX as usize {
            return bad("too many sources".into());
        }
        if let Some((i, w)) = weights
            .iter()
            .enumerate()
            .find(|(_, w)| !w.is_finite() || **w < 0.0)
        {
            return bad(format!(
                "the weight of source {i} is {w}: weights are numbers >= 0"
            ));
        }
        let sum: f64 = weights.iter().sum();
        if sum <= 0.0 {
            return bad("the weights sum to 0".into());
        }
        if let Some(i) = (0..sizes.len()).find(|&i| sizes[i] == 0 && weights[i] > 0.0) {
            return bad(format!(
                "source {i} has no samples but a weight of {}",
                weights[i]
            ));
        }
        let total = samples.unwrap_or_else(|| sizes.iter().sum());
        // Largest remainder, in exact integer arithmetic where f64 allows.
        let shares: Vec<f64> = weights.iter().map(|w| total as f64 * w / sum).collect();
        let mut counts: Vec<u64> = shares.iter().map(|s| s.floor() as u64).collect();
        let given: u64 = counts.iter().sum();
        let mut left = total.saturating_sub(given);
        let mut by_fraction: Vec<usize> = (0..sizes.len()).filter(|&i| weights[i] > 0.0).collect();
        by_fraction.sort_by(|&a, &b| {
            let (fa, fb) = (shares[a] - shares[a].floor(), shares[b] - shares[b].floor());
            fb.total_cmp(&fa).then(a.cmp(&b))
        });
        for &i in by_fraction.iter().cycle() {
            if left == 0 {
                break;
            }
            counts[i] += 1;
            left -= 1;
        }
        // Rounding of huge totals cannot give more than asked.
        while counts.iter().sum::<u64>() > total {
            if let Some(c) = counts.iter_mut().filter(|c| **c > 0).max() {
                *c -= 1;
            }
        }
        Ok(Mix {
            sizes: sizes.to_vec(),
            counts,
            sampling,
        })
    }

    /// Samples per epoch, `E`.
    pub fn len(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Whether an epoch yields nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Samples each source gives per epoch (`c_i`).
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Samples in each source.
    pub fn sizes(&self) -> &[u64] {
        &self.sizes
    }

    /// How sources are drawn.
    pub fn sampling(&self) -> Sampling {
        self.sampling
    }

    /// The epoch list of `plan`: which sample of which source each position holds.
    ///
    /// # Errors
    /// [`ReaderError::InvalidOption`] for sampling with replacement in a
    /// sequential plan.
    pub fn list(&self, plan: MixPlan) -> Result<MixList> {
        let e = self.len();
        // 4 bytes a position for its source and 8 for its index: an epoch
        // too long for memory is refused, not an abort.
        let too_long = || ReaderError::InvalidOption {
            name: "samples",
            what: format!(
                "an epoch of {e} samples needs {} bytes for its list (12 a sample), more than \
                 can be allocated: ask for fewer samples",
                u128::from(e) * 12
            ),
        };
        let len = usize::try_from(e).map_err(|_| too_long())?;
        let mut sources: Vec<u32> = Vec::new();
        let mut indices: Vec<u64> = Vec::new();
        sources.try_reserve_exact(len).map_err(|_| too_long())?;
        indices.try_reserve_exact(len).map_err(|_| too_long())?;
        match plan {
            MixPlan::Sequential { .. } => {
                if self.sampling == Sampling::WithReplacement {
                    return Err(ReaderError::InvalidOption {
                        name: "replacement",
                        what: "draws with replacement are random: shuffle the mix".into(),
                    });
                }
                // Smooth weighted round robin over the counts: each source
                // gets exactly its count over the epoch.
                let mut credit: Vec<i128> = vec![0; self.counts.len()];
                for _ in 0..e {
                    let mut best = 0usize;
                    for (i, c) in credit.iter_mut().enumerate() {
                        *c += i128::from(self.counts[i]);
                    }
                    for i in 1..credit.len() {
                        if credit[i] > credit[best] {
                            best = i;
                        }
                    }
                    credit[best] -= i128::from(e);
                    sources.push(best as u32);
                }
            }
            MixPlan::Shuffled { seed, epoch } => {
                for (i, &c) in self.counts.iter().enumerate() {
                    sources.extend(std::iter::repeat_n(i as u32, c as usize));
                }
                shuffle(&mut sources, derive_seed(seed, &[epoch, MIX]));
            }
        }
        indices.resize(sources.len(), 0);
        for (s, (&n, &c)) in self.sizes.iter().zip(&self.counts).enumerate() {
            if c == 0 {
                continue;
            }
            let draws = sources
                .iter()
                .zip(indices.iter_mut())
                .filter(|(x, _)| **x as usize == s)
                .map(|(_, slot)| slot);
            match (plan, self.sampling) {
                (MixPlan::Sequential { epoch }, _) => {
                    let first = (u128::from(epoch) * u128::from(c) % u128::from(n)) as u64;
                    for (t, slot) in draws.enumerate() {
                        *slot = (first + t as u64 % n) % n;
                    }
                }
                (MixPlan::Shuffled { seed, epoch }, Sampling::WithoutReplacement) => {
                    let perm = permutation(n, derive_seed(seed, &[epoch, MIX, s as u64]));
                    for (t, slot) in draws.enumerate() {
                        *slot = perm[t % perm.len()];
                    }
                }
                (MixPlan::Shuffled { seed, epoch }, Sampling::WithReplacement) => {
                    let mut rng = SplitMix64::new(derive_seed(seed, &[epoch, MIX, s as u64]));
                    for slot in draws {
                        *slot = rng.below(n);
                    }
                }
            }
        }
        Ok(MixList { sources, indices })
    }
}

/// One mixed epoch: the source and sample index of each position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MixList {
    sources: Vec<u32>,
    indices: Vec<u64>,
}

impl MixList {
    /// Positions in the epoch.
    pub fn len(&self) -> u64 {
        self.sources.len() as u64
    }

    /// Whether the epoch is empty.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// (source, index in the source) at position `p` (`p < len`).
    pub fn get(&self, p: u64) -> (usize, u64) {
        (self.sources[p as usize] as usize, self.indices[p as usize])
    }

    /// The positions partition `partition` reads at `place`, from its
    /// start on, in order: a [`crate::resume`]-aware cut of the list.
    ///
    /// # Errors
    /// An invalid partition or place.
    pub fn positions(&self, partition: Partition, place: &Place) -> Result<Vec<u64>> {
        let order = Order::resumed(EpochPlan::Sequential, partition, &[self.len()], place)?;
        Ok(order.iter_from(place.start)?.collect())
    }
}

/// The samples one partition reads from a mixed epoch, in order, each with
/// its source: one [`SampleIter`] per source (reading runs where the list
/// holds them, ahead on the prefetch threads asked for), taken in the
/// list's order.
#[derive(Debug)]
pub struct MixIter {
    iters: Vec<SampleIter>,
    /// The source of each item still to yield, in order.
    sources: Vec<u32>,
    next: usize,
    /// Items yielded before `sources[0]` (the place's start).
    start: u64,
    len: u64,
}

impl MixIter {
    /// The mixed epoch of `list` over `datasets` (the sources, in order)
    /// for `partition` at `place`, reading ahead as
    /// [`SampleIter::prefetch`]`(threads, max_samples, max_bytes)` per source.
    ///
    /// # Errors
    /// An invalid partition or place, or a list made for other sources.
    pub fn new(
        datasets: &[Dataset],
        list: &MixList,
        partition: Partition,
        place: &Place,
        prefetch: (usize, usize, u64),
    ) -> Result<Self> {
        let len = Order::resumed(EpochPlan::Sequential, partition, &[list.len()], place)?.len();
        let positions = list.positions(partition, place)?;
        let mut per_source: Vec<Vec<u64>> = vec![Vec::new(); datasets.len()];
        let mut sources = Vec::with_capacity(positions.len());
        for p in positions {
            let (s, i) = list.get(p);
            let Some(v) = per_source.get_mut(s) else {
                return Err(ReaderError::InvalidOption {
                    name: "datasets",
                    what: format!(
                        "the mix has a source {s} and {} datasets were given",
                        datasets.len()
                    ),
                });
            };
            v.push(i);
            sources.push(s as u32);
        }
        let (threads, max_samples, max_bytes) = prefetch;
        let mut iters = Vec::with_capacity(datasets.len());
        for (ds, indices) in datasets.iter().zip(per_source) {
            let order =
                Order::of_indices(indices, Partition::ALL, &ds.shard_sizes(), &Place::FRESH)?;
            let it = ds.iter_order(order)?;
            // Sources this partition never reads start no threads.
            let threads = if it.is_empty() { 0 } else { threads };
            iters.push(it.prefetch(threads, max_samples, max_bytes));
        }
        Ok(MixIter {
            iters,
            sources,
            next: 0,
            start: place.start,
            len,
        })
    }

    /// Items this partition yields in the epoch (from its start).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the partition yields nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Items yielded so far, counted from the start of the epoch.
    pub fn position(&self) -> u64 {
        self.start + self.next as u64
    }
}

impl Iterator for MixIter {
    type Item = (usize, Result<Sample>);

    fn next(&mut self) -> Option<(usize, Result<Sample>)> {
        let s = *self.sources.get(self.next)? as usize;
        self.next += 1;
        let item = self.iters[s].next().unwrap_or_else(|| {
            Err(ReaderError::Prefetch {
                index: 0,
                what: format!("source {s} ended before the mix"),
            })
        });
        Some((s, item))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.sources.len() - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for MixIter {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_the_largest_remainder() {
        let m = Mix::new(
            &[10, 10, 10],
            &[1.0, 1.0, 1.0],
            None,
            Sampling::WithoutReplacement,
        )
        .unwrap();
        assert_eq!(m.counts(), &[10, 10, 10]);
        let m = Mix::new(
            &[100, 5],
            &[0.7, 0.3],
            Some(11),
            Sampling::WithoutReplacement,
        )
        .unwrap();
        // 7.7 and 3.3: the one left over goes to the first.
        assert_eq!(m.counts(), &[8, 3]);
        assert_eq!(m.len(), 11);
    }

    #[test]
    fn an_epoch_too_long_for_memory_is_refused_not_an_abort() {
        let mix = Mix::new(
            &[10, 10],
            &[1.0, 1.0],
            Some(1 << 50),
            Sampling::WithReplacement,
        )
        .unwrap();
        let err = mix
            .list(MixPlan::Shuffled { seed: 0, epoch: 0 })
            .unwrap_err();
        assert!(err.to_string().contains("ask for fewer samples"), "{err}");
    }

    #[test]
    fn bad_weights_are_refused() {
        for (sizes, weights) in [
            (vec![1u64], vec![-1.0]),
            (vec![1], vec![f64::NAN]),
            (vec![1, 1], vec![0.0, 0.0]),
            (vec![0, 1], vec![1.0, 1.0]),
            (vec![1], vec![1.0, 2.0]),
            (vec![], vec![]),
        ] {
            assert!(
                Mix::new(&sizes, &weights, None, Sampling::WithoutReplacement).is_err(),
                "{sizes:?} {weights:?}"
            );
        }
    }

    #[test]
    fn sequential_turns_keep_every_prefix_in_proportion() {
        let m = Mix::new(
            &[30, 20],
            &[0.7, 0.3],
            Some(100),
            Sampling::WithoutReplacement,
        )
        .unwrap();
        let list = m.list(MixPlan::Sequential { epoch: 0 }).unwrap();
        let mut a = 0u64;
        for p in 0..list.len() {
            a += u64::from(list.get(p).0 == 0);
            let want = (p + 1) as f64 * 0.7;
            assert!((a as f64 - want).abs() <= 1.0, "{a} of {} at {p}", p + 1);
        }
        assert_eq!(a, 70);
        // Source 0 (30 samples, 70 draws): every sample 2 or 3 times, in order.
        let draws: Vec<u64> = (0..list.len())
            .map(|p| list.get(p))
            .filter(|x| x.0 == 0)
            .map(|x| x.1)
            .collect();
        assert_eq!(&draws[..32], &(0..30).chain(0..2).collect::<Vec<_>>()[..]);
    }

    #[test]
    fn shuffled_without_replacement_takes_a_source_once_before_twice() {
        let m = Mix::new(
            &[50, 8],
            &[0.5, 0.5],
            Some(40),
            Sampling::WithoutReplacement,
        )
        .unwrap();
        let list = m.list(MixPlan::Shuffled { seed: 3, epoch: 1 }).unwrap();
        let mut a: Vec<u64> = (0..40)
            .map(|p| list.get(p))
            .filter(|x| x.0 == 0)
            .map(|x| x.1)
            .collect();
        a.sort_unstable();
        a.dedup();
        assert_eq!(a.len(), 20, "20 distinct of the 50");
        let mut b = vec![0u32; 8];
        (0..40)
            .map(|p| list.get(p))
            .filter(|x| x.0 == 1)
            .for_each(|x| b[x.1 as usize] += 1);
        // 20 draws of 8: every sample 2 or 3 times.
        assert!(b.iter().all(|&c| c == 2 || c == 3), "{b:?}");
        let other = m.list(MixPlan::Shuffled { seed: 3, epoch: 2 }).unwrap();
        assert_ne!(list, other, "each epoch its own order");
    }
}
