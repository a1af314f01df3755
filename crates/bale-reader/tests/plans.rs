//! Property tests of epoch plans and partitions (index level, no data read):
//! exactly once per epoch, disjoint and covering partitions, `even` counts,
//! resume equal to an uninterrupted run, bounded shuffle buffer, determinism.

use std::collections::HashMap;

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

/// Every (rank, worker) order of one layout.
fn orders(plan: EpochPlan, sizes: &[u64], world: u64, workers: u64, even: bool) -> Vec<Vec<Order>> {
    (0..world)
        .map(|r| {
            (0..workers)
                .map(|w| {
                    Order::new(
                        plan,
                        Partition::new(r, world)
                            .with_workers(w, workers)
                            .with_even(even),
                        sizes,
                    )
                    .unwrap()
                })
                .collect()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn partitions_are_disjoint_and_cover_each_sample_once(
        plan in plan_strategy(),
        sizes in prop::collection::vec(0u64..40, 0..8),
        world in 1u64..6,
        workers in 1u64..5,
    ) {
        let n: u64 = sizes.iter().sum();
        let mut seen = vec![0u32; n as usize];
        for rank in orders(plan, &sizes, world, workers, false) {
            for o in rank {
                let v: Vec<u64> = o.iter().collect();
                prop_assert_eq!(v.len() as u64, o.len());
                for i in v {
                    seen[i as usize] += 1;
                }
            }
        }
        prop_assert!(seen.iter().all(|&c| c == 1), "counts {:?}", seen);
    }

    #[test]
    fn even_gives_every_rank_the_same_count_and_repeats_few(
        plan in plan_strategy(),
        sizes in prop::collection::vec(0u64..40, 1..8),
        world in 1u64..6,
        workers in 1u64..5,
    ) {
        let n: u64 = sizes.iter().sum();
        prop_assume!(n > 0);
        let per_rank = n.div_ceil(world);
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for rank in orders(plan, &sizes, world, workers, true) {
            let mut total = 0;
            for o in &rank {
                for i in o.iter() {
                    *counts.entry(i).or_default() += 1;
                    total += 1;
                }
            }
            prop_assert_eq!(total, per_rank);
        }
        // Every sample at least once; the padding (fewer than `world` extra) spread as evenly as the list cycles.
        prop_assert_eq!(counts.len() as u64, n);
        prop_assert_eq!(counts.values().sum::<u64>(), per_rank * world);
        let max = per_rank * world;
        prop_assert!(counts.values().all(|&c| c >= 1 && c <= max.div_ceil(n)));
        if plan == EpochPlan::Sequential && per_rank * world - n <= n {
            // The repeated samples are the first of the epoch list.
            for (&i, &c) in &counts {
                prop_assert_eq!(c, if i < per_rank * world - n { 2 } else { 1 }, "sample {}", i);
            }
        }
    }

    #[test]
    fn resume_matches_an_uninterrupted_run(
        plan in plan_strategy(),
        sizes in prop::collection::vec(0u64..40, 0..8),
        world in 1u64..4,
        workers in 1u64..4,
        even in any::<bool>(),
        pick in any::<prop::sample::Index>(),
        k_frac in 0.0f64..=1.0,
    ) {
        let all = orders(plan, &sizes, world, workers, even);
        let flat: Vec<&Order> = all.iter().flatten().collect();
        let o = flat[pick.index(flat.len())];
        let full: Vec<u64> = o.iter().collect();
        let k = ((full.len() as f64) * k_frac) as u64;
        let rest: Vec<u64> = o.iter_from(k).unwrap().collect();
        prop_assert_eq!(&rest[..], &full[k as usize..]);
        prop_assert!(o.iter_from(o.len() + 1).is_err());
    }

    #[test]
    fn plans_are_deterministic_and_the_buffer_is_bounded(
        seed in any::<u64>(),
        epoch in 0u64..5,
        buffer in 0usize..30,
        sizes in prop::collection::vec(0u64..40, 0..8),
        world in 1u64..4,
        rank_pick in any::<prop::sample::Index>(),
    ) {
        let part = Partition::new(rank_pick.index(world as usize) as u64, world);
        let plan = EpochPlan::shard_shuffled(seed, epoch, buffer);
        let a: Vec<u64> = Order::new(plan, part, &sizes).unwrap().iter().collect();
        let b: Vec<u64> = Order::new(plan, part, &sizes).unwrap().iter().collect();
        prop_assert_eq!(&a, &b);
        // The read order is the plan with a buffer of one (no mixing).
        let reads: Vec<u64> = Order::new(EpochPlan::shard_shuffled(seed, epoch, 1), part, &sizes).unwrap().iter().collect();
        let pos: HashMap<u64, usize> = reads.iter().enumerate().map(|(p, &i)| (i, p)).collect();
        for (k, i) in a.iter().enumerate() {
            prop_assert!(pos[i] < k + buffer.max(1), "sample {} read at {} yielded at {}", i, pos[i], k);
        }
        // Whole shards are read in a row: the read order visits each shard's samples consecutively.
        let offsets: Vec<u64> = sizes.iter().scan(0, |acc, &s| { *acc += s; Some(*acc) }).collect();
        let shard_of = |i: u64| offsets.partition_point(|&o| o <= i);
        let changes = reads.windows(2).filter(|w| shard_of(w[0]) != shard_of(w[1])).count();
        prop_assert!(changes < sizes.iter().filter(|&&s| s > 0).count().max(1));
    }
}

#[test]
fn shuffled_epochs_differ_and_seeds_differ() {
    let sizes = [100, 100];
    let list = |plan| {
        Order::new(plan, Partition::ALL, &sizes)
            .unwrap()
            .iter()
            .collect::<Vec<_>>()
    };
    let e0 = list(EpochPlan::shuffled(5, 0));
    assert_ne!(e0, list(EpochPlan::shuffled(5, 1)));
    assert_ne!(e0, list(EpochPlan::shuffled(6, 0)));
    assert_eq!(e0, list(EpochPlan::shuffled(5, 0)));
    assert_ne!(e0, (0..200).collect::<Vec<_>>());
}

#[test]
fn shuffled_order_is_pinned() {
    // The permutation is part of the format: a change here changes every run's order.
    let o = Order::new(EpochPlan::shuffled(42, 0), Partition::ALL, &[4, 6]).unwrap();
    let expected =
        bale_format::shuffle::permutation(10, bale_format::shuffle::derive_seed(42, &[0]));
    assert_eq!(o.iter().collect::<Vec<_>>(), expected);
}

#[test]
fn a_shuffle_buffer_far_past_the_dataset_asks_for_no_memory_up_front() {
    // `buffer` is a bound, not an allocation: 2^62 slots of 8 bytes would
    // abort the process (or overflow the capacity) if reserved at the start.
    for k in [0, 3, 17] {
        let o = Order::new(
            EpochPlan::shard_shuffled(7, 1, 1 << 62),
            Partition::new(0, 1),
            &[10, 5, 20],
        )
        .unwrap();
        let full: Vec<u64> = o.iter().collect();
        let rest: Vec<u64> = o.iter_from(k).unwrap().collect();
        assert_eq!(&rest[..], &full[k as usize..]);
        let mut sorted = full.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..35).collect::<Vec<_>>());
    }
}
