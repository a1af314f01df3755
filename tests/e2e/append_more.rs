//! `bale convert --append` and `bale index --append`: the promises of
//! `bale pack --append` (tests/e2e/append.rs) for the other two commands
//! that write datasets: new shards or indexes after the old ones, one new
//! manifest as the commit point, old files never rewritten, old readers
//! keep their view, and a refused, failed or interrupted append leaves the
//! dataset as it was.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bale_format::Manifest;
use bale_reader::Dataset;

use crate::append::{kill_append_after, ok, shard_files, verifies};
use crate::common::{Bounded, bale_bounded, pack_quiet, samples, snapshot, text_tree};

/// `bale CMD -q --append ARGS...`.
fn run(cmd: &str, args: &[&OsStr]) -> Bounded {
    let mut all: Vec<&OsStr> = vec![cmd.as_ref(), "-q".as_ref(), "--append".as_ref()];
    all.extend(args);
    bale_bounded(&all)
}

/// `bale convert -q --append SRC -o DS EXTRA...`.
fn convert_append(src: &Path, ds: &Path, extra: &[&str]) -> Bounded {
    let mut args: Vec<&OsStr> = vec![src.as_os_str(), "-o".as_ref(), ds.as_os_str()];
    args.extend(extra.iter().map(OsStr::new));
    run("convert", &args)
}

/// `bale convert -q SRC -o DS EXTRA...`, which must succeed.
fn convert_quiet(src: &Path, ds: &Path, extra: &[&str]) {
    let mut args: Vec<&OsStr> = vec![
        "convert".as_ref(),
        "-q".as_ref(),
        src.as_os_str(),
        "-o".as_ref(),
        ds.as_os_str(),
    ];
    args.extend(extra.iter().map(OsStr::new));
    let o = bale_bounded(&args);
    assert!(ok(&o), "{}", o.describe());
}

/// A tree of classes `cat` and `dog`, `n` files each, keyed
/// `CLASS/<prefix>NNNN`.
fn tree(root: &Path, prefix: &str, n: usize) {
    for class in ["cat", "dog"] {
        text_tree(root, class, &format!("{prefix}-{class}"), n);
        for i in 0..n {
            let dir = root.join(class);
            fs::rename(
                dir.join(format!("{i:04}.txt")),
                dir.join(format!("{prefix}{i:04}.txt")),
            )
            .unwrap();
        }
    }
}

/// Two packed datasets of the same classes and different keys: `a` (30
/// samples a class) and `b` (20), shards of 10 samples.
fn packed(t: &Path) -> (PathBuf, PathBuf) {
    let (ta, tb) = (t.join("tree-a"), t.join("tree-b"));
    tree(&ta, "a", 30);
    tree(&tb, "b", 20);
    let (a, b) = (t.join("a"), t.join("b"));
    pack_quiet(&ta, &a, &["--shard-samples", "10"]);
    pack_quiet(&tb, &b, &["--shard-samples", "10"]);
    (a, b)
}

#[test]
fn convert_append_adds_shards_after_the_old_ones_which_stay_byte_for_byte_and_old_readers_keep_their_view()
 {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = packed(t.path());
    let ds = t.path().join("ds");
    convert_quiet(&a, &ds, &["--shard-samples", "25"]);
    let before = shard_files(&ds);
    let old_samples = samples(&ds);
    let old = Dataset::open(&ds).unwrap();
    assert_eq!(old.len(), 60);
    // mtimes have a coarse clock: a rewrite within it would keep them.
    std::thread::sleep(Duration::from_millis(20));

    let o = convert_append(&b, &ds, &["--shard-samples", "25", "--json"]);
    assert!(ok(&o), "{}", o.describe());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (j["appended_to"].as_u64(), j["samples"].as_u64()),
        (Some(60), Some(40))
    );
    let after = shard_files(&ds);
    assert_eq!(after[..before.len()], before[..]);
    let m = Manifest::read(&ds).unwrap();
    let names: Vec<&str> = m.shards.iter().map(|s| s.file.as_str()).collect();
    assert_eq!(
        names,
        [
            "shard-000000.tar",
            "shard-000001.tar",
            "shard-000002.tar",
            "shard-000003.tar",
            "shard-000004.tar"
        ]
    );
    assert_eq!(m.samples, 100);
    assert_eq!(m.created_by.command, "convert");
    assert_eq!(m.created_by.options["appends"], 1);
    assert_eq!(m.labels, Some(vec!["cat".to_owned(), "dog".to_owned()]));

    // The reader opened before reads exactly its own samples.
    assert_eq!(old.len(), 60);
    for (i, (key, members)) in old_samples.iter().enumerate() {
        let s = old.get(i as u64).unwrap();
        assert_eq!(s.key(), key);
        for (ext, bytes) in members {
            assert_eq!(s.field(ext), Some(&bytes[..]), "{key}.{ext}");
        }
    }
    // A new open sees old then new, the new samples as `b` has them.
    let all = samples(&ds);
    assert_eq!(all[..60], old_samples[..]);
    assert_eq!(all[60..], samples(&b)[..]);
    let s = Dataset::open(&ds).unwrap().get_by_key("dog/b0007").unwrap();
    assert_eq!(s.label(), Some(1));
    verifies(&ds);
}

#[test]
fn convert_append_refuses_what_does_not_fit_before_anything_is_written_naming_it() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = packed(t.path());
    let ds = t.path().join("ds");
    convert_quiet(&a, &ds, &["--format", "tar.zst"]);
    let refused = |src: &Path, extra: &[&str], says: &[&str]| {
        let before = snapshot(t.path());
        let o = convert_append(src, &ds, extra);
        let err = o.stderr_text();
        assert!(o.failed_cleanly(), "{extra:?}: {}", o.describe());
        for w in says {
            assert!(err.contains(w), "{extra:?}: {w:?} not in: {}", o.describe());
        }
        assert!(snapshot(t.path()) == before, "{extra:?}: files changed");
    };
    // A key the dataset holds: the key, the input file and the shard.
    refused(
        &a,
        &["--format", "tar.zst"],
        &[
            "\"cat/a0000\"",
            "a/shard-000000.tar",
            "in shard-000000.tar.zst",
            "already in the dataset",
        ],
    );
    // Settings unlike the dataset's.
    refused(&b, &[], &["format (--format)", "\"tar.zst\""]);
    refused(
        &b,
        &["--format", "tar.zst", "--level", "9"],
        &["zstd level (--level)"],
    );
    refused(
        &b,
        &["--format", "tar.zst", "--shard-samples", "5"],
        &["shard sample limit (--shard-samples)"],
    );
    // Another class list.
    let other = t.path().join("other");
    let tree_c = t.path().join("tree-c");
    text_tree(&tree_c, "bird", "c", 3);
    text_tree(&tree_c, "fish", "c", 3);
    pack_quiet(&tree_c, &other, &[]);
    refused(
        &other,
        &["--format", "tar.zst"],
        &["the source's classes are [bird, fish]", "[cat, dog]"],
    );
    // --force, and --format dir.
    refused(
        &b,
        &["--format", "tar.zst", "--force"],
        &["--append", "--force"],
    );
    refused(&b, &["--format", "dir"], &["--format dir"]);
    // The dataset itself, and a source inside it.
    refused(&ds, &["--format", "tar.zst"], &["is the source dataset"]);
    let inside = ds.join("more");
    fs::rename(&b, &inside).unwrap();
    let before = snapshot(t.path());
    let o = convert_append(&inside, &ds, &["--format", "tar.zst"]);
    assert!(
        o.failed_cleanly() && o.stderr_text().contains("or inside it"),
        "{}",
        o.describe()
    );
    assert!(snapshot(t.path()) == before, "files changed");
    fs::rename(&inside, &b).unwrap();
    // A key repeated within the new input (a source indexed with
    // --allow-duplicate-keys).
    let tars = t.path().join("tars");
    fs::create_dir(&tars).unwrap();
    fs::copy(b.join("shard-000000.tar"), tars.join("x.tar")).unwrap();
    fs::copy(b.join("shard-000000.tar"), tars.join("y.tar")).unwrap();
    let dup = t.path().join("dup");
    let o = bale_bounded(&[
        "index".as_ref(),
        "-q".as_ref(),
        "--allow-duplicate-keys".as_ref(),
        tars.join("x.tar").as_os_str(),
        tars.join("y.tar").as_os_str(),
        "-o".as_ref(),
        dup.as_os_str(),
    ]);
    assert!(ok(&o), "{}", o.describe());
    let before = snapshot(t.path());
    let o = convert_append(&dup, &ds, &["--format", "tar.zst"]);
    assert!(
        o.failed_cleanly() && o.stderr_text().contains("which sample 1 of"),
        "{}",
        o.describe()
    );
    assert!(snapshot(t.path()) == before, "files changed");
    // A dataset `bale pack` wrote: convert appends to its own datasets only.
    let o = convert_append(&b, &a, &["--shard-samples", "10"]);
    assert!(
        o.failed_cleanly() && o.stderr_text().contains("written by `bale pack`"),
        "{}",
        o.describe()
    );
    assert!(snapshot(t.path()) == before, "files changed");
    // What fits goes in.
    let o = convert_append(&b, &ds, &["--format", "tar.zst"]);
    assert!(ok(&o), "{}", o.describe());
    assert_eq!(Manifest::read(&ds).unwrap().samples, 100);
    verifies(&ds);
}

#[test]
fn a_convert_append_that_fails_mid_way_leaves_the_dataset_as_it_was_and_a_later_one_works() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = packed(t.path());
    let ds = t.path().join("ds");
    convert_quiet(&a, &ds, &["--shard-samples", "10"]);
    let before = snapshot(&ds);
    // The last shard of `b` is damaged: met once three new shards are
    // written.
    let bad = t.path().join("bad");
    let o = bale_bounded(&[
        "convert".as_ref(),
        "-q".as_ref(),
        "--shard-samples".as_ref(),
        "10".as_ref(),
        b.as_os_str(),
        "-o".as_ref(),
        bad.as_os_str(),
    ]);
    assert!(ok(&o), "{}", o.describe());
    let m = Manifest::read(&bad).unwrap();
    let last = bad.join(&m.shards.last().unwrap().file);
    let mut bytes = fs::read(&last).unwrap();
    let at = bytes.windows(6).position(|w| w == b"sample").unwrap();
    bytes[at] ^= 0x20;
    fs::write(&last, &bytes).unwrap();
    let o = convert_append(&bad, &ds, &["--shard-samples", "10"]);
    assert!(!ok(&o), "{}", o.describe());
    assert!(
        o.stderr_text()
            .contains("the old dataset there is as it was"),
        "{}",
        o.describe()
    );
    assert_eq!(snapshot(&ds), before);
    verifies(&ds);
    let o = convert_append(&b, &ds, &["--shard-samples", "10"]);
    assert!(ok(&o), "{}", o.describe());
    assert_eq!(Manifest::read(&ds).unwrap().samples, 100);
    verifies(&ds);
}

#[test]
fn a_convert_append_interrupted_leaves_the_old_dataset_and_a_later_append_works() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    crate::common::random_tree(&input, 300);
    let more = t.path().join("more");
    crate::common::random_tree(&more.join("new"), 600);
    let (src_old, src_new) = (t.path().join("src-old"), t.path().join("src-new"));
    pack_quiet(&input, &src_old, &["--labels", "none"]);
    pack_quiet(&more, &src_new, &["--labels", "none"]);
    let ds = t.path().join("ds");
    let mut problems = Vec::new();
    let mut stopped = 0;
    for (k, (files, sig)) in [(2, libc::SIGINT), (6, libc::SIGINT), (4, libc::SIGKILL)]
        .into_iter()
        .enumerate()
    {
        let _ = fs::remove_dir_all(&ds);
        convert_quiet(&src_old, &ds, &["--shard-size", "1MiB"]);
        let before = shard_files(&ds);
        let manifest = fs::read(ds.join("bale.json")).unwrap();
        let args: Vec<&OsStr> = vec![
            "convert".as_ref(),
            "-q".as_ref(),
            "--append".as_ref(),
            "--shard-size".as_ref(),
            "1MiB".as_ref(),
            src_new.as_os_str(),
            "-o".as_ref(),
            ds.as_os_str(),
        ];
        let killed = kill_append_after(&args, &ds, files, sig);
        stopped += usize::from(killed);
        let case = format!("run {k} (signal {sig} after {files} files, stopped {killed})");
        if killed && fs::read(ds.join("bale.json")).unwrap() != manifest {
            problems.push(format!("{case}: the manifest changed"));
        }
        if shard_files(&ds)[..before.len()] != before[..] {
            problems.push(format!("{case}: old shard files changed"));
        }
        let v = bale_bounded(&["verify".as_ref(), ds.as_os_str()]);
        if !ok(&v) {
            problems.push(format!("{case}: verify: {}", v.describe()));
        }
        if sig == libc::SIGINT && killed && fs::read_dir(&ds).unwrap().count() != before.len() + 1 {
            problems.push(format!("{case}: an interrupted append left files"));
        }
        let redo = bale_bounded(&args);
        if !ok(&redo) {
            problems.push(format!("{case}: the redo failed: {}", redo.describe()));
            continue;
        }
        let m = Manifest::read(&ds).unwrap();
        if m.samples != 900 {
            problems.push(format!("{case}: {} samples after the redo", m.samples));
        }
        if fs::read_dir(&ds).unwrap().count() != 1 + 2 * m.shards.len() {
            problems.push(format!("{case}: after the redo, unlisted files are left"));
        }
        let v = bale_bounded(&["verify".as_ref(), ds.as_os_str()]);
        if !ok(&v) {
            problems.push(format!("{case}: verify after the redo: {}", v.describe()));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        stopped >= 2,
        "only {stopped} of 3 runs were stopped before they ended"
    );
}

/// `bale index -q --append TARS... -o DS EXTRA...`.
fn index_append(tars: &[PathBuf], ds: &Path, extra: &[&str]) -> Bounded {
    let mut args: Vec<&OsStr> = tars.iter().map(|t| t.as_os_str()).collect();
    args.extend(["-o".as_ref(), ds.as_os_str()]);
    args.extend(extra.iter().map(OsStr::new));
    run("index", &args)
}

/// `n` tars `tars/tK.tar` of distinct keys (the shards of one pack of 10
/// samples each), and the tree they came from.
fn tars(t: &Path, n: usize) -> Vec<PathBuf> {
    let tree_a = t.join("tree");
    tree(&tree_a, "s", 5 * n);
    let packed = t.join("packed");
    pack_quiet(&tree_a, &packed, &["--shard-samples", "10"]);
    let dir = t.join("tars");
    fs::create_dir_all(&dir).unwrap();
    (0..n)
        .map(|k| {
            let to = dir.join(format!("t{k}.tar"));
            fs::copy(packed.join(format!("shard-{k:06}.tar")), &to).unwrap();
            to
        })
        .collect()
}

#[test]
fn index_append_adds_the_new_tars_skips_those_listed_and_keeps_old_files_and_readers() {
    let t = tempfile::tempdir().unwrap();
    let tars = tars(t.path(), 4);
    let ds = t.path().join("ds");
    let o = bale_bounded(&[
        "index".as_ref(),
        "-q".as_ref(),
        tars[0].as_os_str(),
        tars[1].as_os_str(),
        "-o".as_ref(),
        ds.as_os_str(),
    ]);
    assert!(ok(&o), "{}", o.describe());
    let before = shard_files(&ds);
    let old_samples = samples(&ds);
    let old = Dataset::open(&ds).unwrap();
    std::thread::sleep(Duration::from_millis(20));

    // A glob over all four: the two listed are skipped.
    let glob = t.path().join("tars/*.tar");
    let o = index_append(std::slice::from_ref(&glob), &ds, &["--json"]);
    assert!(ok(&o), "{}", o.describe());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (j["already_listed"].as_u64(), j["samples"].as_u64()),
        (Some(2), Some(20))
    );
    let after = shard_files(&ds);
    assert_eq!(after[..before.len()], before[..]);
    let m = Manifest::read(&ds).unwrap();
    let names: Vec<&str> = m.shards.iter().map(|s| s.file.as_str()).collect();
    assert_eq!(
        names,
        [
            "../tars/t0.tar",
            "../tars/t1.tar",
            "../tars/t2.tar",
            "../tars/t3.tar"
        ]
    );
    assert_eq!((m.samples, m.created_by.command.as_str()), (40, "index"));
    assert_eq!(m.created_by.options["appends"], 1);
    assert_eq!(old.len(), 20);
    for (i, (key, members)) in old_samples.iter().enumerate() {
        let s = old.get(i as u64).unwrap();
        assert_eq!(s.key(), key);
        for (ext, bytes) in members {
            assert_eq!(s.field(ext), Some(&bytes[..]), "{key}.{ext}");
        }
    }
    assert_eq!(samples(&ds)[..20], old_samples[..]);
    assert_eq!(Dataset::open(&ds).unwrap().len(), 40);
    verifies(&ds);

    // All listed: nothing to add, nothing written.
    let before = snapshot(t.path());
    let o = index_append(&[glob], &ds, &[]);
    assert!(ok(&o), "{}", o.describe());
    assert!(snapshot(t.path()) == before, "files changed");
}

#[test]
fn index_append_refuses_what_does_not_fit_before_anything_is_written_naming_it() {
    let t = tempfile::tempdir().unwrap();
    let tars = tars(t.path(), 3);
    let ds = t.path().join("ds");
    let o = bale_bounded(&[
        "index".as_ref(),
        "-q".as_ref(),
        "--checksum".as_ref(),
        tars[0].as_os_str(),
        "-o".as_ref(),
        ds.as_os_str(),
    ]);
    assert!(ok(&o), "{}", o.describe());
    let refused = |tars: &[PathBuf], out: &Path, extra: &[&str], says: &[&str]| {
        let before = snapshot(t.path());
        let o = index_append(tars, out, extra);
        assert!(o.failed_cleanly(), "{extra:?}: {}", o.describe());
        for w in says {
            assert!(
                o.stderr_text().contains(w),
                "{extra:?}: {w:?} not in: {}",
                o.describe()
            );
        }
        assert!(snapshot(t.path()) == before, "{extra:?}: files changed");
    };
    // A key the dataset holds: a copy of t0 under another name.
    let copy = t.path().join("tars/again.tar");
    fs::copy(&tars[0], &copy).unwrap();
    refused(
        std::slice::from_ref(&copy),
        &ds,
        &["--checksum"],
        &[
            "\"cat/s0000\"",
            "tars/again.tar",
            "in ../tars/t0.tar",
            "already in",
        ],
    );
    fs::remove_file(&copy).unwrap();
    // Settings unlike the dataset's.
    refused(&tars[1..], &ds, &[], &["--checksum setting", "true"]);
    refused(
        &tars[1..],
        &ds,
        &["--checksum", "--rename-split"],
        &["--rename-split setting"],
    );
    // --force, --wids-json.
    refused(&tars[1..], &ds, &["--checksum", "--force"], &["--force"]);
    let wids = t.path().join("w.json");
    refused(
        &tars[1..],
        &ds,
        &["--checksum", "--wids-json", wids.to_str().unwrap()],
        &["--wids-json"],
    );
    // A tar whose index would take the name of a listed one's.
    let other = t.path().join("other");
    fs::create_dir(&other).unwrap();
    fs::copy(&tars[1], other.join("t0.tar")).unwrap();
    refused(
        &[other.join("t0.tar")],
        &ds,
        &["--checksum"],
        &["would be t0.idx", "../tars/t0.tar"],
    );
    // A key repeated within the new tars.
    fs::copy(&tars[1], other.join("x.tar")).unwrap();
    refused(
        &[tars[1].clone(), other.join("x.tar")],
        &ds,
        &["--checksum"],
        &["has the key", "has too"],
    );
    // A dataset `bale pack` wrote.
    refused(
        &tars[1..],
        &t.path().join("packed"),
        &["--checksum"],
        &[
            "written by `bale pack`",
            "`bale index --append` adds to datasets",
        ],
    );
    // What fits goes in.
    let o = index_append(&tars[1..], &ds, &["--checksum"]);
    assert!(ok(&o), "{}", o.describe());
    assert_eq!(Manifest::read(&ds).unwrap().samples, 30);
    verifies(&ds);
}

#[test]
fn an_index_append_that_fails_or_is_interrupted_leaves_the_dataset_and_a_later_one_works() {
    let t = tempfile::tempdir().unwrap();
    let mut tars = tars(t.path(), 2);
    let ds = t.path().join("ds");
    let o = bale_bounded(&[
        "index".as_ref(),
        "-q".as_ref(),
        "--checksum".as_ref(),
        tars[0].as_os_str(),
        "-o".as_ref(),
        ds.as_os_str(),
    ]);
    assert!(ok(&o), "{}", o.describe());
    let before = snapshot(&ds);
    // A bad tar after a good one.
    let bad = t.path().join("tars/bad.tar");
    fs::write(&bad, vec![b'x'; 3000]).unwrap();
    let o = index_append(
        &[tars[1].clone(), bad.clone()],
        &ds,
        &["--jobs", "1", "--checksum"],
    );
    assert!(
        o.failed_cleanly() && o.stderr_text().contains("bad.tar"),
        "{}",
        o.describe()
    );
    assert!(snapshot(&ds) == before, "files changed");
    verifies(&ds);

    // Interrupted: many tars of incompressible samples, read whole.
    let big = t.path().join("big");
    crate::common::random_tree(&big, 400);
    let packed = t.path().join("big-packed");
    pack_quiet(
        &big,
        &packed,
        &["--shard-samples", "10", "--labels", "none"],
    );
    for k in 0..40 {
        let to = t.path().join(format!("tars/b{k:02}.tar"));
        fs::copy(packed.join(format!("shard-{k:06}.tar")), &to).unwrap();
        tars.push(to);
    }
    let new: Vec<&OsStr> = tars[1..].iter().map(|p| p.as_os_str()).collect();
    let mut problems = Vec::new();
    let mut stopped = 0;
    for (k, (files, sig)) in [(2, libc::SIGINT), (8, libc::SIGINT), (4, libc::SIGKILL)]
        .into_iter()
        .enumerate()
    {
        let mut args: Vec<&OsStr> = vec![
            "index".as_ref(),
            "-q".as_ref(),
            "--append".as_ref(),
            "--jobs".as_ref(),
            "1".as_ref(),
            "--checksum".as_ref(),
        ];
        args.extend(&new);
        args.extend(["-o".as_ref(), ds.as_os_str()]);
        let killed = kill_append_after(&args, &ds, files, sig);
        stopped += usize::from(killed);
        let case = format!("run {k} (signal {sig} after {files} files, stopped {killed})");
        let now = snapshot(&ds);
        let kept = before
            .iter()
            .all(|(name, bytes)| now.get(name) == Some(bytes));
        if killed && !kept {
            problems.push(format!("{case}: the old dataset changed"));
        }
        if sig == libc::SIGINT && killed && now.len() != before.len() {
            problems.push(format!("{case}: an interrupted append left files"));
        }
        let v = bale_bounded(&["verify".as_ref(), ds.as_os_str()]);
        if !ok(&v) {
            problems.push(format!("{case}: verify: {}", v.describe()));
        }
        if !killed {
            // It ended first: start over from the one-tar dataset.
            fs::remove_dir_all(&ds).unwrap();
            let o = bale_bounded(&[
                "index".as_ref(),
                "-q".as_ref(),
                "--checksum".as_ref(),
                tars[0].as_os_str(),
                "-o".as_ref(),
                ds.as_os_str(),
            ]);
            assert!(ok(&o), "{}", o.describe());
        }
    }
    // A run killed between its indexes and its manifest: an index of a new
    // tar the manifest does not list, and the run's append mark.
    let scratch = t.path().join("scratch");
    let o = bale_bounded(&[
        "index".as_ref(),
        "-q".as_ref(),
        tars[1].as_os_str(),
        "-o".as_ref(),
        scratch.as_os_str(),
    ]);
    assert!(ok(&o), "{}", o.describe());
    fs::copy(scratch.join("t1.idx"), ds.join("t1.idx")).unwrap();
    fs::write(ds.join(".bale-tmp-99999-run"), b"append\n").unwrap();
    let v = bale_bounded(&["verify".as_ref(), ds.as_os_str()]);
    assert!(
        ok(&v) && String::from_utf8_lossy(&v.stdout).contains("interrupted `--append`"),
        "{}",
        v.describe()
    );
    // A later append works, over whatever the stopped runs left.
    let o = index_append(&tars[1..], &ds, &["--checksum"]);
    assert!(ok(&o), "{}", o.describe());
    let m = Manifest::read(&ds).unwrap();
    assert_eq!((m.shards.len(), m.samples), (42, 10 + 10 + 400));
    assert_eq!(fs::read_dir(&ds).unwrap().count(), 1 + m.shards.len());
    verifies(&ds);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(stopped >= 1, "none of 3 runs was stopped before it ended");
}

#[test]
fn convert_append_into_a_bucket_writes_what_a_local_one_writes_and_index_append_there_is_refused() {
    let s = bale_tests::seaweed::Seaweed::shared();
    let t = tempfile::tempdir().unwrap();
    let (a, b) = packed(t.path());
    let bkt = crate::store::bucket(s, "append-more");
    let url = format!("s3://{bkt}/ds");
    let with = |args: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        all.extend(s.cli_options());
        all
    };
    let by25 = ["--shard-samples", "25"];
    let (a_s, b_s) = (a.to_str().unwrap(), b.to_str().unwrap());
    let o = bale_bounded(&with(&["convert", "-q", a_s, "-o", &url, by25[0], by25[1]]));
    assert!(ok(&o), "{}", o.describe());
    let old = crate::store::open_at(s, &url);
    let old_samples = crate::store::samples_of(&old);
    let appended = |src: &str| {
        bale_bounded(&with(&[
            "convert", "-q", "--append", src, "-o", &url, by25[0], by25[1],
        ]))
    };
    let o = appended(b_s);
    assert!(ok(&o), "{}", o.describe());

    // The same objects as the same two runs make locally, and a reader
    // opened before keeps its view.
    let local = t.path().join("local");
    convert_quiet(&a, &local, &by25);
    let o = convert_append(&b, &local, &by25);
    assert!(ok(&o), "{}", o.describe());
    crate::store::assert_same_objects(s, &url, &local);
    assert_eq!(crate::store::samples_of(&old), old_samples);
    let o = bale_bounded(&with(&["verify", "-q", &url]));
    assert!(ok(&o), "{}", o.describe());

    // Refused before anything is written: a key the dataset holds, and a
    // source whose settings differ.
    let held = crate::store::objects(s, &bkt, "ds");
    let o = appended(a_s);
    assert!(
        o.failed_cleanly() && o.stderr_text().contains("already in the dataset"),
        "{}",
        o.describe()
    );
    assert_eq!(crate::store::objects(s, &bkt, "ds"), held);
    let c = t.path().join("c");
    tree(&t.path().join("tree-c"), "c", 5);
    pack_quiet(&t.path().join("tree-c"), &c, &[]);
    let o = bale_bounded(&with(&[
        "convert",
        "-q",
        "--append",
        c.to_str().unwrap(),
        "-o",
        &url,
    ]));
    assert!(
        o.failed_cleanly() && o.stderr_text().contains("shard sample limit"),
        "{}",
        o.describe()
    );
    assert_eq!(crate::store::objects(s, &bkt, "ds"), held);
    let m: serde_json::Value =
        serde_json::from_slice(&crate::store::object(s, &url, "bale.json")).unwrap();
    assert_eq!(m["created_by"]["options"]["appends"], 1, "{m}");

    // `bale index --append` adds to a local dataset only.
    let tars = tars(t.path(), 1);
    let empty = format!("s3://{bkt}/idx");
    let tar_url = format!("{empty}/t0.tar");
    let before = snapshot(t.path());
    let o = bale_bounded(&with(&["index", "-q", "--append", &tar_url, "-o", &empty]));
    assert!(
        o.failed_cleanly() && o.stderr_text().contains("adds to a local dataset only"),
        "{}",
        o.describe()
    );
    assert!(
        crate::store::objects(s, &bkt, "idx").is_empty(),
        "objects left"
    );
    assert!(snapshot(t.path()) == before, "local files changed");
    assert!(tars[0].exists());
}
