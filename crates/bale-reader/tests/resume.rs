//! Property tests of resumed epochs (index level, no data read): a
//! checkpoint taken at one world size and worker count, resumed at another,
//! yields every sample of the epoch exactly once over the stages; with
//! `even`, every rank of a stage yields the same count and nothing is lost;
//! with the same cut, the resumed order is the rest of the uninterrupted one.

use bale_reader::resume::{Cut, Progress, Resume};
use bale_reader::{EpochPlan, Order, Partition};
use proptest::prelude::*;

fn plan_strategy() -> impl Strategy<Value = EpochPlan> {
    prop_oneof![
        Just(EpochPlan::Sequential),
        (any::<u64>(), 0u64..5).prop_map(|(s, e)| EpochPlan::shuffled(s, e)),
        (any::<u64>(), 0u64..5, 0usize..20)
            .prop_map(|(s, e, b)| EpochPlan::shard_shuffled(s, e, b)),
    ]
}

fn partition(cut: Cut, rank: u64, worker: u64) -> Partition {
    Partition::new(rank, cut.world_size)
        .with_workers(worker, cut.num_workers)
        .with_even(cut.even)
}

/// The order partition (`rank`, `worker`) of `cut` reads after `done`, and
/// the items it skips.
fn order_after(
    plan: EpochPlan,
    sizes: &[u64],
    done: &[Progress],
    cut: Cut,
    rank: u64,
    worker: u64,
) -> (Order, u64) {
    let n: u64 = sizes.iter().sum();
    let place = Resume::new(done.to_vec())
        .place(n, cut, rank, worker, plan.mixing())
        .unwrap();
    let order = Order::resumed(plan, partition(cut, rank, worker), sizes, &place).unwrap();
    (order, place.start)
}

/// A stage: a cut, the saving rank, and the fraction of each of its
/// workers' shares they had yielded (0..=1000 per mille).
#[derive(Debug, Clone)]
struct StageSpec {
    cut: Cut,
    rank: u64,
    per_mille: Vec<u64>,
}

fn stage_strategy(even: bool) -> impl Strategy<Value = StageSpec> {
    (1u64..6, 1u64..4).prop_flat_map(move |(world, workers)| {
        (
            0..world,
            prop::collection::vec(0u64..=1000, workers as usize),
        )
            .prop_map(move |(rank, per_mille)| StageSpec {
                cut: Cut::new(world, workers, even),
                rank,
                per_mille,
            })
    })
}

/// The saving rank's counts of a stage after `done`, from its shares.
fn progress_of(plan: EpochPlan, sizes: &[u64], done: &[Progress], st: &StageSpec) -> Progress {
    let consumed = (0..st.cut.num_workers)
        .map(|w| {
            let (o, _) = order_after(plan, sizes, done, st.cut, st.rank, w);
            Some(o.len() * st.per_mille[w as usize] / 1000)
        })
        .collect();
    Progress {
        cut: st.cut,
        rank: st.rank,
        consumed,
    }
}

/// Runs the stages: each partition of each stage yields what the lockstep
/// rule says it had when the checkpoint was taken; then a last stage of
/// `last` reads everything left. Returns how often each sample was yielded,
/// and the counts each rank of each stage would yield in full.
fn run(
    plan: EpochPlan,
    sizes: &[u64],
    stages: &[StageSpec],
    last: Cut,
) -> (Vec<u32>, Vec<Vec<u64>>) {
    let n: u64 = sizes.iter().sum();
    let mut seen = vec![0u32; n as usize];
    let mut done: Vec<Progress> = Vec::new();
    let mut rank_lens = Vec::new();
    for st in stages {
        let progress = progress_of(plan, sizes, &done, st);
        let consumed = progress.consumed.clone();
        let mut lens = Vec::new();
        for r in 0..st.cut.world_size {
            let mut len = 0;
            for w in 0..st.cut.num_workers {
                let (o, start) = order_after(plan, sizes, &done, st.cut, r, w);
                assert_eq!(start, 0, "a new cut starts its stage");
                len += o.len();
                let k = consumed[w as usize].unwrap().min(o.len());
                for i in o.iter().take(k as usize) {
                    seen[i as usize] += 1;
                }
            }
            lens.push(len);
        }
        rank_lens.push(lens);
        done.push(progress);
    }
    let mut lens = Vec::new();
    for r in 0..last.world_size {
        let mut len = 0;
        for w in 0..last.num_workers {
            let (o, start) = order_after(plan, sizes, &done, last, r, w);
            len += o.len();
            for i in o.iter_from(start).unwrap() {
                seen[i as usize] += 1;
            }
        }
        lens.push(len);
    }
    rank_lens.push(lens);
    (seen, rank_lens)
}

/// Consecutive stages with the same cut are one stage: make each differ
/// from the one before.
fn distinct(stages: &mut [StageSpec], last: &mut Cut) {
    for i in 1..stages.len() {
        if stages[i].cut == stages[i - 1].cut {
            stages[i].cut.world_size += 1;
        }
    }
    if let Some(prev) = stages.last()
        && prev.cut == *last
    {
        last.num_workers += 1;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn every_sample_once_across_changes_of_world_size_and_workers(
        plan in plan_strategy(),
        sizes in prop::collection::vec(0u64..40, 0..8),
        mut stages in prop::collection::vec(stage_strategy(false), 1..4),
        last_world in 1u64..7,
        last_workers in 1u64..4,
    ) {
        let mut last = Cut::new(last_world, last_workers, false);
        distinct(&mut stages, &mut last);
        for s in &mut stages {
            s.rank = s.rank.min(s.cut.world_size - 1);
            s.per_mille.resize(s.cut.num_workers as usize, 500);
        }
        let (seen, _) = run(plan, &sizes, &stages, last);
        prop_assert!(seen.iter().all(|&c| c == 1), "counts {:?}", seen);
    }

    #[test]
    fn with_even_every_rank_of_a_stage_yields_the_same_and_nothing_is_lost(
        plan in plan_strategy(),
        sizes in prop::collection::vec(0u64..40, 0..8),
        mut stages in prop::collection::vec(stage_strategy(true), 1..3),
        last_world in 1u64..7,
        last_workers in 1u64..4,
    ) {
        let mut last = Cut::new(last_world, last_workers, true);
        distinct(&mut stages, &mut last);
        for s in &mut stages {
            s.rank = s.rank.min(s.cut.world_size - 1);
            s.per_mille.resize(s.cut.num_workers as usize, 500);
        }
        let n: u64 = sizes.iter().sum();
        let (seen, rank_lens) = run(plan, &sizes, &stages, last);
        for lens in &rank_lens {
            prop_assert!(lens.windows(2).all(|w| w[0] == w[1]), "ranks yield {:?}", lens);
        }
        if n > 0 {
            prop_assert!(seen.iter().all(|&c| c >= 1), "counts {:?}", seen);
            // Each stage repeats fewer items than it has ranks.
            let extra: u64 = seen.iter().map(|&c| u64::from(c) - 1).sum();
            let bound: u64 = stages.iter().map(|s| s.cut.world_size - 1).sum::<u64>() + last.world_size - 1;
            prop_assert!(extra <= bound, "{} repeats, at most {}", extra, bound);
        }
    }

    #[test]
    fn the_same_cut_resumes_the_uninterrupted_order(
        plan in plan_strategy(),
        sizes in prop::collection::vec(0u64..40, 0..8),
        first in prop::option::of(stage_strategy(false)),
        then in stage_strategy(false),
    ) {
        // An elastic stage first (or none), then a checkpoint in a stage of
        // cut `then.cut`, resumed with that same cut.
        let mut then = then;
        let done: Vec<Progress> = match first {
            None => Vec::new(),
            Some(mut first) => {
                distinct(std::slice::from_mut(&mut first), &mut then.cut);
                then.per_mille.resize(then.cut.num_workers as usize, 500);
                vec![progress_of(plan, &sizes, &[], &first)]
            }
        };
        let saved = progress_of(plan, &sizes, &done, &then);
        let mut resumed = done.clone();
        resumed.push(saved.clone());
        for r in 0..then.cut.world_size {
            for w in 0..then.cut.num_workers {
                let (whole, _) = order_after(plan, &sizes, &done, then.cut, r, w);
                let (again, start) = order_after(plan, &sizes, &resumed, then.cut, r, w);
                prop_assert_eq!(start, saved.consumed[w as usize].unwrap().min(whole.len()));
                let rest: Vec<u64> = again.iter_from(start).unwrap().collect();
                let want: Vec<u64> = whole.iter().skip(start as usize).collect();
                prop_assert_eq!(rest, want);
            }
        }
    }
}

#[test]
fn four_ranks_to_three_and_two_to_five_under_both_shuffles() {
    let sizes = [37u64, 50, 13, 64, 29];
    let n: u64 = sizes.iter().sum();
    for plan in [
        EpochPlan::shuffled(7, 2),
        EpochPlan::shard_shuffled(7, 2, 16),
    ] {
        for (from, to) in [(4u64, 3u64), (2, 5)] {
            for workers in [1u64, 2, 3] {
                let stage = StageSpec {
                    cut: Cut::new(from, workers, false),
                    rank: 0,
                    per_mille: vec![400; workers as usize],
                };
                let (seen, _) = run(plan, &sizes, &[stage], Cut::new(to, 2, false));
                assert!(
                    seen.iter().all(|&c| c == 1),
                    "{plan:?} {from} -> {to} ranks, {workers} workers: {seen:?}"
                );
                assert_eq!(seen.len() as u64, n);
            }
        }
    }
}
