//! Epoch iteration over real shards: plan order, correct bytes, resume,
//! prefetch, and errors in place of damaged samples.

use bale_format::Compression;
use bale_reader::testing::TestDataset;
use bale_reader::{Backing, Dataset, EpochPlan, Partition, ReaderError, Sample, SampleIter};

fn plans() -> Vec<EpochPlan> {
    vec![
        EpochPlan::Sequential,
        EpochPlan::shuffled(11, 2),
        EpochPlan::shard_shuffled(11, 2, 1),
        EpochPlan::shard_shuffled(11, 2, 16),
    ]
}

/// `None`, or (threads, max samples, max bytes).
fn prefetch_configs() -> Vec<Option<(usize, usize, u64)>> {
    vec![
        None,
        Some((1, 4, 1 << 20)),
        Some((3, 1, 1)),
        Some((2, 64, 64 << 20)),
        // More threads than the sample budget fills with full batches:
        // batches of 5 single reads (40 / 8), and of 1 (20 / 16).
        Some((8, 40, 1 << 20)),
        Some((16, 20, 1 << 20)),
    ]
}

fn with_prefetch(it: SampleIter, p: Option<(usize, usize, u64)>) -> SampleIter {
    match p {
        None => it,
        Some((t, s, b)) => it.prefetch(t, s, b),
    }
}

fn checked(spec: &TestDataset, s: Result<Sample, ReaderError>) -> u64 {
    let s = s.unwrap();
    let i = s.index();
    assert_eq!(s.key(), spec.key(i));
    assert_eq!(s.label(), Some(spec.label(i)));
    assert_eq!(s.field("bin"), Some(&spec.payload(i)[..]), "sample {i}");
    i
}

#[test]
fn iteration_yields_the_plan_order_with_correct_bytes() {
    let mut kinds = vec![Compression::None, Compression::Zstd];
    if cfg!(feature = "hdf5") {
        kinds.push(Compression::H5);
    }
    for compression in kinds {
        let dir = tempfile::tempdir().unwrap();
        let spec = TestDataset::with_shard_sizes(vec![30, 0, 17, 40, 1]).compression(compression);
        spec.write(dir.path()).unwrap();
        for backing in [Backing::Mmap, Backing::Pread] {
            // Small reads, so runs are cut by size as well as by shard ends.
            let ds = Dataset::options()
                .backing(backing)
                .read_chunk(8 << 10)
                .verify_on_read(true)
                .open(dir.path())
                .unwrap();
            for plan in plans() {
                for part in [
                    Partition::ALL,
                    Partition::new(1, 3).with_workers(1, 2).with_even(true),
                ] {
                    let want: Vec<u64> = ds.order(plan, part).unwrap().iter().collect();
                    for p in prefetch_configs() {
                        let it = with_prefetch(ds.iter(plan, part).unwrap(), p);
                        assert_eq!(it.len(), want.len() as u64);
                        let got: Vec<u64> = it.map(|s| checked(&spec, s)).collect();
                        assert_eq!(
                            got, want,
                            "{plan:?} {part:?} {p:?} {backing:?} {compression:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn partitions_of_an_epoch_read_every_sample_once() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TestDataset::new(101, 3);
    spec.write(dir.path()).unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    for plan in plans() {
        let mut seen = vec![0; 101];
        for rank in 0..2 {
            for worker in 0..4 {
                let part = Partition::new(rank, 2).with_workers(worker, 4);
                for s in ds.iter(plan, part).unwrap().prefetch(2, 8, 1 << 20) {
                    seen[checked(&spec, s) as usize] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&c| c == 1), "{plan:?}: {seen:?}");
    }
}

#[test]
fn resume_yields_exactly_the_rest_of_the_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TestDataset::new(90, 4).compression(Compression::Zstd);
    spec.write(dir.path()).unwrap();
    let ds = Dataset::options()
        .read_chunk(4 << 10)
        .open(dir.path())
        .unwrap();
    let part = Partition::new(0, 2).with_workers(1, 2);
    for plan in plans() {
        let full: Vec<u64> = ds
            .iter(plan, part)
            .unwrap()
            .map(|s| s.unwrap().index())
            .collect();
        for k in [
            0,
            1,
            5,
            11,
            16,
            17,
            full.len() as u64 - 1,
            full.len() as u64,
        ] {
            for p in prefetch_configs() {
                let it = with_prefetch(ds.iter(plan, part).unwrap().start_at(k).unwrap(), p);
                assert_eq!(it.position(), k);
                let rest: Vec<u64> = it.map(|s| checked(&spec, s)).collect();
                assert_eq!(rest, full[k as usize..], "{plan:?} from {k} with {p:?}");
            }
        }
        // Interrupt a run after 13 samples, checkpoint its position, resume in a new iterator.
        let mut it = ds.iter(plan, part).unwrap().prefetch(2, 4, 1 << 20);
        let first: Vec<u64> = it.by_ref().take(13).map(|s| s.unwrap().index()).collect();
        let checkpoint = it.position();
        drop(it);
        assert_eq!(checkpoint, 13);
        let rest: Vec<u64> = ds
            .iter(plan, part)
            .unwrap()
            .start_at(checkpoint)
            .unwrap()
            .map(|s| s.unwrap().index())
            .collect();
        assert_eq!([first, rest].concat(), full);
        let err = ds
            .iter(plan, part)
            .unwrap()
            .start_at(full.len() as u64 + 1)
            .unwrap_err();
        assert!(matches!(err, ReaderError::StartPastEnd { .. }), "{err}");
    }
}

#[test]
fn restarting_with_prefetch_mid_epoch_keeps_the_order() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TestDataset::new(60, 3);
    spec.write(dir.path()).unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    let plan = EpochPlan::shard_shuffled(3, 0, 8);
    let want: Vec<u64> = ds.order(plan, Partition::ALL).unwrap().iter().collect();
    let mut it = ds.iter(plan, Partition::ALL).unwrap();
    let mut got: Vec<u64> = it.by_ref().take(10).map(|s| s.unwrap().index()).collect();
    let it = it.prefetch(2, 3, 1 << 20);
    got.extend(it.map(|s| checked(&spec, s)));
    assert_eq!(got, want);
}

#[test]
fn a_damaged_sample_is_an_error_in_its_place() {
    for compression in [Compression::None, Compression::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let spec = TestDataset::new(40, 2)
            .compression(compression)
            .payload_len(1000, 1000);
        spec.write(dir.path()).unwrap();
        // Damage sample 7's bytes (its .bin data, or its zstd frame).
        let idx = bale_format::ShardIndex::open(dir.path().join("shard-000000.idx")).unwrap();
        let e = idx.sample(7);
        let shard = dir
            .path()
            .join(format!("shard-000000.{}", compression.extension()));
        let mut bytes = std::fs::read(&shard).unwrap();
        let at = (e.file_offset + e.file_len / 2) as usize;
        for b in &mut bytes[at..at + 8] {
            *b ^= 0xFF;
        }
        std::fs::write(&shard, &bytes).unwrap();
        for backing in [Backing::Mmap, Backing::Pread] {
            let ds = Dataset::options()
                .backing(backing)
                .verify_on_read(true)
                .open(dir.path())
                .unwrap();
            for p in prefetch_configs() {
                let items: Vec<_> =
                    with_prefetch(ds.iter(EpochPlan::Sequential, Partition::ALL).unwrap(), p)
                        .collect();
                assert_eq!(items.len(), 40);
                for (k, item) in items.into_iter().enumerate() {
                    if k == 7 {
                        let err = item.unwrap_err();
                        assert!(err.to_string().contains("shard-000000"), "{err}");
                    } else {
                        assert_eq!(checked(&spec, item), k as u64);
                    }
                }
            }
        }
    }
}

#[test]
fn iteration_over_an_empty_partition_yields_nothing() {
    let dir = tempfile::tempdir().unwrap();
    TestDataset::new(2, 1).write(dir.path()).unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    let it = ds
        .iter(EpochPlan::Sequential, Partition::new(2, 4))
        .unwrap()
        .prefetch(2, 2, 1 << 20);
    assert!(it.is_empty());
    assert_eq!(it.count(), 0);
    let err = ds
        .iter(EpochPlan::Sequential, Partition::new(4, 4))
        .unwrap_err();
    assert!(matches!(err, ReaderError::InvalidPartition { .. }), "{err}");
}

#[test]
fn a_huge_prefetch_count_starts_at_most_the_cap_of_threads() {
    // A count mistyped by orders of magnitude reads the epoch on
    // MAX_PREFETCH_THREADS threads, not a failed allocation.
    let dir = tempfile::tempdir().unwrap();
    let spec = TestDataset::with_shard_sizes(vec![30, 17]);
    spec.write(dir.path()).unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    for threads in [bale_reader::MAX_PREFETCH_THREADS + 1, 1 << 40, usize::MAX] {
        let got: Vec<u64> = ds
            .iter(EpochPlan::Sequential, Partition::ALL)
            .unwrap()
            .prefetch(threads, 8, 1 << 20)
            .map(|s| checked(&spec, s))
            .collect();
        assert_eq!(got, (0..47).collect::<Vec<_>>(), "{threads}");
    }
}
