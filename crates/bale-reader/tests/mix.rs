//! Mixed epochs: exact counts per source, every draw of the epoch list read
//! by exactly one partition (also when resumed at another world size), and
//! real samples of the right source in the list's order.

use bale_reader::mix::{Mix, MixIter, MixPlan, Sampling};
use bale_reader::resume::{Cut, Progress, Resume};
use bale_reader::testing::TestDataset;
use bale_reader::{Dataset, Partition};
use proptest::prelude::*;

fn part(cut: Cut, r: u64, w: u64) -> Partition {
    Partition::new(r, cut.world_size)
        .with_workers(w, cut.num_workers)
        .with_even(cut.even)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn partitions_of_a_mix_read_every_draw_once_also_resumed_elsewhere(
        sizes in prop::collection::vec(1u64..60, 1..4),
        weights in prop::collection::vec(0.05f64..5.0, 4),
        samples in prop::option::of(0u64..300),
        shuffled in any::<bool>(),
        replacement in any::<bool>(),
        seed in any::<u64>(),
        (world, workers, to_world, to_workers) in (1u64..5, 1u64..3, 1u64..6, 1u64..3),
        per_mille in prop::collection::vec(0u64..=1000, 3),
        rank in 0u64..5,
    ) {
        let weights = &weights[..sizes.len()];
        let sampling = if replacement && shuffled { Sampling::WithReplacement } else { Sampling::WithoutReplacement };
        let mix = Mix::new(&sizes, weights, samples, sampling).unwrap();
        prop_assert_eq!(mix.len(), samples.unwrap_or(sizes.iter().sum()));
        let plan = if shuffled { MixPlan::Shuffled { seed, epoch: 1 } } else { MixPlan::Sequential { epoch: 1 } };
        let list = mix.list(plan).unwrap();
        for (s, &c) in mix.counts().iter().enumerate() {
            let got = (0..list.len()).filter(|&p| list.get(p).0 == s).count() as u64;
            prop_assert_eq!(got, c);
            let want = list.len() as f64 * weights[s] / weights.iter().sum::<f64>();
            prop_assert!((c as f64 - want).abs() < 1.0, "{} for {}", c, want);
        }
        // A checkpoint at (world, workers), resumed at (to_world, to_workers).
        let cut = Cut::new(world, workers, false);
        let rank = rank % world;
        let fresh = Resume::default();
        let consumed: Vec<Option<u64>> = (0..workers)
            .map(|w| {
                let n = list.positions(part(cut, rank, w), &fresh.place(list.len(), cut, rank, w, None).unwrap()).unwrap().len() as u64;
                Some(n * per_mille[w as usize] / 1000)
            })
            .collect();
        let mut seen = vec![0u32; list.len() as usize];
        for r in 0..world {
            for w in 0..workers {
                let p = list.positions(part(cut, r, w), &fresh.place(list.len(), cut, r, w, None).unwrap()).unwrap();
                let k = consumed[w as usize].unwrap().min(p.len() as u64) as usize;
                p[..k].iter().for_each(|&q| seen[q as usize] += 1);
            }
        }
        let resume = Resume::new(vec![Progress { cut, rank, consumed }]);
        let to = Cut::new(to_world, to_workers, false);
        let to = if to == cut { Cut::new(to_world + 1, to_workers, false) } else { to };
        for r in 0..to.world_size {
            for w in 0..to.num_workers {
                let place = resume.place(list.len(), to, r, w, None).unwrap();
                for q in list.positions(part(to, r, w), &place).unwrap() {
                    seen[q as usize] += 1;
                }
            }
        }
        prop_assert!(seen.iter().all(|&c| c == 1), "{:?}", seen);
    }
}

#[test]
fn a_mix_iterator_reads_each_source_in_the_lists_order() {
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let specs = [
        TestDataset::with_shard_sizes(vec![13, 20, 7]),
        TestDataset::with_shard_sizes(vec![9, 9]).payload_len(10, 40),
    ];
    let datasets: Vec<Dataset> = dirs
        .iter()
        .zip(&specs)
        .map(|(d, s)| {
            s.write(d.path()).unwrap();
            Dataset::open(d.path()).unwrap()
        })
        .collect();
    let mix = Mix::new(
        &[40, 18],
        &[0.6, 0.4],
        Some(70),
        Sampling::WithoutReplacement,
    )
    .unwrap();
    for plan in [
        MixPlan::Sequential { epoch: 3 },
        MixPlan::Shuffled { seed: 5, epoch: 3 },
    ] {
        let list = mix.list(plan).unwrap();
        for prefetch in [(0, 1, 1), (2, 16, 1 << 20)] {
            let cut = Cut::new(2, 2, false);
            let mut all = Vec::new();
            for r in 0..2 {
                for w in 0..2 {
                    let place = Resume::default().place(70, cut, r, w, None).unwrap();
                    let p = part(cut, r, w);
                    let want: Vec<(usize, u64)> = list
                        .positions(p, &place)
                        .unwrap()
                        .into_iter()
                        .map(|q| list.get(q))
                        .collect();
                    let it = MixIter::new(&datasets, &list, p, &place, prefetch).unwrap();
                    assert_eq!(it.len(), want.len() as u64);
                    let got: Vec<(usize, u64)> = it
                        .map(|(s, x)| {
                            let x = x.unwrap();
                            let i = x.index();
                            assert_eq!(x.key(), specs[s].key(i));
                            assert_eq!(x.field("bin").unwrap(), specs[s].payload(i));
                            (s, i)
                        })
                        .collect();
                    assert_eq!(got, want);
                    all.extend(got);
                }
            }
            assert_eq!(all.len(), 70);
        }
    }
}
