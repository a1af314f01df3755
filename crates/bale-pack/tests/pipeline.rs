//! Library-level tests of the packing pipeline: each builds a small tree in a
//! temporary directory, packs it, and reads the dataset back with bale-format.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bale_format::read::ShardReader;
use bale_format::{Compression, Manifest, ShardEntry};
use bale_pack::{
    FileList, LabelMode, MemberData, MergeOptions, NoProgress, OnError, PackError, PackOrder,
    PackProgress, PackSummary, Packer, PackerBuilder, Part, SampleTransformError, merge,
};

type Samples = Vec<(String, Vec<(String, Vec<u8>)>)>;

fn write_tree(root: &Path, files: &[(&str, &[u8])]) {
    for (rel, data) in files {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data).unwrap();
    }
}

fn builder(input: &Path, out: &Path) -> PackerBuilder {
    Packer::builder().input(input).output(out).jobs(2)
}

fn pack(b: PackerBuilder) -> Result<PackSummary, PackError> {
    b.build()?.run(&NoProgress)
}

/// Every sample of a dataset, in order, with its members.
fn read_dataset(dir: &Path) -> Samples {
    let m = Manifest::read(dir).unwrap();
    let mut out = Vec::new();
    for s in &m.shards {
        let r = ShardReader::open(
            Manifest::resolve(dir, &s.file),
            Manifest::resolve(dir, &s.index),
        )
        .unwrap();
        for i in 0..r.len() {
            let sample = r.read(i, true).unwrap();
            let members = sample
                .members
                .iter()
                .map(|(e, d)| (e.clone(), d.clone()))
                .collect();
            out.push((sample.key.clone(), members));
        }
    }
    out
}

fn keys(s: &Samples) -> Vec<&str> {
    s.iter().map(|(k, _)| k.as_str()).collect()
}

fn files_in(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd {
            let e = e.unwrap();
            m.insert(
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap_or_default(),
            );
        }
    }
    m
}

fn member<'a>(s: &'a Samples, key: &str, ext: &str) -> Option<&'a [u8]> {
    s.iter()
        .find(|(k, _)| k == key)?
        .1
        .iter()
        .find(|(e, _)| e == ext)
        .map(|(_, d)| d.as_slice())
}

#[test]
fn groups_files_into_samples_with_members_in_extension_order() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    write_tree(
        &input,
        &[
            ("a/b/0001.jpg", b"jpg1"),
            ("a/b/0001.json", b"{}"),
            ("a/b/0001.seg.png", b"seg"),
            ("a/b/0002.jpg", b"jpg2"),
            ("c/0003.txt", b"t"),
        ],
    );
    let out = t.path().join("out");
    let s = pack(builder(&input, &out)).unwrap();
    assert_eq!((s.samples, s.members, s.shards), (3, 5, 1));
    assert_eq!(
        s.labels, "none",
        "a/b/.. is two levels deep: no auto labels"
    );
    let d = read_dataset(&out);
    assert_eq!(keys(&d), ["a/b/0001", "a/b/0002", "c/0003"]);
    let exts: Vec<&str> = d[0].1.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(exts, ["jpg", "json", "seg.png"]);
    assert_eq!(member(&d, "a/b/0001", "seg.png"), Some(&b"seg"[..]));
    let m = Manifest::read(&out).unwrap();
    assert_eq!(m.labels, None);
    assert_eq!(m.created_by.command, "pack");
    assert_eq!(m.created_by.options["labels"], "none");
}

#[test]
fn duplicate_key_and_extension_across_roots_names_both_files() {
    let t = tempfile::tempdir().unwrap();
    let (r1, r2) = (t.path().join("r1"), t.path().join("r2"));
    write_tree(&r1, &[("x/0001.jpg", b"1")]);
    write_tree(&r2, &[("x/0001.jpg", b"2"), ("x/0002.jpg", b"3")]);
    let out = t.path().join("out");
    let err = pack(builder(&r1, &out).input(&r2)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, PackError::DuplicateMember { .. }), "{msg}");
    assert!(
        msg.contains("r1/x/0001.jpg") && msg.contains("r2/x/0001.jpg"),
        "{msg}"
    );
    assert!(
        !out.exists(),
        "a failed pack removes the output directory it created"
    );
    // Different extensions under two roots join one sample.
    fs::rename(r2.join("x/0001.jpg"), r2.join("x/0001.json")).unwrap();
    pack(builder(&r1, &out).input(&r2)).unwrap();
    let d = read_dataset(&out);
    assert_eq!(keys(&d), ["x/0001", "x/0002"]);
    assert_eq!(member(&d, "x/0001", "json"), Some(&b"2"[..]));
}

#[test]
fn directory_labels_follow_torchvision_order_and_cls_is_decimal_text() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    let mut files = Vec::new();
    // Byte order (Python's sorted): "B" < "_c" < "a" < "a b"; 11 classes so index 10 has two digits.
    let classes = ["a", "B", "_c", "a b", "d", "e", "f", "g", "h", "i", "j"];
    let names: Vec<String> = classes.iter().map(|c| format!("{c}/img.jpg")).collect();
    for n in &names {
        files.push((n.as_str(), &b"x"[..]));
    }
    write_tree(&input, &files);
    fs::create_dir_all(input.join("empty_class")).unwrap();
    let out = t.path().join("out");
    let s = pack(builder(&input, &out).labels(LabelMode::Dir)).unwrap();
    assert_eq!((s.labels.as_str(), s.classes), ("dir", 11));
    let m = Manifest::read(&out).unwrap();
    let want = ["B", "_c", "a", "a b", "d", "e", "f", "g", "h", "i", "j"];
    assert_eq!(m.labels.clone().unwrap(), want);
    let d = read_dataset(&out);
    assert_eq!(member(&d, "B/img", "cls"), Some(&b"0"[..]));
    assert_eq!(member(&d, "a b/img", "cls"), Some(&b"3"[..]));
    assert_eq!(member(&d, "j/img", "cls"), Some(&b"10"[..]));
    // Members stay in extension order with the label slotted in.
    let exts: Vec<&str> = d[0].1.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(exts, ["cls", "jpg"]);
}

#[test]
fn auto_labels_only_for_image_folder_trees_and_files_at_the_root_are_outside_classes() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    write_tree(&input, &[("cat/1.jpg", b"c"), ("dog/2.jpg", b"d")]);
    let s = pack(builder(&input, &t.path().join("o1"))).unwrap();
    assert_eq!(s.labels, "dir");
    // A file at the root: auto gives no labels; dir labels ignore it.
    write_tree(&input, &[("readme.txt", b"r")]);
    let s = pack(builder(&input, &t.path().join("o2"))).unwrap();
    assert_eq!((s.labels.as_str(), s.samples), ("none", 3));
    let s = pack(builder(&input, &t.path().join("o3")).labels(LabelMode::Dir)).unwrap();
    assert_eq!(
        (s.labels.as_str(), s.samples, s.ignored.outside_class.count),
        ("dir", 2, 1)
    );
    // One class directory is not enough for auto.
    let one = t.path().join("one");
    write_tree(&one, &[("images/1.jpg", b"1"), ("images/2.jpg", b"2")]);
    assert_eq!(
        pack(builder(&one, &t.path().join("o4"))).unwrap().labels,
        "none"
    );
    // --labels none never adds .cls.
    let s = pack(builder(&input, &t.path().join("o5")).labels(LabelMode::None)).unwrap();
    assert_eq!(s.labels, "none");
    assert!(member(&read_dataset(&t.path().join("o5")), "cat/1", "cls").is_none());
}

#[test]
fn an_existing_cls_file_conflicts_with_labels() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    write_tree(
        &input,
        &[
            ("cat/1.jpg", b"c"),
            ("cat/1.cls", b"7"),
            ("dog/2.jpg", b"d"),
        ],
    );
    let err = pack(builder(&input, &t.path().join("o"))).unwrap_err();
    assert!(matches!(err, PackError::LabelConflict { .. }), "{err}");
    assert!(err.to_string().contains("cat/1.cls"), "{err}");
    pack(builder(&input, &t.path().join("o")).labels(LabelMode::None)).unwrap();
}

#[test]
fn csv_labels_by_path_or_key_with_missing_labels_failing_or_skipped() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    write_tree(
        &input,
        &[("x/1.jpg", b"1"), ("x/2.jpg", b"2"), ("y/3.jpg", b"3")],
    );
    let csv = t.path().join("labels.csv");
    fs::write(
        &csv,
        "path,label\nx/1.jpg,10\n./x/2.jpg,2\ny/3,\"10\"\nnope/9.jpg,2\n",
    )
    .unwrap();
    let out = t.path().join("out");
    let s = pack(builder(&input, &out).labels(LabelMode::Csv(csv.clone()))).unwrap();
    assert_eq!(s.labels, "csv");
    assert!(
        s.warnings.iter().any(|w| w.contains("line 5")),
        "{:?}",
        s.warnings
    );
    let m = Manifest::read(&out).unwrap();
    assert_eq!(
        m.labels.unwrap(),
        ["2", "10"],
        "integer labels sort numerically"
    );
    let d = read_dataset(&out);
    assert_eq!(member(&d, "x/1", "cls"), Some(&b"1"[..]));
    assert_eq!(member(&d, "x/2", "cls"), Some(&b"0"[..]));
    assert_eq!(member(&d, "y/3", "cls"), Some(&b"1"[..]));
    assert!(m.created_by.options["labels_csv_xxh3"].is_string());

    fs::write(&csv, "x/1.jpg,cat\nx/2.jpg,dog\n").unwrap();
    let err = pack(
        builder(&input, &out)
            .force(true)
            .labels(LabelMode::Csv(csv.clone())),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("y/3") && err.to_string().contains("no label"),
        "{err}"
    );
    assert!(!Manifest::path_in(&out).exists());
    let s = pack(
        builder(&input, &out)
            .force(true)
            .labels(LabelMode::Csv(csv.clone()))
            .on_error(OnError::Skip),
    )
    .unwrap();
    assert_eq!(s.samples, 2);
    assert_eq!(s.skipped.len(), 1);
    assert_eq!(Manifest::read(&out).unwrap().skipped, 1);

    fs::write(&csv, "x/1.jpg,cat\nx/1,dog\n").unwrap();
    let err = pack(
        builder(&input, &out)
            .force(true)
            .labels(LabelMode::Csv(csv)),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("line 2") && err.to_string().contains("line 1"),
        "{err}"
    );
}

#[test]
fn files_without_extension_hidden_files_empty_files_and_empty_directories() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    write_tree(
        &input,
        &[
            ("s/0001.jpg", b"x"),
            ("s/0001.txt", b""),
            ("s/README", b"no extension"),
            ("s/trailing.", b"empty extension"),
            ("s/.DS_Store", b"hidden"),
            (".git/config.txt", b"hidden dir"),
            ("s/.cache/0009.jpg", b"hidden dir"),
        ],
    );
    fs::create_dir_all(input.join("empty/deeper")).unwrap();
    let out = t.path().join("out");
    let s = pack(builder(&input, &out)).unwrap();
    assert_eq!(s.samples, 1);
    assert_eq!(s.ignored.no_extension.count, 2);
    assert_eq!(s.ignored.hidden.count, 3, "{:?}", s.ignored.hidden);
    let d = read_dataset(&out);
    assert_eq!(
        member(&d, "s/0001", "txt"),
        Some(&b""[..]),
        "empty files are empty members"
    );
}

#[cfg(unix)]
#[test]
fn non_utf8_names_are_bad_input() {
    use std::os::unix::ffi::OsStrExt;
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    write_tree(&input, &[("a/0001.jpg", b"1")]);
    let bad = input
        .join("a")
        .join(std::ffi::OsStr::from_bytes(b"\xff\xfe.jpg"));
    fs::write(&bad, b"2").unwrap();
    let out = t.path().join("out");
    let err = pack(builder(&input, &out)).unwrap_err();
    assert!(err.to_string().contains("not valid UTF-8"), "{err}");
    let s = pack(builder(&input, &out).on_error(OnError::Skip)).unwrap();
    assert_eq!((s.samples, s.skipped.len()), (1, 1));
    assert!(s.skipped[0].error.contains("UTF-8"));
}

fn numbered_tree(root: &Path, n: usize, size: usize) {
    for i in 0..n {
        let p = root.join(format!("c{}/{i:04}.bin", i % 3));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, vec![(i % 251) as u8; size + i % 7]).unwrap();
    }
}

#[test]
fn shard_size_and_sample_limits_and_an_oversize_sample() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    numbered_tree(&input, 20, 1000);
    write_tree(&input, &[("c0/big.bin", &[7u8; 20_000])]);
    let out = t.path().join("out");
    let limit = 8 * 1024;
    let s = pack(
        builder(&input, &out)
            .shard_size(limit)
            .labels(LabelMode::None),
    )
    .unwrap();
    let m = Manifest::read(&out).unwrap();
    assert_eq!(m.samples, 21);
    let mut oversize = 0;
    for sh in &m.shards {
        if sh.bytes > limit {
            assert_eq!(
                sh.samples, 1,
                "only a lone oversize sample may pass the limit"
            );
            oversize += 1;
        }
    }
    assert_eq!(oversize, 1);
    assert!(
        s.warnings.iter().any(|w| w.contains("c0/big")),
        "{:?}",
        s.warnings
    );
    // Every shard but the last is full: the next sample would not have fit.
    assert!(m.shards.len() >= 5);

    let out2 = t.path().join("out2");
    pack(builder(&input, &out2).shard_samples(Some(6))).unwrap();
    let counts: Vec<u64> = Manifest::read(&out2)
        .unwrap()
        .shards
        .iter()
        .map(|s| s.samples)
        .collect();
    assert_eq!(counts, [6, 6, 6, 3]);
    assert_eq!(
        keys(&read_dataset(&out2)),
        keys(&read_dataset(&out)),
        "limits never reorder samples"
    );
}

#[test]
fn shuffle_is_a_seeded_permutation_of_the_sorted_samples() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    numbered_tree(&input, 30, 10);
    let sorted = {
        pack(builder(&input, &t.path().join("sorted"))).unwrap();
        read_dataset(&t.path().join("sorted"))
    };
    let run = |name: &str, seed: u64| {
        let out = t.path().join(name);
        pack(builder(&input, &out).order(PackOrder::Shuffle(seed))).unwrap();
        read_dataset(&out)
    };
    let (a, b, c) = (run("a", 7), run("b", 7), run("c", 8));
    assert_eq!(a, b);
    assert_ne!(keys(&a), keys(&c));
    assert_ne!(keys(&a), keys(&sorted));
    let mut want: Vec<usize> = (0..30).collect();
    bale_format::shuffle::shuffle(&mut want, 7);
    let expect: Vec<&str> = want.iter().map(|&i| keys(&sorted)[i]).collect();
    assert_eq!(keys(&a), expect);
}

#[test]
fn output_is_byte_identical_for_any_job_count_and_budget() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    numbered_tree(&input, 60, 3000);
    let mut outs = Vec::new();
    for (i, (jobs, budget, zstd)) in [
        (1, 1 << 20, false),
        (4, 1 << 20, false),
        (4, 2000, false),
        (1, 1 << 20, true),
        (4, 5000, true),
    ]
    .into_iter()
    .enumerate()
    {
        let out = t.path().join(format!("out{i}"));
        let mut b = builder(&input, &out)
            .jobs(jobs)
            .in_flight_bytes(budget)
            .shard_size(40_000)
            .order(PackOrder::Shuffle(3));
        if zstd {
            b = b.compression(Compression::Zstd, 5);
        }
        pack(b).unwrap();
        outs.push(files_in(&out));
    }
    assert!(outs[0].len() > 4, "several shards: {:?}", outs[0].keys());
    assert_eq!(outs[0], outs[1], "jobs 1 vs 4");
    assert_eq!(
        outs[0], outs[2],
        "streamed (budget below the file size) vs loaded"
    );
    assert_eq!(outs[3], outs[4], "zstd, jobs 1 vs 4");
    assert!(outs[3].keys().any(|k| k.ends_with(".tar.zst")));
}

#[test]
fn refuses_a_non_empty_output_without_force() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    numbered_tree(&input, 3, 10);
    let out = t.path().join("out");
    fs::create_dir_all(&out).unwrap();
    fs::write(out.join("keep.txt"), b"mine").unwrap();
    let err = pack(builder(&input, &out)).unwrap_err();
    assert!(matches!(err, PackError::OutputNotEmpty { .. }), "{err}");
    assert_eq!(files_in(&out).len(), 1);
    pack(builder(&input, &out).force(true)).unwrap();
    assert_eq!(files_in(&out)["keep.txt"], b"mine");
}

#[cfg(unix)]
#[test]
fn fifo_is_bad_input_failing_or_skipped_with_its_whole_sample() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    write_tree(&input, &[("a/0001.jpg", b"1"), ("a/0002.jpg", b"2")]);
    let fifo = input.join("a/0002.json");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let out = t.path().join("out");
    let err = pack(builder(&input, &out)).unwrap_err();
    assert!(
        err.to_string().contains("a/0002.json") && err.to_string().contains("FIFO"),
        "{err}"
    );
    assert!(!out.exists());
    let s = pack(builder(&input, &out).on_error(OnError::Skip)).unwrap();
    assert_eq!(keys(&read_dataset(&out)), ["a/0001"]);
    let skipped: Vec<String> = s
        .skipped
        .iter()
        .map(|f| f.path.display().to_string())
        .collect();
    assert_eq!(
        skipped.len(),
        2,
        "the FIFO and its sample's other member: {skipped:?}"
    );
    assert_eq!(Manifest::read(&out).unwrap().skipped, 2);
}

#[cfg(unix)]
#[test]
fn symlinks_are_ignored_unless_followed_and_broken_links_and_loops_are_bad_input() {
    use std::os::unix::fs::symlink;
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    let elsewhere = t.path().join("elsewhere");
    write_tree(&input, &[("a/0001.jpg", b"1")]);
    write_tree(&elsewhere, &[("0005.jpg", b"5")]);
    symlink(elsewhere.join("0005.jpg"), input.join("a/0002.jpg")).unwrap();
    symlink(&elsewhere, input.join("linked")).unwrap();
    let s = pack(builder(&input, &t.path().join("o1"))).unwrap();
    assert_eq!((s.samples, s.ignored.symlinks.count), (1, 2));
    let s = pack(builder(&input, &t.path().join("o2")).follow_links(true)).unwrap();
    assert_eq!(s.samples, 3);
    let d = read_dataset(&t.path().join("o2"));
    assert_eq!(keys(&d), ["a/0001", "a/0002", "linked/0005"]);
    assert_eq!(member(&d, "a/0002", "jpg"), Some(&b"5"[..]));

    // A broken link: ignored when not following, an error naming it when following.
    symlink(t.path().join("missing.jpg"), input.join("a/0003.jpg")).unwrap();
    pack(builder(&input, &t.path().join("o3"))).unwrap();
    let err = pack(builder(&input, &t.path().join("o4")).follow_links(true)).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("a/0003.jpg") && msg.contains("No such file"),
        "{msg}"
    );
    let s = pack(
        builder(&input, &t.path().join("o4"))
            .follow_links(true)
            .on_error(OnError::Skip),
    )
    .unwrap();
    assert_eq!((s.samples, s.skipped.len()), (3, 1));

    // A loop back to an ancestor.
    fs::remove_file(input.join("a/0003.jpg")).unwrap();
    symlink(&input, input.join("a/loop")).unwrap();
    let err = pack(builder(&input, &t.path().join("o5")).follow_links(true)).unwrap_err();
    assert!(err.to_string().contains("symlink loop"), "{err}");
}

/// Runs a closure once the plan is made: the files are listed and sized, not yet read.
struct OnPlanned<F: Fn()>(F);
impl<F: Fn()> PackProgress for OnPlanned<F> {
    fn planned(&self, _: u64, _: u64) {
        (self.0)()
    }
}

#[test]
fn files_that_vanish_or_change_size_during_the_pack() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    numbered_tree(&input, 6, 100);
    let out = t.path().join("out");
    let vanish = input.join("c1/0004.bin");
    let grow = input.join("c2/0005.bin");
    let hook = OnPlanned(|| {
        let _ = fs::remove_file(&vanish);
        let _ = fs::write(&grow, vec![1u8; 5000]);
    });
    let err = builder(&input, &out)
        .build()
        .unwrap()
        .run(&hook)
        .unwrap_err();
    assert!(err.to_string().contains("c1/0004.bin"), "{err}");
    assert!(!out.exists(), "no dataset, no directory left");
    numbered_tree(&input, 6, 100);
    for budget in [1 << 20, 10] {
        let out = t.path().join(format!("out{budget}"));
        let s = builder(&input, &out)
            .on_error(OnError::Skip)
            .in_flight_bytes(budget)
            .build()
            .unwrap()
            .run(&hook)
            .unwrap();
        assert_eq!(s.samples, 4);
        let errors: Vec<&str> = s.skipped.iter().map(|f| f.error.as_str()).collect();
        assert!(errors[0].contains("No such file"), "{errors:?}");
        assert!(errors[1].contains("changed during the pack"), "{errors:?}");
        numbered_tree(&input, 6, 100);
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_file_listed_as_empty_that_gives_bytes_is_an_error_not_an_empty_sample() {
    use std::os::unix::fs::symlink;
    // procfs lists its files with size 0 and then gives their text.
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    fs::create_dir_all(&input).unwrap();
    fs::write(input.join("a.txt"), b"a").unwrap();
    symlink("/proc/version", input.join("b.txt")).unwrap();
    assert_eq!(fs::metadata(input.join("b.txt")).unwrap().len(), 0);
    let out = t.path().join("out");
    let err = pack(builder(&input, &out).follow_links(true)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("b.txt") && msg.contains("grew past"), "{msg}");
    assert!(!out.exists(), "no dataset, no directory left");
}

#[test]
fn cancel_leaves_no_manifest_and_no_shards() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    numbered_tree(&input, 40, 2000);
    let out = t.path().join("out");
    fs::create_dir_all(&out).unwrap();
    let flag = Arc::new(AtomicBool::new(false));
    struct CancelAfterShard(Arc<AtomicBool>, RefCell<u32>);
    impl PackProgress for CancelAfterShard {
        fn shard_finished(&self, _: &ShardEntry) {
            *self.1.borrow_mut() += 1;
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let p = CancelAfterShard(flag.clone(), RefCell::new(0));
    let err = builder(&input, &out)
        .shard_size(10_000)
        .cancel_flag(flag)
        .build()
        .unwrap()
        .run(&p)
        .unwrap_err();
    assert!(matches!(err, PackError::Cancelled), "{err}");
    assert!(*p.1.borrow() >= 1, "a shard was in place before the cancel");
    assert!(
        files_in(&out).is_empty(),
        "left: {:?}",
        files_in(&out).keys()
    );
}

#[test]
fn transform_hook_runs_on_members_and_its_errors_are_input_errors() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    write_tree(
        &input,
        &[
            ("a/1.txt", b"hello"),
            ("a/1.jpg", b"img"),
            ("a/2.txt", b"bad"),
        ],
    );
    let upper = |ext: &str, data: Vec<u8>| -> Result<Vec<u8>, bale_pack::TransformError> {
        if data == b"bad" {
            return Err("refused".into());
        }
        Ok(if ext == "txt" {
            data.to_ascii_uppercase()
        } else {
            data
        })
    };
    let out = t.path().join("out");
    let err = pack(builder(&input, &out).transform("upper", upper)).unwrap_err();
    assert!(
        err.to_string().contains("a/2.txt") && err.to_string().contains("refused"),
        "{err}"
    );
    pack(
        builder(&input, &out)
            .transform("upper", upper)
            .on_error(OnError::Skip),
    )
    .unwrap();
    let d = read_dataset(&out);
    assert_eq!(member(&d, "a/1", "txt"), Some(&b"HELLO"[..]));
    assert_eq!(member(&d, "a/1", "jpg"), Some(&b"img"[..]));
    assert_eq!(
        Manifest::read(&out).unwrap().created_by.options["transform"],
        "upper"
    );
}

#[test]
fn sample_transform_renames_and_adds_members_in_extension_order() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    write_tree(
        &input,
        &[
            ("c/1.jpg", b"one"),
            ("c/1.txt", b"caption"),
            ("c/2.jpg", b"two"),
        ],
    );
    // jpg -> zzz (renamed, sorts last), plus a new "aaa" member (sorts first).
    let f =
        |key: &str, members: Vec<MemberData>| -> Result<Vec<MemberData>, SampleTransformError> {
            let mut out: Vec<MemberData> = members
                .into_iter()
                .map(|m| MemberData {
                    ext: if m.ext == "jpg" { "zzz".into() } else { m.ext },
                    data: m.data,
                })
                .collect();
            out.push(MemberData {
                ext: "aaa".into(),
                data: key.as_bytes().to_vec(),
            });
            Ok(out)
        };
    let out = t.path().join("out");
    pack(
        builder(&input, &out)
            .labels(LabelMode::Dir)
            .sample_transform("rename", f),
    )
    .unwrap();
    let d = read_dataset(&out);
    let exts: Vec<&str> = d[0].1.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(
        exts,
        ["aaa", "cls", "txt", "zzz"],
        "sorted, label slotted in"
    );
    assert_eq!(member(&d, "c/1", "aaa"), Some(&b"c/1"[..]));
    assert_eq!(member(&d, "c/2", "zzz"), Some(&b"two"[..]));
    assert_eq!(member(&d, "c/2", "jpg"), None);
    let m = Manifest::read(&out).unwrap();
    assert_eq!(m.fields["aaa"].count, 2);
    assert_eq!(m.created_by.options["transform"], "rename");
    assert!(m.created_by.options.get("image").is_none());

    // Two members with one name, a bad name, or a .cls beside labels: input
    // errors naming a file of the sample.
    let dup =
        |_: &str, members: Vec<MemberData>| -> Result<Vec<MemberData>, SampleTransformError> {
            Ok(members
                .into_iter()
                .map(|m| MemberData {
                    ext: "x".into(),
                    data: m.data,
                })
                .collect())
        };
    let bad = t.path().join("bad");
    let err = pack(builder(&input, &bad).sample_transform("dup", dup)).unwrap_err();
    assert!(err.to_string().contains("two .x members"), "{err}");
    assert!(err.to_string().contains("c/1."), "{err}");
    let slash = |_: &str, _: Vec<MemberData>| -> Result<Vec<MemberData>, SampleTransformError> {
        Ok(vec![MemberData {
            ext: "a/b".into(),
            data: vec![],
        }])
    };
    let err = pack(builder(&input, &bad).sample_transform("slash", slash)).unwrap_err();
    assert!(err.to_string().contains("\"a/b\""), "{err}");
    let cls = |_: &str, _: Vec<MemberData>| -> Result<Vec<MemberData>, SampleTransformError> {
        Ok(vec![MemberData {
            ext: "cls".into(),
            data: b"9".to_vec(),
        }])
    };
    let err = pack(
        builder(&input, &bad)
            .labels(LabelMode::Dir)
            .sample_transform("cls", cls),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("labels are added as .cls"),
        "{err}"
    );
    // Errors blame the member the transform names.
    let blame =
        |key: &str, members: Vec<MemberData>| -> Result<Vec<MemberData>, SampleTransformError> {
            if key == "c/2" {
                return Ok(members);
            }
            Err(SampleTransformError {
                ext: Some("txt".into()),
                source: "no".into(),
            })
        };
    let summary = pack(
        builder(&input, &bad)
            .sample_transform("blame", blame)
            .on_error(OnError::Skip)
            .force(true),
    )
    .unwrap();
    assert_eq!(summary.samples, 1);
    assert!(
        summary.skipped[0].path.ends_with("c/1.txt"),
        "{:?}",
        summary.skipped
    );
}

#[test]
fn file_lists_are_relative_to_the_base_and_globs_filter() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    write_tree(
        &input,
        &[
            ("a/1.jpg", b"1"),
            ("a/1.json", b"j"),
            ("b/2.jpg", b"2"),
            ("b/skip/3.jpg", b"3"),
        ],
    );
    let out = t.path().join("out");
    let list = FileList::Paths(vec![
        PathBuf::from("a/1.jpg"),
        input.join("b"),
        PathBuf::from("./a/1.jpg"),
    ]);
    let s = pack(
        Packer::builder()
            .input(&input)
            .output(&out)
            .files_from(list),
    )
    .unwrap();
    assert_eq!(s.samples, 3);
    assert_eq!(keys(&read_dataset(&out)), ["a/1", "b/2", "b/skip/3"]);
    let missing = FileList::Paths(vec![PathBuf::from("a/404.jpg")]);
    let err = pack(
        Packer::builder()
            .input(&input)
            .output(t.path().join("o2"))
            .files_from(missing),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("a/404.jpg") && err.to_string().contains("No such file"),
        "{err}"
    );

    let out = t.path().join("o3");
    let s = pack(
        builder(&input, &out)
            .include("*.jpg")
            .exclude("b/skip")
            .labels(LabelMode::None),
    )
    .unwrap();
    assert_eq!((s.samples, s.members), (2, 2));
    assert_eq!(
        s.ignored.excluded.count, 2,
        "a/1.json and the b/skip directory"
    );
}

#[test]
fn output_inside_the_input_is_not_packed() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    numbered_tree(&input, 4, 10);
    let out = input.join("packed");
    pack(builder(&input, &out)).unwrap();
    let s = pack(builder(&input, &out).force(true)).unwrap();
    assert_eq!(s.samples, 4);
}

#[test]
fn three_parts_merged_hold_exactly_the_samples_of_one_pack() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    numbered_tree(&input, 50, 500);
    let one = t.path().join("one");
    let opts = |b: PackerBuilder| b.shard_size(6000).order(PackOrder::Shuffle(11));
    pack(opts(builder(&input, &one))).unwrap();
    let mut parts = Vec::new();
    for i in 0..3 {
        let dir = t.path().join(format!("part{i}"));
        pack(opts(builder(&input, &dir)).part(Some(Part { index: i, count: 3 }))).unwrap();
        let names = files_in(&dir);
        assert!(
            names
                .keys()
                .all(|n| n == "bale.json" || n.starts_with(&format!("part-{i:04}-of-0003-shard-")))
        );
        parts.push(dir);
    }
    // Incomplete or mismatched sets are refused, and leave the parts intact.
    let merged = t.path().join("merged");
    let err = merge(&parts[..2], &merged, &MergeOptions::default()).unwrap_err();
    assert!(err.to_string().contains("missing 2/3"), "{err}");
    let odd = t.path().join("odd");
    pack(
        builder(&input, &odd)
            .shard_size(6000)
            .part(Some(Part { index: 2, count: 3 })),
    )
    .unwrap();
    let err = merge(
        &[parts[0].clone(), parts[1].clone(), odd],
        &merged,
        &MergeOptions::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("other options") && err.to_string().contains("order"),
        "{err}"
    );
    assert!(!merged.exists());

    let s = merge(&parts, &merged, &MergeOptions::default()).unwrap();
    assert_eq!(s.parts, 3);
    assert_eq!(s.copied, 0);
    assert_eq!(
        read_dataset(&merged),
        read_dataset(&one),
        "same samples, same order"
    );
    let m = Manifest::read(&merged).unwrap();
    assert_eq!(m.shards[0].file, "shard-000000.tar");
    assert_eq!(m.created_by.command, "merge");
    assert!(parts.iter().all(|p| !Manifest::path_in(p).exists()));
}
