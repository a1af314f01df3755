//! "Nothing lost" (docs/reliability.md, promise 1): no command
//! overwrites or deletes a file it did not create unless `--force` says so,
//! and `--force` never deletes or replaces a file an input refers to; it
//! refuses, naming the file. A failed `pack`, `convert` or `index` removes
//! only what it put in place.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bale_format::{Manifest, ShardIndex};
use bale_tests::{assert_success as ok, bale_bin, describe as text, run_bale as bale};

use crate::common::{Running, snapshot, text_tree};

/// Packs `n` text samples into the one-shard dataset `out` and returns the
/// path of its shard (`out/shard-000000.tar`).
fn packed(work: &Path, name: &str, n: usize) -> PathBuf {
    packed_under(work, name, "a", n)
}

/// Like [`packed`], its keys under `sub/`: shards packed under different
/// `sub`s share no key, so an index of them all is no index of duplicates.
fn packed_under(work: &Path, name: &str, sub: &str, n: usize) -> PathBuf {
    let input = work.join(format!("{name}-in"));
    text_tree(&input, sub, name, n);
    let out = work.join(name);
    ok(&bale(
        &["pack", "-q", "--labels", "none", "-o"],
        &[&out, &input],
    ));
    out.join("shard-000000.tar")
}

fn run(args: &[&str]) -> Output {
    bale(args, &[])
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts that `o` failed and that its stderr names `name` (and holds every
/// one of `words`).
fn refused(o: &Output, name: &str, words: &[&str]) {
    assert!(!o.status.success(), "should have failed:\n{}", text(o));
    let err = stderr(o);
    assert!(
        err.contains(name),
        "the error should name {name}:\n{}",
        text(o)
    );
    for w in words {
        assert!(err.contains(w), "the error should say {w:?}:\n{}", text(o));
    }
}

fn verifies(ds: &Path) {
    let o = bale(&["verify"], &[ds]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "verify {}: {}",
        ds.display(),
        text(&o)
    );
}

/// `bale index --wids-json` never writes over a tar it indexes (with or
/// without `--force`), nor over an index the run writes; an unrelated file
/// is replaced only with `--force`.
#[test]
fn index_wids_json_never_overwrites_an_input_or_its_own_output() {
    let t = tempfile::tempdir().unwrap();
    let shard = packed(t.path(), "src", 10);
    let u = t.path().join("u");
    fs::create_dir(&u).unwrap();
    let tar = u.join("data.tar");
    fs::copy(&shard, &tar).unwrap();
    let original = fs::read(&tar).unwrap();
    let ds = u.join("ds");

    for force in [false, true] {
        let mut args = vec!["index", "-o", p(&ds), "--wids-json", p(&tar), p(&tar)];
        if force {
            args.push("--force");
        }
        let o = run(&args);
        refused(&o, "data.tar", &["input"]);
        assert_eq!(
            fs::read(&tar).unwrap(),
            original,
            "--wids-json over the indexed tar (force {force}) changed it"
        );
        assert!(
            !ds.join("bale.json").exists(),
            "force {force}: {}",
            text(&o)
        );
    }

    // Onto the index this very run writes.
    let idx = ds.join("data.idx");
    let o = run(&[
        "index",
        "--force",
        "-o",
        p(&ds),
        "--wids-json",
        p(&idx),
        p(&tar),
    ]);
    refused(&o, "data.idx", &[]);
    assert!(!ds.join("bale.json").exists(), "{}", text(&o));
    assert_eq!(fs::read(&tar).unwrap(), original);

    // Onto an unrelated existing file: kept without --force, replaced with it.
    let other = u.join("other.json");
    fs::write(&other, b"the user's own json").unwrap();
    let o = run(&["index", "-o", p(&ds), "--wids-json", p(&other), p(&tar)]);
    refused(&o, "other.json", &["--force"]);
    assert_eq!(fs::read(&other).unwrap(), b"the user's own json");
    assert!(!ds.join("bale.json").exists(), "{}", text(&o));
    ok(&run(&[
        "index",
        "-q",
        "--force",
        "-o",
        p(&ds),
        "--wids-json",
        p(&other),
        p(&tar),
    ]));
    let wids: serde_json::Value = serde_json::from_slice(&fs::read(&other).unwrap()).unwrap();
    assert_eq!(wids["__kind__"], "wids-shard-index-v1", "{wids}");
    assert_eq!(wids["shardlist"][0]["nsamples"], 10, "{wids}");
    assert_eq!(fs::read(&tar).unwrap(), original);
    verifies(&ds);
}

/// `bale convert SRC -o DIR --force`, where DIR holds the tars SRC (made by
/// `bale index`) refers to, named like bale's shards: refused, naming the
/// tar, which survives, and SRC still verifies.
#[test]
fn convert_force_never_deletes_the_tars_of_its_source() {
    let t = tempfile::tempdir().unwrap();
    let shard = packed(t.path(), "src", 10);
    let x = t.path().join("x");
    fs::create_dir(&x).unwrap();
    let tar = x.join("shard-000000.tar");
    fs::copy(&shard, &tar).unwrap();
    let ds = x.join("ds");
    ok(&bale(&["index", "-q", "-o"], &[&ds, &tar]));
    let before = snapshot(&x);

    let o = bale(&["convert", "--force", "-o"], &[&x, &ds]);
    refused(&o, "shard-000000.tar", &["input"]);
    assert_eq!(snapshot(&x), before, "convert changed its own source");
    verifies(&ds);
}

/// `bale pack DIR -o DIR --force`, where DIR holds an input file named like
/// a shard: refused, naming it, and nothing in DIR changes.
#[test]
fn pack_force_never_deletes_an_input_named_like_a_shard() {
    let t = tempfile::tempdir().unwrap();
    let raw = t.path().join("raw");
    text_tree(&raw, "a", "raw", 10);
    fs::write(
        raw.join("shard-000000.tar"),
        b"the user's file, not a bale shard",
    )
    .unwrap();
    let before = snapshot(&raw);

    let o = bale(
        &["pack", "--labels", "none", "--force", "-o"],
        &[&raw, &raw],
    );
    refused(&o, "shard-000000.tar", &["input"]);
    assert_eq!(snapshot(&raw), before, "pack changed its own input");
}

/// The two parts of `bale pack --part I/2` of 12 text samples tagged
/// `tag`, in `t/p0` and `t/p1`.
fn two_parts(t: &Path, tag: &str) -> (PathBuf, PathBuf) {
    let input = t.join("in");
    text_tree(&input, "a", tag, 12);
    let parts = (t.join("p0"), t.join("p1"));
    for (i, dir) in [&parts.0, &parts.1].into_iter().enumerate() {
        let part = format!("{i}/2");
        ok(&bale(
            &["pack", "-q", "--labels", "none", "--part", &part, "-o"],
            &[dir, &input],
        ));
    }
    parts
}

/// `bale merge ... -o OUT --force` never deletes a part's file: not when OUT
/// is one of the parts, and not when the parts' shards live in OUT (the part
/// directories hold symlinks to them).
#[test]
fn merge_force_never_deletes_a_parts_files() {
    let t = tempfile::tempdir().unwrap();
    let (p0, p1) = two_parts(t.path(), "merge");
    let parts_before = (snapshot(&p0), snapshot(&p1));

    let o = bale(&["merge", "--force", "-o"], &[&p0, &p0, &p1]);
    refused(&o, "p0", &["one of the parts"]);
    assert_eq!((snapshot(&p0), snapshot(&p1)), parts_before);

    // The parts' shards and indexes moved into OUT, symlinked from the parts.
    let out = t.path().join("merged");
    fs::create_dir(&out).unwrap();
    for p in [&p0, &p1] {
        for e in fs::read_dir(p).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            if name.starts_with("part-") {
                fs::rename(e.path(), out.join(&name)).unwrap();
                std::os::unix::fs::symlink(Path::new("../merged").join(&name), e.path()).unwrap();
            }
        }
    }
    let before = (snapshot(&out), snapshot(&p0), snapshot(&p1));
    let o = bale(&["merge", "--force", "-o"], &[&out, &p0, &p1]);
    refused(&o, "part-000", &["input"]);
    assert_eq!(
        (snapshot(&out), snapshot(&p0), snapshot(&p1)),
        before,
        "merge --force deleted or moved what its parts refer to"
    );
    for p in [&p0, &p1] {
        // Every part still reads (through its symlinks).
        let m = Manifest::read(p).unwrap();
        for s in &m.shards {
            let idx = ShardIndex::open(Manifest::resolve(p, &s.index)).unwrap();
            assert_eq!(idx.len() as u64, s.samples);
            assert_eq!(
                fs::metadata(Manifest::resolve(p, &s.file)).unwrap().len(),
                s.bytes
            );
        }
    }
}

/// `bale index TAR -o DIR` where DIR holds a file under the index's name
/// that bale did not write: refused without `--force`, the file unchanged;
/// with `--force` replaced, and the dataset verifies.
#[test]
fn index_never_replaces_a_file_it_did_not_write_unless_forced() {
    let t = tempfile::tempdir().unwrap();
    let shard = packed(t.path(), "src", 10);
    let u2 = t.path().join("u2");
    fs::create_dir(&u2).unwrap();
    let tar = u2.join("data.tar");
    fs::copy(&shard, &tar).unwrap();
    fs::write(u2.join("data.idx"), b"the user's data.idx").unwrap();
    let before = snapshot(&u2);

    // A file of that name that is not one of bale's indexes (a DALI tar
    // index is named `<tar>.idx` too) is refused, --force or not.
    for force in [&[][..], &["--force"][..]] {
        let mut args = vec!["index"];
        args.extend_from_slice(force);
        args.push("-o");
        let o = bale(&args, &[&u2, &tar]);
        refused(&o, "data.idx", &["not one of bale's indexes"]);
        assert_eq!(
            snapshot(&u2),
            before,
            "a refused index changed the directory"
        );
    }

    // The same beside an old dataset: the refusal comes first, not the
    // hint to pass --force.
    let u4 = t.path().join("u4");
    fs::create_dir(&u4).unwrap();
    fs::copy(&shard, u4.join("a.tar")).unwrap();
    ok(&bale(&["index", "-q", "-o"], &[&u4, &u4.join("a.tar")]));
    fs::copy(&shard, u4.join("b.tar")).unwrap();
    fs::write(u4.join("b.idx"), b"v1.2 1\ntxt 512 10 a/0000.txt\n").unwrap();
    let before4 = snapshot(&u4);
    let o = bale(
        &["index", "-o"],
        &[&u4, &u4.join("a.tar"), &u4.join("b.tar")],
    );
    refused(&o, "b.idx", &["not one of bale's indexes"]);
    assert!(!stderr(&o).contains("hint: --force"), "{}", text(&o));
    assert_eq!(snapshot(&u4), before4);
    // A bale.json that no bale run wrote is not a dataset to replace.
    fs::remove_file(u4.join("b.idx")).unwrap();
    fs::write(u4.join("bale.json"), br#"{"name": "my-shards"}"#).unwrap();
    let before4 = snapshot(&u4);
    let o = bale(
        &["index", "--force", "-o"],
        &[&u4, &u4.join("a.tar"), &u4.join("b.tar")],
    );
    refused(&o, "bale.json", &["no bale run wrote it"]);
    assert_eq!(snapshot(&u4), before4);

    // One of bale's (an index of another tar): --force replaces it.
    let other = packed(t.path(), "other", 4);
    fs::copy(other.with_extension("idx"), u2.join("data.idx")).unwrap();
    let o = bale(&["index", "-o"], &[&u2, &tar]);
    refused(&o, "data.idx", &["--force"]);
    ok(&bale(&["index", "-q", "--force", "-o"], &[&u2, &tar]));
    let idx = ShardIndex::open(u2.join("data.idx")).unwrap();
    assert_eq!(idx.len(), 10);
    assert_eq!(Manifest::read(&u2).unwrap().samples, 10);
    verifies(&u2);
}

/// A failed `bale index` into the tars' own directory leaves every file it
/// did not write as it was: a truncated tar makes it fail after it indexed
/// the good one; a file under an index name it would write is refused.
#[test]
fn a_failed_index_keeps_every_file_it_did_not_write() {
    let t = tempfile::tempdir().unwrap();
    let shard = packed(t.path(), "src", 10);
    let u3 = t.path().join("u3");
    fs::create_dir(&u3).unwrap();
    let tar = u3.join("data.tar");
    fs::copy(&shard, &tar).unwrap();
    let bad = u3.join("bad.tar");
    fs::write(&bad, b"not a tar").unwrap();
    fs::write(u3.join("notes.txt"), b"notes").unwrap();
    fs::write(u3.join("shard-000000.tar"), b"the user's, not an input").unwrap();
    fs::write(u3.join("shard-000000.idx"), b"the user's idx").unwrap();
    let before = snapshot(&u3);

    let o = bale(&["index", "-o"], &[&u3, &tar, &bad]);
    refused(&o, "bad.tar", &[]);
    assert_eq!(
        snapshot(&u3),
        before,
        "a failed index changed the directory"
    );

    // The index name it would write is taken by the user's file.
    fs::write(u3.join("data.idx"), b"the user's data.idx").unwrap();
    let before = snapshot(&u3);
    let o = bale(&["index", "-o"], &[&u3, &tar, &bad]);
    refused(&o, "data.idx", &[]);
    assert_eq!(
        snapshot(&u3),
        before,
        "a failed index changed the directory"
    );

    // A dataset indexed with its wids file, indexed again with --force and
    // a bad tar among the new ones: the run fails, and the old dataset stays
    // whole, its wids file with it.
    let wd = t.path().join("wd");
    fs::create_dir(&wd).unwrap();
    fs::copy(&shard, wd.join("a.tar")).unwrap();
    let wids = wd.join("train-wids.json");
    ok(&bale(
        &["index", "-q", "--wids-json", p(&wids), "-o"],
        &[&wd, &wd.join("a.tar")],
    ));
    fs::write(wd.join("b.tar"), b"not a tar").unwrap();
    let before = snapshot(&wd);
    let o = bale(
        &["index", "-q", "--force", "--wids-json", p(&wids), "-o"],
        &[&wd, &wd.join("a.tar"), &wd.join("b.tar")],
    );
    refused(&o, "b.tar", &[]);
    assert_eq!(snapshot(&wd), before, "{}", text(&o));
    verifies(&wd);
    // Forced with good tars, it is replaced (a file named like its
    // temporary is not left).
    fs::copy(packed_under(t.path(), "src-b", "b", 10), wd.join("b.tar")).unwrap();
    let o = bale(
        &["index", "-q", "--force", "--wids-json", p(&wids), "-o"],
        &[&wd, &wd.join("a.tar"), &wd.join("b.tar")],
    );
    ok(&o);
    let doc: serde_json::Value = serde_json::from_slice(&fs::read(&wids).unwrap()).unwrap();
    assert_eq!(doc["shardlist"].as_array().unwrap().len(), 2, "{doc}");
    assert!(
        !snapshot(&wd).keys().any(|n| n.starts_with(".bale-tmp")),
        "{:?}",
        snapshot(&wd).keys()
    );
}

/// A failed `bale pack` leaves every file it did not create: with `--force`
/// (an old dataset beside the user's files) and a FIFO among the inputs; and
/// without it, when the user's files appear in the output while the pack
/// runs (it waits for its file list on stdin): a shard name taken by the
/// user's file makes the pack fail, never replace it.
#[test]
fn a_failed_pack_keeps_every_file_it_did_not_create() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    text_tree(&input, "a", "pack", 10);

    // --force over an old dataset, a FIFO among the inputs.
    let out = t.path().join("out");
    ok(&bale(
        &["pack", "-q", "--labels", "none", "-o"],
        &[&out, &input],
    ));
    fs::write(out.join("notes.txt"), b"notes").unwrap();
    fs::create_dir(out.join("mine")).unwrap();
    fs::write(out.join("mine/keep.bin"), b"keep").unwrap();
    let fifo_in = t.path().join("fifo-in");
    text_tree(&fifo_in, "a", "fifo", 4);
    ok(&Command::new("mkfifo")
        .arg(fifo_in.join("a/0002.json"))
        .output()
        .unwrap());
    let o = bale(
        &["pack", "--labels", "none", "--force", "-o"],
        &[&out, &fifo_in],
    );
    refused(&o, "0002.json", &[]);
    for (name, bytes) in [("notes.txt", &b"notes"[..]), ("mine/keep.bin", b"keep")] {
        assert_eq!(
            fs::read(out.join(name)).unwrap(),
            bytes,
            "{name}: {}",
            text(&o)
        );
    }
    // The FIFO is refused before --force removes anything: the old
    // dataset stays whole.
    ok(&bale(&["verify", "-q"], &[&out]));

    // Without --force: the user's files arrive while the pack waits for its list.
    let out = t.path().join("out2");
    let mut run = Running::start(
        Command::new(bale_bin())
            .args(["pack", "--labels", "none", "--files-from", "-", "-o"])
            .arg(&out)
            .arg(&input)
            .stdin(Stdio::piped()),
    );
    let start = Instant::now();
    while !out.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "bale pack never created its output"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let user: [(&str, &[u8]); 3] = [
        ("notes.txt", b"notes"),
        ("shard-000000.tar", b"the user's tar"),
        ("shard-000000.idx", b"the user's idx"),
    ];
    for (name, bytes) in user {
        fs::write(out.join(name), bytes).unwrap();
    }
    {
        use std::io::Write;
        let mut stdin = run.child().stdin.take().unwrap();
        let list: String = (0..10).map(|i| format!("a/{i:04}.txt\n")).collect();
        stdin.write_all(list.as_bytes()).unwrap();
    }
    let o = run.finish_within(Duration::from_secs(60));
    refused(&o, "shard-000000.tar", &["already exists"]);
    for (name, bytes) in user {
        assert_eq!(
            fs::read(out.join(name)).unwrap(),
            bytes,
            "{name}: {}",
            text(&o)
        );
    }
    let left: Vec<String> = snapshot(&out).into_keys().collect();
    assert_eq!(
        left,
        ["notes.txt", "shard-000000.idx", "shard-000000.tar"],
        "{}",
        text(&o)
    );
}

/// A failed `bale convert` leaves every file it did not create: with
/// `--force` and a corrupt source shard; and without it, when the user's
/// files appear in the output while the convert runs: a shard name taken by
/// the user's file makes the convert fail, never replace it.
#[test]
fn a_failed_convert_keeps_every_file_it_did_not_create() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    text_tree(&input, "a", "convert", 400);
    let src = t.path().join("src");
    ok(&bale(
        &["pack", "-q", "--labels", "none", "-o"],
        &[&src, &input],
    ));

    // --force over an old dataset, the source's last sample corrupt.
    let bad = t.path().join("bad");
    ok(&bale(
        &["pack", "-q", "--labels", "none", "-o"],
        &[&bad, &input],
    ));
    let shard = bad.join("shard-000000.tar");
    let mut bytes = fs::read(&shard).unwrap();
    let at = bytes
        .windows(16)
        .rposition(|w| w == b"convert sample 3")
        .unwrap();
    bytes[at] ^= 0x20;
    fs::write(&shard, bytes).unwrap();
    let out = t.path().join("out");
    ok(&bale(
        &["pack", "-q", "--labels", "none", "-o"],
        &[&out, &input],
    ));
    fs::write(out.join("notes.txt"), b"notes").unwrap();
    fs::create_dir(out.join("mine")).unwrap();
    fs::write(out.join("mine/keep.bin"), b"keep").unwrap();
    let o = bale(&["convert", "--force", "-o"], &[&out, &bad]);
    assert!(!o.status.success(), "{}", text(&o));
    for (name, bytes) in [("notes.txt", &b"notes"[..]), ("mine/keep.bin", b"keep")] {
        assert_eq!(
            fs::read(out.join(name)).unwrap(),
            bytes,
            "{name}: {}",
            text(&o)
        );
    }
    assert!(!out.join("bale.json").exists(), "{}", text(&o));

    // Without --force: one shard per sample; once the convert has started
    // writing, the user's files take the names of later shards.
    let out = t.path().join("out2");
    fs::create_dir(&out).unwrap();
    let run = Running::start(
        Command::new(bale_bin())
            .args(["convert", "--shard-samples", "1", "-o"])
            .arg(&out)
            .arg(&src)
            .stdin(Stdio::null()),
    );
    let start = Instant::now();
    while fs::read_dir(&out).unwrap().next().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "bale convert never wrote"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let user: [(&str, &[u8]); 3] = [
        ("notes.txt", b"notes"),
        ("shard-000300.tar", b"the user's tar"),
        ("shard-000300.idx", b"the user's idx"),
    ];
    for (name, bytes) in user {
        // create_new: were the name taken already, the convert would be too far along to test.
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(out.join(name))
            .and_then(|mut f| std::io::Write::write_all(&mut f, bytes))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let o = run.finish_within(Duration::from_secs(120));
    refused(&o, "shard-000300.tar", &["already exists"]);
    for (name, bytes) in user {
        assert_eq!(
            fs::read(out.join(name)).unwrap(),
            bytes,
            "{name}: {}",
            text(&o)
        );
    }
    let left: Vec<String> = snapshot(&out).into_keys().collect();
    assert_eq!(
        left,
        ["notes.txt", "shard-000300.idx", "shard-000300.tar"],
        "{}",
        text(&o)
    );
}

/// A part whose manifest names a file outside the part's directory is
/// refused before any file moves: merge moves only a part's own files
/// (and its journal names nothing else).
#[test]
fn merge_refuses_a_part_naming_a_file_outside_it_and_moves_nothing() {
    let t = tempfile::tempdir().unwrap();
    let (p0, p1) = two_parts(t.path(), "out");
    // p1's first shard moves into a subdirectory its manifest now names.
    let path = p1.join("bale.json");
    let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    let file = v["shards"][0]["file"].as_str().unwrap().to_owned();
    fs::create_dir(p1.join("sub")).unwrap();
    fs::rename(p1.join(&file), p1.join("sub").join(&file)).unwrap();
    v["shards"][0]["file"] = serde_json::json!(format!("sub/{file}"));
    fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let before = (snapshot(&p0), snapshot(&p1));
    let out = t.path().join("merged");
    let o = bale(&["merge", "-o"], &[&out, &p0, &p1]);
    refused(&o, "sub/", &["not a file in the part's directory"]);
    assert!(text(&o).contains("nothing was merged"), "{}", text(&o));
    assert_eq!((snapshot(&p0), snapshot(&p1)), before, "a part changed");
    assert!(!out.join(".bale-merge-journal.json").exists());
}

/// `--force` removes only the names bale gives its own files: a user's
/// files that merely start like them (`shard-notes.idx`, `part-of-thesis.tar`)
/// and a folder under bale's temporary prefix that is not one of its own
/// staging folders survive, while the old dataset goes.
#[test]
fn force_removes_only_names_of_bales_own_shape() {
    let t = tempfile::tempdir().unwrap();
    let shard = packed(t.path(), "old", 4);
    let out = shard.parent().unwrap().to_path_buf();
    let user = [
        "shard-notes.idx",
        "shard-map.h5",
        "shard-x.tar",
        "part-final.tar.zst",
        "part-of-thesis.tar",
        "part-1.idx",
        "shard-00001.tar",
        ".bale-tmp-photos/2019/a.jpg",
        ".bale-tmp-12-notes/a.txt",
    ];
    for name in user {
        let p = out.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, format!("the user's {name}")).unwrap();
    }
    // A leftover of bale's own: removed.
    fs::write(out.join(".bale-tmp-12-shard-000001.tar"), b"leftover").unwrap();
    let input = t.path().join("new-in");
    text_tree(&input, "a", "new", 3);
    let o = bale(
        &["pack", "-q", "--labels", "none", "--force", "-o"],
        &[&out, &input],
    );
    ok(&o);
    verifies(&out);
    assert_eq!(Manifest::read(&out).unwrap().samples, 3);
    for name in user {
        assert_eq!(
            fs::read_to_string(out.join(name)).unwrap_or_default(),
            format!("the user's {name}"),
            "{name}: {}",
            text(&o)
        );
    }
    assert!(!out.join(".bale-tmp-12-shard-000001.tar").exists());
}

/// Tars that `bale index` indexed in place are the user's: `pack` or
/// `convert` with `--force` into their directory refuses, naming one, and
/// removes nothing (the tars, their indexes and the manifest stay).
#[test]
fn force_never_deletes_tars_indexed_in_place() {
    let t = tempfile::tempdir().unwrap();
    let shard = packed(t.path(), "src", 6);
    let wd = t.path().join("wd");
    fs::create_dir(&wd).unwrap();
    let shards = [shard.clone(), packed_under(t.path(), "src-b", "b", 6)];
    for (n, shard) in shards.iter().enumerate() {
        fs::copy(shard, wd.join(format!("shard-00000{n}.tar"))).unwrap();
    }
    let pattern = format!("{}/shard-*.tar", wd.display());
    ok(&bale(&["index", "-q", "-o", p(&wd), &pattern], &[]));
    verifies(&wd);
    let before = snapshot(&wd);
    let input = t.path().join("other");
    text_tree(&input, "a", "other", 3);
    let o = bale(
        &["pack", "-q", "--labels", "none", "--force", "-o"],
        &[&wd, &input],
    );
    refused(&o, "shard-00000", &["bale index", "indexed in place"]);
    assert_eq!(
        snapshot(&wd),
        before,
        "pack --force changed the tars' folder"
    );
    let o = bale(
        &["convert", "--force", "-o"],
        &[&wd, shard.parent().unwrap()],
    );
    refused(&o, "shard-00000", &["indexed in place"]);
    assert_eq!(
        snapshot(&wd),
        before,
        "convert --force changed the tars' folder"
    );
    verifies(&wd);
    // A manifest that fails the strict checks is still read for whose the
    // tars are; one that is not JSON at all stops --force from guessing.
    let manifest = wd.join("bale.json");
    let good = fs::read(&manifest).unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&good).unwrap();
    v["samples"] = serde_json::json!(v["samples"].as_u64().unwrap() + 1);
    v["format_version"] = serde_json::json!("99.0");
    for (bytes, words) in [
        (serde_json::to_vec(&v).unwrap(), "indexed in place"),
        (b"{ not json".to_vec(), "not JSON"),
    ] {
        fs::write(&manifest, &bytes).unwrap();
        let before = snapshot(&wd);
        let o = bale(
            &["pack", "-q", "--labels", "none", "--force", "-o"],
            &[&wd, &input],
        );
        refused(&o, "wd/", &[words]);
        assert!(!stderr(&o).contains("were removed"), "{}", text(&o));
        assert_eq!(snapshot(&wd), before, "{words}: {}", text(&o));
    }
    // A `bale.json` of the user's or another tool's is no bale dataset:
    // the tars beside it may be anyone's.
    fs::write(
        &manifest,
        br#"{"name": "my-shards", "license": "cc-by-4.0"}"#,
    )
    .unwrap();
    let before = snapshot(&wd);
    let o = bale(
        &["pack", "-q", "--labels", "none", "--force", "-o"],
        &[&wd, &input],
    );
    refused(&o, "wd/", &["no bale run wrote it"]);
    assert_eq!(snapshot(&wd), before, "{}", text(&o));
    fs::write(&manifest, good).unwrap();
    verifies(&wd);

    // Indexed with --absolute, then the folder moved: the manifest's paths
    // name the old place, and the tars are still the user's.
    let abs = t.path().join("abs");
    fs::create_dir(&abs).unwrap();
    for (n, shard) in shards.iter().enumerate() {
        fs::copy(shard, abs.join(format!("shard-00000{n}.tar"))).unwrap();
    }
    let pattern = format!("{}/shard-*.tar", abs.display());
    ok(&bale(
        &["index", "-q", "--absolute", "-o", p(&abs), &pattern],
        &[],
    ));
    let moved = t.path().join("moved");
    fs::rename(&abs, &moved).unwrap();
    let before = snapshot(&moved);
    for args in [
        vec![
            "pack",
            "-q",
            "--labels",
            "none",
            "--force",
            "-o",
            p(&moved),
            p(&input),
        ],
        vec![
            "convert",
            "-q",
            "--force",
            "-o",
            p(&moved),
            p(shard.parent().unwrap()),
        ],
    ] {
        let o = run(&args);
        refused(&o, "shard-00000", &["indexed in place"]);
        assert_eq!(snapshot(&moved), before, "{args:?}: {}", text(&o));
    }
}

/// An old shard's name that is a hard link to an input file: `pack --force`
/// refuses, naming it, and the link stays.
#[test]
fn pack_force_never_unlinks_a_hard_link_to_an_input() {
    let t = tempfile::tempdir().unwrap();
    let shard = packed(t.path(), "old", 3);
    let out = shard.parent().unwrap().to_path_buf();
    let input = t.path().join("in");
    text_tree(&input, "a", "in", 3);
    let file = fs::read_dir(input.join("a"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    fs::hard_link(&file, out.join("shard-000009.tar")).unwrap();
    let before = snapshot(&out);
    let o = bale(
        &["pack", "--labels", "none", "--force", "-o"],
        &[&out, &input],
    );
    refused(&o, "shard-000009.tar", &["input"]);
    assert_eq!(snapshot(&out), before, "pack --force changed the output");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(&file).unwrap().nlink(), 2);
}

/// Something named like bale's output that `--force` does not remove (a
/// folder, a FIFO) would stop the run after the old dataset was gone: it is
/// refused before anything is removed, naming it.
#[test]
fn force_refuses_what_it_cannot_remove_before_removing_anything() {
    let t = tempfile::tempdir().unwrap();
    let shard = packed(t.path(), "old", 3);
    let out = shard.parent().unwrap().to_path_buf();
    let input = t.path().join("in");
    text_tree(&input, "a", "in", 3);
    for (name, kind) in [
        ("shard-000001.tar", "a directory"),
        ("shard-000002.idx", "a FIFO"),
    ] {
        let p = out.join(name);
        if kind == "a directory" {
            fs::create_dir(&p).unwrap();
        } else {
            crate::common::mkfifo(&p);
        }
        let before = snapshot(&out);
        let o = bale(
            &["pack", "-q", "--labels", "none", "--force", "-o"],
            &[&out, &input],
        );
        refused(&o, name, &[kind, "--force does not remove"]);
        assert_eq!(snapshot(&out), before, "{name}: {}", text(&o));
        verifies(&out);
        if kind == "a directory" {
            fs::remove_dir(&p).unwrap();
        } else {
            fs::remove_file(&p).unwrap();
        }
    }
}

/// A `convert --format dir` killed while it moved its export in leaves a
/// marker and the rest of the export in its staging folder: the next
/// `--force` run refuses, says what to do, and keeps both (it used to clear
/// the staging folder and leave a partial export that looked whole).
#[test]
fn a_convert_to_dir_killed_while_moving_in_is_never_cleared() {
    let t = tempfile::tempdir().unwrap();
    let shard = packed(t.path(), "src", 4);
    let ds = shard.parent().unwrap().to_path_buf();
    let out = t.path().join("files");
    // What such a kill leaves: a part moved in, the rest staged, the marker.
    let staging = out.join(".bale-tmp-4242-convert");
    fs::create_dir_all(staging.join("b")).unwrap();
    fs::create_dir_all(out.join("a")).unwrap();
    fs::write(out.join("a/0.txt"), b"moved").unwrap();
    fs::write(staging.join("b/1.txt"), b"staged").unwrap();
    fs::write(out.join(".bale-tmp-4242-convert.moving"), b"a\nb\n").unwrap();
    let before = snapshot(&out);
    for cmd in [
        vec!["convert", "--format", "dir", "--force", "-o"],
        vec!["pack", "--labels", "none", "--force", "-o"],
    ] {
        let o = bale(&cmd, &[&out, &ds]);
        refused(
            &o,
            ".bale-tmp-4242-convert",
            &[
                "killed while it moved its export in",
                "names starting with a dot",
            ],
        );
        assert_eq!(snapshot(&out), before, "{cmd:?} changed the partial export");
    }
    // Once the marker is gone (the user finished the move by hand, say), a
    // rerun goes on as usual.
    fs::rename(staging.join("b"), out.join("b")).unwrap();
    fs::remove_dir(&staging).unwrap();
    fs::remove_file(out.join(".bale-tmp-4242-convert.moving")).unwrap();
    let o = bale(
        &["convert", "--format", "dir", "--force", "-o"],
        &[&out, &ds],
    );
    assert!(
        !o.status.success(),
        "the export's names exist: {}",
        text(&o)
    );
    assert!(stderr(&o).contains("already exists"), "{}", text(&o));
}

/// Without a manifest, tars of bale's shard names are a killed run's only
/// when that run's mark is there: a folder of the user's own
/// `shard-000000.tar` is refused by `--force`, and nothing is removed; a
/// killed pack's leftovers (with its mark) are cleared.
#[test]
fn force_without_a_manifest_removes_tars_only_after_a_killed_run() {
    let t = tempfile::tempdir().unwrap();
    let shard = packed(t.path(), "src", 5);
    let theirs = t.path().join("theirs");
    fs::create_dir(&theirs).unwrap();
    fs::copy(&shard, theirs.join("shard-000000.tar")).unwrap();
    fs::write(theirs.join("shard-000000.idx"), b"an old index").unwrap();
    let input = t.path().join("in");
    text_tree(&input, "a", "in", 3);
    let before = snapshot(&theirs);
    let o = bale(
        &["pack", "-q", "--labels", "none", "--force", "-o"],
        &[&theirs, &input],
    );
    refused(&o, "shard-000000.tar", &["no bale.json", "may be yours"]);
    assert!(!stderr(&o).contains("were removed"), "{}", text(&o));
    assert_eq!(snapshot(&theirs), before);

    // The same folder as a killed pack leaves it: its mark is there.
    fs::write(theirs.join(".bale-tmp-99999-run"), b"").unwrap();
    let o = bale(
        &["pack", "-q", "--labels", "none", "--force", "-o"],
        &[&theirs, &input],
    );
    ok(&o);
    verifies(&theirs);
    assert_eq!(Manifest::read(&theirs).unwrap().samples, 3);
    let left: Vec<String> = snapshot(&theirs).into_keys().collect();
    assert_eq!(left, ["bale.json", "shard-000000.idx", "shard-000000.tar"]);

    // A run killed before its first shard leaves only its mark: the folder
    // counts as empty (no --force needed), and the mark goes.
    let fresh = t.path().join("fresh");
    fs::create_dir(&fresh).unwrap();
    fs::write(fresh.join(".bale-tmp-99999-run"), b"").unwrap();
    ok(&bale(
        &["pack", "-q", "--labels", "none", "-o"],
        &[&fresh, &input],
    ));
    let left: Vec<String> = snapshot(&fresh).into_keys().collect();
    assert_eq!(left, ["bale.json", "shard-000000.idx", "shard-000000.tar"]);
}

/// `bale get` with its writes cut off part way (a file size limit, as a
/// full disk would): no cut-off file under the name it writes, and with
/// `--force` the file it would replace stays whole; nothing temporary left.
#[test]
fn a_get_whose_write_fails_leaves_no_cut_file_and_keeps_the_old_one() {
    use std::os::unix::process::CommandExt;
    let t = tempfile::tempdir().unwrap();
    let tree = t.path().join("tree");
    fs::create_dir(&tree).unwrap();
    let big: Vec<u8> = (0..150_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(tree.join("1.bin"), &big).unwrap();
    let ds = t.path().join("ds");
    ok(&bale(
        &["pack", "-q", "--labels", "none", "-o"],
        &[&ds, &tree],
    ));
    let out = t.path().join("out");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("notes.bin"), b"my notes").unwrap();
    fs::write(out.join("1.bin"), b"my 1.bin").unwrap();
    // Writes past 64 KiB fail (EFBIG) instead of killing the process.
    let limited = |args: &[&str]| {
        let mut cmd = Command::new(bale_bin());
        cmd.args(args);
        // SAFETY: setrlimit and signal are async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                let lim = libc::rlimit {
                    rlim_cur: 64 << 10,
                    rlim_max: 64 << 10,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.output().unwrap()
    };
    let before = snapshot(&out);
    let new = out.join("new.bin");
    let notes = out.join("notes.bin");
    for args in [
        vec!["get", p(&ds), "1", "--ext", "bin", "-o", p(&new)],
        vec![
            "get",
            p(&ds),
            "1",
            "--ext",
            "bin",
            "-o",
            p(&notes),
            "--force",
        ],
        vec!["get", p(&ds), "1", "-o", p(&out), "--force"],
    ] {
        let o = limited(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert_eq!(snapshot(&out), before, "{args:?}: {}", text(&o));
    }
    // Without the limit the same commands write the member whole.
    ok(&run(&[
        "get",
        p(&ds),
        "1",
        "--ext",
        "bin",
        "-o",
        p(&notes),
        "--force",
    ]));
    assert_eq!(fs::read(&notes).unwrap(), big);
}

/// `pack --force` removes the old dataset only once its input has been
/// walked, checked, labelled and planned: a FIFO among the inputs or a
/// label file that does not parse leaves the old dataset whole and
/// readable. A failure past that point (a damaged source of `convert
/// --force`, found while it is read) says that the old dataset is gone,
/// rather than only that nothing new was written.
#[test]
fn a_force_run_that_fails_on_its_input_keeps_the_old_dataset() {
    let t = tempfile::tempdir().unwrap();
    let old = packed(t.path(), "old", 6).parent().unwrap().to_path_buf();
    let before = snapshot(&old);
    let input = t.path().join("new-in");
    text_tree(&input, "b", "new", 4);
    let fifo = input.join("b").join("zz.txt");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let o = bale(
        &["pack", "--labels", "none", "--force", "-o"],
        &[&old, &input],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("FIFO"), "{}", text(&o));
    assert!(text(&o).contains("is as it was"), "{}", text(&o));
    assert_eq!(
        snapshot(&old),
        before,
        "a refused input cost the old dataset"
    );
    fs::remove_file(&fifo).unwrap();

    let csv = t.path().join("labels.csv");
    fs::write(&csv, "not a label row\n").unwrap();
    let labels = format!("csv:{}", csv.display());
    let o = bale(
        &["pack", "--labels", &labels, "--force", "-o"],
        &[&old, &input],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("is as it was"), "{}", text(&o));
    assert_eq!(
        snapshot(&old),
        before,
        "a bad label file cost the old dataset"
    );
    ok(&bale(&["verify", "-q"], &[&old]));

    // A damaged source is found only as it is read: by then the old
    // dataset was removed, and the message says so.
    let src = t.path().join("src");
    let shard = packed(t.path(), "src", 4);
    let mut bytes = fs::read(&shard).unwrap();
    bytes[512] ^= 0xff;
    fs::write(&shard, bytes).unwrap();
    let o = bale(&["convert", "--force", "-o"], &[&old, &src]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("had been removed by --force before the failure"),
        "{err}"
    );
    assert!(!old.join("bale.json").exists());
}
