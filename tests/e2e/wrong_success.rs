//! "Nothing reported as success that is wrong" (docs/reliability.md,
//! promises 2 and 3): every command that writes a dataset holds an exclusive lock
//! on its output, so a second writer fails at once; `ls`, `get` and `stat`
//! refuse an index that does not match the manifest; a file rewritten while
//! `bale pack` reads it is never stored torn; `bale verify` of a dataset
//! indexed from some of the tars of a directory does not count the others.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bale_format::Manifest;
use bale_reader::Dataset;
use bale_tests::{assert_success as ok, bale_bin, describe as text, gnu_tar, python};

use crate::common::{Running, output_within, samples, snapshot, text_tree};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Runs bale with `args`, failing the test if it takes over a minute.
fn run(args: &[&str]) -> Output {
    output_within(Command::new(bale_bin()).args(args), Duration::from_secs(60))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Packs `n` text samples under `sub/`, each starting with `tag`, into `out`.
fn pack(work: &Path, out: &Path, sub: &str, tag: &str, n: usize) {
    let input = work.join(format!("{tag}-in"));
    text_tree(&input, sub, tag, n);
    ok(&run(&[
        "pack",
        "-q",
        "--labels",
        "none",
        "-o",
        p(out),
        p(&input),
    ]));
}

/// Another process holding `flock(LOCK_EX)` on each of some directories
/// (on the directory's own descriptor, as bale takes it) until dropped.
struct LockHolder(Child);

impl LockHolder {
    fn new(dirs: &[&Path]) -> Self {
        const SCRIPT: &str = "import fcntl, os, sys\n\
            fds = [os.open(d, os.O_RDONLY) for d in sys.argv[1:]]\n\
            for fd in fds:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n\
            print('locked', flush=True)\n\
            sys.stdin.read()\n";
        let mut child = Command::new(python())
            .arg("-c")
            .arg(SCRIPT)
            .args(dirs)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start python");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let holder = LockHolder(child);
        assert_eq!(line.trim(), "locked", "python could not take the locks");
        holder
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every command that writes a dataset fails at once, naming the output,
/// when another process holds its lock, and writes or deletes nothing: into
/// a directory holding an old dataset (with `--force`) and into an empty one.
#[test]
fn a_locked_output_makes_every_writer_fail_at_once_and_touch_nothing() {
    let t = tempfile::tempdir().unwrap();
    let w = t.path();
    let input = w.join("in");
    text_tree(&input, "a", "lock", 12);
    let src = w.join("src");
    ok(&run(&[
        "pack",
        "-q",
        "--labels",
        "none",
        "-o",
        p(&src),
        p(&input),
    ]));
    let (p0, p1) = (w.join("p0"), w.join("p1"));
    for (i, part) in [&p0, &p1].into_iter().enumerate() {
        let n = format!("{i}/2");
        ok(&run(&[
            "pack",
            "-q",
            "--labels",
            "none",
            "--part",
            &n,
            "-o",
            p(part),
            p(&input),
        ]));
    }
    let tars = w.join("tars");
    fs::create_dir(&tars).unwrap();
    let tar = tars.join("data.tar");
    fs::copy(src.join("shard-000000.tar"), &tar).unwrap();

    let full = w.join("full");
    ok(&run(&[
        "pack",
        "-q",
        "--labels",
        "none",
        "-o",
        p(&full),
        p(&input),
    ]));
    fs::write(full.join("notes.txt"), b"notes").unwrap();
    let empty = w.join("empty");
    fs::create_dir(&empty).unwrap();
    let inputs_before = [&src, &p0, &p1, &tars].map(|d| snapshot(d));

    let _lock = LockHolder::new(&[&full, &empty]);
    for (out, force) in [(&full, true), (&empty, false)] {
        let before = snapshot(out);
        let o = p(out);
        let mut commands: Vec<Vec<&str>> = vec![
            vec!["pack", "--labels", "none", "-o", o, p(&input)],
            vec!["convert", "-o", o, p(&src)],
            vec!["merge", "-o", o, p(&p0), p(&p1)],
            vec!["index", "-o", o, p(&tar)],
        ];
        for c in &mut commands {
            if force {
                c.push("--force");
            }
            let start = Instant::now();
            let r = run(c);
            let took = start.elapsed();
            assert!(
                !r.status.success(),
                "{c:?} wrote into a locked output:\n{}",
                text(&r)
            );
            let err = stderr(&r);
            assert!(
                err.contains(o) && err.contains("another bale command"),
                "{c:?} should fail with the lock message naming {o}:\n{}",
                text(&r)
            );
            assert!(
                !err.contains("removed"),
                "{c:?} touched nothing, and should not say it removed files:\n{}",
                text(&r)
            );
            assert!(took < Duration::from_secs(5), "{c:?} took {took:?} to fail");
            assert_eq!(snapshot(out), before, "{c:?} changed the locked output");
        }
    }
    assert_eq!([&src, &p0, &p1, &tars].map(|d| snapshot(d)), inputs_before);
}

/// Two `bale pack` of the same tree into the same new output, started at
/// once: exactly one wins, the other fails with the lock message, and the
/// output is the winner's dataset, whole. A few rounds, each into a new
/// output, as who creates the directory first is up to the scheduler.
#[test]
fn two_packs_into_one_output_one_wins_the_other_fails_with_the_lock_message() {
    const ARGS: [&str; 6] = ["pack", "-q", "--labels", "none", "--shard-size", "64KiB"];
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    for d in 0..4 {
        text_tree(&input, &format!("d{d}"), &format!("race {d}"), 800);
    }
    let solo = t.path().join("solo");
    ok(&run(&[&ARGS[..], &["-o", p(&solo), p(&input)]].concat()));
    let want = snapshot(&solo);
    for round in 0..3 {
        let out = t.path().join(format!("out{round}"));
        let start = || {
            Running::start(
                Command::new(bale_bin())
                    .args(ARGS)
                    .arg("-o")
                    .arg(&out)
                    .arg(&input)
                    .stdin(Stdio::null()),
            )
        };
        let (a, b) = (start(), start());
        let runs = [a, b].map(|r| r.finish_within(Duration::from_secs(180)));
        let won = runs.iter().filter(|o| o.status.success()).count();
        assert_eq!(
            won,
            1,
            "round {round}: exactly one pack should win:\n--- first ---\n{}\n--- second ---\n{}",
            text(&runs[0]),
            text(&runs[1])
        );
        let lost = runs.iter().find(|o| !o.status.success()).unwrap();
        let err = stderr(lost);
        assert!(
            err.contains(p(&out)) && err.contains("another bale command"),
            "round {round}: the loser should fail with the lock message naming {}:\n{}",
            out.display(),
            text(lost)
        );
        let v = run(&["verify", p(&out)]);
        assert_eq!(v.status.code(), Some(0), "round {round}: {}", text(&v));
        assert_eq!(Manifest::read(&out).unwrap().samples, 3200);
        assert_eq!(
            snapshot(&out),
            want,
            "round {round}: not the winner's dataset"
        );
    }
}

/// A dataset whose shard and index were replaced by another dataset's.
fn foreign_index_dataset(work: &Path) -> PathBuf {
    let ds = work.join("ds");
    pack(work, &ds, "a", "mine", 10);
    let other = work.join("other");
    pack(work, &other, "b", "FOREIGN", 10);
    for f in ["shard-000000.tar", "shard-000000.idx"] {
        fs::copy(other.join(f), ds.join(f)).unwrap();
    }
    ds
}

/// A dataset of 10 samples whose index was replaced by one of 0 samples
/// (`bale index` of an empty tar).
fn empty_index_dataset(work: &Path) -> PathBuf {
    let ds = work.join("ds");
    pack(work, &ds, "a", "mine", 10);
    let e = work.join("e");
    fs::create_dir(&e).unwrap();
    let tar = e.join("empty.tar");
    ok(&Command::new(gnu_tar())
        .arg("-cf")
        .arg(&tar)
        .args(["-T", "/dev/null"])
        .output()
        .unwrap());
    ok(&run(&["index", "-q", "-o", p(&e), p(&tar)]));
    assert_eq!(Manifest::read(&e).unwrap().samples, 0);
    fs::copy(e.join("empty.idx"), ds.join("shard-000000.idx")).unwrap();
    ds
}

/// `ls`, `get` and `stat` on `ds` fail with the reader's own mismatch error
/// ([`Dataset::open`]), printing no data of the index.
fn read_commands_refuse(ds: &Path, what: &str) {
    let reader = match Dataset::open(ds) {
        Ok(_) => panic!("{what}: the reader opened a dataset whose index does not match"),
        Err(e) => e.to_string(),
    };
    assert!(
        reader.contains("does not match the manifest"),
        "{what}: {reader}"
    );
    let d = p(ds);
    for args in [
        vec!["ls", d],
        vec!["ls", "--json", d],
        vec!["get", d, "0", "--ext", "txt"],
        vec!["get", d, "b/0000", "--ext", "txt"],
        vec!["stat", d],
    ] {
        let o = run(&args);
        assert!(
            !o.status.success(),
            "{what}: {args:?} succeeded:\n{}",
            text(&o)
        );
        let err = stderr(&o);
        assert!(
            err.contains(&reader),
            "{what}: {args:?} should fail with the reader's error {reader:?}:\n{}",
            text(&o)
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            !out.contains("FOREIGN") && !out.contains("b/0"),
            "{what}: {args:?} printed the foreign data:\n{}",
            text(&o)
        );
    }
}

#[test]
fn ls_get_and_stat_refuse_another_datasets_index() {
    let t = tempfile::tempdir().unwrap();
    let ds = foreign_index_dataset(t.path());
    read_commands_refuse(&ds, "foreign shard and index");
}

#[test]
fn ls_get_and_stat_refuse_an_index_of_0_samples_where_the_manifest_says_10() {
    let t = tempfile::tempdir().unwrap();
    let ds = empty_index_dataset(t.path());
    read_commands_refuse(&ds, "index of 0 samples");
}

/// Rewrites a file in place at its size, alternating two patterns in 1 MiB
/// `pwrite`s (never truncating), until dropped.
struct Rewriter {
    stop: Arc<AtomicBool>,
    passes: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Rewriter {
    fn start(path: &Path, size: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let passes = Arc::new(AtomicU64::new(0));
        let file = fs::OpenOptions::new().write(true).open(path).unwrap();
        let thread = {
            let (stop, passes) = (stop.clone(), passes.clone());
            std::thread::spawn(move || {
                let chunk = 1 << 20;
                let patterns = [vec![0xAAu8; chunk], vec![0x55u8; chunk]];
                let mut pass = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let pattern = &patterns[pass % 2];
                    for off in (0..size).step_by(chunk) {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        file.write_all_at(&pattern[..chunk.min(size - off)], off as u64)
                            .unwrap();
                    }
                    pass += 1;
                    passes.store(pass as u64, Ordering::Relaxed);
                }
            })
        };
        Rewriter {
            stop,
            passes,
            thread: Some(thread),
        }
    }

    /// Waits (a bounded time) for `n` full passes.
    fn wait_passes(&self, n: u64) {
        let start = Instant::now();
        while self.passes.load(Ordering::Relaxed) < n {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the rewriter is stuck"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Rewriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A file rewritten in place at the same size while `bale pack` reads it is
/// never stored torn: `--on-error fail` fails saying it was modified while
/// being read; `--on-error skip` leaves its sample out and lists it.
#[test]
fn a_file_rewritten_while_packed_is_refused_or_skipped_never_stored_torn() {
    const BIG: usize = 64 << 20;
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    text_tree(&input, "a", "small", 5);
    let big = input.join("a/big.bin");
    fs::write(&big, vec![0xAAu8; BIG]).unwrap();

    let writer = Rewriter::start(&big, BIG);
    writer.wait_passes(1);
    let out = t.path().join("fail");
    let failed = run(&[
        "pack",
        "--labels",
        "none",
        "--on-error",
        "fail",
        "-o",
        p(&out),
        p(&input),
    ]);
    let out2 = t.path().join("skip");
    let skipped = run(&[
        "pack",
        "--labels",
        "none",
        "--on-error",
        "skip",
        "--json",
        "-o",
        p(&out2),
        p(&input),
    ]);
    drop(writer);

    assert!(
        !failed.status.success(),
        "a torn file was packed:\n{}",
        text(&failed)
    );
    let err = stderr(&failed);
    assert!(
        err.contains("big.bin") && err.contains("modified while being read"),
        "{}",
        text(&failed)
    );
    assert!(!out.join("bale.json").exists(), "{}", text(&failed));

    ok(&skipped);
    let summary: serde_json::Value = serde_json::from_slice(&skipped.stdout).unwrap();
    let list = summary["skipped"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{summary}");
    assert!(
        list[0]["path"].as_str().unwrap().ends_with("a/big.bin"),
        "{summary}"
    );
    assert!(
        list[0]["error"]
            .as_str()
            .unwrap()
            .contains("modified while being read"),
        "{summary}"
    );
    let m = Manifest::read(&out2).unwrap();
    assert_eq!((m.samples, m.skipped), (5, 1));
    let keys: Vec<String> = samples(&out2).into_iter().map(|s| s.0).collect();
    assert_eq!(
        keys,
        (0..5).map(|i| format!("a/{i:04}")).collect::<Vec<_>>()
    );
}

/// `bale index 'some/a*.tar' -o ds` over some of the tars of a directory
/// elsewhere: `bale verify ds` passes, the other tars there are no findings;
/// a stray bale-named shard in the dataset directory itself still is one.
#[test]
fn verify_of_a_glob_subset_ignores_the_other_tars_but_not_strays_in_the_dataset() {
    let t = tempfile::tempdir().unwrap();
    let w = t.path();
    let some = w.join("some");
    fs::create_dir(&some).unwrap();
    for (name, sub) in [("a1", "x"), ("a2", "y"), ("b1", "z")] {
        let ds = w.join(format!("pack-{name}"));
        pack(w, &ds, sub, name, 6);
        fs::copy(
            ds.join("shard-000000.tar"),
            some.join(format!("{name}.tar")),
        )
        .unwrap();
    }
    fs::write(some.join("shard-000000.tar"), b"not indexed either").unwrap();
    let ds = w.join("ds");
    let glob = format!("{}/a*.tar", p(&some));
    ok(&run(&["index", "-q", "-o", p(&ds), &glob]));
    let m = Manifest::read(&ds).unwrap();
    assert_eq!((m.shards.len(), m.samples), (2, 12));
    for args in [vec!["verify", p(&ds)], vec!["verify", "--quick", p(&ds)]] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
    }

    // Strays in the dataset directory itself are findings: an index, a shard.
    let stray_idx = ds.join("shard-000008.idx");
    fs::copy(ds.join("a1.idx"), &stray_idx).unwrap();
    let o = run(&["verify", p(&ds)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(
        all.contains("shard-000008.idx") && all.contains("not listed in the manifest"),
        "{}",
        text(&o)
    );
    fs::remove_file(&stray_idx).unwrap();
    fs::copy(some.join("b1.tar"), ds.join("shard-000009.tar")).unwrap();
    let o = run(&["verify", p(&ds)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let all = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(
        all.contains("shard-000009.tar") && all.contains("not listed in the manifest"),
        "{}",
        text(&o)
    );
    assert!(!all.contains("b1.tar"), "{}", text(&o));
}

/// A manifest whose counts disagree with an index (here: 2^40 members) is
/// refused by `convert` as by every reader, naming what disagrees; no
/// dataset is written.
#[test]
fn convert_refuses_a_manifest_that_disagrees_with_an_index() {
    let t = tempfile::tempdir().unwrap();
    let ds = t.path().join("ds");
    pack(t.path(), &ds, "a", "mm", 6);
    let path = ds.join("bale.json");
    let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    v["shards"][0]["members"] = serde_json::json!(1u64 << 40);
    fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    for cmd in [&["ls", p(&ds)][..], &["stat", p(&ds)], &["verify", p(&ds)]] {
        assert!(
            !run(cmd).status.success(),
            "{cmd:?} took the damaged manifest"
        );
    }
    let out = t.path().join("conv");
    let o = run(&["convert", "-q", p(&ds), "-o", p(&out)]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        stderr(&o).contains("the index holds") && stderr(&o).contains("members"),
        "{}",
        stderr(&o)
    );
    assert!(!out.join("bale.json").exists());
}
