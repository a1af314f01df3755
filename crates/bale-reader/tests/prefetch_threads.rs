//! Prefetch threads stop when the iterator is dropped. A test binary of its
//! own: it counts this process's threads by name.

use std::time::{Duration, Instant};

use bale_reader::testing::TestDataset;
use bale_reader::{Dataset, EpochPlan, Partition};

fn prefetch_threads() -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap();
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("bale-prefetch"))
        .count()
}

/// Waits (up to a minute) for the count of prefetch threads to become `n`, and returns the last count.
fn wait_for_threads(n: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let c = prefetch_threads();
        if c == n || Instant::now() > deadline {
            return c;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn dropping_the_iterator_stops_its_threads() {
    let dir = tempfile::tempdir().unwrap();
    TestDataset::new(2000, 4).write(dir.path()).unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    assert_eq!(prefetch_threads(), 0);
    for plan in [
        EpochPlan::Sequential,
        EpochPlan::shuffled(1, 0),
        EpochPlan::shard_shuffled(1, 0, 100),
    ] {
        let mut it = ds
            .iter(plan, Partition::ALL)
            .unwrap()
            .prefetch(3, 16, 1 << 20);
        let first = it.next().unwrap().unwrap();
        assert!(first.field("bin").is_some());
        // Mid-epoch, the threads are alive (waiting for budget).
        assert_eq!(wait_for_threads(3), 3, "{plan:?}");
        drop(it);
        // Drop stops and joins them (the kernel may take a moment to forget a finished thread).
        assert_eq!(wait_for_threads(0), 0, "{plan:?}");
    }
    // At the end of an epoch the threads exit by themselves, before the iterator is dropped.
    let mut it = ds
        .iter(EpochPlan::Sequential, Partition::ALL)
        .unwrap()
        .prefetch(2, 16, 1 << 20);
    assert_eq!(it.by_ref().count(), 2000);
    assert_eq!(wait_for_threads(0), 0);
    drop(it);
}
