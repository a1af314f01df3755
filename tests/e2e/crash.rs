//! Crash consistency: `bale pack`, `bale convert` and `bale index` killed
//! with SIGKILL at points spread over their run. A killed writer leaves
//! either no manifest or a dataset that verifies, and the same command with
//! `--force` into the same output then succeeds and verifies. Two steps too
//! short to hit from outside (the removal of an old dataset under `--force`,
//! and `convert --format dir` moving its export in) are killed under `strace`
//! at an exact system call.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use crate::common::{bale_bounded, bale_cmd, random_tree, run_bounded};

/// Runs `bale ARGS` to the end (at most `limit`), returning how long it took.
fn timed(args: &[OsString], limit: Duration) -> Duration {
    let o = run_bounded(&mut bale_cmd(args), limit, 4096);
    assert!(
        o.killed.is_none() && o.status.is_some_and(|s| s.success()),
        "bale {args:?}: {}",
        o.describe()
    );
    o.elapsed
}

/// `Ok` when `bale verify DIR` passes.
fn verifies(dir: &Path) -> Result<(), String> {
    let o = bale_bounded(&["verify".as_ref(), dir.as_os_str()]);
    if o.killed.is_none() && o.status.is_some_and(|s| s.success()) {
        Ok(())
    } else {
        Err(format!("bale verify {}: {}", dir.display(), o.describe()))
    }
}

/// After a kill: no manifest, or a dataset that verifies.
fn consistent(dir: &Path) -> Result<&'static str, String> {
    if !dir.join("bale.json").exists() {
        return Ok("no manifest");
    }
    verifies(dir).map(|()| "a complete dataset")
}

/// Runs `args` (which write `out` with `--force`) to the end and checks the
/// result verifies and, when `no_temps`, holds no temporary file.
fn redo(args: &[OsString], out: &Path, no_temps: bool) -> Result<(), String> {
    let o = run_bounded(&mut bale_cmd(args), Duration::from_secs(120), 4096);
    if !(o.killed.is_none() && o.status.is_some_and(|s| s.success())) {
        return Err(format!("redo bale {args:?}: {}", o.describe()));
    }
    verifies(out)?;
    let temps: Vec<String> = fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".bale-tmp-"))
        .collect();
    if temps.is_empty() || !no_temps {
        Ok(())
    } else {
        Err(format!("temporary files left after the redo: {temps:?}"))
    }
}

fn args(parts: &[&OsStr]) -> Vec<OsString> {
    parts.iter().map(|p| p.to_os_string()).collect()
}

/// How many shard and index files in `dir` were written at or after `since`.
fn written_since(dir: &Path, since: SystemTime) -> usize {
    let Ok(rd) = fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("shard-"))
        .filter(|e| {
            e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|m| m >= since)
        })
        .count()
}

/// Starts `bale ARGS` and kills it with SIGKILL as soon as `out` holds
/// `files` shard and index files it wrote (at once when 0), unless it ends
/// first; returns whether it was killed. Kill points follow the command's
/// progress, so they spread over its run however fast the machine is.
fn kill_at_progress(args: &[OsString], out: &Path, files: usize) -> bool {
    // File times have a coarser clock than SystemTime::now(): step back a little.
    let since = SystemTime::now() - Duration::from_millis(20);
    kill_when(args, || files == 0 || written_since(out, since) >= files)
}

/// Starts `bale ARGS` and kills it with SIGKILL once `ready()` holds, unless
/// it ends first; returns whether it was killed.
fn kill_when(args: &[OsString], ready: impl Fn() -> bool) -> bool {
    let mut child = bale_cmd(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !ready() {
        if child.try_wait().unwrap().is_some() || start.elapsed() > Duration::from_secs(60) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // The child is not reaped yet: its pid is still its own.
    let killed = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    killed
}

#[test]
fn sigkill_at_20_points_of_a_pack_leaves_no_dataset_or_a_valid_one() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    random_tree(&input, 1500);
    let out = t.path().join("out");
    // `--force` packs (over a complete dataset) cut other shards, so a
    // manifest left from before cannot pass for theirs.
    let pack = |force: bool| {
        let size = if force { "3MiB" } else { "2MiB" };
        let mut a = args(&[
            "pack".as_ref(),
            "-q".as_ref(),
            "--shard-size".as_ref(),
            size.as_ref(),
            input.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        if force {
            a.push("--force".into());
        }
        a
    };
    let redo_args = {
        let mut a = pack(false);
        a.push("--force".into());
        a
    };
    // One uninterrupted run of each kind, to know how many files each writes.
    let full = timed(&pack(true), Duration::from_secs(120));
    verifies(&out).unwrap();
    let files_force = 2 * bale_format::Manifest::read(&out).unwrap().shards.len();
    fs::remove_dir_all(&out).unwrap();
    let full = full.max(timed(&pack(false), Duration::from_secs(120)));
    verifies(&out).unwrap();
    let files_fresh = 2 * bale_format::Manifest::read(&out).unwrap().shards.len();
    assert!(
        files_force >= 20,
        "{files_force} files: the kills should fall between and inside many shards"
    );
    let mut report = Vec::new();
    let mut problems = Vec::new();
    for k in 0..20u32 {
        // Even kills: a fresh output; odd ones: a --force pack over the
        // complete dataset the previous redo left.
        let fresh = k % 2 == 0;
        if fresh {
            fs::remove_dir_all(&out).unwrap();
        }
        let total = if fresh { files_fresh } else { files_force };
        // From at once to the moment the last index is in place (racing the
        // manifest), in 10 steps for each kind.
        let files = (k as usize / 2 * total).div_ceil(9);
        let killed = kill_at_progress(&pack(!fresh), &out, files);
        let state = consistent(&out);
        let left = fs::read_dir(&out).map_or(0, Iterator::count);
        let case = format!(
            "kill {k} ({}) after {files} of {total} files",
            if fresh { "fresh" } else { "--force" }
        );
        report.push(format!(
            "{case}: killed {killed}, {left} entries left, {state:?}"
        ));
        if let Err(e) = state {
            problems.push(format!("{case}: {e}"));
        }
        if let Err(e) = redo(&redo_args, &out, true) {
            problems.push(format!("after {case}: {e}"));
        }
    }
    eprintln!("uninterrupted pack: {full:.2?}\n{}", report.join("\n"));
    assert!(
        problems.is_empty(),
        "uninterrupted pack: {full:.2?}\n{}\n\nproblems:\n{}",
        report.join("\n"),
        problems.join("\n\n")
    );
}

/// A dataset packed from `n` random files in 2 MiB shards, in `t/ds`.
fn source(t: &Path, n: usize) -> std::path::PathBuf {
    let input = t.join("in");
    random_tree(&input, n);
    let ds = t.join("ds");
    crate::common::pack_quiet(&input, &ds, &["--shard-size", "2MiB"]);
    ds
}

#[test]
fn sigkill_of_convert_leaves_no_dataset_or_a_valid_one() {
    let t = tempfile::tempdir().unwrap();
    let ds = source(t.path(), 800);
    let conv = t.path().join("conv");
    let convert = |force: bool| {
        let mut a = args(&[
            "convert".as_ref(),
            "-q".as_ref(),
            ds.as_os_str(),
            "-o".as_ref(),
            conv.as_os_str(),
            "--format".as_ref(),
            "tar.zst".as_ref(),
        ]);
        // The --force conversions over a complete dataset cut other shards.
        let size = if force { "3MiB" } else { "2MiB" };
        a.extend(args(&["--shard-size".as_ref(), size.as_ref()]));
        if force {
            a.push("--force".into());
        }
        a
    };
    // One uninterrupted run of each kind, to know how many files each writes.
    let _ = timed(&convert(true), Duration::from_secs(120));
    let files_force = 2 * bale_format::Manifest::read(&conv).unwrap().shards.len();
    fs::remove_dir_all(&conv).unwrap();
    let _ = timed(&convert(false), Duration::from_secs(120));
    let files_fresh = 2 * bale_format::Manifest::read(&conv).unwrap().shards.len();
    let redo_args = {
        let mut a = convert(false);
        a.push("--force".into());
        a
    };
    let mut problems = Vec::new();
    for k in 0..8usize {
        // A fresh output, then a --force conversion over the complete one
        // the redo left.
        let fresh = k % 2 == 0;
        if fresh {
            fs::remove_dir_all(&conv).unwrap();
        }
        let total = if fresh { files_fresh } else { files_force };
        let files = (k / 2 * total).div_ceil(3);
        let killed = kill_at_progress(&convert(!fresh), &conv, files);
        let state = consistent(&conv);
        let case = format!(
            "convert{} killed after {files} of {total} files (killed: {killed})",
            if fresh { "" } else { " --force" }
        );
        eprintln!("{case}: {state:?}");
        if let Err(e) = state {
            problems.push(format!("{case}: {e}"));
        }
        if let Err(e) = redo(&redo_args, &conv, true) {
            problems.push(format!("after {case}: {e}"));
        }
    }
    verifies(&ds).unwrap();
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// The xxh3 of every file in `dir`, by name.
fn digests(dir: &Path) -> std::collections::BTreeMap<String, u64> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                bale_format::hash::xxh3_64(&fs::read(e.path()).unwrap()),
            )
        })
        .collect()
}

#[test]
fn sigkill_of_index_in_place_leaves_the_tars_and_no_dataset_or_a_valid_one() {
    let t = tempfile::tempdir().unwrap();
    let ds = source(t.path(), 1000);
    // WebDataset tars on their own, indexed in their own directory.
    let tars = t.path().join("tars");
    fs::create_dir(&tars).unwrap();
    for e in fs::read_dir(&ds).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().ends_with(".tar") {
            fs::copy(e.path(), tars.join(e.file_name())).unwrap();
        }
    }
    let originals = digests(&tars);
    // `bale index` writes beside the user's files and, by design, replaces
    // only the names it writes: a temporary file a killed run left stays
    // (verify warns about it), so the redo is not asked to remove it.
    let pattern = tars.join("*.tar");
    // Fresh runs record checksums; --force runs over a complete dataset do
    // not, so their indexes differ and a manifest left from before cannot
    // pass for theirs.
    let index = |force: bool| {
        let mut a = args(&[
            "index".as_ref(),
            "-q".as_ref(),
            pattern.as_os_str(),
            "-o".as_ref(),
            tars.as_os_str(),
        ]);
        a.push(if force { "--force" } else { "--checksum" }.into());
        a
    };
    let clean = |tars: &Path| {
        for e in fs::read_dir(tars).unwrap() {
            let e = e.unwrap();
            if !e.file_name().to_string_lossy().ends_with(".tar") {
                fs::remove_file(e.path()).unwrap();
            }
        }
    };
    // One index per tar, whichever kind of run.
    let total = originals.len();
    let redo_args = {
        let mut a = index(false);
        a.push("--force".into());
        a
    };
    let mut problems = Vec::new();
    for k in 0..8usize {
        // A fresh run, then a --force run (without checksums) over the
        // complete dataset (with checksums) the redo left.
        let fresh = k % 2 == 0;
        if fresh {
            clean(&tars);
        }
        let files = (k / 2 * total).div_ceil(3);
        let killed = kill_at_progress(&index(!fresh), &tars, files);
        let state = consistent(&tars);
        let case = format!(
            "index{} killed after {files} of {total} indexes (killed: {killed})",
            if fresh { "" } else { " --force" }
        );
        eprintln!("{case}: {state:?}");
        if let Err(e) = state {
            problems.push(format!("{case}: {e}"));
        }
        if let Err(e) = redo(&redo_args, &tars, false) {
            problems.push(format!("after {case}: {e}"));
        }
        let now: std::collections::BTreeMap<String, u64> = digests(&tars)
            .into_iter()
            .filter(|(n, _)| n.ends_with(".tar"))
            .collect();
        if now != originals {
            problems.push(format!("after {case}: the tars changed"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// Every path under `root`, relative, directories included.
fn all_paths(root: &Path) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            out.insert(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    out
}

#[test]
fn sigkill_of_convert_to_dir_then_force_leaves_exactly_the_samples() {
    let t = tempfile::tempdir().unwrap();
    let ds = source(t.path(), 800);
    let out = t.path().join("files");
    let convert = |force: bool| to_dir_args(&ds, &out, force);
    timed(&convert(false), Duration::from_secs(120));
    let expected = all_paths(&out);
    assert!(expected.len() > 1600, "{} paths", expected.len());
    let mut problems = Vec::new();
    for part in [4, 2] {
        fs::remove_dir_all(&out).unwrap();
        // Killed once a part of the samples' files are written (in its
        // staging directory).
        let want = expected.len() / part;
        let killed = kill_when(&convert(false), || {
            out.exists() && all_paths(&out).len() >= want
        });
        let at = format!("{want} of {} paths", expected.len());
        // Into the output the killed run left: --force makes the conversion,
        // and the output then holds the samples' files, nothing else.
        let o = run_bounded(
            &mut bale_cmd(&convert(true)),
            Duration::from_secs(120),
            4096,
        );
        if !(o.killed.is_none() && o.status.is_some_and(|s| s.success())) {
            problems.push(format!("redo after a kill at {at}: {}", o.describe()));
            continue;
        }
        let got = all_paths(&out);
        let extra: Vec<&String> = got.difference(&expected).collect();
        let missing: Vec<&String> = expected.difference(&got).collect();
        if !extra.is_empty() || !missing.is_empty() {
            problems.push(format!(
                "after a kill at {at} (killed: {killed}) and a --force conversion: {} extra paths (first: {:?}), {} missing (first: {:?})",
                extra.len(),
                extra.iter().take(3).collect::<Vec<_>>(),
                missing.len(),
                missing.iter().take(3).collect::<Vec<_>>()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// `bale convert -q DS -o OUT --format dir`, with `--force` when `force`.
fn to_dir_args(ds: &Path, out: &Path, force: bool) -> Vec<OsString> {
    let mut a = args(&[
        "convert".as_ref(),
        "-q".as_ref(),
        ds.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
        "--format".as_ref(),
        "dir".as_ref(),
    ]);
    if force {
        a.push("--force".into());
    }
    a
}

/// Shard and index files in `dir`: a dataset's (`shard-*`) or a part's (`part-*`).
fn shard_files(dir: &Path) -> usize {
    fs::read_dir(dir).map_or(0, |rd| {
        rd.filter_map(Result::ok)
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with("shard-") || n.starts_with("part-")
            })
            .count()
    })
}

/// Two parts of `bale pack --part I/2` of `input` in small shards, afresh,
/// in `t/p0` and `t/p1`; their sample count.
fn two_parts(t: &Path, input: &Path) -> u64 {
    let mut samples = 0;
    for i in 0..2 {
        let p = t.join(format!("p{i}"));
        let _ = fs::remove_dir_all(&p);
        let part = format!("{i}/2");
        let o = bale_bounded(&[
            "pack".as_ref(),
            "-q".as_ref(),
            "--shard-size".as_ref(),
            "64KiB".as_ref(),
            "--part".as_ref(),
            part.as_ref(),
            input.as_os_str(),
            "-o".as_ref(),
            p.as_os_str(),
        ]);
        assert!(o.status.is_some_and(|s| s.success()), "{}", o.describe());
        samples += bale_format::Manifest::read(&p).unwrap().samples;
    }
    samples
}

/// `bale merge` killed with SIGKILL at points over its run (its renames
/// follow one another quickly, so the points are counted in files moved
/// into the output): the merge run again puts right what the killed one
/// left, and the merged dataset verifies and holds every sample. Until
/// then, no other command writes into that output.
#[test]
fn sigkill_of_merge_is_put_right_by_the_next_merge() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    random_tree(&input, 600);
    let out = t.path().join("out");
    let (p0, p1) = (t.path().join("p0"), t.path().join("p1"));
    let merge = args(&[
        "merge".as_ref(),
        "-q".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        p0.as_os_str(),
        p1.as_os_str(),
    ]);
    let samples = two_parts(t.path(), &input);
    let total = shard_files(&p0) + shard_files(&p1);
    assert!(
        total >= 40,
        "{total} files: too few for kills inside the merge"
    );
    let mut problems = Vec::new();
    let (mut journals, mut hinted) = (0, 0);
    for k in 0..8usize {
        if k > 0 {
            let _ = fs::remove_dir_all(&out);
            two_parts(t.path(), &input);
        }
        let files = k * total / 7;
        let killed = kill_when(&merge, || files == 0 || shard_files(&out) >= files);
        let journal = out.join(".bale-merge-journal.json").exists();
        let manifest = out.join("bale.json").exists();
        let case = format!(
            "merge killed after {files} of {total} files (killed: {killed}, journal: {journal}, manifest: {manifest})"
        );
        eprintln!("{case}");
        if journal {
            journals += 1;
            // A part whose files the killed merge moved says how to get
            // them back.
            for p in [&p0, &p1] {
                let o = bale_bounded(&["verify".as_ref(), p.as_os_str()]);
                if o.status.is_some_and(|s| !s.success()) {
                    hinted += 1;
                    if !o.stderr_text().contains("run the same merge again") {
                        problems.push(format!("{case}: verify of a part: {}", o.describe()));
                    }
                }
            }
            if journals == 1 {
                // As a merge killed while it wrote its manifest leaves it.
                fs::write(out.join(".bale-tmp-999999-bale.json"), b"{").unwrap();
            }
            // Nothing else writes there meanwhile.
            let o = bale_bounded(&[
                "pack".as_ref(),
                "-q".as_ref(),
                "--force".as_ref(),
                input.as_os_str(),
                "-o".as_ref(),
                out.as_os_str(),
            ]);
            // Refused before it wrote anything: it must not say it removed
            // what it wrote.
            if o.status.is_none_or(|s| s.success())
                || !o.stderr_text().contains("bale merge")
                || o.stderr_text().contains("were removed")
            {
                problems.push(format!("{case}: pack --force into it: {}", o.describe()));
            }
        }
        if journal || !manifest {
            let o = run_bounded(&mut bale_cmd(&merge), Duration::from_secs(120), 4096);
            if !o.status.is_some_and(|s| s.success()) {
                problems.push(format!("{case}: the merge again: {}", o.describe()));
                continue;
            }
        }
        if let Err(e) = verifies(&out) {
            problems.push(format!("{case}: {e}"));
        } else if bale_format::Manifest::read(&out).unwrap().samples != samples {
            problems.push(format!("{case}: not every sample merged"));
        }
        if out.join(".bale-merge-journal.json").exists() {
            problems.push(format!("{case}: the journal is left"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        journals > 0,
        "no kill fell inside the moves: the test did not test recovery"
    );
    assert!(hinted > 0, "no part was missing a file after a kill");
}

/// `bale merge` stopped with SIGTERM while it moves files moves them back:
/// both parts still verify, and the output holds none of their files.
#[test]
fn sigterm_of_merge_puts_the_parts_back() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    random_tree(&input, 600);
    let out = t.path().join("out");
    let (p0, p1) = (t.path().join("p0"), t.path().join("p1"));
    two_parts(t.path(), &input);
    let total = shard_files(&p0) + shard_files(&p1);
    let mut child = bale_cmd(&args(&[
        "merge".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        p0.as_os_str(),
        p1.as_os_str(),
    ]))
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let start = Instant::now();
    while shard_files(&out) < total / 4
        && child.try_wait().unwrap().is_none()
        && start.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_micros(200));
    }
    // SAFETY: a plain syscall on the child's pid (not reaped yet).
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    // Over a thousand files move after the signal was sent: it lands inside.
    assert_eq!(o.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("the parts are as they were"), "{stderr}");
    assert_eq!(shard_files(&out), 0, "files left in the output");
    assert!(!out.join(".bale-merge-journal.json").exists());
    for p in [&p0, &p1] {
        verifies(p).unwrap();
    }
}

/// Runs `bale ARGS` under `strace`, which kills it with SIGKILL at the
/// `when`-th call of one of `syscalls` (a comma-separated list): a kill at an
/// exact step of the run, which a kill timed from outside can seldom hit.
/// Returns the run, which must have been killed.
fn kill_at_syscall(args: &[OsString], syscalls: &str, when: u32) -> crate::common::Bounded {
    assert!(
        std::process::Command::new("strace")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success()),
        "strace is missing: `cargo xtask ci` installs it (apt-get install strace)"
    );
    let mut cmd = std::process::Command::new("strace");
    cmd.args(["-f", "-o", "/dev/null", "-e"])
        .arg(format!("trace={syscalls}"))
        .arg("-e")
        .arg(format!("inject={syscalls}:signal=KILL:when={when}"))
        .arg(bale_tests::bale_bin())
        .args(args);
    let o = run_bounded(&mut cmd, Duration::from_secs(120), 4096);
    assert!(
        o.killed.is_none() && !o.status.is_some_and(|s| s.success()),
        "the run under strace was not killed at call {when} of {syscalls}: {}",
        o.describe()
    );
    o
}

/// The names in `dir` that start with `prefix`.
fn names_in(dir: &Path, prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names
}

#[test]
fn a_force_pack_killed_while_it_removes_the_old_dataset_is_cleared_by_the_next() {
    let t = tempfile::tempdir().unwrap();
    let ds = source(t.path(), 300);
    let input = t.path().join("in");
    let old = names_in(&ds, "shard-");
    assert!(old.len() >= 6, "{old:?}");
    let pack = args(&[
        "pack".as_ref(),
        "-q".as_ref(),
        "--force".as_ref(),
        "--shard-size".as_ref(),
        "2MiB".as_ref(),
        "-o".as_ref(),
        ds.as_os_str(),
        input.as_os_str(),
    ]);
    // The old manifest goes first, then the old shards: killed at the
    // third removal, two of them are gone and the rest stay.
    kill_at_syscall(&pack, "unlink,unlinkat", 3);
    assert!(!ds.join("bale.json").exists(), "the manifest goes first");
    let left = names_in(&ds, "shard-");
    assert!(
        !left.is_empty() && left.len() < old.len(),
        "killed half way through the removal: {left:?}"
    );
    // The run marked the folder before it removed anything, so what it
    // left is a run's, and --force clears it.
    let marks: Vec<String> = names_in(&ds, ".bale-tmp-")
        .into_iter()
        .filter(|n| n.ends_with("-run"))
        .collect();
    assert_eq!(marks.len(), 1, "{:?}", names_in(&ds, ""));
    redo(&pack, &ds, true).unwrap();
}

#[test]
fn a_convert_to_dir_killed_while_it_moves_the_export_in_leaves_both_halves_and_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let ds = source(t.path(), 100);
    let out = t.path().join("files");
    let convert = |force: bool| to_dir_args(&ds, &out, force);
    timed(&convert(false), Duration::from_secs(120));
    let expected = all_paths(&out);
    let folders = names_in(&out, "c");
    assert_eq!(folders.len(), 5, "{folders:?}");
    fs::remove_dir_all(&out).unwrap();

    // The marker is renamed into place first, then each of the five
    // folders: killed at the third rename, one folder is in, four are not.
    kill_at_syscall(&convert(false), "renameat2", 3);
    let moving: Vec<String> = names_in(&out, ".bale-tmp-")
        .into_iter()
        .filter(|n| n.ends_with("-convert.moving"))
        .collect();
    assert_eq!(moving.len(), 1, "the marker: {:?}", names_in(&out, ""));
    assert_eq!(names_in(&out, "c").len(), 1, "{:?}", names_in(&out, ""));
    // Between them, the output and the staging folder hold every file.
    let staging = names_in(&out, ".bale-tmp-")
        .into_iter()
        .find(|n| n.ends_with("-convert"))
        .expect("the staging folder");
    let mut held = all_paths(&out);
    held.retain(|p| !p.starts_with(".bale-tmp-"));
    held.extend(all_paths(&out.join(&staging)));
    assert_eq!(held, expected);
    // Nothing clears that state: a rerun refuses (with --force, saying how
    // to finish or undo the move), and both halves stay.
    let before = all_paths(&out);
    for force in [true, false] {
        let o = run_bounded(
            &mut bale_cmd(&convert(force)),
            Duration::from_secs(120),
            4096,
        );
        assert_eq!(o.status.and_then(|s| s.code()), Some(2), "{}", o.describe());
        assert!(
            !force || String::from_utf8_lossy(&o.stderr).contains(".moving"),
            "{}",
            o.describe()
        );
        assert_eq!(all_paths(&out), before);
    }
}
