//! Resuming an epoch from a checkpoint, at the same or at another world
//! size: what a checkpoint says was consumed, and what remains, cut again.
//!
//! Everything here is arithmetic on positions of an epoch list (see
//! [`crate::plan`]): no sample is read, no index list the size of the
//! dataset is kept. A checkpoint holds a few counts per cut, whatever the
//! dataset's size.
//!
//! # The rule
//!
//! An epoch is read in *stages*. The first stage cuts the epoch list among
//! `world_size` ranks and `num_workers` workers per rank ([`Cut`], with the
//! blocks of [`crate::plan`]). A checkpoint records, for the rank that saved
//! it, how many items each of its workers has yielded ([`Progress`]).
//!
//! **Ranks step in lockstep**, as data-parallel training does (every rank
//! takes one batch per step): at a checkpoint, worker `w` of every rank has
//! yielded as many items as worker `w` of the saving rank, or its whole
//! share when that is shorter. With [`Cut::even`] every rank's workers have
//! the same shares, so this is exact at every step. Without it, shares of
//! ranks differ by at most one item; a checkpoint taken after a worker's
//! last, short batch may count one item of a longer share as not yet
//! yielded: it is yielded again after the resume, never lost.
//!
//! Resuming with the same cut continues each partition where it stopped
//! (the same order as an uninterrupted run). Resuming with another cut
//! (another world size or worker count) ends the stage: what every
//! partition had left is the [`Rest`], in partition order (rank-major,
//! then worker), each partition's part in the order it would have read it.
//! The next stage cuts the rest among the new ranks and workers exactly as
//! the first stage cut the whole list, `even` padding included (the first
//! `ceil(R / W) * W - R` items of the rest, fewer than `W`, are yielded
//! twice), so every item of the epoch is yielded exactly once over the
//! stages (`even` aside) and, with `even`, every rank of a stage yields the
//! same count.
//!
//! For a plan that mixes through a reservoir (shard-shuffled), a
//! partition's rest is first what its reservoir held (in slot order), then
//! the part of its block it had not read; the reservoir's draws are
//! replayed on positions only. A later stage mixes with seeds of its own
//! (the stage number joins the seed's parts).
//!
//! Checking that a checkpoint belongs to this dataset, plan and seed is the
//! caller's part; [`fingerprint`] names a dataset's content.

use std::ops::Range;
use std::sync::Arc;

use bale_format::Manifest;
use bale_format::shuffle::derive_seed;

use crate::error::{ReaderError, Result};
use crate::reservoir::Reservoir;

/// How an epoch, or what remains of it, is split among ranks and workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cut {
    /// Number of ranks.
    pub world_size: u64,
    /// Loader workers per rank.
    pub num_workers: u64,
    /// Every rank yields `ceil(R / world_size)` items of a list of `R`, the
    /// first items of the list repeating (see [`crate::Partition::even`]).
    pub even: bool,
}

impl Cut {
    /// `world_size` ranks of `num_workers` workers each.
    pub fn new(world_size: u64, num_workers: u64, even: bool) -> Self {
        Cut {
            world_size,
            num_workers,
            even,
        }
    }

    /// Checks that both counts are at least 1.
    ///
    /// # Errors
    /// [`ReaderError::InvalidPartition`].
    pub fn validate(&self) -> Result<()> {
        if self.world_size == 0 || self.num_workers == 0 {
            return Err(ReaderError::InvalidPartition {
                what: format!(
                    "world_size {} and num_workers {} must both be at least 1",
                    self.world_size, self.num_workers
                ),
            });
        }
        Ok(())
    }

    /// The positions `[start, end)` of the padded list that partition
    /// (`rank`, `worker`) gets from a list of `total` items; position `p`
    /// holds item `p mod total`. Assumes a valid cut and partition.
    pub fn range(&self, total: u64, rank: u64, worker: u64) -> (u64, u64) {
        let (n, w, k) = (
            u128::from(total),
            u128::from(self.world_size),
            u128::from(self.num_workers),
        );
        let (r, wk) = (u128::from(rank), u128::from(worker));
        let padded = if self.even { n.div_ceil(w) * w } else { n };
        let (a, b) = (padded * r / w, padded * (r + 1) / w);
        let m = b - a;
        let (s, e) = (a + m * wk / k, a + m * (wk + 1) / k);
        // s <= e <= padded < n + w fits in u64 unless n is absurd; saturate.
        (
            u64::try_from(s).unwrap_or(u64::MAX),
            u64::try_from(e).unwrap_or(u64::MAX),
        )
    }

    /// Items partition (`rank`, `worker`) yields from a list of `total`.
    pub fn share(&self, total: u64, rank: u64, worker: u64) -> u64 {
        let (s, e) = self.range(total, rank, worker);
        e - s
    }
}

/// What one stage of an epoch had consumed when a checkpoint was taken:
/// its cut, the rank that saved the checkpoint, and how many items each of
/// that rank's workers had yielded (`None` where the saving process did not
/// know: a loader worker knows only its own count).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Progress {
    /// The stage's cut.
    pub cut: Cut,
    /// The saving rank.
    pub rank: u64,
    /// Items yielded by each worker of `rank`, indexed by worker.
    pub consumed: Vec<Option<u64>>,
}

impl Progress {
    /// Checks the counts against the cut and a stage list of `total` items.
    fn validate(&self, total: u64, stage: usize) -> Result<()> {
        self.cut.validate()?;
        let bad = |what: String| Err(ReaderError::InvalidResume { what });
        if self.rank >= self.cut.world_size {
            return bad(format!(
                "stage {stage}: rank {} is not below world_size {}",
                self.rank, self.cut.world_size
            ));
        }
        if self.consumed.len() as u64 != self.cut.num_workers {
            return bad(format!(
                "stage {stage}: {} worker counts for num_workers {}",
                self.consumed.len(),
                self.cut.num_workers
            ));
        }
        for (w, k) in self.consumed.iter().enumerate() {
            let share = self.cut.share(total, self.rank, w as u64);
            if let Some(k) = *k
                && k > share
            {
                return bad(format!(
                    "stage {stage}: worker {w} of rank {} yielded {k} items of a share of {share}",
                    self.rank
                ));
            }
        }
        Ok(())
    }

    /// Items partition (`rank`, `worker`) had yielded, by the lockstep rule.
    fn of(&self, total: u64, rank: u64, worker: u64) -> Option<u64> {
        let k = self.consumed.get(worker as usize).copied().flatten()?;
        Some(k.min(self.cut.share(total, rank, worker)))
    }
}

/// The reservoir of a shard-shuffled plan, whose draws a resume replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mixing {
    /// Reservoir size in items (0 behaves as 1).
    pub buffer: usize,
    /// The run's seed.
    pub seed: u64,
    /// The epoch.
    pub epoch: u64,
}

impl Mixing {
    /// The reservoir seed of partition (`rank`, `worker`) of `cut` in stage
    /// `stage`: the first stage's is [`crate::plan`]'s, later stages add
    /// their number.
    pub fn seed_of(&self, cut: Cut, rank: u64, worker: u64, stage: u64) -> u64 {
        let parts = [
            self.epoch,
            rank,
            cut.world_size,
            worker,
            cut.num_workers,
            stage,
        ];
        let n = if stage == 0 { 5 } else { 6 };
        derive_seed(self.seed, &parts[..n])
    }
}

/// An ordered list of positions of an epoch list, as ranges: what an epoch
/// has left after a stage. Its size is the number of partitions of the
/// stages before (and, for reservoir plans, the items their reservoirs
/// held), not the dataset's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rest {
    /// `(first position, count)`, in order, no empty one.
    segs: Vec<(u64, u64)>,
    /// Items before the end of each segment.
    ends: Vec<u64>,
}

impl Rest {
    /// The whole list `0..len`.
    pub fn whole(len: u64) -> Self {
        let mut r = Rest::default();
        r.push(0..len);
        r
    }

    /// Appends `range`, merged with the last segment when they touch.
    fn push(&mut self, range: Range<u64>) {
        if range.is_empty() {
            return;
        }
        let len = range.end - range.start;
        if let Some(last) = self.segs.last_mut()
            && last.0 + last.1 == range.start
        {
            last.1 += len;
            *self.ends.last_mut().expect("ends match segs") += len;
            return;
        }
        let before = self.len();
        self.segs.push((range.start, len));
        self.ends.push(before + len);
    }

    /// Number of positions.
    pub fn len(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    /// Whether no position is left.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The segment holding item `q` (`q < len`).
    fn seg(&self, q: u64) -> usize {
        self.ends.partition_point(|&e| e <= q)
    }

    /// The position of item `q` (`q < len`).
    pub fn at(&self, q: u64) -> u64 {
        let k = self.seg(q);
        let start = self.ends[k] - self.segs[k].1;
        self.segs[k].0 + (q - start)
    }

    /// How many items from `q` on (`q < len`) hold consecutive positions.
    pub fn run(&self, q: u64) -> u64 {
        self.ends[self.seg(q)] - q
    }

    /// The positions, as ranges in order.
    pub fn ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.segs.iter().map(|&(s, n)| s..s + n)
    }

    /// Appends items `a..b` of the cyclic list (item `q` is `q mod len`) to `out`.
    fn slice_into(&self, a: u64, b: u64, out: &mut Rest) {
        let n = self.len();
        let mut q = a;
        while q < b && n > 0 {
            let i = q % n;
            let run = self.run(i).min(b - q);
            let p = self.at(i);
            out.push(p..p + run);
            q += run;
        }
    }
}

/// Where a partition reads in a resumed epoch ([`Resume::place`]).
#[derive(Debug, Clone)]
pub struct Place {
    /// The positions its stage cuts (`None`: the whole epoch list).
    pub rest: Option<Arc<Rest>>,
    /// The stage number (0: the epoch's first cut).
    pub stage: u64,
    /// Items of its share already yielded.
    pub start: u64,
}

impl Place {
    /// A fresh epoch: the whole list, the first stage, nothing yielded.
    pub const FRESH: Place = Place {
        rest: None,
        stage: 0,
        start: 0,
    };
}

/// The stages a checkpoint records for one epoch, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resume {
    /// Each stage's progress at the checkpoint (the last one is the stage
    /// the checkpoint was taken in).
    pub stages: Vec<Progress>,
}

impl Resume {
    /// The stages, oldest first.
    pub fn new(stages: Vec<Progress>) -> Self {
        Resume { stages }
    }

    /// What partition (`rank`, `worker`) of `cut` reads, over an epoch list
    /// of `len` positions: with the cut of the last stage, that stage goes
    /// on where the lockstep rule says this partition stopped; with another
    /// cut, a new stage cuts what every partition had left.
    ///
    /// # Errors
    /// [`ReaderError::InvalidResume`] for counts that do not fit their cut
    /// and list, or a new cut when the checkpoint does not hold every
    /// worker's count of its last stage (a loader worker's own state).
    pub fn place(
        &self,
        len: u64,
        cut: Cut,
        rank: u64,
        worker: u64,
        mixing: Option<Mixing>,
    ) -> Result<Place> {
        cut.validate()?;
        let Some(last) = self.stages.last() else {
            return Ok(Place::FRESH);
        };
        let n = self.stages.len();
        if last.cut == cut {
            let before = self.rest_after(len, &self.stages[..n - 1], mixing)?;
            let total = before.as_ref().map_or(len, |r| r.len());
            last.validate(total, n - 1)?;
            let start = last
                .of(total, rank, worker)
                .ok_or_else(|| ReaderError::InvalidResume {
                    what: format!(
                        "the checkpoint has no count for worker {worker} of its last stage"
                    ),
                })?;
            return Ok(Place {
                rest: before.map(Arc::new),
                stage: n as u64 - 1,
                start,
            });
        }
        let rest = self
            .rest_after(len, &self.stages, mixing)?
            .unwrap_or_default();
        Ok(Place {
            rest: Some(Arc::new(rest)),
            stage: n as u64,
            start: 0,
        })
    }

    /// What the epoch has left after `stages` (`None`: no stage, the whole list).
    fn rest_after(
        &self,
        len: u64,
        stages: &[Progress],
        mixing: Option<Mixing>,
    ) -> Result<Option<Rest>> {
        let mut rest: Option<Rest> = None;
        for (i, st) in stages.iter().enumerate() {
            let input = rest.take().unwrap_or_else(|| Rest::whole(len));
            let total = input.len();
            st.validate(total, i)?;
            let mut out = Rest::default();
            for r in 0..st.cut.world_size {
                for w in 0..st.cut.num_workers {
                    let k = st.of(total, r, w).ok_or_else(|| ReaderError::InvalidResume {
                        what: format!(
                            "stage {i} lacks the count of worker {w}: a checkpoint resumed with \
                             another world size or worker count must hold every worker's count \
                             of the rank that saved it"
                        ),
                    })?;
                    let (s, e) = st.cut.range(total, r, w);
                    match mixing {
                        None => input.slice_into(s + k, e, &mut out),
                        Some(m) => {
                            let seed = m.seed_of(st.cut, r, w, i as u64);
                            let (held, pos) = replay(m.buffer, seed, s, e, k);
                            for q in held {
                                input.slice_into(q, q + 1, &mut out);
                            }
                            input.slice_into(pos, e, &mut out);
                        }
                    }
                }
            }
            rest = Some(out);
        }
        Ok(rest)
    }
}

/// A reservoir of `buffer` items over positions `s..e`, after `k` draws:
/// the positions it holds (slot order) and the next position to read.
pub(crate) fn replay(buffer: usize, seed: u64, s: u64, e: u64, k: u64) -> (Vec<u64>, u64) {
    let mut r = Reservoir::<u64>::new(buffer, seed);
    let mut pos = s;
    for _ in 0..k {
        r.step(|| {
            (pos < e).then(|| {
                pos += 1;
                pos - 1
            })
        });
    }
    (r.buf, pos)
}

/// A name for a dataset's content: the xxh3-64 of its shards' sample counts
/// and index checksums, in order, as 16 hex digits. Two datasets with the
/// same shards and indexes (a copy, a staged dataset) have the same
/// fingerprint; any change to a key, a member or the shard order changes it.
pub fn fingerprint(manifest: &Manifest) -> String {
    let mut h = bale_format::hash::Xxh3::new();
    for s in &manifest.shards {
        h.update(&s.samples.to_le_bytes());
        h.update(s.index_xxh3.as_bytes());
        h.update(b"\n");
    }
    format!("{:016x}", h.digest())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rest_merges_touching_ranges_and_maps_items() {
        let mut r = Rest::default();
        r.push(3..5);
        r.push(5..6);
        r.push(10..12);
        r.push(7..7);
        assert_eq!(r.ranges().collect::<Vec<_>>(), vec![3..6, 10..12]);
        assert_eq!(r.len(), 5);
        assert_eq!(
            (0..5).map(|q| r.at(q)).collect::<Vec<_>>(),
            vec![3, 4, 5, 10, 11]
        );
        assert_eq!((r.run(0), r.run(2), r.run(3)), (3, 1, 2));
        // Items past the end wrap around (the `even` padding).
        let mut out = Rest::default();
        r.slice_into(4, 7, &mut out);
        assert_eq!(out.ranges().collect::<Vec<_>>(), vec![11..12, 3..5]);
    }

    #[test]
    fn same_cut_continues_each_partition() {
        let cut = Cut::new(2, 2, false);
        let resume = Resume::new(vec![Progress {
            cut,
            rank: 0,
            consumed: vec![Some(2), Some(1)],
        }]);
        // 10 items: rank 1 has shares 3 and 2; the counts are capped there.
        let p = resume.place(10, cut, 1, 1, None).unwrap();
        assert!(p.rest.is_none());
        assert_eq!((p.stage, p.start), (0, 1));
        let p = resume.place(10, cut, 1, 0, None).unwrap();
        assert_eq!(p.start, 2);
    }

    #[test]
    fn another_cut_takes_what_every_partition_left() {
        let resume = Resume::new(vec![Progress {
            cut: Cut::new(2, 1, false),
            rank: 1,
            consumed: vec![Some(3)],
        }]);
        // 10 items, 2 ranks of 5: each has yielded 3, left 3..5 and 8..10.
        let p = resume.place(10, Cut::new(3, 1, false), 0, 0, None).unwrap();
        let rest = p.rest.unwrap();
        assert_eq!(rest.ranges().collect::<Vec<_>>(), vec![3..5, 8..10]);
        assert_eq!((p.stage, p.start), (1, 0));
    }

    #[test]
    fn a_workers_own_count_resumes_only_its_own_cut() {
        let cut = Cut::new(2, 2, false);
        let resume = Resume::new(vec![Progress {
            cut,
            rank: 0,
            consumed: vec![None, Some(4)],
        }]);
        assert_eq!(resume.place(20, cut, 1, 1, None).unwrap().start, 4);
        let err = resume.place(20, cut, 1, 0, None).unwrap_err();
        assert!(err.to_string().contains("no count for worker 0"), "{err}");
        let err = resume
            .place(20, Cut::new(3, 2, false), 0, 0, None)
            .unwrap_err();
        assert!(err.to_string().contains("every worker's count"), "{err}");
    }

    #[test]
    fn counts_past_a_share_are_refused() {
        let resume = Resume::new(vec![Progress {
            cut: Cut::new(2, 1, false),
            rank: 0,
            consumed: vec![Some(6)],
        }]);
        let err = resume
            .place(10, Cut::new(2, 1, false), 0, 0, None)
            .unwrap_err();
        assert!(err.to_string().contains("share of 5"), "{err}");
    }
}
