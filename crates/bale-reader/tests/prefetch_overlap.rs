//! Prefetch reads ahead while the caller consumes: a job holds only a share
//! of the budget, so the thread reads the next run while the caller still
//! holds one, and never more than the budget. Seen on the page cache
//! (`mincore`) of a shard read with `pread` and no read-ahead.

use std::time::{Duration, Instant};

use bale_format::{Compression, ShardIndex, index_file_name, shard_file_name};
use bale_reader::testing::TestDataset;
use bale_reader::{Backing, Dataset, EpochPlan, Partition, ReadAround};

mod common;
use common::{evict, resident};

#[test]
fn the_prefetch_thread_reads_the_next_run_while_the_caller_holds_one() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let spec = TestDataset::new(256, 1).payload_len(30_000, 30_000);
    spec.write(dir.path()).unwrap();
    let name = shard_file_name("shard", 0, Compression::None);
    let shard = dir.path().join(&name);
    let index = ShardIndex::open(dir.path().join(index_file_name(&name))).unwrap();
    // The bytes of samples a..b in the shard.
    let span = |a: usize, b: usize| {
        let start = index.sample(a).file_offset;
        let last = index.sample(b - 1);
        (start, last.file_offset + last.file_len - start)
    };
    evict(&shard);
    let ds = Dataset::options()
        .backing(Backing::Pread)
        .read_around(ReadAround::Never)
        .open(dir.path())
        .unwrap();
    // A budget of 64 samples and one thread: jobs of 32.
    let mut it = ds
        .iter(EpochPlan::Sequential, Partition::ALL)
        .unwrap()
        .prefetch(1, 64, 1 << 30);
    for i in 0..40 {
        let s = it.next().unwrap().unwrap();
        assert_eq!(s.field("bin"), Some(&spec.payload(i)[..]));
    }
    // The caller holds samples 32..64; the thread reads 64..96 meanwhile.
    let (start, len) = span(64, 96);
    let pages = len.div_ceil(4096) as usize;
    let t = Instant::now();
    let mut got = resident(&shard, start & !4095, len);
    while got < pages && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
        got = resident(&shard, start & !4095, len);
    }
    assert!(
        got >= pages,
        "samples 64..96 were not read ahead ({got} of {pages} pages cached)"
    );
    // ... and nothing past the budget.
    std::thread::sleep(Duration::from_millis(200));
    let (start, len) = span(97, 128);
    let beyond = resident(&shard, start & !4095, len);
    assert_eq!(beyond, 0, "samples 97..128 were read beyond the budget");
    // The rest of the epoch arrives, in order.
    for i in 40..256 {
        let s = it.next().unwrap().unwrap();
        assert_eq!(s.field("bin"), Some(&spec.payload(i)[..]), "sample {i}");
    }
    assert!(it.next().is_none());
}
