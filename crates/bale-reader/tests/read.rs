//! Opening datasets and reading samples: correct bytes, clear errors on bad data.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Arc;

use bale_format::{Compression, FormatError, Manifest};
use bale_reader::testing::TestDataset;
use bale_reader::{Backing, Dataset, ReaderError};

/// Every shard kind: HDF5 too when the `hdf5` feature can write them.
fn kinds() -> Vec<Compression> {
    let mut v = vec![Compression::None, Compression::Zstd];
    if cfg!(feature = "hdf5") {
        v.push(Compression::H5);
    }
    v
}

fn both_backings() -> [Backing; 2] {
    [Backing::Mmap, Backing::Pread]
}

fn check_sample(spec: &TestDataset, ds: &Dataset, i: u64) {
    let s = ds.get(i).unwrap();
    assert_eq!(s.index(), i);
    assert_eq!(s.key(), spec.key(i));
    assert_eq!(s.label(), Some(spec.label(i)));
    assert_eq!(s.field("bin"), Some(&spec.payload(i)[..]), "sample {i}");
    assert_eq!(s.field("cls"), Some(spec.label(i).to_string().as_bytes()));
    assert_eq!(s.extensions().collect::<Vec<_>>(), vec!["bin", "cls"]);
    assert_eq!(s.field("jpg"), None);
}

#[test]
fn get_returns_every_sample_with_its_bytes() {
    for compression in kinds() {
        let dir = tempfile::tempdir().unwrap();
        let spec = TestDataset::with_shard_sizes(vec![7, 0, 13, 1]).compression(compression);
        spec.write(dir.path()).unwrap();
        for backing in both_backings() {
            for verify in [false, true] {
                let ds = Dataset::options()
                    .backing(backing)
                    .verify_on_read(verify)
                    .open(dir.path())
                    .unwrap();
                assert_eq!(ds.len(), 21);
                assert_eq!(ds.shard_sizes(), vec![7, 0, 13, 1]);
                assert_eq!(ds.labels().unwrap().len(), 10);
                assert_eq!(ds.fields(), ["bin", "cls"]);
                for i in 0..ds.len() {
                    check_sample(&spec, &ds, i);
                    assert_eq!(ds.key(i).unwrap(), spec.key(i));
                }
                let mapped = ds.get(0).unwrap().is_mapped();
                assert_eq!(
                    mapped,
                    backing == Backing::Mmap && compression != Compression::Zstd
                );
            }
        }
    }
}

#[test]
fn get_by_key_finds_samples_in_every_shard() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TestDataset::new(50, 5);
    spec.write(dir.path()).unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    for i in [0, 9, 10, 33, 49] {
        let s = ds.get_by_key(&spec.key(i)).unwrap();
        assert_eq!(s.index(), i);
        assert_eq!(s.field("bin"), Some(&spec.payload(i)[..]));
        assert_eq!(ds.find(&spec.key(i)), Some(i));
    }
    let err = ds.get_by_key("c1/99999999").unwrap_err();
    assert!(matches!(err, ReaderError::UnknownKey { .. }), "{err}");
    assert!(err.to_string().contains("c1/99999999"), "{err}");
    let err = ds.get(50).unwrap_err();
    assert!(
        matches!(
            err,
            ReaderError::IndexOutOfRange {
                index: 50,
                len: 50,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn samples_outlive_the_dataset_and_are_send_sync() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<Dataset>();
    assert_send_sync::<bale_reader::Sample>();
    assert_send_sync::<bale_reader::SampleIter>();
    assert_send_sync::<bale_reader::Order>();
    let dir = tempfile::tempdir().unwrap();
    let spec = TestDataset::new(5, 1);
    spec.write(dir.path()).unwrap();
    let s = {
        let ds = Dataset::open(dir.path()).unwrap();
        ds.get(4).unwrap()
    };
    assert_eq!(s.field("bin"), Some(&spec.payload(4)[..]));
}

#[test]
fn concurrent_readers_get_correct_bytes() {
    for compression in [Compression::None, Compression::Zstd] {
        let dir = tempfile::tempdir().unwrap();
        let spec = Arc::new(TestDataset::new(400, 7).compression(compression));
        spec.write(dir.path()).unwrap();
        for backing in both_backings() {
            let ds = Dataset::options()
                .backing(backing)
                .verify_on_read(true)
                .open(dir.path())
                .unwrap();
            std::thread::scope(|scope| {
                for t in 0..8u64 {
                    let (ds, spec) = (ds.clone(), Arc::clone(&spec));
                    scope.spawn(move || {
                        // Each thread walks the dataset in its own order (a stride coprime with 400).
                        let stride = [1, 3, 7, 9, 11, 13, 17, 19][t as usize];
                        for k in 0..400u64 {
                            let i = (k * stride + t) % 400;
                            let s = ds.get(i).unwrap();
                            assert_eq!(
                                s.field("bin"),
                                Some(&spec.payload(i)[..]),
                                "thread {t} sample {i}"
                            );
                        }
                    });
                }
            });
        }
    }
}

fn err_of(r: Result<Dataset, ReaderError>) -> ReaderError {
    r.expect_err("open should fail")
}

#[test]
fn open_refuses_an_incomplete_dataset() {
    let dir = tempfile::tempdir().unwrap();
    TestDataset::new(10, 2).write(dir.path()).unwrap();
    std::fs::remove_file(dir.path().join("bale.json")).unwrap();
    let err = err_of(Dataset::open(dir.path()));
    assert!(
        matches!(err, ReaderError::Format(FormatError::Incomplete { .. })),
        "{err}"
    );
    assert!(
        err.to_string().contains("not a complete bale dataset"),
        "{err}"
    );
}

fn edit_manifest(dir: &Path, f: impl FnOnce(&mut Manifest)) {
    let mut m = Manifest::read(dir).unwrap();
    f(&mut m);
    std::fs::remove_file(Manifest::path_in(dir)).unwrap();
    m.write(dir).unwrap();
}

#[test]
fn open_refuses_an_index_that_does_not_match_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    TestDataset::new(10, 2).write(dir.path()).unwrap();
    edit_manifest(dir.path(), |m| {
        m.shards[1].index_xxh3 = "0123456789abcdef".into()
    });
    let err = err_of(Dataset::open(dir.path()));
    match &err {
        ReaderError::ManifestMismatch {
            shard, path, what, ..
        } => {
            assert_eq!(*shard, 1);
            assert!(path.ends_with("shard-000001.idx"), "{err}");
            assert!(what.contains("0123456789abcdef"), "{err}");
        }
        other => panic!("unexpected error {other}"),
    }

    // An index replaced by another shard's index (valid, but not the one recorded).
    let dir = tempfile::tempdir().unwrap();
    TestDataset::new(10, 2).write(dir.path()).unwrap();
    std::fs::copy(
        dir.path().join("shard-000000.idx"),
        dir.path().join("shard-000001.idx"),
    )
    .unwrap();
    let err = err_of(Dataset::open(dir.path()));
    assert!(
        matches!(err, ReaderError::ManifestMismatch { shard: 1, .. }),
        "{err}"
    );
}

#[test]
fn open_refuses_a_missing_or_truncated_shard() {
    let dir = tempfile::tempdir().unwrap();
    TestDataset::new(10, 2).write(dir.path()).unwrap();
    let shard = dir.path().join("shard-000001.tar");
    let len = std::fs::metadata(&shard).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len - 512)
        .unwrap();
    let err = err_of(Dataset::open(dir.path()));
    assert!(
        matches!(err, ReaderError::Format(FormatError::Truncated { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("shard-000001.tar"), "{err}");
    std::fs::remove_file(&shard).unwrap();
    let err = err_of(Dataset::open(dir.path()));
    assert!(
        matches!(err, ReaderError::Format(FormatError::Io { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("shard-000001.tar"), "{err}");
}

#[test]
fn open_refuses_a_corrupt_or_newer_index() {
    let dir = tempfile::tempdir().unwrap();
    TestDataset::new(10, 2).write(dir.path()).unwrap();
    let idx = dir.path().join("shard-000000.idx");
    let mut bytes = std::fs::read(&idx).unwrap();
    bytes[100] ^= 0x10;
    std::fs::write(&idx, &bytes).unwrap();
    let err = err_of(Dataset::open(dir.path()));
    assert!(
        matches!(
            err,
            ReaderError::Format(FormatError::ChecksumMismatch { .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("shard-000000.idx"), "{err}");
    bytes[100] ^= 0x10;
    bytes[8] = 9; // major version 9
    std::fs::write(&idx, &bytes).unwrap();
    let err = err_of(Dataset::open(dir.path()));
    assert!(
        matches!(
            err,
            ReaderError::Format(FormatError::UnsupportedVersion { major: 9, .. })
        ),
        "{err}"
    );
}

/// Offset in the shard file of sample `i`'s `.bin` data (plain tar: right after its 512-byte header).
fn bin_offset(dir: &Path, shard: &str, local: usize) -> u64 {
    let idx = bale_format::ShardIndex::open(dir.join(shard.replace(".tar", ".idx"))).unwrap();
    idx.members(local).next().unwrap().offset
}

#[test]
fn a_flipped_bit_is_caught_by_verify_on_read() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TestDataset::new(10, 2);
    spec.write(dir.path()).unwrap();
    let shard = dir.path().join("shard-000000.tar");
    let at = bin_offset(dir.path(), "shard-000000.tar", 3) + 5;
    let mut bytes = std::fs::read(&shard).unwrap();
    bytes[at as usize] ^= 0x01;
    std::fs::write(&shard, &bytes).unwrap();
    for backing in both_backings() {
        // Unverified reads return the damaged bytes; verified reads refuse them.
        let ds = Dataset::options()
            .backing(backing)
            .open(dir.path())
            .unwrap();
        assert_ne!(ds.get(3).unwrap().field("bin"), Some(&spec.payload(3)[..]));
        let ds = Dataset::options()
            .backing(backing)
            .verify_on_read(true)
            .open(dir.path())
            .unwrap();
        let err = ds.get(3).unwrap_err();
        assert!(
            matches!(
                err,
                ReaderError::Format(FormatError::ChecksumMismatch { .. })
            ),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("shard-000000.tar") && msg.contains(&spec.key(3)) && msg.contains("bin"),
            "{msg}"
        );
        // Its neighbours are fine.
        check_neighbours(&spec, &ds, &[2, 4]);
    }
}

fn check_neighbours(spec: &TestDataset, ds: &Dataset, ids: &[u64]) {
    for &i in ids {
        assert_eq!(ds.get(i).unwrap().field("bin"), Some(&spec.payload(i)[..]));
    }
}

#[test]
fn a_damaged_zstd_frame_is_an_error_naming_the_shard() {
    let dir = tempfile::tempdir().unwrap();
    let spec = TestDataset::new(10, 1)
        .compression(Compression::Zstd)
        .payload_len(3000, 3000);
    spec.write(dir.path()).unwrap();
    let idx = bale_format::ShardIndex::open(dir.path().join("shard-000000.idx")).unwrap();
    let e = idx.sample(4);
    let shard = dir.path().join("shard-000000.tar.zst");
    let mut bytes = std::fs::read(&shard).unwrap();
    // Damage the middle of sample 4's frame.
    let mid = (e.file_offset + e.file_len / 2) as usize;
    for b in &mut bytes[mid..mid + 16] {
        *b ^= 0xA5;
    }
    std::fs::write(&shard, &bytes).unwrap();
    for backing in both_backings() {
        let ds = Dataset::options()
            .backing(backing)
            .verify_on_read(true)
            .open(dir.path())
            .unwrap();
        let err = ds.get(4).unwrap_err();
        assert!(err.to_string().contains("shard-000000.tar.zst"), "{err}");
        check_neighbours(&spec, &ds, &[3, 5]);
    }
}

#[test]
fn a_shard_truncated_after_open_is_an_error_with_pread() {
    let spec = TestDataset::new(10, 1);
    // A dataset of its own, opened with `Backing::Pread`.
    let opened = || {
        let dir = tempfile::tempdir().unwrap();
        spec.write(dir.path()).unwrap();
        let ds = Dataset::options()
            .backing(Backing::Pread)
            .open(dir.path())
            .unwrap();
        (dir, ds)
    };
    let (dir, ds) = opened();
    let shard = dir.path().join("shard-000000.tar");
    let len = std::fs::metadata(&shard).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    // The shard file is first opened here: it is not the file the dataset
    // found at the open (nor of the length its index describes).
    let err = ds.get(9).unwrap_err();
    assert!(matches!(err, ReaderError::ShardReplaced { .. }), "{err}");
    assert!(!err.is_sample_damage(), "{err}");
    // Opened before the truncation: the read itself fails.
    let (dir, ds) = opened();
    ds.get(0).unwrap();
    let shard = dir.path().join("shard-000000.tar");
    OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let err = ds.get(9).unwrap_err();
    assert!(err.to_string().contains("shard-000000.tar"), "{err}");
    // A read past the new end, of a file written since the open: the shard
    // changed, which no reader may take for one damaged sample.
    assert!(matches!(err, ReaderError::ShardReplaced { .. }), "{err}");
    assert!(ds.get(0).is_ok());

    // The index cut short after the open: read into memory at the open,
    // it is no signal either (a mapped index would raise SIGBUS here).
    let (dir, ds) = opened();
    std::fs::File::create(dir.path().join("shard-000000.idx")).unwrap();
    for i in 0..10 {
        assert_eq!(ds.key(i).unwrap(), spec.key(i));
        check_sample(&spec, &ds, i);
    }
}

#[test]
fn a_huge_index_is_refused_before_it_is_read_into_memory() {
    // Backing::Pread reads indexes into memory: a hostile or damaged file of
    // gigabytes (sparse here) is refused from its first bytes and length,
    // never allocated.
    let spec = TestDataset::new(10, 1);
    for zeroed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        spec.write(dir.path()).unwrap();
        let idx = dir.path().join("shard-000000.idx");
        if zeroed {
            std::fs::File::create(&idx).unwrap();
        }
        OpenOptions::new()
            .write(true)
            .open(&idx)
            .unwrap()
            .set_len(3 << 30)
            .unwrap();
        let err = err_of(Dataset::options().backing(Backing::Pread).open(dir.path()));
        assert!(err.to_string().contains("shard-000000.idx"), "{err}");
        if zeroed {
            assert!(
                matches!(err, ReaderError::Format(FormatError::BadMagic { .. })),
                "{err}"
            );
        } else {
            assert!(err.to_string().contains("more than an index"), "{err}");
        }
    }
}

#[test]
fn a_shard_replaced_after_open_is_an_error_not_another_files_bytes() {
    let spec = TestDataset::new(10, 2);
    for backing in both_backings() {
        // A dataset of its own, opened.
        let opened = || {
            let dir = tempfile::tempdir().unwrap();
            spec.write(dir.path()).unwrap();
            let ds = Dataset::options()
                .backing(backing)
                .open(dir.path())
                .unwrap();
            (dir, ds)
        };
        let (dir, ds) = opened();
        // Shard 0 is opened now; shard 1 (samples 5..10) on its first read.
        check_neighbours(&spec, &ds, &[0]);
        // Another file of the same length renamed over shard 1, as a pack
        // with `--force` does: the index read at the open does not describe it.
        let shard = dir.path().join("shard-000001.tar");
        let at = bin_offset(dir.path(), "shard-000001.tar", 2) as usize;
        let mut bytes = std::fs::read(&shard).unwrap();
        bytes[at] ^= 0x01;
        // Past the file system's clock step: the file is told apart by its
        // times (a pack takes longer than that).
        std::thread::sleep(std::time::Duration::from_millis(50));
        let tmp = dir.path().join("new.tmp");
        std::fs::write(&tmp, &bytes).unwrap();
        std::fs::rename(&tmp, &shard).unwrap();
        let err = ds.get(7).unwrap_err();
        assert!(
            matches!(&err, ReaderError::ShardReplaced { path } if path == &shard),
            "{backing:?}: {err}"
        );
        assert!(err.to_string().contains("open the dataset again"), "{err}");
        // The shard opened before the replacement still reads the file it opened.
        check_neighbours(&spec, &ds, &[1, 4]);
        // Opened again, the dataset reads the new file.
        let again = Dataset::options()
            .backing(backing)
            .open(dir.path())
            .unwrap();
        assert_ne!(
            again.get(7).unwrap().field("bin"),
            Some(&spec.payload(7)[..])
        );
        check_neighbours(&spec, &again, &[5, 6, 8]);

        // The same file written in place, at the same length.
        let (dir, ds) = opened();
        // Past the file system's clock step, so the write moves the time.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let shard = dir.path().join("shard-000001.tar");
        std::fs::write(&shard, &bytes).unwrap();
        let err = ds.get(7).unwrap_err();
        assert!(
            matches!(&err, ReaderError::ShardReplaced { .. }),
            "{backing:?}: {err}"
        );
    }
}

#[test]
fn a_bad_label_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut w =
        bale_format::ShardFileWriter::create(dir.path(), "shard-000000.tar", Compression::None, 0)
            .unwrap();
    let m = |ext, data| bale_format::Member { ext, data };
    w.writer()
        .write_sample("a", &[m("bin", b"x"), m("cls", b" 12\n")])
        .unwrap();
    w.writer()
        .write_sample("b", &[m("bin", b"y"), m("cls", b"dog")])
        .unwrap();
    w.writer().write_sample("c", &[m("bin", b"z")]).unwrap();
    let entry = w.finish().unwrap();
    let created_by = bale_format::CreatedBy {
        tool: "t".into(),
        version: "0".into(),
        command: "t".into(),
        options: Default::default(),
    };
    Manifest::new(vec![entry], None, created_by)
        .write(dir.path())
        .unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    assert_eq!(ds.get(0).unwrap().label(), Some(12));
    let err = ds.get(1).unwrap_err();
    assert!(
        matches!(&err, ReaderError::BadLabel { key, .. } if key == "b"),
        "{err}"
    );
    assert!(err.to_string().contains("dog"), "{err}");
    let err = ds.get_batch(&[0, 1, 2]).unwrap_err();
    assert!(
        matches!(&err, ReaderError::BadLabel { key, .. } if key == "b"),
        "{err}"
    );
    assert_eq!(ds.get(2).unwrap().label(), None);
    assert_eq!(ds.labels(), None);
    assert_eq!(ds.label_name(0), None);
}

#[test]
fn get_populated_and_get_batch_equal_get() {
    for compression in kinds() {
        let dir = tempfile::tempdir().unwrap();
        // Payloads from a few bytes to several pages: samples within one
        // page, across two, and larger than the small-sample limit.
        let spec = TestDataset::with_shard_sizes(vec![9, 0, 14])
            .compression(compression)
            .payload_len(16, 40_000);
        spec.write(dir.path()).unwrap();
        for backing in both_backings() {
            let ds = Dataset::options()
                .backing(backing)
                .open(dir.path())
                .unwrap();
            let fields = |s: &bale_reader::Sample| {
                let f: Vec<(String, Vec<u8>)> = s
                    .fields()
                    .map(|(e, b)| (e.to_owned(), b.to_vec()))
                    .collect();
                (s.key().to_owned(), s.index(), s.label(), f)
            };
            // Twice over: the first pass cold for the hint policy, the second warm.
            for _ in 0..2 {
                for i in 0..ds.len() {
                    let got = ds.get_populated(i).unwrap();
                    assert_eq!(fields(&got), fields(&ds.get(i).unwrap()), "sample {i}");
                    check_sample(&spec, &ds, i);
                }
            }
            let idx: Vec<u64> = vec![22, 0, 9, 9, 13, 8, 1, 22];
            let batch = ds.get_batch(&idx).unwrap();
            assert_eq!(batch.len(), idx.len());
            for (s, &i) in batch.iter().zip(&idx) {
                assert_eq!(fields(s), fields(&ds.get(i).unwrap()), "sample {i}");
            }
            assert!(ds.get_batch(&[]).unwrap().is_empty());
        }
    }
}

#[test]
fn get_batch_names_an_index_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    TestDataset::new(10, 2).write(dir.path()).unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    match ds.get_batch(&[3, 10, 2]) {
        Err(
            e @ ReaderError::IndexOutOfRange {
                index: 10, len: 10, ..
            },
        ) => {
            assert!(e.to_string().contains("10"), "{e}");
        }
        other => panic!("expected IndexOutOfRange for 10, got {other:?}"),
    }
}

/// `reads_are_quick`: a warm, local, mapped, uncompressed dataset learns it
/// within a few warm passes; a dataset whose reads are system calls or
/// decompressions never says it, however warm.
#[test]
fn reads_are_quick_only_when_warm_mapped_and_uncompressed() {
    for kind in kinds() {
        for backing in both_backings() {
            let dir = tempfile::tempdir().unwrap();
            let spec = TestDataset::new(1200, 2).compression(kind);
            spec.write(dir.path()).unwrap();
            for e in std::fs::read_dir(dir.path()).unwrap() {
                std::fs::read(e.unwrap().path()).unwrap();
            }
            let ds = Dataset::options()
                .backing(backing)
                .open(dir.path())
                .unwrap();
            assert!(
                !ds.reads_are_quick(),
                "{kind:?} {backing:?}: a dataset just opened is taken for cold"
            );
            // A touch preempted for 10 us just after a major fault passes for
            // a wait on storage: on a busy machine, give it a few passes.
            let quick = (0..5).any(|_| {
                for i in bale_reader::testing::shuffled_order(spec.len()) {
                    let s = ds.get_populated(i).unwrap();
                    assert_eq!(s.field("bin"), Some(&spec.payload(i)[..]));
                }
                ds.reads_are_quick()
            });
            let expected = backing == Backing::Mmap && kind != Compression::Zstd;
            assert_eq!(
                quick, expected,
                "{kind:?} {backing:?}: reads_are_quick after five warm passes"
            );
        }
    }
}
