//! What a process holds of a local dataset: the mapped pages of its shards
//! and indexes it has in its resident set (`Rss` of each mapping in
//! `/proc/self/smaps`), after open and along a pass over every sample.

use std::path::Path;

use bale_format::{Compression, shard_file_name};
use bale_reader::testing::TestDataset;
use bale_reader::{Dataset, Pass, RELEASE_BYTES};

/// Bytes of the process's resident set in mappings of `file`.
fn mapped_rss(file: &Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let name = file.canonicalize().unwrap();
    let name = name.to_str().unwrap();
    let mut ours = false;
    let mut kb = 0;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or_default();
        if first.contains('-') && first.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            ours = line.ends_with(name);
        } else if ours && let Some(v) = line.strip_prefix("Rss:") {
            kb += v
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap();
        }
    }
    kb << 10
}

/// One shard of 48 MiB: 12,288 samples of 4 KiB, a `.cls` member each.
fn one_big_shard() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    TestDataset::new(12_288, 1)
        .payload_len(4096, 4096)
        .write(dir.path())
        .unwrap();
    let shard = dir
        .path()
        .join(shard_file_name("shard", 0, Compression::None));
    let ds = Dataset::open(dir.path()).unwrap();
    let index = dir.path().join(&ds.manifest().shards[0].index);
    (dir, shard, index)
}

#[test]
fn an_open_dataset_holds_none_of_its_index_resident() {
    // 40,000 samples of one byte: an index of about 5.6 MB.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    TestDataset::new(40_000, 1)
        .payload_len(1, 1)
        .write(dir.path())
        .unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    let index = dir.path().join(&ds.manifest().shards[0].index);
    let len = std::fs::metadata(&index).unwrap().len();
    assert!(len > 4 << 20, "the index is {len} bytes");
    let held = mapped_rss(&index);
    assert!(
        held <= 64 << 10,
        "{held} of the index's {len} bytes resident after open"
    );
    // The pages dropped read the same: a key lookup and a sample.
    let key = ds.key(27_000).unwrap().to_owned();
    let got = ds.get_by_key(&key).unwrap();
    assert_eq!(got.key(), key);
    assert_eq!(got.len(), 2);
}

#[test]
fn a_pass_over_every_sample_holds_a_bounded_share_of_its_shard() {
    let (dir, shard, index) = one_big_shard();
    let ds = Dataset::open(dir.path()).unwrap();
    let len = std::fs::metadata(&shard).unwrap().len();
    let bound = RELEASE_BYTES + RELEASE_BYTES / 4;
    assert!(len > 3 * bound / 2, "the shard is {len} bytes");
    let mut most = 0;
    {
        let mut pass = Pass::new(&ds);
        for i in 0..ds.len() {
            pass.read(i).unwrap();
            assert!(ds.read_member(i, "cls").unwrap().is_some());
            assert_eq!(ds.get(i).unwrap().len(), 2);
            if i % 512 == 0 {
                most = most.max(mapped_rss(&shard));
            }
        }
    }
    assert!(
        most <= bound,
        "{most} bytes of a {len}-byte shard resident during the pass"
    );
    assert!(most > 0, "the pass read through the map");
    let after = mapped_rss(&shard) + mapped_rss(&index);
    assert!(
        after <= 64 << 10,
        "{after} bytes still resident after the pass"
    );
}

#[test]
fn stats_end_holding_none_of_the_dataset() {
    let (dir, shard, index) = one_big_shard();
    let ds = Dataset::open(dir.path()).unwrap();
    let st = ds.stats(true, 1).unwrap();
    assert_eq!(st.sample_bytes.summary().count, 12_288);
    let labels = st.labels.unwrap();
    assert_eq!(labels.counts.values().sum::<u64>(), 12_288);
    let held = mapped_rss(&shard) + mapped_rss(&index);
    assert!(held <= 64 << 10, "{held} bytes resident after stats");
}
