//! Hangs and unbounded memory: files that are not regular files (devices,
//! FIFOs, symlinks to them) where a dataset's index, shard or manifest should
//! be; thread counts that would bring a machine down; a pack that must stop
//! when told to.
//!
//! Every command runs as a child killed after a timeout or when its memory
//! grows (`run_bounded`), so a regression fails the test instead of hanging
//! the suite.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bale_format::Compression;

use crate::common::{Bounded, bale_cmd, random_tree, run_bounded, run_bounded_with_pid};
use crate::verify::make_dataset;

/// How long a refusal may take: far more than the milliseconds it needs,
/// far less than the timeout, which means a hang.
const QUICK: Duration = Duration::from_secs(10);

/// Resident memory a command over the 12-sample fixture may reach.
const RSS_MIB: u64 = 256;

use crate::common::mkfifo;

/// The fixture of the verify tests (3 shards x 4 samples, `.cls` labels) in `t/ds`.
fn fixture(t: &Path) -> PathBuf {
    let ds = t.join("ds");
    make_dataset(&ds, Compression::None, false);
    ds
}

/// Sets field `field` of shard `shard` in the manifest of `ds` to `value`.
fn set_manifest_path(ds: &Path, shard: usize, field: &str, value: &str) {
    let p = ds.join("bale.json");
    let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
    v["shards"][shard][field] = value.into();
    fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// The read commands, over sample `dog/0005` of shard 1 where one is needed.
fn read_commands(ds: &Path) -> Vec<(&'static str, Vec<&OsStr>)> {
    let d = ds.as_os_str();
    vec![
        ("verify", vec!["verify".as_ref(), d]),
        ("stat", vec!["stat".as_ref(), d]),
        ("ls", vec!["ls".as_ref(), d]),
        (
            "get",
            vec![
                "get".as_ref(),
                d,
                "dog/0005".as_ref(),
                "--ext".as_ref(),
                "txt".as_ref(),
            ],
        ),
    ]
}

/// Runs `commands` at once, each bounded in time and memory.
fn run_all(commands: Vec<(&'static str, Vec<&OsStr>)>) -> Vec<(&'static str, Bounded)> {
    std::thread::scope(|s| {
        let handles: Vec<_> = commands
            .into_iter()
            .map(|(name, args)| {
                s.spawn(move || {
                    let mut cmd = bale_cmd(&args);
                    (
                        name,
                        run_bounded(&mut cmd, Duration::from_secs(20), RSS_MIB),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Every command of `commands` exits non-zero within [`QUICK`], and what it
/// prints (stderr, or stdout for verify's findings) holds every string of `says`.
fn all_refuse(case: &str, commands: Vec<(&'static str, Vec<&OsStr>)>, says: &[&str]) {
    let mut bad = Vec::new();
    for (name, o) in run_all(commands) {
        let err = format!("{}{}", String::from_utf8_lossy(&o.stdout), o.stderr_text());
        let fine = o.failed_cleanly() && o.elapsed < QUICK && says.iter().all(|s| err.contains(s));
        if !fine {
            bad.push(format!(
                "{case}: `bale {name}` should fail at once saying {says:?}; {}",
                o.describe()
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
}

#[test]
fn an_index_symlinked_to_a_device_is_refused_at_once() {
    for dev in ["/dev/zero", "/dev/urandom"] {
        let t = tempfile::tempdir().unwrap();
        let ds = fixture(t.path());
        let idx = ds.join("shard-000001.idx");
        fs::remove_file(&idx).unwrap();
        std::os::unix::fs::symlink(dev, &idx).unwrap();
        all_refuse(
            &format!("shard-000001.idx -> {dev}"),
            read_commands(&ds),
            &["shard-000001.idx", "is a device", "not a regular file"],
        );
    }
}

#[test]
fn an_index_that_is_a_fifo_or_a_symlink_to_one_is_refused_at_once() {
    let t = tempfile::tempdir().unwrap();
    let ds = fixture(t.path());
    // The commands below fail because of the damage, not the fixture.
    for (name, o) in run_all(read_commands(&ds)) {
        assert!(
            o.status.is_some_and(|s| s.success()) && o.elapsed < QUICK,
            "bale {name} on the clean fixture: {}",
            o.describe()
        );
    }
    let idx = ds.join("shard-000001.idx");
    fs::remove_file(&idx).unwrap();
    mkfifo(&idx);
    all_refuse(
        "shard-000001.idx is a FIFO",
        read_commands(&ds),
        &["shard-000001.idx", "is a FIFO", "not a regular file"],
    );
    fs::remove_file(&idx).unwrap();
    let fifo = t.path().join("elsewhere.fifo");
    mkfifo(&fifo);
    std::os::unix::fs::symlink(&fifo, &idx).unwrap();
    all_refuse(
        "shard-000001.idx -> a FIFO",
        read_commands(&ds),
        &["shard-000001.idx", "is a FIFO", "not a regular file"],
    );
}

#[test]
fn an_index_path_in_the_manifest_naming_a_device_is_refused_at_once() {
    for dev in ["/dev/zero", "/dev/urandom"] {
        let t = tempfile::tempdir().unwrap();
        let ds = fixture(t.path());
        set_manifest_path(&ds, 1, "index", dev);
        all_refuse(
            &format!("\"index\": \"{dev}\" in bale.json"),
            read_commands(&ds),
            &[dev, "is a device", "not a regular file"],
        );
    }
}

#[test]
fn a_shard_that_is_a_fifo_blocks_no_reader() {
    let t = tempfile::tempdir().unwrap();
    let ds = fixture(t.path());
    let shard = ds.join("shard-000001.tar");
    fs::remove_file(&shard).unwrap();
    mkfifo(&shard);
    // ls and stat read the `.cls` member of every sample, get reads a member
    // of shard 1, verify reads every shard: each meets the FIFO.
    all_refuse(
        "shard-000001.tar is a FIFO",
        read_commands(&ds),
        &["shard-000001.tar", "not a regular file"],
    );
    assert!(
        fs::symlink_metadata(&shard).unwrap().file_type().is_fifo(),
        "the FIFO is left as it was"
    );
}

#[test]
fn a_manifest_that_is_a_fifo_or_a_device_is_refused_at_once() {
    let t = tempfile::tempdir().unwrap();
    let ds = fixture(t.path());
    let manifest = ds.join("bale.json");
    fs::remove_file(&manifest).unwrap();
    mkfifo(&manifest);
    all_refuse(
        "bale.json is a FIFO",
        read_commands(&ds),
        &["bale.json", "is a FIFO", "not a regular file"],
    );
    fs::remove_file(&manifest).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &manifest).unwrap();
    all_refuse(
        "bale.json -> /dev/zero",
        read_commands(&ds),
        &["bale.json", "is a device", "not a regular file"],
    );
}

/// `bale ARGS` with its address space capped at 4 GiB, so a binary that does
/// start 100,000 threads runs out of stacks after a few thousand instead of
/// exhausting the machine.
fn capped(args: &[&OsStr]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("ulimit -v 4194304 && exec \"$0\" \"$@\"")
        .arg(bale_tests::bale_bin())
        .args(args);
    c
}

#[test]
fn pack_with_100000_jobs_is_refused_at_once_and_writes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    random_tree(&input, 20);
    let out = t.path().join("out");
    let o = run_bounded(
        &mut capped(&[
            "pack".as_ref(),
            "-j".as_ref(),
            "100000".as_ref(),
            input.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ]),
        Duration::from_secs(20),
        1024,
    );
    let err = o.stderr_text();
    assert!(
        o.failed_cleanly()
            && o.elapsed < QUICK
            && err.contains("--jobs 100000")
            && err.contains("at most 1024 threads"),
        "pack -j 100000 should fail at once naming the thread limit: {}",
        o.describe()
    );
    assert!(
        !out.exists(),
        "nothing written: {:?}",
        fs::read_dir(&out).map(|d| d.count())
    );
}

#[test]
fn index_with_100000_jobs_is_refused_at_once_and_writes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let ds = fixture(t.path());
    let tars = t.path().join("tars");
    fs::create_dir(&tars).unwrap();
    for i in 0..3 {
        let name = format!("shard-00000{i}.tar");
        fs::copy(ds.join(&name), tars.join(&name)).unwrap();
    }
    let out = t.path().join("out");
    let pattern = tars.join("*.tar");
    let o = run_bounded(
        &mut capped(&[
            "index".as_ref(),
            "-j".as_ref(),
            "100000".as_ref(),
            pattern.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ]),
        Duration::from_secs(20),
        1024,
    );
    let err = o.stderr_text();
    assert!(
        o.failed_cleanly()
            && o.elapsed < QUICK
            && err.contains("--jobs 100000")
            && err.contains("at most 1024 threads"),
        "index -j 100000 should fail at once naming the thread limit: {}",
        o.describe()
    );
    assert!(!out.exists(), "nothing written");
    assert_eq!(
        fs::read_dir(&tars).unwrap().count(),
        3,
        "no index beside the tars"
    );
}

/// Runs `cmd`, sending it SIGTERM once `ready()` holds and `delay` more has
/// passed (unless it has ended by then); returns how it ended and, when the
/// signal was sent, how long it lived after it.
fn terminate(
    cmd: &mut Command,
    ready: impl Fn() -> bool + Send + 'static,
    delay: Duration,
) -> (Bounded, Option<Duration>) {
    let pid = Arc::new(Mutex::new(None::<u32>));
    let sent = Arc::new(Mutex::new(None::<Instant>));
    let stop = Arc::new(AtomicBool::new(false));
    let killer = {
        let (pid, sent, stop) = (pid.clone(), sent.clone(), stop.clone());
        std::thread::spawn(move || {
            while !ready() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(delay);
            let alive = pid.lock().unwrap();
            if let Some(p) = *alive {
                *sent.lock().unwrap() = Some(Instant::now());
                let _ = Command::new("kill")
                    .args(["-TERM", &p.to_string()])
                    .status();
            }
        })
    };
    let o = run_bounded_with_pid(cmd, Duration::from_secs(30), 4096, &pid);
    stop.store(true, Ordering::SeqCst);
    killer.join().unwrap();
    let after = sent
        .lock()
        .unwrap()
        .map(|s| o.elapsed.saturating_sub(s - o.started));
    (o, after)
}

#[test]
fn sigterm_stops_a_pack_within_seconds_leaving_no_dataset() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    random_tree(&input, 1500);
    let out = t.path().join("out");
    // At the start, in the middle of the first shards, and later on; with
    // the most reader threads the limit allows.
    for delay_ms in [0u64, 300, 1500] {
        let _ = fs::remove_dir_all(&out);
        let watched = out.clone();
        let mut cmd = bale_cmd(&[
            "pack".as_ref(),
            "--jobs".as_ref(),
            "1024".as_ref(),
            "--shard-size".as_ref(),
            "2MiB".as_ref(),
            input.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        let (o, after) = terminate(
            &mut cmd,
            move || watched.exists(),
            Duration::from_millis(delay_ms),
        );
        let case = format!("SIGTERM {delay_ms} ms after the output appeared");
        eprintln!(
            "{case}: exit {:?} {:?} after the signal, {:.2?} in all",
            o.status, after, o.elapsed
        );
        assert!(o.killed.is_none(), "{case}: {}", o.describe());
        if let Some(after) = after {
            assert!(
                after < Duration::from_secs(5),
                "{case}: exited {after:?} after SIGTERM: {}",
                o.describe()
            );
            if o.status.is_some_and(|s| !s.success()) {
                assert!(
                    !out.join("bale.json").exists(),
                    "{case}: a failed pack left a manifest"
                );
                assert!(
                    o.stderr_text().contains("no dataset was written"),
                    "{case}: {}",
                    o.describe()
                );
            }
        }
    }
    // A pack asked for more threads than the machine can start must stop
    // just as quickly (or refuse at once).
    let _ = fs::remove_dir_all(&out);
    let mut cmd = capped(&[
        "pack".as_ref(),
        "--jobs".as_ref(),
        "100000".as_ref(),
        input.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let start = Instant::now();
    let (o, after) = terminate(
        &mut cmd,
        move || start.elapsed() > Duration::from_millis(500),
        Duration::ZERO,
    );
    assert!(
        o.killed.is_none() && o.elapsed < QUICK,
        "pack --jobs 100000, SIGTERM after 0.5 s (ended {after:?} after the signal): {}",
        o.describe()
    );
    assert!(!out.join("bale.json").exists());
}

/// A list (`--files-from`) or label CSV (`--labels csv:`) that is a FIFO no
/// process writes to keeps `open` blocked; the first SIGTERM still stops the
/// pack within seconds (exit 130), leaving no manifest.
#[test]
fn a_list_or_label_csv_in_a_fifo_nobody_writes_yields_to_sigterm() {
    let t = tempfile::tempdir().unwrap();
    let tree = t.path().join("tree");
    random_tree(&tree, 10);
    let fifo = t.path().join("nobody.fifo");
    mkfifo(&fifo);
    let csv = format!("csv:{}", fifo.display());
    for (case, flag, value) in [
        ("--files-from FIFO", "--files-from", fifo.as_os_str()),
        ("--labels csv:FIFO", "--labels", OsStr::new(&csv)),
    ] {
        let out = t.path().join("out");
        let _ = fs::remove_dir_all(&out);
        let mut cmd = bale_cmd(&[
            OsStr::new("pack"),
            OsStr::new("-q"),
            tree.as_os_str(),
            OsStr::new("-o"),
            out.as_os_str(),
            OsStr::new(flag),
            value,
        ]);
        cmd.current_dir(&tree);
        let start = Instant::now();
        let (o, after) = terminate(
            &mut cmd,
            move || start.elapsed() > Duration::from_millis(700),
            Duration::ZERO,
        );
        let after =
            after.unwrap_or_else(|| panic!("{case}: ended before the signal: {}", o.describe()));
        assert!(
            o.killed.is_none() && after < Duration::from_secs(5),
            "{case}: ended {after:?} after SIGTERM: {}",
            o.describe()
        );
        assert_eq!(
            o.status.and_then(|s| s.code()),
            Some(130),
            "{case}: {}",
            o.describe()
        );
        assert!(!out.join("bale.json").exists(), "{case}");
    }
}

/// `--files-from` and `--labels csv:` naming `/dev/zero` (or a binary file)
/// fail at once with the line that is too long, in bounded memory; a list
/// in a pipe still works.
#[test]
fn a_list_or_label_csv_that_is_dev_zero_is_refused_at_once() {
    let t = tempfile::tempdir().unwrap();
    let tree = t.path().join("tree");
    random_tree(&tree, 10);
    for (case, flag, value, says) in [
        (
            "--files-from /dev/zero",
            "--files-from",
            "/dev/zero",
            "not a list of paths",
        ),
        (
            "--labels csv:/dev/zero",
            "--labels",
            "csv:/dev/zero",
            "not a label CSV",
        ),
    ] {
        let out = t.path().join("out");
        let o = run_bounded(
            bale_cmd(&[
                OsStr::new("pack"),
                tree.as_os_str(),
                OsStr::new("-o"),
                out.as_os_str(),
                OsStr::new(flag),
                OsStr::new(value),
            ])
            .current_dir(t.path()),
            Duration::from_secs(60),
            RSS_MIB,
        );
        let err = o.stderr_text();
        assert!(
            o.failed_cleanly()
                && o.elapsed < QUICK
                && err.contains("/dev/zero")
                && err.contains("line 1 is longer than")
                && err.contains(says),
            "{case}: {}",
            o.describe()
        );
        assert!(!out.join("bale.json").exists());
    }
    // A list read from a pipe (as `--files-from <(find ...)` gives).
    let list = t.path().join("list.fifo");
    mkfifo(&list);
    let names: Vec<String> = fs::read_dir(&tree)
        .unwrap()
        .flat_map(|d| fs::read_dir(d.unwrap().path()).unwrap())
        .map(|e| {
            let p = e.unwrap().path();
            format!("{}\n", p.strip_prefix(&tree).unwrap().display())
        })
        .collect();
    assert_eq!(names.len(), 10);
    let writer = {
        let list = list.clone();
        std::thread::spawn(move || fs::write(&list, names.concat()).unwrap())
    };
    let out = t.path().join("piped");
    let o = run_bounded(
        bale_cmd(&[
            OsStr::new("pack"),
            OsStr::new("-q"),
            OsStr::new("-o"),
            out.as_os_str(),
            OsStr::new("--files-from"),
            list.as_os_str(),
        ])
        .current_dir(&tree),
        Duration::from_secs(60),
        RSS_MIB,
    );
    writer.join().unwrap();
    assert!(o.status.is_some_and(|s| s.success()), "{}", o.describe());
    assert!(out.join("bale.json").exists());
}

/// `bale index` of a FIFO named like a tar: refused at once, naming it as a
/// FIFO and the command as index, and nothing is written.
#[test]
fn index_of_a_fifo_is_refused_at_once() {
    let t = tempfile::tempdir().unwrap();
    let fifo = t.path().join("shard-000000.tar");
    mkfifo(&fifo);
    let out = t.path().join("out");
    let o = run_bounded(
        &mut capped(&[
            "index".as_ref(),
            fifo.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ]),
        Duration::from_secs(20),
        1024,
    );
    let err = o.stderr_text();
    assert!(
        o.failed_cleanly()
            && o.elapsed < QUICK
            && err.contains("cannot index")
            && err.contains("a FIFO"),
        "{}",
        o.describe()
    );
    assert!(!out.exists(), "nothing written");
}

#[test]
fn merge_of_a_part_whose_shard_is_a_fifo_is_refused_at_once() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    random_tree(&input, 40);
    let parts: Vec<PathBuf> = (0..2)
        .map(|i| {
            let p = t.path().join(format!("p{i}"));
            let part = format!("{i}/2");
            crate::common::pack_quiet(&input, &p, &["--part", &part]);
            p
        })
        .collect();
    let shard = fs::read_dir(&parts[1])
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "tar"))
        .unwrap();
    fs::remove_file(&shard).unwrap();
    mkfifo(&shard);
    let out = t.path().join("out");
    let o = run_bounded(
        &mut bale_cmd(&[
            OsStr::new("merge"),
            OsStr::new("-o"),
            out.as_os_str(),
            parts[0].as_os_str(),
            parts[1].as_os_str(),
        ]),
        QUICK,
        RSS_MIB,
    );
    assert_eq!(o.status.and_then(|s| s.code()), Some(2), "{}", o.describe());
    let err = o.stderr_text();
    assert!(
        err.contains("a FIFO, not a regular file"),
        "{}",
        o.describe()
    );
    assert!(!out.join("bale.json").exists());
    assert!(fs::symlink_metadata(&shard).unwrap().file_type().is_fifo());
}
