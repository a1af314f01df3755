//! Read-around (`ReadAround`): a cold read of a dataset read around brings
//! the whole region (`READ_AROUND`) around it into the page cache; read exactly, only
//! the sample's own pages. Checked on the page cache itself (`mincore`),
//! after evicting the shard with `posix_fadvise(DONTNEED)`.

use std::time::{Duration, Instant};

use bale_format::{Compression, shard_file_name};
use bale_reader::testing::TestDataset;
use bale_reader::{Backing, Dataset, READ_AROUND, ReadAround};

mod common;
use common::{PAGE, evict, resident};

/// One shard of a bit more than three regions of ~31 KB samples, on a file
/// system whose cache can be evicted; and the sample in the middle, which
/// sits in the second region.
fn three_regions() -> (tempfile::TempDir, TestDataset, std::path::PathBuf, u64) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let n = 3 * READ_AROUND / 30_000;
    let spec = TestDataset::new(n, 1).payload_len(30_000, 30_000);
    spec.write(dir.path()).unwrap();
    let shard = dir
        .path()
        .join(shard_file_name("shard", 0, Compression::None));
    (dir, spec, shard, n / 2)
}

#[test]
fn a_cold_read_brings_in_its_region_only_when_read_around() {
    let (dir, spec, shard, mid) = three_regions();
    // Sample `mid` sits in the second region.
    let region = (READ_AROUND, READ_AROUND);
    let region_pages = (READ_AROUND / PAGE) as usize;
    for backing in [Backing::Mmap, Backing::Pread] {
        for mode in [ReadAround::Always, ReadAround::Never] {
            evict(&shard);
            let ds = Dataset::options()
                .backing(backing)
                .read_around(mode)
                .open(dir.path())
                .unwrap();
            let s = ds.get_populated(mid).unwrap();
            assert_eq!(s.field("bin"), Some(&spec.payload(mid)[..]));
            let t = Instant::now();
            let mut pages = resident(&shard, region.0, region.1);
            match mode {
                ReadAround::Always => {
                    // The region's read was started by the hint; wait for it.
                    while pages < region_pages && t.elapsed() < Duration::from_secs(10) {
                        std::thread::sleep(Duration::from_millis(20));
                        pages = resident(&shard, region.0, region.1);
                    }
                    // The hint is best effort: under memory pressure the
                    // kernel's read-ahead skips pages it cannot allocate
                    // at once (a CI run saw 2,037 of 2,048). Read exactly,
                    // the region holds at most 16 cached pages; read
                    // around, nearly all of it.
                    assert!(
                        pages >= region_pages * 7 / 8,
                        "{backing:?}: read around, only {pages} of the {region_pages} pages \
                         of the region holding the sample are cached"
                    );
                    // Its neighbours were not asked for.
                    let before = resident(&shard, 0, READ_AROUND);
                    assert!(
                        before < region_pages / 4,
                        "{backing:?}: {before} pages of the region before are cached"
                    );
                }
                _ => {
                    std::thread::sleep(Duration::from_millis(200));
                    pages = resident(&shard, region.0, region.1);
                    // The sample is ~30 KB: 8 or 9 pages, and nothing around it.
                    assert!(
                        (8..=16).contains(&pages),
                        "{backing:?}: read exactly, {pages} pages of the region are cached"
                    );
                }
            }
        }
    }
}

#[test]
fn read_around_changes_no_byte() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TestDataset::new(300, 3).payload_len(1, 40_000);
    spec.write(dir.path()).unwrap();
    for backing in [Backing::Mmap, Backing::Pread] {
        for mode in [ReadAround::Always, ReadAround::Never, ReadAround::Auto] {
            let ds = Dataset::options()
                .backing(backing)
                .read_around(mode)
                .open(dir.path())
                .unwrap();
            let order: Vec<u64> = (0..spec.len()).rev().collect();
            for &i in &order {
                assert_eq!(ds.get(i).unwrap().field("bin"), Some(&spec.payload(i)[..]));
            }
            for (k, s) in ds.get_batch(&order).unwrap().iter().enumerate() {
                assert_eq!(s.field("bin"), Some(&spec.payload(order[k])[..]));
            }
        }
    }
}

/// A mapped region is read through the shard file before the read that
/// reached it returns (a `MADV_WILLNEED` would only start its reads).
#[test]
fn a_mapped_region_is_cached_when_the_read_that_reached_it_returns() {
    let (dir, spec, shard, mid) = three_regions();
    evict(&shard);
    let ds = Dataset::options()
        .backing(Backing::Mmap)
        .read_around(ReadAround::Always)
        .open(dir.path())
        .unwrap();
    let s = ds.get_populated(mid).unwrap();
    assert_eq!(s.field("bin"), Some(&spec.payload(mid)[..]));
    let pages = resident(&shard, READ_AROUND, READ_AROUND);
    assert_eq!(
        pages,
        (READ_AROUND / PAGE) as usize,
        "the region holding sample {mid} is not wholly cached when its read returns"
    );
}
