//! Writing datasets to object storage, against a real S3 server (SeaweedFS
//! on 127.0.0.1, see `bale_tests::seaweed`): `bale pack`, `bale convert` and
//! `bale merge` with `-o s3://...` write the bytes a local run writes, with
//! `bale.json` last; an error, SIGINT, SIGTERM or SIGKILL never leaves a
//! dataset, nor (after the clean-up path) an open multipart upload; objects
//! bale did not write are never deleted.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use bale_reader::Dataset;
use bale_storage::Store;
use bale_tests::seaweed::Seaweed;
use bale_tests::{assert_success as ok, describe as text};

use crate::common::{Running, bale_cmd, pack_quiet, random_tree, snapshot};
use crate::relay::{Gate, GateDoes, bulk_delete_in, put_of};
use crate::store::{
    assert_same_objects, assert_same_tars, bucket, failed, holds, listing, local_samples, lock_at,
    object, object_in, objects, open_at, options, put, remote_opts, samples_of, with_options,
};

/// `bale ARGS... --storage-option ...` (quiet), bounded in time.
pub(crate) fn bale(s: &Seaweed, args: &[&str]) -> Output {
    bale_in(s, None, args)
}

/// As [`bale`], with `TMPDIR` (the spool's parent) set to `tmp`.
fn bale_in(s: &Seaweed, tmp: Option<&Path>, args: &[&str]) -> Output {
    let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    all.extend(s.cli_options());
    all.extend(UPLOAD.iter().map(|a| (*a).to_owned()));
    let mut cmd = bale_cmd(&all);
    if let Some(t) = tmp {
        cmd.env("TMPDIR", t);
    }
    Running::start(&mut cmd).finish_within(Duration::from_secs(300))
}

/// Runs `bale ARGS` (as [`bale`]) and checks it is refused (exit 2) with
/// a message holding each of `says`.
fn refused(s: &Seaweed, args: &[&str], says: &[&str]) {
    failed(&bale(s, args), 2, says);
}

/// A tree of `n` files of 16-64 KiB, and its local pack with `args`.
fn tree_and_local(n: usize, args: &[&str]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let tree = t.path().join("tree");
    random_tree(&tree, n);
    let local = t.path().join("local");
    pack_quiet(&tree, &local, args);
    (t, tree, local)
}

/// What most tests here start from: the shared server `s`, a scratch
/// folder `t` with a tree of files of 16-64 KiB (`tree`) and its local pack
/// (`local`), to compare with, and a bucket `b` of the test's own with
/// `url` = `s3://b/ds`. Bind `t` (to `_t` if unused): the folder goes with it.
type Setup = (
    &'static Seaweed,
    tempfile::TempDir,
    PathBuf,
    PathBuf,
    String,
    String,
);

/// `(s, t, tree, local, b, url)`: a [`Setup`] with a bucket tagged `tag`
/// and a tree of `n` files, packed locally with `pack`.
fn setup(tag: &str, n: usize, pack: &[&str]) -> Setup {
    let s = Seaweed::shared();
    let (t, tree, local) = tree_and_local(n, pack);
    let b = bucket(s, tag);
    let url = format!("s3://{b}/ds");
    (s, t, tree, local, b, url)
}

/// Shards of 12 MiB: with [`UPLOAD`]'s 5 MiB parts, each goes up as a
/// multipart upload of three parts, at most two in flight.
const SHARDS: &[&str] = &["--shard-size", "12MiB"];

/// Upload parts of 5 MiB (S3's least), two in flight, for every command.
const UPLOAD: &[&str] = &[
    "--storage-option",
    "upload_part_mib=5",
    "--storage-option",
    "upload_parts_in_flight=2",
];

#[test]
fn pack_to_a_bucket_writes_the_local_packs_bytes_and_every_reader_reads_them() {
    let (s, _t, tree, local, b, url) = setup("pack", 900, SHARDS);
    // Another --jobs than the local pack: the same bytes.
    let tree_s = tree.to_str().unwrap();
    ok(&bale(
        s,
        &[
            "pack",
            "-q",
            "--jobs",
            "1",
            "--shard-size",
            "12MiB",
            "-o",
            &url,
            tree_s,
        ],
    ));
    assert!(snapshot(&local).len() >= 6, "several shards and indexes");
    assert_same_objects(s, &url, &local);

    // The CLI verifies it; the Rust reader reads the local dataset's samples.
    ok(&bale(s, &["verify", &url]));
    let remote = open_at(s, &url);
    let here = Dataset::open(&local).unwrap();
    assert_eq!(remote.manifest(), here.manifest());
    assert_eq!(samples_of(&remote), samples_of(&here));

    // bale convert to a bucket: the same bytes as a local convert.
    let conv_local = local.with_file_name("conv");
    ok(&bale(
        s,
        &[
            "convert",
            "-q",
            "--format",
            "tar.zst",
            "-o",
            conv_local.to_str().unwrap(),
            local.to_str().unwrap(),
        ],
    ));
    let conv_url = format!("s3://{b}/conv");
    ok(&bale(
        s,
        &[
            "convert",
            "-q",
            "--format",
            "tar.zst",
            "-o",
            &conv_url,
            local.to_str().unwrap(),
        ],
    ));
    assert_same_objects(s, &conv_url, &conv_local);
}

#[test]
fn a_prefix_with_objects_is_refused_and_force_never_deletes_foreign_objects() {
    let (s, t, tree, local, b, url) = setup("force", 300, &[]);
    for key in [
        "ds/notes.txt",
        "ds/sub/shard-000000.tar",
        "ds-other/bale.json",
    ] {
        put(s, t.path(), &b, key, b"the user's own notes");
    }
    let tree_s = tree.to_str().unwrap();

    refused(
        s,
        &["pack", "-q", "-o", &url, tree_s],
        &["already holds", "--force"],
    );
    assert_eq!(objects(s, &b, "ds"), ["notes.txt", "sub/shard-000000.tar"]);

    // An upload of the user's going on there, of one of bale's names.
    s.boto(
        "s3.create_multipart_upload(Bucket=sys.argv[1], Key=sys.argv[2])\n",
        &[&b, "ds/shard-000999.tar"],
    )
    .unwrap();
    for round in 0..2 {
        // Into the foreign objects, then over bale's own dataset.
        ok(&bale(s, &["pack", "-q", "--force", "-o", &url, tree_s]));
        let (objects, uploads) = listing(s, &b, "ds");
        // Beside neither a dataset nor a killed run's lock, the upload is
        // left alone; beside bale's dataset, it is one of bale's, aborted.
        let want: &[&str] = if round == 0 {
            &["shard-000999.tar"]
        } else {
            &[]
        };
        assert_eq!(uploads, want);
        let mut want: Vec<String> = snapshot(&local).keys().cloned().collect();
        want.push("notes.txt".into());
        want.push("sub/shard-000000.tar".into());
        want.sort();
        assert_eq!(objects, want);
    }
    let store = Store::open(&url, &options(s)).unwrap();
    assert_eq!(object_in(&store, "notes.txt"), b"the user's own notes");
    assert_eq!(
        object_in(&store, "sub/shard-000000.tar"),
        b"the user's own notes"
    );
    assert_eq!(objects(s, &b, "ds-other"), ["bale.json"]);
}

#[test]
fn a_store_without_conditional_puts_still_gets_a_whole_dataset_and_a_mark() {
    let (s, t, tree, local, b, url) = setup("noconditional", 200, &[]);
    let tree_s = tree.to_str().unwrap();
    let off = ["--storage-option", "aws_conditional_put=disabled"];
    let pack = |force: bool| {
        let mut a = vec!["pack", "-q", "-o", &url, tree_s];
        a.extend(off);
        if force {
            a.push("--force");
        }
        bale(s, &a)
    };
    // Without If-None-Match, the manifest is still written last and only
    // where none is (checked by a HEAD), and the lock object, a mark only
    // there, is gone once the run ends.
    let o = pack(false);
    ok(&o);
    assert_same_objects(s, &url, &local);
    assert!(!holds(s, &b, "ds", ".bale-tmp-lock"));
    let o = pack(false);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = pack(true);
    ok(&o);
    assert_same_objects(s, &url, &local);
    // A lock there (a run writing, or killed) is found by a GET: refused
    // without --force; taken over with it once it has not changed for 7 s.
    put(
        s,
        t.path(),
        &b,
        "ds/.bale-tmp-lock",
        br#"{"run": "elsewhere", "beat": 1, "request_timeout_ms": 0}"#,
    );
    let o = pack(false);

    failed(&o, 2, &["another bale run is writing here"]);
    assert!(holds(s, &b, "ds", ".bale-tmp-lock"));
    let o = pack(true);
    ok(&o);
    assert_same_objects(s, &url, &local);
}

/// Starts `bale pack -o url`, waits until `name` exists under `url`, and
/// returns the running pack (or `None` when it finished first).
pub(crate) fn pack_until(
    s: &Seaweed,
    tree: &Path,
    url: &str,
    extra: &[&str],
    name: &str,
) -> Option<Running> {
    pack_until_in(s, tree, url, extra, name, None)
}

/// As [`pack_until`], with `TMPDIR` (the spool's parent) set to `tmp`.
fn pack_until_in(
    s: &Seaweed,
    tree: &Path,
    url: &str,
    extra: &[&str],
    name: &str,
    tmp: Option<&Path>,
) -> Option<Running> {
    let mut args: Vec<String> = vec!["pack".into(), "-q".into()];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    args.extend([
        "-o".into(),
        url.to_owned(),
        tree.to_str().unwrap().to_owned(),
    ]);
    args.extend(s.cli_options());
    args.extend(UPLOAD.iter().map(|a| (*a).to_owned()));
    let mut cmd = bale_cmd(&args);
    if let Some(t) = tmp {
        cmd.env("TMPDIR", t);
    }
    let mut run = Running::start(&mut cmd);
    let store = Store::open(url, &options(s)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if store.object(name).unwrap().head().is_ok() {
            return Some(run);
        }
        if run.child().try_wait().unwrap().is_some() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("{name} never appeared under {url}");
}

pub(crate) fn signal(run: &mut Running, sig: i32) {
    // SAFETY: signals our own child.
    unsafe { libc::kill(run.child().id() as i32, sig) };
}

#[test]
fn interrupted_packs_leave_no_manifest_and_no_open_uploads() {
    let s = Seaweed::shared();
    let (_t, tree, _local) = tree_and_local(1500, SHARDS);
    let b = bucket(s, "int");
    let mut interrupted = 0;
    // Just after the lock, with the first shard in place, late in the run;
    // by SIGINT and by SIGTERM.
    for (i, (at, sig)) in [
        (".bale-tmp-lock", libc::SIGINT),
        ("shard-000000.idx", libc::SIGINT),
        ("shard-000002.idx", libc::SIGINT),
        ("shard-000001.idx", libc::SIGTERM),
    ]
    .into_iter()
    .enumerate()
    {
        let prefix = format!("run{i}");
        let url = format!("s3://{b}/{prefix}");
        let Some(mut run) = pack_until(s, &tree, &url, SHARDS, at) else {
            continue;
        };
        signal(&mut run, sig);
        let o = run.finish_within(Duration::from_secs(120));
        let (objects, uploads) = listing(s, &b, &prefix);
        if o.status.success() {
            // It finished before the signal landed: a whole dataset.
            assert!(objects.contains(&"bale.json".to_owned()));
            continue;
        }
        interrupted += 1;
        assert_eq!(o.status.code(), Some(130), "{at}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("no dataset was written"),
            "{}",
            text(&o)
        );
        assert!(objects.is_empty(), "after a signal at {at}: {objects:?}");
        assert!(uploads.is_empty(), "after a signal at {at}: {uploads:?}");
    }
    assert!(interrupted >= 2, "too few runs were interrupted mid-way");
}

#[test]
fn a_killed_pack_is_never_a_dataset_and_force_clears_what_it_left() {
    let (s, t, tree, local, b, url) = setup("kill", 1500, SHARDS);
    put(s, t.path(), &b, "ds/notes.txt", b"keep me");
    // A part of shard 1 is up while shard 1 is still uploading: SIGKILL then.
    let spools = t.path().join("tmp");
    std::fs::create_dir_all(&spools).unwrap();
    let run = pack_until_in(
        s,
        &tree,
        &url,
        &["--force", "--shard-size", "12MiB"],
        "shard-000000.idx",
        Some(&spools),
    );
    let mut run = run.expect("the pack ended before it could be killed");
    signal(&mut run, libc::SIGKILL);
    let o = run.finish_within(Duration::from_secs(60));
    assert_eq!(o.status.code(), None, "killed: {}", text(&o));
    understate_timeout(s, &b, "ds");
    let left = objects(s, &b, "ds");
    assert!(!left.contains(&"bale.json".to_owned()), "{left:?}");
    assert!(left.contains(&".bale-tmp-lock".to_owned()), "{left:?}");
    let spool_count = || std::fs::read_dir(&spools).unwrap().count();
    assert_eq!(spool_count(), 1, "the killed run's spool is left");

    // Never mistaken for a dataset.
    refused(s, &["verify", &url], &["no bale.json"]);
    assert!(remote_opts(s).open(&url).is_err());
    // A rerun without --force is refused, naming the lock; the killed
    // run's local spool goes all the same.
    let tree_s = tree.to_str().unwrap();
    let o = bale_in(
        s,
        Some(&spools),
        &["pack", "-q", "--shard-size", "12MiB", "-o", &url, tree_s],
    );
    failed(&o, 2, &["--force"]);
    assert_eq!(
        spool_count(),
        0,
        "a refused rerun removes the killed run's spool"
    );

    // The killed run's lock covers what it can have written, not a tar of
    // bale's names uploaded once it had stopped (the user's, maybe): --force
    // refuses it. Its lock was last written just after the kill (above).
    std::thread::sleep(Duration::from_secs(9));
    put(s, t.path(), &b, "ds/shard-000777.tar", b"keep me");
    let rerun = [
        "pack",
        "-q",
        "--force",
        "--shard-size",
        "12MiB",
        "-o",
        &url,
        tree_s,
    ];
    // Refused again by a second --force: the first, refused, left its own
    // lock over the killed run's leftovers, written later than the killed
    // run's, and that lock carries the killed run's bound for them, so the
    // user's tar is never dated as a leftover. (A short timeout for these
    // runs, which upload nothing: the next waits out their requests.)
    let mut refused_run = rerun.to_vec();
    refused_run.extend(["--storage-option", "timeout=2s"]);
    for attempt in ["first", "second"] {
        refused(s, &refused_run, &["shard-000777.tar", "written after"]);
        let mut with_theirs = left.clone();
        with_theirs.push("shard-000777.tar".into());
        with_theirs.sort();
        assert_eq!(
            objects(s, &b, "ds"),
            with_theirs,
            "{attempt} refusal: it removed nothing, lock included"
        );
    }
    s.delete(&b, "ds/shard-000777.tar").unwrap();

    // An upload started but not yet recorded when the kill landed (bale's
    // name), and a foreign one: only bale's goes.
    s.boto(
        "for k in sys.argv[2:]:\n\x20   s3.create_multipart_upload(Bucket=sys.argv[1], Key=k)\n",
        &[&b, "ds/shard-000007.tar", "ds/sub/theirs.tar"],
    )
    .unwrap();
    // With --force: the leftovers (objects, markers, open uploads, the
    // local spool) go, the foreign ones stay.
    ok(&bale_in(s, Some(&spools), &rerun));
    assert_eq!(spool_count(), 0, "the rerun's spool is removed");
    let (objects, uploads) = listing(s, &b, "ds");
    assert_eq!(uploads, ["sub/theirs.tar"], "open uploads after --force");
    let mut want: Vec<String> = snapshot(&local).keys().cloned().collect();
    want.push("notes.txt".into());
    want.sort();
    assert_eq!(objects, want);
    let store = Store::open(&url, &options(s)).unwrap();
    for (name, bytes) in snapshot(&local) {
        assert!(object_in(&store, &name) == bytes, "{name}");
    }
}

#[test]
fn a_pack_that_fails_on_a_bad_input_leaves_nothing_in_the_bucket() {
    let (s, _t, tree, _, b, url) = setup("fail", 900, SHARDS);
    // The last sample in key order is a "JPEG" that does not decode: the
    // image stage fails on it after the first shards are up.
    std::fs::create_dir_all(tree.join("zz")).unwrap();
    std::fs::write(tree.join("zz/last.jpg"), b"\xff\xd8\xff\xe0 not a jpeg").unwrap();
    refused(
        s,
        &[
            "pack",
            "-q",
            "--on-error",
            "fail",
            "--resize",
            "shorter:8",
            "--shard-size",
            "12MiB",
            "-o",
            &url,
            tree.to_str().unwrap(),
        ],
        &["zz/last.jpg", "no dataset was written"],
    );
    let (objects, uploads) = listing(s, &b, "ds");
    assert!(
        objects.is_empty() && uploads.is_empty(),
        "{objects:?} {uploads:?}"
    );
}

#[test]
fn a_second_pack_into_the_same_prefix_is_refused_while_the_first_runs() {
    let (s, _t, tree, local, _, url) = setup("two", 1500, SHARDS);
    let first = pack_until(s, &tree, &url, SHARDS, ".bale-tmp-lock");
    let tree_s = tree.to_str().unwrap();
    refused(
        s,
        &["pack", "-q", "--shard-size", "12MiB", "-o", &url, tree_s],
        &["another bale run is writing here"],
    );
    if let Some(first) = first {
        let o = first.finish_within(Duration::from_secs(300));
        ok(&o);
    }
    // The refused run took nothing away from the first.
    assert_same_objects(s, &url, &local);
}

#[test]
fn a_run_whose_lock_another_wrote_never_commits_even_under_its_own_name() {
    // As when a run stalls past the 7 s --force watches, another takes the
    // prefix over, and the stalled run's late write puts its own name back:
    // the lock says this run, but another wrote it. The run must notice at
    // its next write of the lock (each goes over the version it wrote last)
    // and never commit.
    let (s, _t, tree, _, b, url) = setup("stalled", 1500, SHARDS);
    let mut run = pack_until(s, &tree, &url, SHARDS, ".bale-tmp-lock")
        .expect("the pack ended before it could be stopped");
    signal(&mut run, libc::SIGSTOP);
    s.boto(
        "import json\n\
         k = sys.argv[2]\n\
         body = json.loads(s3.get_object(Bucket=sys.argv[1], Key=k)['Body'].read())\n\
         body['beat'] = body.get('beat', 0) + 1000\n\
         s3.put_object(Bucket=sys.argv[1], Key=k, Body=json.dumps(body).encode())\n",
        &[&b, "ds/.bale-tmp-lock"],
    )
    .unwrap();
    signal(&mut run, libc::SIGCONT);
    let o = run.finish_within(Duration::from_secs(300));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // Said first, before whatever request failed because of it.
    let err = String::from_utf8_lossy(&o.stderr);
    let first = err.lines().next().unwrap_or_default();
    assert!(
        first.contains("took this prefix over") || first.contains("took it over"),
        "{}",
        text(&o)
    );
    assert!(!holds(s, &b, "ds", "bale.json"));
}

#[test]
fn force_never_takes_over_the_lock_of_a_live_run() {
    let (s, t, tree, local, b, url) = setup("live", 300, &[]);
    // A live run elsewhere: its lock object changes every fraction of a second.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let beating = {
        let (stop, b) = (stop.clone(), b.clone());
        std::thread::spawn(move || {
            let mut beat = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                beat += 1;
                s.boto(
                    "s3.put_object(Bucket=sys.argv[1], Key='ds/.bale-tmp-lock', Body=('{\"run\": \"elsewhere\", \"beat\": %s, \"request_timeout_ms\": 0}' % sys.argv[2]).encode())\n",
                    &[&b, &beat.to_string()],
                )
                .unwrap();
            }
        })
    };
    s.wait_object(&b, "ds/.bale-tmp-lock").unwrap();
    let tree_s = tree.to_str().unwrap();
    let o = bale(s, &["pack", "-q", "--force", "-o", &url, tree_s]);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    beating.join().unwrap();
    failed(&o, 2, &["is writing here now"]);
    let (objects, uploads) = listing(s, &b, "ds");
    assert_eq!(
        objects,
        [".bale-tmp-lock"],
        "the live run's lock is left alone"
    );
    assert!(uploads.is_empty());

    // Once it stops refreshing (it was killed), --force takes over.
    ok(&bale(s, &["pack", "-q", "--force", "-o", &url, tree_s]));
    assert_same_objects(s, &url, &local);
    drop(t);
}

#[test]
fn merge_of_parts_in_a_bucket_copies_on_the_server_and_equals_a_local_merge() {
    let s = Seaweed::shared();
    let t = tempfile::tempdir().unwrap();
    let tree = t.path().join("tree");
    random_tree(&tree, 400);
    let b = bucket(s, "merge");
    let tree_s = tree.to_str().unwrap();
    let mut local_parts = Vec::new();
    for i in 0..3 {
        let part = format!("{i}/3");
        let dir = t.path().join(format!("p{i}"));
        pack_quiet(&tree, &dir, &["--part", &part, "--shard-samples", "50"]);
        local_parts.push(dir);
        let o = bale(
            s,
            &[
                "pack",
                "-q",
                "--part",
                &part,
                "--shard-samples",
                "50",
                "-o",
                &format!("s3://{b}/parts/p{i}"),
                tree_s,
            ],
        );
        ok(&o);
    }
    let merged = t.path().join("merged");
    let mut args = vec![
        "merge".to_owned(),
        "-q".to_owned(),
        "-o".to_owned(),
        merged.to_str().unwrap().to_owned(),
    ];
    args.extend(local_parts.iter().map(|p| p.to_str().unwrap().to_owned()));
    ok(&Running::start(&mut bale_cmd(&args)).finish_within(Duration::from_secs(120)));

    // Parts given out of order.
    let url = format!("s3://{b}/merged");
    let (p0, p1, p2) = (
        format!("s3://{b}/parts/p0"),
        format!("s3://{b}/parts/p1"),
        format!("s3://{b}/parts/p2"),
    );
    let o = bale(s, &["merge", "-o", &url, &p2, &p0, &p1]);
    ok(&o);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("copied on the server"),
        "{}",
        text(&o)
    );
    assert_same_objects(s, &url, &merged);
    // `s3a://` is `s3://`: the same bucket, copied on the server too; and
    // never a part, however spelled.
    ok(&bale(
        s,
        &["merge", "-o", &format!("s3a://{b}/merged-a"), &p2, &p0, &p1],
    ));
    assert_same_objects(s, &format!("s3://{b}/merged-a"), &merged);
    let o = bale(
        s,
        &[
            "merge",
            "--force",
            "-o",
            &format!("s3a://{b}/parts/p0"),
            &p0,
            &p1,
            &p2,
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(holds(s, &b, "parts/p0", "bale.json"));
    // The parts are left whole, and the merged dataset holds a single pack's samples.
    assert!(holds(s, &b, "parts/p1", "bale.json"));
    let single = t.path().join("single");
    pack_quiet(&tree, &single, &["--shard-samples", "50"]);
    assert_eq!(samples_of(&open_at(s, &url)), local_samples(&single));

    // An incomplete set, and a part that is the output, are refused; nothing is written.
    refused(
        s,
        &["merge", "-o", &format!("s3://{b}/m2"), &p0, &p1],
        &["missing 2/3"],
    );
    assert!(objects(s, &b, "m2").is_empty());
    let o = bale(s, &["merge", "-o", &p0, &p0, &p1, &p2]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // However the output spells a part, --force deletes nothing of it: with
    // an encoded `/`, the client would write to p0 itself.
    let p0_before = objects(s, &b, "parts/p0");
    for out in [format!("{p0}/"), format!("{p0}%2F"), format!("{p0}%2f")] {
        let o = bale(s, &["merge", "--force", "-o", &out, &p0, &p1, &p2]);
        assert_eq!(o.status.code(), Some(2), "{out}: {}", text(&o));
        assert_eq!(objects(s, &b, "parts/p0"), p0_before, "{out}: {}", text(&o));
    }

    // Into another bucket the server cannot copy; with --force over the
    // dataset there, refused before anything of it is removed.
    let b2 = bucket(s, "merge-far");
    let far = format!("s3://{b2}/ds");
    let o = bale(s, &["pack", "-q", "-o", &far, tree_s]);
    ok(&o);
    let there = objects(s, &b2, "ds");
    refused(
        s,
        &["merge", "--force", "-o", &far, &p0, &p1, &p2],
        &["copies on the server"],
    );
    assert_eq!(objects(s, &b2, "ds"), there);

    // A part with a shard gone is refused before the output is touched:
    // with --force over a dataset, that dataset is as it was, and the
    // message says so (not that the objects of the merge were removed).
    let tar = objects(s, &b, "parts/p1")
        .into_iter()
        .find(|n| n.ends_with(".tar"))
        .unwrap();
    s.delete(&b, &format!("parts/p1/{tar}")).unwrap();
    let o = bale(s, &["merge", "--force", "-o", &url, &p0, &p1, &p2]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("is as it was"), "{}", text(&o));
    assert!(!err.contains("were removed"), "{}", text(&o));
    assert_same_objects(s, &url, &merged);
}

#[test]
fn index_into_a_bucket_writes_beside_the_tars_and_touches_nothing_else() {
    let (s, t, tree, local, b, _) = setup("index", 300, &["--shard-samples", "100"]);
    // The tars only (no index, no manifest), and a file of the user's.
    let urls = tars_in_bucket(s, t.path(), &local, &b);
    put(s, t.path(), &b, "wds/notes.txt", b"theirs");
    let url = format!("s3://{b}/wds");
    let before = objects(s, &b, "wds");

    // Tars of bale's names under a prefix with neither a manifest nor a
    // killed run's lock may be the user's: pack --force refuses, naming
    // one, and deletes nothing.
    refused(
        s,
        &["pack", "-q", "--force", "-o", &url, tree.to_str().unwrap()],
        &["shard-000000.tar", "no bale.json"],
    );
    assert_eq!(objects(s, &b, "wds"), before);
    // Nor does the lock of a run killed before its checks passed (while it
    // listed the prefix, or one that was about to refuse it): only a lock
    // its run had claimed marks the shards beside it as a run's.
    put(
        s,
        t.path(),
        &b,
        "wds/.bale-tmp-lock",
        br#"{"run": "killed-while-listing", "beat": 3, "claimed": false, "request_timeout_ms": 0}"#,
    );
    refused(
        s,
        &["pack", "-q", "--force", "-o", &url, tree.to_str().unwrap()],
        &["shard-000000.tar", "no bale.json"],
    );
    assert_eq!(objects(s, &b, "wds"), before);
    let mut args = vec!["index", "-q", "-o", &url];
    args.extend(urls.iter().map(String::as_str));
    // A run never deletes what it reads. A local index of the tars, converted
    // into their own prefix: even beside a lock a killed run had claimed
    // (so that the tars look like that run's), --force refuses, naming one.
    let idx = t.path().join("idx");
    let mut local_args = vec!["index", "-q", "-o", idx.to_str().unwrap()];
    local_args.extend(urls.iter().map(String::as_str));
    ok(&bale(s, &local_args));
    put(
        s,
        t.path(),
        &b,
        "wds/.bale-tmp-lock",
        br#"{"run": "killed-after-its-checks", "beat": 9, "claimed": true, "request_timeout_ms": 0}"#,
    );

    refused(
        s,
        &[
            "convert",
            "-q",
            "--force",
            "-o",
            &url,
            idx.to_str().unwrap(),
        ],
        &["shard-000000.tar", "never deletes an input"],
    );
    // The refused run leaves the killed run's claim where it was (it took
    // the lock over, claim and all), and nothing else changed.
    let mut with_lock = before.clone();
    with_lock.push(".bale-tmp-lock".into());
    with_lock.sort();
    assert_eq!(objects(s, &b, "wds"), with_lock);
    let body = lock_at(s, &url);
    assert_eq!(body["claimed"], true, "{body}");
    s.delete(&b, "wds/.bale-tmp-lock").unwrap();
    // A source in a bucket is refused before the output is touched (convert
    // reads local datasets), and so is an output URL that a parser would
    // change (`..`, a newline).
    for (src, out) in [
        (url.clone(), url.clone()),
        (
            idx.to_str().unwrap().to_owned(),
            format!("s3://{b}/other/../wds"),
        ),
        (idx.to_str().unwrap().to_owned(), format!("s3://{b}/w\nds")),
        // An encoded `/`: the client reads `wds%2F` as the prefix `wds`,
        // where the tars are, while the check of inputs read another key.
        (idx.to_str().unwrap().to_owned(), format!("s3://{b}/wds%2F")),
    ] {
        let o = bale(s, &["convert", "-q", "--force", "-o", &out, &src]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert_eq!(objects(s, &b, "wds"), before, "{src} -o {out}");
    }

    ok(&bale(s, &args));
    let remote = open_at(s, &url);
    assert_eq!(samples_of(&remote), local_samples(&local));
    let manifest: serde_json::Value =
        serde_json::from_slice(&object(s, &url, "bale.json")).unwrap();
    assert_eq!(
        manifest["shards"][0]["file"], "shard-000000.tar",
        "names relative to the prefix"
    );

    // Again: refused, naming the object; with --force, only the .idx and
    // bale.json are replaced (the tars, bale-named, and the user's file stay).
    let o = bale(s, &args);
    failed(&o, 2, &["--force"]);
    let mut forced = args.clone();
    forced.push("--force");
    ok(&bale(s, &forced));
    let (listed, uploads) = listing(s, &b, "wds");
    assert!(uploads.is_empty());
    let mut want: Vec<String> = snapshot(&local).keys().cloned().collect();
    want.push("notes.txt".into());
    want.sort();
    assert_eq!(listed, want);
    assert_same_tars(s, &url, &local);

    // A --force run that fails in its scan (a tar that is not one) leaves
    // the old dataset whole: its bale.json and indexes are deleted only
    // once every tar is scanned.
    let manifest_before = object(s, &url, "bale.json");
    put(s, t.path(), &b, "wds/junk.tar", &[b'x'; 5000]);
    let mut failing = forced.clone();
    let junk_url = format!("{url}/junk.tar");
    failing.push(&junk_url);
    let o = bale(s, &failing);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("junk.tar"),
        "{}",
        text(&o)
    );
    s.delete(&b, "wds/junk.tar").unwrap();
    assert_eq!(objects(s, &b, "wds"), want);
    assert_eq!(object(s, &url, "bale.json"), manifest_before);
    let remote = open_at(s, &url);
    assert_eq!(samples_of(&remote), local_samples(&local));

    // The tars indexed in place are the user's: a pack with --force into
    // their prefix refuses, naming one, and deletes nothing.
    refused(
        s,
        &["pack", "-q", "--force", "-o", &url, tree.to_str().unwrap()],
        &["indexed in place"],
    );
    assert_eq!(objects(s, &b, "wds"), want);
    assert_same_tars(s, &url, &local);

    // An index's manifest without its list of shards cannot tell whose the
    // tars are: refused too.
    put(
        s,
        t.path(),
        &b,
        "wds/bale.json",
        br#"{"created_by": {"tool": "bale", "command": "index"}}"#,
    );
    refused(
        s,
        &["pack", "-q", "--force", "-o", &url, tree.to_str().unwrap()],
        &["lists no shards"],
    );
    assert_eq!(objects(s, &b, "wds"), want);
    assert_same_tars(s, &url, &local);

    // A tar outside the output prefix cannot be named by the manifest.
    let other = format!("s3://{b}/elsewhere");
    refused(
        s,
        &["index", "-o", &other, &urls[0]],
        &["under that prefix"],
    );
    assert!(objects(s, &b, "elsewhere").is_empty());
}

/// The tars of the dataset `local` alone (no index, no manifest), uploaded
/// under `s3://b/wds` (by way of `scratch/tars`): their URLs.
fn tars_in_bucket(s: &Seaweed, scratch: &Path, local: &Path, b: &str) -> Vec<String> {
    let tars = scratch.join("tars");
    std::fs::create_dir_all(&tars).unwrap();
    let mut urls = Vec::new();
    for (name, bytes) in snapshot(local) {
        if name.ends_with(".tar") {
            std::fs::write(tars.join(&name), bytes).unwrap();
            urls.push(format!("s3://{b}/wds/{name}"));
        }
    }
    s.upload_dir(&tars, b, "wds").unwrap();
    urls
}

/// Makes the lock under `s3://b/PREFIX` say that its run's requests never
/// take long (`request_timeout_ms` 0), as if its run had stalled or been
/// killed with a request that lands later than its timeout (a store that
/// stalls longer than the client waits, which no wait can foresee).
/// `--force` then takes the prefix over after its 7 s watch alone, and the
/// test sees what the later defences do when such a request lands.
fn understate_timeout(s: &Seaweed, b: &str, prefix: &str) {
    s.boto(
        "import json\n\
         k = sys.argv[2]\n\
         body = json.loads(s3.get_object(Bucket=sys.argv[1], Key=k)['Body'].read())\n\
         body['request_timeout_ms'] = 0\n\
         body.pop('in_flight_until_ms', None)\n\
         s3.put_object(Bucket=sys.argv[1], Key=k, Body=json.dumps(body).encode())\n",
        &[b, &format!("{prefix}/.bale-tmp-lock")],
    )
    .unwrap();
}

/// `bale pack -q EXTRA... -o URL SRC` through `gate`, running.
fn pack_through(s: &Seaweed, gate: &Gate, src: &Path, url: &str, extra: &[&str]) -> Running {
    let mut args = vec!["pack", "-q"];
    args.extend(extra);
    args.extend(["-o", url, src.to_str().unwrap()]);
    gate.bale(s, &args)
}

/// The dataset at `url`, once `bale verify` passed on it.
pub(crate) fn verified(s: &Seaweed, url: &str) -> Dataset {
    ok(&bale(s, &["verify", url]));
    open_at(s, url)
}

/// A second tree of `n` files, `t/other`, to pack over the first.
fn other_tree(t: &tempfile::TempDir, n: usize) -> PathBuf {
    let other = t.path().join("other");
    random_tree(&other, n);
    other
}

#[test]
fn a_manifest_that_lands_after_another_run_took_the_prefix_over_is_withdrawn() {
    // A run that stalls whole (SIGSTOP here; a paused VM, a swapped-out
    // process) while its manifest PUT is in flight, for longer than --force
    // watches a lock (7 s), lets another run take the prefix over and delete
    // its shards. Held here by a relay: the first run's bale.json goes out
    // only after the second (--force) cleared the prefix and sent its own.
    // The first run must withdraw its manifest and fail; the second must
    // commit a whole dataset.
    let (s, t, tree, _, b, url) = setup("window", 300, &[]);
    let other = other_tree(&t, 200);
    let gate = Gate::start(s, put_of(&b, "ds/bale.json"), GateDoes::HoldRequest, 2);
    let mut first = pack_through(s, &gate, &tree, &url, &[]);
    gate.wait_held(1, Duration::from_secs(120));
    // The run stalls whole (its lock's refreshes with it): a slow manifest
    // alone keeps the lock fresh, and --force would refuse.
    signal(&mut first, libc::SIGSTOP);
    understate_timeout(s, &b, "ds");
    let second = pack_through(s, &gate, &other, &url, &["--force"]);
    gate.wait_held(2, Duration::from_secs(120));
    gate.release(0);
    s.wait_object(&b, "ds/bale.json").unwrap();
    signal(&mut first, libc::SIGCONT);
    let o = first.finish_within(Duration::from_secs(120));
    failed(&o, 2, &["withdrew its bale.json"]);
    gate.release(1);
    let o = second.finish_within(Duration::from_secs(120));
    ok(&o);
    // What the prefix holds is the second run's dataset, whole.
    assert_eq!(verified(s, &url).len(), 200);
    let (objects, uploads) = listing(s, &b, "ds");
    assert!(
        !objects.iter().any(|n| n.starts_with(".bale-tmp")) && uploads.is_empty(),
        "{objects:?} {uploads:?}"
    );
}

#[test]
fn a_local_index_of_tars_in_a_bucket_converts_benches_and_names_a_missing_tar() {
    // `bale index -o DIR URL...` writes a manifest that names its shards by
    // URL: every command that reads shards reads them through the storage
    // options, and one that cannot copy them says what to do instead.
    let (s, t, tree, local, b, _) = setup("urlshards", 300, &["--shard-samples", "100"]);
    let mut urls = Vec::new();
    for (name, _) in snapshot(&local) {
        if name.ends_with(".tar") {
            s.put_file(&local.join(&name), &b, &format!("wds/{name}"))
                .unwrap();
            urls.push(format!("s3://{b}/wds/{name}"));
        }
    }
    let idx = t.path().join("idx");
    let i = idx.to_str().unwrap();
    // `wds//shard-000000.tar` is another key than `wds/shard-000000.tar`
    // (S3 keeps them apart), which the client would read: refused. An index
    // that names it so, converted into `wds` with --force, deleted the tars
    // it reads (the input check compared the spellings).
    let doubled = urls[0].replace("/wds/", "/wds//");
    refused(
        s,
        &["index", "-q", "-o", i, &doubled],
        &["empty path segment ('//')", "write single slashes"],
    );
    assert!(!idx.exists());
    let mut args = vec!["index", "-q", "-o", i];
    args.extend(urls.iter().map(String::as_str));
    ok(&bale(s, &args));
    let conv = t.path().join("conv");
    ok(&bale(
        s,
        &["convert", "-q", "-o", conv.to_str().unwrap(), i],
    ));
    assert_eq!(local_samples(&conv), local_samples(&local));
    // The index uploaded beside its tars (a dataset that names them by
    // URL): the tars are still the user's, and --force deletes none.
    s.upload_dir(&idx, &b, "wds").unwrap();
    ok(&bale(s, &["verify", "-q", &format!("s3://{b}/wds")]));
    let before = objects(s, &b, "wds");
    refused(
        s,
        &[
            "pack",
            "-q",
            "--force",
            "-o",
            &format!("s3://{b}/wds"),
            tree.to_str().unwrap(),
        ],
        &["shard-000000.tar", "indexed in place"],
    );
    assert_eq!(objects(s, &b, "wds"), before);
    for name in before.iter().filter(|n| !n.ends_with(".tar")) {
        s.delete(&b, &format!("wds/{name}")).unwrap();
    }
    let o = bale(s, &["bench", i, "--budget", "0.2", "--threads", "1"]);
    ok(&o);
    // Its tars are read from the bucket, and it cannot be staged as it is:
    // the advice is the conversion stage asks for.
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(
        shown.contains("in object storage: every pass reads from the store")
            && shown.contains("relieve it with bale convert DIR -o OUT"),
        "{shown}"
    );
    let staged = t.path().join("staged");
    refused(
        s,
        &["stage", i, "--to", staged.to_str().unwrap()],
        &["a file in object storage", "bale convert"],
    );
    assert!(!staged.exists());
    // A tar gone from the bucket is named, with what happened to it.
    s.delete(&b, "wds/shard-000001.tar").unwrap();
    let conv2 = t.path().join("conv2");
    for args in [
        vec!["convert", "-q", "-o", conv2.to_str().unwrap(), i],
        vec!["bench", i, "--budget", "0.2", "--threads", "1"],
    ] {
        refused(
            s,
            &args,
            &[&format!("s3://{b}/wds/shard-000001.tar does not exist")],
        );
    }
    let o = bale(s, &["verify", "--quick", i]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&format!(
            "s3://{b}/wds/shard-000001.tar: shard file is missing"
        )),
        "{}",
        text(&o)
    );
}

#[test]
fn a_manifest_another_wrote_during_the_run_is_left_as_it_is() {
    // A bale.json that appears while a run writes (someone's own upload,
    // outside bale's lock) makes the run's create of its manifest fail:
    // undoing the run must not delete that object, which is not the run's.
    let (s, t, tree, _, b, url) = setup("theirs", 1500, SHARDS);
    let mut run = pack_until(s, &tree, &url, SHARDS, "shard-000000.tar")
        .expect("the pack ended before it could be stopped");
    signal(&mut run, libc::SIGSTOP);
    put(
        s,
        t.path(),
        &b,
        "ds/bale.json",
        br#"{"written": "by someone else"}"#,
    );
    signal(&mut run, libc::SIGCONT);
    let o = run.finish_within(Duration::from_secs(300));
    failed(&o, 2, &["another run wrote it meanwhile"]);
    assert_eq!(
        object(s, &url, "bale.json"),
        br#"{"written": "by someone else"}"#
    );

    // Everything of the run's own is gone.
    let (objects, uploads) = listing(s, &b, "ds");
    assert_eq!(objects, ["bale.json"], "{uploads:?}");
    assert!(uploads.is_empty(), "{uploads:?}");
}

#[test]
fn a_run_never_withdraws_the_same_bytes_another_run_committed() {
    // Manifests are deterministic: a --force run of the same input commits
    // the very bytes of the first run's manifest. The first run's bale.json
    // lands, its answer is held past the 7 s watch, the second run takes the
    // prefix over and replaces the dataset; the first run, told at last,
    // must tell the second run's bale.json from its own and leave it.
    let (s, _t, tree, _, b, url) = setup("same", 300, &[]);
    let gate = Gate::start(s, put_of(&b, "ds/bale.json"), GateDoes::HoldAnswer, 1);
    let mut first = pack_through(s, &gate, &tree, &url, &[]);
    gate.wait_held(1, Duration::from_secs(120));
    // The run stalls whole, its lock's refreshes with it.
    signal(&mut first, libc::SIGSTOP);
    understate_timeout(s, &b, "ds");
    let o = bale(
        s,
        &["pack", "-q", "--force", "-o", &url, tree.to_str().unwrap()],
    );
    signal(&mut first, libc::SIGCONT);
    ok(&o);
    gate.release(0);
    let o = first.finish_within(Duration::from_secs(120));
    failed(&o, 2, &["is the other run's"]);
    ok(&bale(s, &["verify", &url]));
}

#[test]
fn a_manifest_whose_answer_was_lost_is_the_runs_own_on_the_retry() {
    // The manifest's PUT lands but its answer is lost (a 503 in the server's
    // stead); the client sends it again, and the store refuses the create:
    // bale.json is there, this run's own. The run must commit (not undo
    // itself around a manifest it then leaves, naming deleted shards).
    let (s, _t, tree, local, b, url) = setup("lost", 300, &[]);
    let gate = Gate::start(s, put_of(&b, "ds/bale.json"), GateDoes::LoseAnswer, 1);
    ok(&pack_through(s, &gate, &tree, &url, &[]).finish_within(Duration::from_secs(120)));
    assert_eq!(gate.acted(), 1);
    ok(&bale(s, &["verify", &url]));
    assert_same_objects(s, &url, &local);
}

#[test]
fn a_lock_write_whose_answer_was_lost_is_the_runs_own_on_the_retry() {
    // The lock's create (then its "claimed" write, then a refresh) lands
    // but its answer is lost; the client sends it again and the store
    // refuses it, the lock being there or its version moved. The lock is
    // this run's own (it names the run): the run goes on and commits, not
    // blame "another run" and leave its lock and shards behind.
    let s = Seaweed::shared();
    let (_t, tree, local) = tree_and_local(300, &[]);
    for passed in [0, 1] {
        let b = bucket(s, &format!("lostlock{passed}"));
        let url = format!("s3://{b}/ds");
        let lock_put = put_of(&b, "ds/.bale-tmp-lock");
        let mut rules = vec![(lock_put.clone(), GateDoes::Pass, passed, true)];
        rules.push((lock_put, GateDoes::LoseAnswer, 1, true));
        let gate = Gate::with_rules(s, rules);
        let o = pack_through(s, &gate, &tree, &url, &[]).finish_within(Duration::from_secs(120));
        assert!(o.status.success(), "lock write {passed}: {}", text(&o));
        assert_eq!(gate.acted(), passed + 1);
        ok(&bale(s, &["verify", &url]));
        assert_same_objects(s, &url, &local);
    }
}

#[test]
fn a_manifest_put_without_an_answer_is_sent_again_and_never_names_deleted_shards() {
    // The manifest's PUT times out with no answer; it may still land. The
    // run sends its create again: when one lands first, the run commits (a
    // later one is refused by the store, its bale.json being there). When
    // no attempt gets an answer, the run fails but keeps the shards and the
    // lock: a bale.json landing later never names missing objects.
    let s = Seaweed::shared();
    let (_t, tree, local) = tree_and_local(300, &[]);
    let timeout = ["--storage-option", "timeout=2s"];
    for (prefix, does, times) in [
        ("late", GateDoes::HoldAnswer, 1),
        ("never", GateDoes::HoldRequest, 3),
    ] {
        let b = bucket(s, prefix);
        let url = format!("s3://{b}/ds");
        let gate = Gate::start(s, put_of(&b, "ds/bale.json"), does.clone(), times);
        let o =
            pack_through(s, &gate, &tree, &url, &timeout).finish_within(Duration::from_secs(120));
        assert_eq!(gate.acted(), times);
        if does == GateDoes::HoldAnswer {
            ok(&o);
            gate.release(0);
        } else {
            assert_eq!(o.status.code(), Some(2), "{}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains("may still land"), "{}", text(&o));
            assert!(!err.contains("were removed"), "{}", text(&o));
            // The held creates land now, the first of them whole.
            for i in 0..times {
                gate.release(i);
            }
            s.wait_object(&b, "ds/bale.json").unwrap();
        }
        assert_eq!(
            samples_of(&verified(s, &url)),
            local_samples(&local),
            "{prefix}"
        );
    }
}

#[test]
fn a_stale_runs_manifest_landing_late_is_replaced_by_the_run_that_holds_the_prefix() {
    // A run whose manifest PUTs got no answer keeps its shards and its lock.
    // A --force run takes the prefix over, clears them and writes its own;
    // the stale PUTs land just before its create. The run that holds the
    // lock replaces that bale.json (another run's, by its id) with its own:
    // the prefix ends whole, the second run's.
    let (s, t, tree, _, b, url) = setup("stale", 300, &[]);
    let other = other_tree(&t, 200);
    let gate = Gate::start(s, put_of(&b, "ds/bale.json"), GateDoes::HoldRequest, 4);
    let o = pack_through(s, &gate, &tree, &url, &["--storage-option", "timeout=2s"])
        .finish_within(Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    gate.wait_held(3, Duration::from_secs(10));
    let second = pack_through(s, &gate, &other, &url, &["--force"]);
    gate.wait_held(4, Duration::from_secs(120));
    for i in 0..3 {
        gate.release(i);
    }
    s.wait_object(&b, "ds/bale.json").unwrap();
    gate.release(3);
    let o = second.finish_within(Duration::from_secs(120));
    ok(&o);
    assert_eq!(verified(s, &url).len(), 200);
}

#[test]
fn a_run_that_cannot_check_its_lock_replaces_and_deletes_nothing() {
    // A run stalls with its manifest in flight; a --force run takes the
    // prefix over and commits. When the stalled run resumes, its lock
    // cannot be read (every request for it answered 503): that proves
    // nothing, so it must neither replace the other run's bale.json nor
    // delete the shards of bale's names, which are the other run's now.
    let (s, t, tree, _, b, url) = setup("blind", 300, &[]);
    let other = other_tree(&t, 200);
    let gate = Gate::with_rules(
        s,
        vec![
            (put_of(&b, "ds/bale.json"), GateDoes::HoldRequest, 1, true),
            (
                b".bale-tmp-lock".to_vec(),
                GateDoes::LoseAnswer,
                usize::MAX,
                false,
            ),
        ],
    );
    let mut first = pack_through(s, &gate, &tree, &url, &[]);
    gate.wait_held(1, Duration::from_secs(120));
    signal(&mut first, libc::SIGSTOP);
    understate_timeout(s, &b, "ds");
    ok(&bale(
        s,
        &["pack", "-q", "--force", "-o", &url, other.to_str().unwrap()],
    ));
    gate.arm(1);
    signal(&mut first, libc::SIGCONT);
    gate.release(0);
    let o = first.finish_within(Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let first_said = text(&o);
    let o = bale(s, &["verify", &url]);
    assert!(
        o.status.success(),
        "{}\nthe stalled run: {first_said}",
        text(&o)
    );
    let ds = open_at(s, &url);
    assert_eq!(ds.len(), 200);
}

#[test]
fn an_index_killed_over_a_claimed_lock_leaves_the_tars_it_indexed_unclaimed() {
    // A pack into a prefix was killed after its checks (a claimed lock).
    // The user's tars are there, of bale's names, and `bale index --force`
    // takes the killed run's lock over to index them in place. An index run
    // writes only .idx objects and bale.json: it claims nothing. Had it
    // carried the killed run's claim and kept it fresh, its own death
    // (SIGKILL before its manifest) would leave a claim dated after the
    // user's tars, and a later `pack --force` would delete them as
    // leftovers of a run.
    let (s, t, tree, local, b, _) = setup("indexkill", 200, &["--shard-samples", "100"]);
    let url = format!("s3://{b}/wds");
    let urls = tars_in_bucket(s, t.path(), &local, &b);
    put(
        s,
        t.path(),
        &b,
        "wds/.bale-tmp-lock",
        br#"{"run": "killed-after-its-checks", "beat": 9, "claimed": true, "request_timeout_ms": 0}"#,
    );
    let tars = || -> Vec<String> {
        objects(s, &b, "wds")
            .into_iter()
            .filter(|n| n.ends_with(".tar"))
            .collect()
    };
    let tars_before = tars();
    assert_eq!(tars_before.len(), 2, "{tars_before:?}");

    let gate = Gate::start(s, put_of(&b, "wds/bale.json"), GateDoes::HoldRequest, 1);
    let mut args = vec!["index", "-q", "--force", "-o", &url];
    args.extend(urls.iter().map(String::as_str));
    let mut run = gate.bale(s, &args);
    gate.wait_held(1, Duration::from_secs(120));
    // The lock is the index run's now, and says it claims nothing.
    let body = lock_at(s, &url);
    assert_ne!(body["run"], "killed-after-its-checks", "{body}");
    assert_eq!(body["claimed"], false, "{body}");
    signal(&mut run, libc::SIGKILL);
    let _ = run.finish_within(Duration::from_secs(60));
    understate_timeout(s, &b, "wds");
    // The killed index's lock marks nothing: a pack with --force (after
    // watching it for 7 s) refuses the tars, naming one, and deletes none.
    refused(
        s,
        &["pack", "-q", "--force", "-o", &url, tree.to_str().unwrap()],
        &["shard-000000.tar", "no bale.json"],
    );
    assert_eq!(tars(), tars_before);
    assert_same_tars(s, &url, &local);
}

#[test]
fn an_index_run_taken_over_during_its_scan_deletes_nothing_of_the_run_that_took_it() {
    // `bale index -o URL --force` deletes the old bale.json and indexes
    // only once every tar is scanned. A run that stalls whole in its scan
    // (SIGSTOP, with a tar's GET held) for longer than --force watches a
    // lock is taken over by another --force run, which commits; when the
    // first resumes it must not delete that run's dataset.
    let (s, t, _, local, b, _) = setup("indextaken", 200, &["--shard-samples", "100"]);
    let url = format!("s3://{b}/wds");
    let urls = tars_in_bucket(s, t.path(), &local, &b);
    let mut args: Vec<&str> = vec!["index", "-q", "--force", "-o", &url];
    args.extend(urls.iter().map(String::as_str));
    ok(&bale(s, &args));

    let last = urls.last().unwrap();
    let gate = Gate::start(
        s,
        format!("GET /{b}/wds/{}", last.rsplit('/').next().unwrap()).into_bytes(),
        GateDoes::HoldRequest,
        1,
    );
    let mut first = gate.bale(s, &args);
    gate.wait_held(1, Duration::from_secs(120));
    signal(&mut first, libc::SIGSTOP);
    understate_timeout(s, &b, "wds");
    // The other run watches the stalled lock, takes it over and commits.
    ok(&bale(s, &args));
    let store = Store::open(&url, &options(s)).unwrap();
    let committed = object_in(&store, "bale.json");

    signal(&mut first, libc::SIGCONT);
    gate.release(0);
    let o = first.finish_within(Duration::from_secs(120));
    failed(&o, 2, &["took this prefix over"]);
    // The other run's dataset is there, whole.
    assert_eq!(object_in(&store, "bale.json"), committed);
    assert_eq!(verified(s, &url).len(), 200);
    assert_same_tars(s, &url, &local);
}

#[test]
fn force_never_deletes_a_dali_index_named_like_bales() {
    // `shard-000000.idx` is also what DALI's tar indexer writes: text, not
    // bale's index. Beside no bale.json and no killed run's lock, --force
    // refuses it, naming it; bale's own index of that name goes.
    let (s, t, tree, local, b, url) = setup("daliidx", 100, &[]);
    let dali: &[u8] = b"v1.2 3\njpg 0 1536 1024\ncls 1536 512 2\n";
    put(s, t.path(), &b, "ds/shard-000000.idx", dali);
    s.put_file(&local.join("shard-000000.idx"), &b, "ds/shard-000001.idx")
        .unwrap();
    let before = objects(s, &b, "ds");
    refused(
        s,
        &["pack", "-q", "--force", "-o", &url, tree.to_str().unwrap()],
        &[
            "shard-000000.idx",
            "named like bale's indexes but is not one",
        ],
    );
    assert_eq!(objects(s, &b, "ds"), before);
    s.delete(&b, "ds/shard-000000.idx").unwrap();
    let o = bale(
        s,
        &["pack", "-q", "--force", "-o", &url, tree.to_str().unwrap()],
    );
    ok(&o);
    assert_same_objects(s, &url, &local);
    // Nor does `bale index -o URL --force` replace a DALI index where it
    // would write the tar's index.
    put(s, t.path(), &b, "ds/shard-000000.idx", dali);
    let before = objects(s, &b, "ds");
    let tar = format!("{url}/shard-000000.tar");
    refused(
        s,
        &["index", "-q", "--force", "-o", &url, &tar],
        &["shard-000000.idx", "not one of bale's indexes"],
    );
    assert_eq!(objects(s, &b, "ds"), before);
    assert_eq!(object(s, &url, "shard-000000.idx"), dali);
    // A bale.json that no bale run wrote: neither pack --force nor index
    // --force takes it for a dataset to replace.
    s.delete(&b, "ds/shard-000000.idx").unwrap();
    put(s, t.path(), &b, "ds/bale.json", br#"{"name": "my-shards"}"#);
    let before = objects(s, &b, "ds");
    for args in [
        vec!["pack", "-q", "--force", "-o", &url, tree.to_str().unwrap()],
        vec!["index", "-q", "--force", "-o", &url, &tar],
    ] {
        refused(s, &args, &["no bale run wrote it"]);
        assert_eq!(objects(s, &b, "ds"), before, "{args:?}");
    }
    assert_eq!(object(s, &url, "bale.json"), br#"{"name": "my-shards"}"#);
}

#[test]
fn force_keeps_a_tar_of_bales_names_that_the_old_manifest_does_not_list() {
    // A committed dataset's objects are the ones its bale.json lists: a
    // shard name beside it that it does not list was put there later (the
    // user's own `shard-000042.tar`), and --force deletes none of it.
    let (s, _t, tree, local, b, url) = setup("unlisted", 100, &[]);
    ok(&bale(
        s,
        &["pack", "-q", "-o", &url, tree.to_str().unwrap()],
    ));
    s.put_file(&local.join("shard-000000.tar"), &b, "ds/shard-000042.tar")
        .unwrap();
    let before = objects(s, &b, "ds");
    refused(
        s,
        &["pack", "-q", "--force", "-o", &url, tree.to_str().unwrap()],
        &["shard-000042.tar", "does not list it"],
    );
    assert_eq!(objects(s, &b, "ds"), before);
    // Without it, --force replaces the dataset as ever.
    s.delete(&b, "ds/shard-000042.tar").unwrap();
    ok(&bale(
        s,
        &["pack", "-q", "--force", "-o", &url, tree.to_str().unwrap()],
    ));
    assert_same_objects(s, &url, &local);
}

/// A run through a gate that holds its upload of `shard-000001.tar` (and
/// never lets it go) and the first DELETE of its undo (a bulk POST, held
/// from its request line): both get no answer within `timeout`. The run
/// fails, keeps its lock with a note that its requests may still land, and
/// says that a rerun waits `timeout` more. Returns the gate, holding the
/// two requests (0 and 1).
fn a_run_whose_requests_get_no_answer(s: &Seaweed, b: &str, tree: &Path, timeout: &str) -> Gate {
    let gate = Gate::with_rules(
        s,
        vec![
            (
                put_of(b, "ds/shard-000001.tar"),
                GateDoes::HoldRequest,
                1,
                true,
            ),
            (bulk_delete_in(b), GateDoes::HoldRequest, 1, true),
        ],
    );
    let opts = [
        "--shard-size",
        "4MiB",
        "--storage-option",
        &format!("timeout={timeout}"),
        "--storage-option",
        "max_retries=0",
    ];
    let url = format!("s3://{b}/ds");
    let o = pack_through(s, &gate, tree, &url, &opts).finish_within(Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    gate.wait_held(2, Duration::from_secs(10));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("may still land"), "{}", text(&o));
    let wait = format!("waits {} s more", timeout.trim_end_matches('s'));
    assert!(err.contains(&wait), "{}", text(&o));
    gate
}

#[test]
fn force_waits_out_the_requests_a_failed_run_left_unanswered() {
    // A run fails against a slow store: an upload and its undo's first
    // DELETE get no answer (6 s) and may still land. Its lock says so;
    // --force then watches it 7 s + 6 s before it writes. A DELETE of
    // shard-000000.tar lands 10 s after --force started, while it still
    // waits: it removes the failed run's object, not the one --force writes
    // under that name. (Watching only 7 s, --force would have written its
    // shards by then, and the DELETE would take one from under its dataset.)
    let (s, t, tree, _, b, url) = setup("late-delete", 300, &[]);
    let other = other_tree(&t, 300);
    let gate = a_run_whose_requests_get_no_answer(s, &b, &tree, "6s");
    let started = Instant::now();
    let second = pack_through(s, &gate, &other, &url, &["--force", "--shard-size", "4MiB"]);
    // The held DELETE lands (sent here by the test: a request the client
    // gave up on may or may not reach this server's handler).
    std::thread::sleep(Duration::from_secs(10).saturating_sub(started.elapsed()));
    s.delete(&b, "ds/shard-000000.tar").unwrap();
    let o = second.finish_within(Duration::from_secs(120));
    ok(&o);
    assert!(
        started.elapsed() >= Duration::from_secs(13),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(verified(s, &url).len(), 300);
}

#[test]
fn force_waits_out_what_a_killed_run_had_in_flight() {
    // A run killed with SIGKILL writes no note, but its lock says its
    // request timeout (10 s here). A PUT it had sent may land up to that
    // long after: here its shard-000000.tar, 9 s after the kill (sent by
    // the test: a request whose client died may or may not reach the
    // server's handler). --force takes the prefix over after its 7 s watch
    // and then waits until the killed run's requests have landed or timed
    // out, so that the late PUT lands before it looks at what is there, is
    // dated as the killed run's and cleared, and never replaces the shard
    // --force writes under that name. (Without the wait, --force has
    // written its shards by then, and the late PUT takes one's place.)
    let (s, t, tree, _, b, url) = setup("in-flight", 1500, SHARDS);
    let (other, local) = another_tree(t.path(), 300);
    let mut extra: Vec<&str> = SHARDS.to_vec();
    extra.extend(["--storage-option", "timeout=10s"]);
    // Killed once it has claimed the prefix and written a shard.
    let mut run = pack_until(s, &tree, &url, &extra, "shard-000000.tar")
        .expect("the pack ended before it could be killed");
    signal(&mut run, libc::SIGKILL);
    let killed = Instant::now();
    let _ = run.finish_within(Duration::from_secs(60));
    let lock = lock_at(s, &url);
    assert_eq!(lock["request_timeout_ms"], 10_000, "{lock}");
    let second = Running::start(&mut bale_cmd(&with_options(
        s,
        &["pack", "--force", "-o", &url, other.to_str().unwrap()],
    )));
    // Sent 9 s after the kill, timed by the Python process itself once its
    // client is made: its start-up (seconds on a loaded machine) would
    // otherwise eat the second of margin.
    let late = t.path().join("late.tar");
    std::fs::write(&late, vec![7u8; 12345]).unwrap();
    let at = std::time::SystemTime::now() + Duration::from_secs(9).saturating_sub(killed.elapsed());
    let at = at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    s.boto(
        "import time\n\
         time.sleep(max(0.0, float(sys.argv[4]) - time.time()))\n\
         s3.upload_file(sys.argv[1], sys.argv[2], sys.argv[3])\n",
        &[
            late.to_str().unwrap(),
            &b,
            "ds/shard-000000.tar",
            &at.to_string(),
        ],
    )
    .unwrap();

    let o = second.finish_within(Duration::from_secs(120));
    ok(&o);
    assert_eq!(verified(s, &url).len(), 300);
    assert_same_objects(s, &url, &local);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("waiting") && err.contains("records a request timeout of 10 s"),
        "{}",
        text(&o)
    );
    assert!(
        killed.elapsed() >= Duration::from_secs(11),
        "{:?}",
        killed.elapsed()
    );
}

#[test]
fn a_delete_of_the_clear_sent_twice_lands_before_the_run_writes() {
    // --force clears the old dataset, its bale.json first. That DELETE's
    // connection is cut once the request went out (the relay holds it):
    // the run sends it again, and the second attempt is answered. The first
    // lands 4 s later. The run must not write before it may have landed
    // (one request timeout, 6 s here, from its start): a DELETE of
    // bale.json that lands after the run committed would leave its dataset
    // without a manifest.
    let (s, t, tree, _, b, url) = setup("twice", 300, &[]);
    let (other, local) = another_tree(t.path(), 300);
    ok(&bale(
        s,
        &["pack", "-q", "-o", &url, tree.to_str().unwrap()],
    ));
    let gate = Gate::start(s, bulk_delete_in(&b), GateDoes::CutAndHold, 1);
    force_through_a_cut_delete(s, &gate, &other, &url);
    assert_eq!(verified(s, &url).len(), 300);
    assert_same_objects(s, &url, &local);
}

/// `bale pack --force --storage-option timeout=6s -o URL SRC` through
/// `gate`, whose first held request (a DELETE it cut) lands 4 s after it
/// was held: the run succeeds and says it waits that DELETE out.
fn force_through_a_cut_delete(s: &Seaweed, gate: &Gate, src: &Path, url: &str) {
    // Not quiet: the wait is told on stderr.
    let run = gate.bale(
        s,
        &[
            "pack",
            "--force",
            "--storage-option",
            "timeout=6s",
            "-o",
            url,
            src.to_str().unwrap(),
        ],
    );

    gate.wait_held(1, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(4));
    gate.release(0);
    let o = run.finish_within(Duration::from_secs(120));
    ok(&o);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("may still land: waiting"),
        "{}",
        text(&o)
    );
}

/// A tree of `n` samples in `dir/other` to pack over a dataset, and its
/// local pack `dir/other-local`, to compare with: `(tree, pack)`.
fn another_tree(dir: &Path, n: usize) -> (PathBuf, PathBuf) {
    let other = dir.join("other");
    random_tree(&other, n);
    let local = dir.join("other-local");
    pack_quiet(&other, &local, &[]);
    (other, local)
}

/// A dataset of 20 samples at `s3://B/ds` in a new bucket `name`, packed
/// from `T/tree`, and a relay that does `does` to the first `times` bulk
/// DELETEs of that bucket: `(T, url, B, relay)`.
fn dataset_behind_a_delete_relay(
    s: &Seaweed,
    name: &str,
    does: GateDoes,
    times: usize,
) -> (tempfile::TempDir, String, String, Gate) {
    let (t, tree, _local) = tree_and_local(20, &[]);
    let b = bucket(s, name);
    let url = format!("s3://{b}/ds");
    ok(&bale(
        s,
        &["pack", "-q", "-o", &url, tree.to_str().unwrap()],
    ));
    let gate = Gate::start(s, bulk_delete_in(&b), does, times);
    (t, url, b, gate)
}

/// A dataset of many small shards under `s3://b/ds` (from a tree of 100
/// samples, 160 KiB shards) and another tree to pack over it, with that
/// tree's local pack: `(tempdir, other tree, its local pack, shards there)`.
fn many_shards_and_another(s: &Seaweed, b: &str) -> (tempfile::TempDir, PathBuf, PathBuf, usize) {
    let t = tempfile::tempdir().unwrap();
    let tree = t.path().join("tree");
    random_tree(&tree, 100);
    let (other, local) = another_tree(t.path(), 30);
    let url = format!("s3://{b}/ds");
    ok(&bale(
        s,
        &[
            "pack",
            "-q",
            "--shard-size",
            "160KiB",
            "-o",
            &url,
            tree.to_str().unwrap(),
        ],
    ));
    let listed = objects(s, b, "ds");
    let shards = listed.iter().filter(|n| n.ends_with(".tar")).count();
    assert!(shards >= 20, "{listed:?}");
    (t, other, local, shards)
}

#[test]
fn force_clears_a_dataset_of_many_shards_in_few_requests() {
    // --force over a dataset of 20+ shards and their indexes: the old
    // bale.json goes first, alone, then every shard and index in one bulk
    // request (S3 takes 1,000 keys to one), and the lock's at the end. One
    // DELETE per object was 2 x shards + 2 requests.
    let s = Seaweed::shared();
    let b = bucket(s, "bulk-clear");
    let (_t, other, local, shards) = many_shards_and_another(s, &b);
    let url = format!("s3://{b}/ds");
    let gate = Gate::start(s, bulk_delete_in(&b), GateDoes::Pass, usize::MAX);
    let o =
        pack_through(s, &gate, &other, &url, &["--force"]).finish_within(Duration::from_secs(120));
    ok(&o);
    assert_eq!(verified(s, &url).len(), 30);
    assert_same_objects(s, &url, &local);
    let requests = gate.acted();
    assert!(
        requests <= 4,
        "{requests} DELETE requests to clear {shards} shards and their indexes"
    );
    // A store without the bulk request: the client sends a DELETE per
    // object, and each is answered for its own name.
    let b = bucket(s, "single-clear");
    let (_t, other, local, shards) = many_shards_and_another(s, &b);
    let url = format!("s3://{b}/ds");
    let gate = Gate::start(
        s,
        format!("DELETE /{b}/ds/").into_bytes(),
        GateDoes::Pass,
        usize::MAX,
    );
    ok(&pack_through(
        s,
        &gate,
        &other,
        &url,
        &[
            "--force",
            "--storage-option",
            "aws_disable_bulk_delete=true",
        ],
    )
    .finish_within(Duration::from_secs(120)));
    assert_eq!(verified(s, &url).len(), 30);
    assert_same_objects(s, &url, &local);
    let requests = gate.acted();
    assert!(
        requests > 2 * shards,
        "{requests} DELETEs for {shards} shards"
    );
}

#[test]
fn an_endpoint_that_would_reach_another_bucket_is_refused_before_any_request() {
    // With a bucket in the endpoint's path (path style), or an endpoint of
    // another bucket (virtual-hosted style), requests for s3://other/ds went
    // to that bucket: its lock stayed there, and every later run was
    // refused. Both are refused before anything is written.
    let s = Seaweed::shared();
    let (_t, tree, _local) = tree_and_local(5, &[]);
    let b = bucket(s, "endpoint-path");
    let other = bucket(s, "endpoint-other");
    for (extra, says) in [
        (vec![], "has a path (/"),
        (
            vec!["aws_virtual_hosted_style_request=true"],
            "not that of the URL's bucket",
        ),
    ] {
        let mut args: Vec<String> = vec![
            "pack".into(),
            "-q".into(),
            "-o".into(),
            format!("s3://{other}/ds"),
            tree.to_str().unwrap().into(),
        ];
        for a in s.cli_options() {
            args.push(if a.starts_with("aws_endpoint_url=") {
                format!("{}/{b}", a.trim_end_matches('/'))
            } else {
                a
            });
        }
        for e in extra {
            args.extend(["--storage-option".into(), e.to_owned()]);
        }
        failed(&bale_cmd(&args).output().unwrap(), 2, &[says]);
        assert!(objects(s, &b, "ds").is_empty());
        assert!(objects(s, &b, &format!("{other}/ds")).is_empty());
        assert!(objects(s, &other, "ds").is_empty());
    }
}

#[test]
fn a_late_delete_of_a_fanned_out_clear_is_waited_out_from_when_it_went_out() {
    // Without the bulk request the client sends one DELETE per object, 20
    // at once, in order: the answer to the first is held 4 s, so the 21st
    // and later go out only then. The DELETE of shard-000014.tar (one of
    // those) is cut once it went out, sent again, and its first attempt
    // lands 5 s later, over the new shard of that name unless the run waits
    // one request timeout (6 s) from when that DELETE went out, not from
    // when the clear began.
    let shards = ["--shard-size", "160KiB"];
    let (s, _t, tree, local, b, url) = setup("fanned", 100, &shards);

    ok(&bale(
        s,
        &[
            "pack",
            "-q",
            shards[0],
            shards[1],
            "-o",
            &url,
            tree.to_str().unwrap(),
        ],
    ));
    assert!(objects(s, &b, "ds").iter().any(|n| n == "shard-000020.tar"));
    let gate = Gate::with_rules(
        s,
        vec![
            (
                format!("DELETE /{b}/ds/shard-000000.idx ").into_bytes(),
                GateDoes::HoldAnswer,
                1,
                true,
            ),
            (
                format!("DELETE /{b}/ds/shard-000014.tar ").into_bytes(),
                GateDoes::CutAndHold,
                1,
                true,
            ),
        ],
    );
    let run = pack_through(
        s,
        &gate,
        &tree,
        &url,
        &[
            "--force",
            shards[0],
            shards[1],
            "--storage-option",
            "timeout=6s",
            "--storage-option",
            "aws_disable_bulk_delete=true",
        ],
    );
    gate.wait_held(1, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(4));
    gate.release(0);
    gate.wait_held(2, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(5));
    gate.release(1);
    let o = run.finish_within(Duration::from_secs(120));
    ok(&o);
    // The late DELETE has landed by now (the relay sent it on release).
    std::thread::sleep(Duration::from_secs(1));
    verified(s, &url);
    assert_same_objects(s, &url, &local);
}

#[test]
fn ctrl_c_stops_a_clear_of_many_objects_between_two_requests() {
    // --force over 2,201 objects deletes them in three requests after the
    // old bale.json (1,000, 1,000, 200). A Ctrl-C while the first is
    // answered stops the clear there: the run exits 130 and the objects of
    // the other two requests are still there (the old dataset "gone, or
    // partly"), where going on would have deleted them all.
    let s = Seaweed::shared();
    let t = tempfile::tempdir().unwrap();
    let tree = t.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    for i in 0..1100 {
        std::fs::write(tree.join(format!("{i:05}.bin")), format!("sample {i}")).unwrap();
    }
    let b = bucket(s, "clear-stop");
    let url = format!("s3://{b}/ds");
    ok(&bale(
        s,
        &[
            "pack",
            "-q",
            "--shard-samples",
            "1",
            "-o",
            &url,
            tree.to_str().unwrap(),
        ],
    ));
    assert_eq!(objects(s, &b, "ds").len(), 2201);
    let delete = bulk_delete_in(&b);
    let gate = Gate::with_rules(
        s,
        vec![
            (delete.clone(), GateDoes::Pass, 1, true),
            (delete, GateDoes::HoldAnswer, 1, true),
        ],
    );
    let mut run = pack_through(s, &gate, &t.path().join("tree"), &url, &["--force"]);
    gate.wait_held(1, Duration::from_secs(60));
    signal(&mut run, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(300));
    gate.release(0);
    let o = run.finish_within(Duration::from_secs(120));
    // Its lock stays, marking what is left as a run's, and it says so.
    failed(
        &o,
        130,
        &[
            "gone, or partly",
            "/.bale-tmp-lock stays over what is left of the old dataset",
        ],
    );
    let left = objects(s, &b, "ds");
    assert!(
        left.iter()
            .filter(|n| n.ends_with(".tar") || n.ends_with(".idx"))
            .count()
            >= 1200,
        "{} objects left",
        left.len()
    );
}

#[test]
fn a_bulk_delete_of_the_clear_sent_twice_lands_before_the_run_writes() {
    // The clear's bulk request for the old shards and indexes is cut once
    // it went out and lands 4 s later; the run sends it again for all of
    // its keys. The old shards have the names the run writes: it waits one
    // request timeout (6 s) from the first attempt before it writes, or the
    // late request deletes its new shards.
    let s = Seaweed::shared();
    let b = bucket(s, "bulk-twice");
    let (_t, other, local, _) = many_shards_and_another(s, &b);
    let url = format!("s3://{b}/ds");
    let delete = bulk_delete_in(&b);
    // The first (the old bale.json's) passes; the second is cut.
    let gate = Gate::with_rules(
        s,
        vec![
            (delete.clone(), GateDoes::Pass, 1, true),
            (delete, GateDoes::CutAndHold, 1, true),
        ],
    );
    force_through_a_cut_delete(s, &gate, &other, &url);
    assert_eq!(verified(s, &url).len(), 30);
    assert_same_objects(s, &url, &local);
}

/// A 200 answer to a bulk delete that reports `key` failed with `code`.
fn bulk_delete_error(key: &str, code: &str) -> Vec<u8> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DeleteResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Error><Key>{key}</Key><Code>{code}</Code><Message>forged by the test</Message></Error></DeleteResult>"
    );
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn a_bulk_delete_refused_for_a_key_fails_the_run_at_once() {
    // The store answers --force's DELETE of the old bale.json with a 200
    // whose body says AccessDenied for that key. That is an answer: the run
    // fails at once with bale's error, never sends it again and waits for
    // nothing to land (the default resends, up to 10 within 180 s, and the
    // wait after them would take minutes).
    let s = Seaweed::shared();
    let (t, url, b, gate) = dataset_behind_a_delete_relay(
        s,
        "bulk-denied",
        GateDoes::Answer(bulk_delete_error("ds/bale.json", "AccessDenied")),
        1,
    );
    let started = Instant::now();
    let o = pack_through(s, &gate, &t.path().join("tree"), &url, &["--force"])
        .finish_within(Duration::from_secs(120));
    failed(
        &o,
        2,
        &[
            "bale.json: access denied (HTTP 403: AccessDenied",
            "is as it was: --force's clear failed before it removed any of it",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);

    assert!(!err.contains("gone, or partly"), "{}", text(&o));
    assert!(!err.contains("may still land"), "{}", text(&o));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // The old dataset is whole: its bale.json was never deleted; and this
    // run's lock went, so a rerun is not kept waiting.
    assert_eq!(verified(s, &url).len(), 20);
    assert!(!err.contains("stays over"), "{}", text(&o));
    assert!(!holds(s, &b, "ds", ".bale-tmp-lock"));
}

#[test]
fn a_clear_answered_with_a_server_error_says_the_old_dataset_may_be_gone() {
    // The DELETE of the old bale.json lands, and its answer (and every
    // resend's) is a 503: the run cannot tell that nothing went, and must
    // not say the old dataset is as it was (it has no bale.json any more).
    let s = Seaweed::shared();
    let (t, url, b, gate) =
        dataset_behind_a_delete_relay(s, "clear-503", GateDoes::LoseAnswer, usize::MAX);
    let o = pack_through(s, &gate, &t.path().join("tree"), &url, &["--force"])
        .finish_within(Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("gone, or partly"), "{}", text(&o));
    assert!(!err.contains("is as it was"), "{}", text(&o));
    assert!(!holds(s, &b, "ds", "bale.json"));
}

#[test]
fn a_prefix_named_like_a_server_error_is_replaced() {
    // A bulk delete's answer lists the keys it deleted; the S3 client takes
    // any answer that holds "SlowDown" or "InternalError" for a server
    // error. Under such a prefix bale deletes one object per request.
    let s = Seaweed::shared();
    let (t, tree, _local) = tree_and_local(20, &[]);
    let (other, local) = another_tree(t.path(), 30);
    let b = bucket(s, "server-words");
    for prefix in ["SlowDown", "runs/InternalError-7"] {
        let url = format!("s3://{b}/{prefix}");
        ok(&bale(
            s,
            &["pack", "-q", "-o", &url, tree.to_str().unwrap()],
        ));
        let o = bale(
            s,
            &["pack", "-q", "--force", "-o", &url, other.to_str().unwrap()],
        );
        assert!(o.status.success(), "{prefix}: {}", text(&o));
        assert_eq!(verified(s, &url).len(), 30);
        assert_same_objects(s, &url, &local);
    }
}

#[test]
fn a_bulk_delete_answered_oddly_is_sent_again_at_once() {
    // The store answers the first bulk DELETE (the old bale.json's) with a
    // 200 whose body is an error: for a key the request did not name (the
    // S3 client panics on it), or InternalError (a server error, as S3
    // sends at times). Either is an answer the run cannot use: it sends the
    // request again at once, never waits for it to land (one request
    // timeout, 60 s by default), never crashes, and replaces the dataset.
    let s = Seaweed::shared();
    for (case, key, code) in [
        ("unasked", "ds/nothing-asked", "AccessDenied"),
        ("internal", "ds/bale.json", "InternalError"),
    ] {
        let (t, url, _b, gate) = dataset_behind_a_delete_relay(
            s,
            &format!("bulk-{case}"),
            GateDoes::Answer(bulk_delete_error(key, code)),
            1,
        );
        let (other, local) = another_tree(t.path(), 30);
        let started = Instant::now();
        let o = pack_through(s, &gate, &other, &url, &["--force"])
            .finish_within(Duration::from_secs(120));
        assert!(o.status.success(), "{case}: {}", text(&o));
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{case}: {:?}",
            started.elapsed()
        );
        assert_eq!(verified(s, &url).len(), 30);
        assert_same_objects(s, &url, &local);
    }
}

#[test]
fn an_undo_whose_delete_was_sent_twice_keeps_its_lock_with_a_note() {
    // A run is interrupted (SIGINT) once it has uploaded a shard. The first
    // DELETE of its undo is cut off once it went out (the relay holds it):
    // sent again, it is answered, but the first attempt may still land. The
    // run keeps its lock with a note, so that the next --force waits it
    // out, and says so.
    let (s, _t, tree, _, b, url) = setup("undo-twice", 1500, SHARDS);
    // The answer to the second shard's PUT is held until the run was
    // interrupted: the run cannot have finished before.
    let gate = Gate::with_rules(
        s,
        vec![
            (
                put_of(&b, "ds/shard-000001.tar"),
                GateDoes::HoldAnswer,
                1,
                true,
            ),
            (bulk_delete_in(&b), GateDoes::CutAndHold, 1, true),
        ],
    );
    let mut extra: Vec<&str> = SHARDS.to_vec();
    extra.extend(["--storage-option", "timeout=6s"]);
    let mut run = pack_through(s, &gate, &tree, &url, &extra);
    gate.wait_held(1, Duration::from_secs(120));
    signal(&mut run, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(300));
    gate.release(0);
    gate.wait_held(2, Duration::from_secs(60));
    let o = run.finish_within(Duration::from_secs(120));
    gate.release(1);
    failed(&o, 130, &["may still land", "waits 6 s more"]);
    let lock = lock_at(s, &url);
    assert_eq!(lock["unanswered_wait_ms"], 6_000, "{lock}");
    assert!(!holds(s, &b, "ds", "bale.json"));
}

#[test]
fn an_index_whose_delete_was_sent_twice_waits_before_it_writes() {
    // `bale index -o URL --force` beside tars in a bucket deletes the old
    // bale.json and indexes first. That DELETE's connection is cut once it
    // went out, sent again and answered; the first attempt lands 4 s later.
    // The run waits it out before it writes its own bale.json, which would
    // otherwise be the one removed.
    let (s, t, _, local, b, _) = setup("index-twice", 200, &["--shard-samples", "100"]);
    let url = format!("s3://{b}/wds");
    let urls = tars_in_bucket(s, t.path(), &local, &b);
    let mut args = vec!["index", "-q", "--force", "--storage-option", "timeout=6s"];
    args.extend(["-o", &url]);
    args.extend(urls.iter().map(String::as_str));
    ok(&Running::start(&mut bale_cmd(&with_options(s, &args)))
        .finish_within(Duration::from_secs(120)));
    let gate = Gate::start(s, bulk_delete_in(&b), GateDoes::CutAndHold, 1);
    let run = gate.bale(s, &args);
    gate.wait_held(1, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(4));
    gate.release(0);
    let o = run.finish_within(Duration::from_secs(120));
    ok(&o);
    assert_eq!(verified(s, &url).len(), 200, "{}", text(&o));
}

#[test]
fn the_locks_delete_sent_twice_lands_before_the_run_ends() {
    // A run commits and deletes its lock; that DELETE's connection is cut
    // once it went out (the relay holds it), the run sends it again and is
    // answered. The first attempt lands 3 s later. Had the run ended at
    // once, it would land on the lock of a run that starts next (created
    // here by the test as soon as the run ends): the run waits it out (one
    // request timeout, 6 s) before it ends.
    let (s, t, tree, _, b, url) = setup("lock-twice", 50, &[]);
    let gate = Gate::start(s, bulk_delete_in(&b), GateDoes::CutAndHold, 1);
    let run = pack_through(s, &gate, &tree, &url, &["--storage-option", "timeout=6s"]);
    gate.wait_held(1, Duration::from_secs(60));
    let held = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_secs(3));
            gate.release(0);
        });
        let o = run.finish_within(Duration::from_secs(60));
        ok(&o);
        // The next run's lock, as soon as this run has ended.
        put(
            s,
            t.path(),
            &b,
            "ds/.bale-tmp-lock",
            br#"{"run": "next", "beat": 0}"#,
        );
    });
    std::thread::sleep(Duration::from_secs(5).saturating_sub(held.elapsed()));
    let left = objects(s, &b, "ds");
    assert!(
        left.contains(&".bale-tmp-lock".to_owned()),
        "the next run's lock was deleted: {left:?}"
    );
    assert!(left.contains(&"bale.json".to_owned()), "{left:?}");
}

#[test]
fn ctrl_c_of_a_convert_into_a_bucket_after_the_clear_exits_130() {
    // `convert --force` over a dataset in a bucket: the clear is done and a
    // shard's upload is in flight (held) when Ctrl-C comes. The run stops as
    // interrupted (exit 130, as pack and merge do), and says the old
    // dataset is gone, or partly.
    let (s, t, tree, local, b, url) = setup("convert-int", 300, &["--shard-size", "4MiB"]);
    ok(&bale(
        s,
        &["pack", "-q", "-o", &url, tree.to_str().unwrap()],
    ));
    let gate = Gate::start(
        s,
        format!("PUT /{b}/ds/shard-000001.tar").into_bytes(),
        GateDoes::HoldRequest,
        1,
    );
    let mut run = gate.bale(
        s,
        &[
            "convert",
            "-q",
            "--force",
            "--format",
            "tar",
            "--shard-size",
            "2MiB",
            "-o",
            &url,
            local.to_str().unwrap(),
        ],
    );
    gate.wait_held(1, Duration::from_secs(120));
    signal(&mut run, libc::SIGINT);
    gate.release(0);
    let o = run.finish_within(Duration::from_secs(120));
    failed(&o, 130, &["error: interrupted: ", "gone, or partly"]);
    assert!(!holds(s, &b, "ds", "bale.json"));
    drop(t);
}

#[test]
fn a_force_run_killed_after_its_clear_leaves_its_own_shards_to_clear() {
    // A killed run's claimed lock (a hand-made one here, with a leftover
    // shard) is taken over by --force, which clears it and uploads a shard
    // of its own; then it is killed too. Its lock must date what it wrote
    // by its own refreshes, not carry the first run's bound for leftovers:
    // a third --force clears its shard and writes a whole dataset.
    let (s, t, tree, local, b, url) = setup("killed-twice", 1500, SHARDS);
    put(
        s,
        t.path(),
        &b,
        "ds/shard-000005.tar",
        b"a killed run's shard",
    );
    put(
        s,
        t.path(),
        &b,
        "ds/.bale-tmp-lock",
        br#"{"run": "killed-first", "beat": 4, "claimed": true, "request_timeout_ms": 0}"#,
    );
    // The second run's shard is dated well past the first run's bound.
    std::thread::sleep(Duration::from_secs(3));
    let mut extra: Vec<&str> = SHARDS.to_vec();
    extra.extend(["--force", "--storage-option", "timeout=2s"]);
    let mut run = pack_until(s, &tree, &url, &extra, "shard-000000.tar")
        .expect("the pack ended before it could be killed");
    signal(&mut run, libc::SIGKILL);
    let _ = run.finish_within(Duration::from_secs(60));
    assert!(
        !holds(s, &b, "ds", "shard-000005.tar"),
        "{:?}",
        objects(s, &b, "ds")
    );
    let tree_s = tree.to_str().unwrap();
    let mut rerun = vec!["pack", "-q", "--force"];
    rerun.extend(SHARDS);
    rerun.extend(["-o", &url, tree_s]);
    ok(&bale(s, &rerun));
    assert_same_objects(s, &url, &local);
}

#[test]
fn a_shard_removed_under_a_run_is_never_committed() {
    // A request of an earlier run that lands later than anyone waits (its
    // undo's DELETE, here sent by the test itself) removes shard-000000.tar
    // once this run has written it. Before the manifest (the run held at its
    // index's PUT) the check of what it wrote fails the run with no
    // bale.json; after it (held at the manifest's PUT) the run withdraws
    // its bale.json. Either way nothing names a missing object, and a rerun
    // with --force writes a whole dataset. The same holds for a late PUT
    // that replaces the shard with other bytes of the same size (the ETag
    // the run's upload was answered with tells them apart).
    let s = Seaweed::shared();
    let (t, tree, _local) = tree_and_local(300, &[]);
    for (prefix, held, says, replaced) in [
        (
            "gone-pre",
            "PUT /{b}/ds/shard-000000.idx ",
            "nothing of this run is committed",
            false,
        ),
        (
            "gone-post",
            "PUT /{b}/ds/bale.json ",
            "withdrew its bale.json",
            false,
        ),
        (
            "same-size-post",
            "PUT /{b}/ds/bale.json ",
            "withdrew its bale.json",
            true,
        ),
    ] {
        let b = bucket(s, prefix);
        let url = format!("s3://{b}/ds");
        let gate = Gate::start(
            s,
            held.replace("{b}", &b).into_bytes(),
            GateDoes::HoldRequest,
            1,
        );
        let run = pack_through(s, &gate, &tree, &url, &["--shard-size", "4MiB"]);
        gate.wait_held(1, Duration::from_secs(120));
        s.wait_object(&b, "ds/shard-000000.tar").unwrap();
        if replaced {
            let store = Store::open(&url, &options(s)).unwrap();
            let size = store.object("shard-000000.tar").unwrap().head().unwrap();
            put(
                s,
                t.path(),
                &b,
                "ds/shard-000000.tar",
                &vec![0x55u8; size as usize],
            );
        } else {
            s.delete(&b, "ds/shard-000000.tar").unwrap();
        }
        gate.release(0);
        let o = run.finish_within(Duration::from_secs(120));
        assert_eq!(o.status.code(), Some(2), "{prefix}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("shard-000000.tar"), "{prefix}: {}", text(&o));
        let what = if replaced {
            "its ETag is"
        } else {
            "it is gone"
        };
        assert!(err.contains(what), "{prefix}: {}", text(&o));
        assert!(err.contains(says), "{prefix}: {}", text(&o));
        let (objects, _) = listing(s, &b, "ds");
        assert!(
            !objects.contains(&"bale.json".to_owned()),
            "{prefix}: {objects:?}"
        );
        let o = bale(
            s,
            &[
                "pack",
                "-q",
                "--force",
                "--shard-size",
                "4MiB",
                "-o",
                &url,
                tree.to_str().unwrap(),
            ],
        );
        assert!(o.status.success(), "{prefix}: {}", text(&o));
        assert_eq!(verified(s, &url).len(), 300, "{prefix}");
    }
}

#[test]
fn an_upload_that_lands_after_its_run_was_undone_is_cleared_by_force() {
    // A run's upload of shard-000001.tar gets no answer (held here) and the
    // run fails; its undo removes everything else. The upload may land
    // after that: the run keeps its lock over it, so that --force knows the
    // shard for a run's and clears it. (Without a lock, --force would refuse
    // a tar of bale's names as maybe the user's, and the prefix would stay
    // stuck.)
    let (s, _t, tree, local, b, url) = setup("late-put", 300, &["--shard-size", "4MiB"]);
    let gate = Gate::start(
        s,
        put_of(&b, "ds/shard-000001.tar"),
        GateDoes::HoldRequest,
        1,
    );

    let opts = [
        "--shard-size",
        "4MiB",
        "--storage-option",
        "timeout=6s",
        "--storage-option",
        "max_retries=0",
    ];
    let o = pack_through(s, &gate, &tree, &url, &opts).finish_within(Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("may still land"), "{}", text(&o));
    assert!(!err.contains("were removed"), "{}", text(&o));
    // The upload lands (its bytes sent here by the test).
    s.put_file(&local.join("shard-000001.tar"), &b, "ds/shard-000001.tar")
        .unwrap();
    let (objects, _) = listing(s, &b, "ds");
    assert_eq!(
        objects,
        [".bale-tmp-lock", "shard-000001.tar"],
        "{objects:?}"
    );
    ok(&bale(
        s,
        &[
            "pack",
            "-q",
            "--force",
            "--shard-size",
            "4MiB",
            "-o",
            &url,
            tree.to_str().unwrap(),
        ],
    ));
    assert_same_objects(s, &url, &local);
}

#[test]
fn a_force_pack_refused_on_its_input_keeps_the_old_dataset_in_the_bucket() {
    // --force replaces a dataset only once the new run has something to
    // upload: an input refused while it is walked and planned (a FIFO, a
    // label file that does not parse) leaves the old dataset whole, and
    // the message says so.
    let (s, t, tree, local, _, url) = setup("keep-old", 200, &[]);
    let o = bale(s, &["pack", "-q", "-o", &url, tree.to_str().unwrap()]);
    ok(&o);
    let bad = t.path().join("bad");
    random_tree(&bad, 50);
    let fifo = bad.join("pipe.bin");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let labels = t.path().join("labels.csv");
    std::fs::write(&labels, "not a label row\n").unwrap();
    let labels = format!("csv:{}", labels.display());
    for (what, extra) in [
        ("fifo", vec![bad.to_str().unwrap()]),
        ("labels", vec!["--labels", &labels, tree.to_str().unwrap()]),
    ] {
        let mut args = vec!["pack", "-q", "--force", "-o", &url];
        args.extend(extra);
        let o = bale(s, &args);
        assert_eq!(o.status.code(), Some(2), "{what}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("is as it was"), "{what}: {}", text(&o));
        assert_same_objects(s, &url, &local);
        assert_eq!(verified(s, &url).len(), 200, "{what}");
    }
}

#[test]
fn a_run_taken_over_during_an_upload_says_so_first() {
    // A run stalls (SIGSTOP) with a part of a multipart upload in flight;
    // a --force run takes the prefix over, aborts that upload and commits.
    // When the stalled run resumes, its part fails (the upload is gone):
    // the message leads with the takeover, the cause, not with the
    // store's NoSuchUpload.
    let (s, t, tree, _, b, url) = setup("taken-part", 1500, SHARDS);
    let other = other_tree(&t, 200);
    let gate = Gate::start(
        s,
        format!("PUT /{b}/ds/shard-000001.tar?partNumber=2&").into_bytes(),
        GateDoes::HoldRequest,
        1,
    );
    let mut extra: Vec<&str> = SHARDS.to_vec();
    extra.extend(UPLOAD);
    let mut first = pack_through(s, &gate, &tree, &url, &extra);
    gate.wait_held(1, Duration::from_secs(120));
    signal(&mut first, libc::SIGSTOP);
    understate_timeout(s, &b, "ds");
    ok(&bale(
        s,
        &["pack", "-q", "--force", "-o", &url, other.to_str().unwrap()],
    ));
    gate.release(0);
    signal(&mut first, libc::SIGCONT);
    let o = first.finish_within(Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let lead = err.lines().next().unwrap_or_default();
    assert!(
        lead.contains("took this prefix over") || lead.contains("took it over"),
        "{}",
        text(&o)
    );
    assert_eq!(verified(s, &url).len(), 200);
}

#[test]
fn a_clearing_delete_without_an_answer_makes_the_next_force_wait() {
    // --force clears the old dataset before its first upload; the DELETE of
    // the old bale.json gets no answer (6 s) and may still land. The run
    // fails, says that the old dataset is gone or partly, keeps its lock
    // with a note, and the next --force says how long it watches that lock
    // (7 s + 6 s) before it writes a whole dataset.
    let (s, t, tree, _, _, url) = setup("clear-held", 200, &[]);
    let other = other_tree(&t, 100);
    ok(&bale(
        s,
        &["pack", "-q", "-o", &url, tree.to_str().unwrap()],
    ));
    let gate = Gate::start(
        s,
        b"<Key>ds/bale.json</Key>".to_vec(),
        GateDoes::HoldRequest,
        1,
    );
    let opts = [
        "--force",
        "--storage-option",
        "timeout=6s",
        "--storage-option",
        "max_retries=0",
    ];
    let o = pack_through(s, &gate, &other, &url, &opts).finish_within(Duration::from_secs(120));
    failed(&o, 2, &["waits 6 s more", "--force had begun to remove it"]);
    let lock = String::from_utf8(object(s, &url, ".bale-tmp-lock")).unwrap();
    assert!(lock.contains("\"unanswered_wait_ms\":6000"), "{lock}");
    let started = Instant::now();
    let o = bale(s, &["pack", "--force", "-o", &url, other.to_str().unwrap()]);
    ok(&o);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("watching it for 13 s"),
        "{}",
        text(&o)
    );
    assert!(started.elapsed() >= Duration::from_secs(13));
    assert_eq!(verified(s, &url).len(), 100);
}

/// Puts `lock` (if any) as the lock object under `s3://b/ds`, starts `bale
/// pack --force` of `tree` there, interrupts it (SIGINT) `after` that, and
/// checks that it stopped at once (within 5 s) with exit 130. Returns its
/// stderr.
fn force_pack_interrupted(
    s: &Seaweed,
    b: &str,
    tmp: &Path,
    tree: &Path,
    lock: Option<&str>,
    after: Duration,
) -> String {
    if let Some(lock) = lock {
        put(s, tmp, b, "ds/.bale-tmp-lock", lock.as_bytes());
    }
    let url = format!("s3://{b}/ds");
    let mut run = Running::start(&mut bale_cmd(&with_options(
        s,
        &["pack", "--force", "-o", &url, tree.to_str().unwrap()],
    )));
    std::thread::sleep(after);
    signal(&mut run, libc::SIGINT);
    let stopped = Instant::now();
    let o = run.finish_within(Duration::from_secs(60));
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopped.elapsed()
    );
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn ctrl_c_while_force_watches_a_lock_stops_at_once() {
    // --force watches another run's lock before it takes the prefix over:
    // 7 s, plus up to 600 s when that run said requests of it may still
    // land. A Ctrl-C then stops it at once, with nothing written and the
    // prefix as it was.
    let (s, t, tree, _, b, url) = setup("watch-int", 50, &[]);
    let lock = r#"{"run":"1-dead","pid":1,"host":"elsewhere","tool":"bale","beat":3,"claimed":false,"unanswered_wait_ms":600000}"#;
    let err = force_pack_interrupted(s, &b, t.path(), &tree, Some(lock), Duration::from_secs(2));
    assert!(err.contains("watching it for 607 s"), "{err}");
    assert!(err.contains("is as it was"), "{err}");
    assert_eq!(object(s, &url, ".bale-tmp-lock"), lock.as_bytes());
    assert_eq!(objects(s, &b, "ds"), [".bale-tmp-lock"]);
}

#[test]
fn ctrl_c_while_force_waits_out_a_killed_runs_requests_stops_at_once() {
    // A killed run's lock says its requests may take up to 600 s: once
    // --force has taken the prefix over (after its 7 s watch), it waits
    // that out before it looks at what is there. A Ctrl-C then stops it at
    // once, with nothing of its own written; what the killed run left
    // stays marked as a run's leftovers, so a later --force still clears it.
    let (s, t, tree, local, b, url) = setup("wait-int", 50, &[]);
    let lock = r#"{"run":"1-dead","pid":1,"host":"elsewhere","tool":"bale","beat":3,"claimed":true,"request_timeout_ms":600000}"#;
    put(
        s,
        t.path(),
        &b,
        "ds/shard-000003.tar",
        b"a killed run's shard",
    );

    let err = force_pack_interrupted(s, &b, t.path(), &tree, Some(lock), Duration::from_secs(10));
    assert!(err.contains("watching it for 7 s"), "{err}");
    assert!(err.contains("records a request timeout of 600 s"), "{err}");
    assert_eq!(
        objects(s, &b, "ds"),
        [".bale-tmp-lock", "shard-000003.tar"],
        "{err}"
    );
    // The lock is the interrupted run's now, with its own 60 s timeout, but
    // it carries the killed run's wait: the next --force still waits that
    // out (most of 600 s), not the interrupted run's.
    let err = force_pack_interrupted(s, &b, t.path(), &tree, None, Duration::from_secs(10));
    let waits: u64 = err
        .split("waiting ")
        .nth(1)
        .and_then(|w| w.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no wait said: {err}"));
    assert!(waits > 500, "{err}");
    // The lock left marks the leftover: --force (the wait long over for a
    // lock that says 0 s) clears it and writes the dataset.
    understate_timeout(s, &b, "ds");
    ok(&bale(
        s,
        &["pack", "-q", "--force", "-o", &url, tree.to_str().unwrap()],
    ));
    assert_same_objects(s, &url, &local);
}
