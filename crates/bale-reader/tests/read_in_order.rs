//! Runs read in order (`Dataset::iter`): a run whose pages are not in the
//! page cache is read in through the shard's file before the map reads it.
//! Checked on the page cache itself (`mincore`), after evicting the shard
//! with `posix_fadvise(DONTNEED)`; and against a path that no longer names
//! the mapped file.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use bale_format::{Compression, shard_file_name};
use bale_reader::testing::{TestDataset, read_in_order};
use bale_reader::{Dataset, EpochPlan, Partition};

mod common;
use common::{PAGE, evict, resident};

/// About 2.4 MB of ~12 KB samples in one shard.
fn dataset(dir: &Path) -> (TestDataset, std::path::PathBuf) {
    let spec = TestDataset::new(200, 1).payload_len(10_000, 14_000);
    spec.write(dir).unwrap();
    let shard = dir.join(shard_file_name("shard", 0, Compression::None));
    (spec, shard)
}

#[test]
fn a_cold_run_is_in_the_page_cache_when_its_request_returns() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (_, shard) = dataset(dir.path());
    let len = std::fs::metadata(&shard).unwrap().len();
    let pages = len.div_ceil(PAGE) as usize;
    evict(&shard);
    let ds = Dataset::open(dir.path()).unwrap();
    // The run is read before the request returns (a `MADV_WILLNEED` only
    // starts the reads): every page is there at once.
    read_in_order(&ds, 0, 0, len).unwrap();
    assert_eq!(
        resident(&shard, 0, len),
        pages,
        "a cold run of {len} bytes is not wholly cached when its request returns"
    );
    // A run inside the shard, likewise. (The kernel may read on past its
    // end, as it reads ahead of any sequential reader: up to the device's
    // read-ahead window, `read_ahead_kb`.)
    evict(&shard);
    let (start, run) = ((len / 4) / PAGE * PAGE, (len / 4) / PAGE * PAGE);
    read_in_order(&ds, 0, start, run).unwrap();
    assert_eq!(resident(&shard, start, run), (run / PAGE) as usize);
}

/// Reads every sample of `dir` in order on a reader thread, with a deadline:
/// a read that blocks fails the test instead of hanging it.
fn epoch_within(ds: Dataset, spec: TestDataset, what: &str) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut n = 0u64;
        for s in ds
            .iter(EpochPlan::sequential(), Partition::ALL)
            .unwrap()
            .prefetch(1, 16, 256 << 10)
        {
            let s = s.unwrap();
            assert_eq!(s.field("bin"), Some(&spec.payload(s.index())[..]));
            n += 1;
        }
        tx.send(n).unwrap();
    });
    let n = rx
        .recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{what}: the epoch did not end ({e})"));
    assert_eq!(n, 200, "{what}");
}

#[test]
fn a_cold_epoch_reads_every_sample_through_the_map_whatever_the_shard_path_now_names() {
    for what in [
        "the shard",
        "a fifo",
        "a link to /dev/zero",
        "a shorter file",
        "nothing",
    ] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let (spec, shard) = dataset(dir.path());
        let ds = Dataset::open(dir.path()).unwrap();
        // The shard is mapped (nothing read: its pages can still be
        // evicted); then its path is taken, and the runs' reads through the
        // file find something else there (or nothing).
        read_in_order(&ds, 0, 0, 0).unwrap();
        let mapped = if what == "the shard" {
            shard.clone()
        } else {
            let moved = dir.path().join("moved.tar");
            std::fs::rename(&shard, &moved).unwrap();
            moved
        };
        match what {
            "a fifo" => {
                let c = std::ffi::CString::new(shard.as_os_str().as_encoded_bytes()).unwrap();
                // SAFETY: a plain syscall on a NUL-terminated path.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            }
            "a link to /dev/zero" => std::os::unix::fs::symlink("/dev/zero", &shard).unwrap(),
            "a shorter file" => std::fs::write(&shard, b"not the shard").unwrap(),
            _ => {}
        }
        evict(&mapped);
        epoch_within(ds, spec, what);
        // Every run was read from the mapped file.
        let len = std::fs::metadata(&mapped).unwrap().len();
        let pages = resident(&mapped, 0, len);
        assert!(
            pages as u64 >= len / PAGE * 7 / 8,
            "{what}: {pages} pages of the {len} bytes read are cached"
        );
    }
}
