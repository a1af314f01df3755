//! `bale pack --append -o s3://...` against a real S3 server (SeaweedFS on
//! 127.0.0.1, see `bale_tests::seaweed`): new shards after every shard
//! object under the prefix, `bale.json` replaced last and only if it is the
//! one the run read, the old objects never rewritten or deleted, the local
//! append's refusals before anything is written, and a failed or
//! interrupted append leaving the old dataset as it was.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use bale_storage::{Publisher, WriteOptions};
use bale_tests::seaweed::Seaweed;
use bale_tests::{assert_success as ok, describe as text};

use crate::append::trees;
use crate::common::{bale_cmd, pack_quiet, random_tree, text_tree};
use crate::relay::{Gate, GateDoes, put_of};
use crate::remote_write::{bale, pack_until, signal, verified};
use crate::store::{
    assert_same_objects, bucket, listing, object, open_at, options, put, samples_of,
};

/// Every object under `s3://bucket/prefix/`: name -> (ETag, bytes).
fn objects_at(s: &Seaweed, bucket: &str, prefix: &str) -> BTreeMap<String, (String, Vec<u8>)> {
    let out = s
        .boto(
            "p = sys.argv[2] + '/'\n\
             for page in s3.get_paginator('list_objects_v2').paginate(Bucket=sys.argv[1], Prefix=p):\n\
             \x20   for o in page.get('Contents', []):\n\
             \x20       print(o['Key'][len(p):] + '|' + o['ETag'])\n",
            &[bucket, prefix],
        )
        .unwrap();
    let url = format!("s3://{bucket}/{prefix}");
    out.lines()
        .filter_map(|l| l.split_once('|'))
        .map(|(n, e)| (n.to_owned(), (e.to_owned(), object(s, &url, n))))
        .collect()
}

/// `bale pack -q --append ARGS... -o URL TREE` (as [`bale`]).
fn append(s: &Seaweed, tree: &Path, url: &str, args: &[&str]) -> Output {
    let mut all = vec!["pack", "-q", "--append"];
    all.extend(args);
    all.extend(["-o", url, tree.to_str().unwrap()]);
    bale(s, &all)
}

/// Asserts that `o` failed and that its stderr holds each of `says`.
fn refused_with(o: &Output, says: &[&str]) {
    assert!(!o.status.success(), "{}", text(o));
    let err = String::from_utf8_lossy(&o.stderr);
    for w in says {
        assert!(err.contains(w), "{w:?} not in: {}", text(o));
    }
}

/// The manifest under `url`, parsed.
fn manifest_at(s: &Seaweed, url: &str) -> serde_json::Value {
    serde_json::from_slice(&object(s, url, "bale.json")).unwrap()
}

/// The shard files the manifest under `url` lists, in order.
fn listed(s: &Seaweed, url: &str) -> Vec<String> {
    manifest_at(s, url)["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["file"].as_str().unwrap().to_owned())
        .collect()
}

/// Asserts that every object of `before` but `bale.json` is under the
/// prefix now, with its ETag and bytes.
fn old_objects_kept(
    before: &BTreeMap<String, (String, Vec<u8>)>,
    now: &BTreeMap<String, (String, Vec<u8>)>,
) {
    for (name, was) in before.iter().filter(|(n, _)| *n != "bale.json") {
        assert!(
            now.get(name) == Some(was),
            "{name} was rewritten or deleted"
        );
    }
}

/// A tree of `n` files of class `dog` whose keys no tree of [`trees`] has.
fn new_dogs(t: &Path, n: usize) -> PathBuf {
    let c = t.join("c");
    text_tree(&c, "dog", "c-dog", n);
    for i in 0..n {
        std::fs::rename(
            c.join(format!("dog/{i:04}.txt")),
            c.join(format!("dog/m{i:04}.txt")),
        )
        .unwrap();
    }
    c
}

#[test]
fn an_append_into_a_bucket_adds_shards_after_every_shard_there_and_rewrites_nothing() {
    let s = Seaweed::shared();
    let t = tempfile::tempdir().unwrap();
    let (a, b) = trees(t.path());
    let bkt = bucket(s, "app");
    let url = format!("s3://{bkt}/ds");
    let by25 = ["--shard-samples", "25"];
    let mut pack = vec!["pack", "-q", "-o", &url, a.to_str().unwrap()];
    pack.extend(by25);
    ok(&bale(s, &pack));
    let before = objects_at(s, &bkt, "ds");
    let old = open_at(s, &url);
    let old_samples = samples_of(&old);
    assert_eq!(old_samples.len(), 60);

    ok(&append(s, &b, &url, &by25));

    // The same bytes as the same append made locally: new shards 3 and 4,
    // then a manifest listing old and new.
    let local = t.path().join("local");
    pack_quiet(&a, &local, &by25);
    let mut args = vec!["pack", "-q", "--append", "-o", local.to_str().unwrap()];
    args.extend(by25);
    args.push(b.to_str().unwrap());
    ok(&bale_cmd(&args).output().unwrap());
    assert_same_objects(s, &url, &local);
    let now = objects_at(s, &bkt, "ds");
    old_objects_kept(&before, &now);
    assert_eq!(now.len(), before.len() + 4, "{:?}", now.keys());
    let m = manifest_at(s, &url);
    assert_eq!(m["samples"], 100, "{m}");
    assert_eq!(m["created_by"]["options"]["appends"], 1, "{m}");
    assert_eq!(
        listed(s, &url),
        (0..5)
            .map(|i| format!("shard-{i:06}.tar"))
            .collect::<Vec<_>>()
    );

    // A reader opened before keeps its view; bale verify, ls and stat see
    // the whole.
    assert_eq!(samples_of(&old), old_samples);
    let ds = verified(s, &url);
    assert_eq!(ds.len(), 100);
    assert_eq!(samples_of(&ds)[..60], old_samples[..]);
    let o = bale(s, &["ls", &url]);
    ok(&o);
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 100);
    let o = bale(s, &["stat", "--json", &url]);
    ok(&o);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["samples"], 100, "{j}");

    // New shards are numbered after every shard object under the prefix,
    // one the manifest does not list included, which stays as it is.
    put(
        s,
        t.path(),
        &bkt,
        "ds/shard-000009.tar",
        b"not one of the dataset's",
    );
    let before = objects_at(s, &bkt, "ds");
    let c = new_dogs(t.path(), 10);
    ok(&append(s, &c, &url, &by25));
    old_objects_kept(&before, &objects_at(s, &bkt, "ds"));
    assert_eq!(
        listed(s, &url).last().map(String::as_str),
        Some("shard-000010.tar")
    );
    assert_eq!(manifest_at(s, &url)["created_by"]["options"]["appends"], 2);
    let ds = verified(s, &url);
    assert_eq!(ds.len(), 110);
    assert_eq!(ds.get_by_key("dog/m0003").unwrap().label(), Some(1));
}

#[test]
fn an_append_into_a_bucket_refuses_what_a_local_one_refuses_and_writes_nothing() {
    let s = Seaweed::shared();
    let t = tempfile::tempdir().unwrap();
    let (a, b) = trees(t.path());
    let bkt = bucket(s, "appno");
    let url = format!("s3://{bkt}/ds");
    ok(&bale(s, &["pack", "-q", "-o", &url, a.to_str().unwrap()]));
    let before = objects_at(s, &bkt, "ds");
    let unchanged = || {
        assert!(objects_at(s, &bkt, "ds") == before, "the prefix changed");
        assert!(listing(s, &bkt, "ds").1.is_empty(), "open uploads");
    };

    // A key the dataset holds, naming the key, the file and the shard.
    std::fs::write(b.join("cat/0003.txt"), b"again").unwrap();
    let o = append(s, &b, &url, &[]);
    refused_with(
        &o,
        &[
            "\"cat/0003\"",
            "cat/0003.txt",
            "already",
            "shard-000000.tar",
        ],
    );
    unchanged();
    std::fs::remove_file(b.join("cat/0003.txt")).unwrap();

    // Settings unlike the dataset's, naming the option.
    let o = append(s, &b, &url, &["--shard-samples", "7"]);
    refused_with(&o, &["--shard-samples", "cannot append to"]);
    unchanged();
    let o = append(s, &b, &url, &["--compress", "zstd"]);
    refused_with(&o, &["compression"]);
    unchanged();

    // A class the dataset does not have.
    let d = t.path().join("d");
    text_tree(&d, "bird", "d-bird", 3);
    let o = append(s, &d, &url, &[]);
    refused_with(&o, &["class \"bird\""]);
    unchanged();

    // --force and --part do not go with --append.
    let o = append(s, &b, &url, &["--force"]);
    refused_with(&o, &["--force"]);
    unchanged();
    let o = append(s, &b, &url, &["--part", "0/2"]);
    refused_with(&o, &["--part"]);
    unchanged();

    // A dataset bale pack did not write: a convert's.
    let conv = format!("s3://{bkt}/conv");
    let local = t.path().join("local");
    pack_quiet(&a, &local, &[]);
    ok(&bale(
        s,
        &["convert", "-q", "-o", &conv, local.to_str().unwrap()],
    ));
    let conv_before = objects_at(s, &bkt, "conv");
    let o = append(s, &b, &conv, &[]);
    refused_with(&o, &["written by `bale convert`"]);
    assert!(objects_at(s, &bkt, "conv") == conv_before);

    // A prefix with objects but no dataset is refused as a fresh pack
    // refuses it; an empty one gets a fresh pack.
    put(s, t.path(), &bkt, "other/notes.txt", b"keep me");
    let o = append(s, &b, &format!("s3://{bkt}/other"), &[]);
    refused_with(&o, &["already holds 1 objects"]);
    assert_eq!(listing(s, &bkt, "other").0, ["notes.txt"]);
    let fresh = format!("s3://{bkt}/fresh");
    ok(&append(s, &b, &fresh, &[]));
    assert_eq!(verified(s, &fresh).len(), 40);

    // After all that, the append goes through.
    ok(&append(s, &b, &url, &[]));
    old_objects_kept(&before, &objects_at(s, &bkt, "ds"));
    assert_eq!(verified(s, &url).len(), 100);
}

#[test]
fn the_store_refuses_a_put_over_a_version_it_no_longer_has() {
    // The commit of an append is a PUT with If-Match on the ETag of the
    // bale.json the run read: the server must refuse it once the object
    // changed.
    let s = Seaweed::shared();
    let bkt = bucket(s, "ifmatch");
    let out = s
        .boto(
            "import botocore\n\
             b, k = sys.argv[1], 'x/obj'\n\
             first = s3.put_object(Bucket=b, Key=k, Body=b'one')['ETag']\n\
             s3.put_object(Bucket=b, Key=k, Body=b'two')\n\
             try:\n\
             \x20   s3.put_object(Bucket=b, Key=k, Body=b'three', IfMatch=first)\n\
             \x20   print('written')\n\
             except botocore.exceptions.ClientError as e:\n\
             \x20   print(e.response['ResponseMetadata']['HTTPStatusCode'])\n\
             print(s3.get_object(Bucket=b, Key=k)['Body'].read().decode())\n",
            &[&bkt],
        )
        .unwrap();
    assert_eq!(out.lines().collect::<Vec<_>>(), ["412", "two"], "{out}");
}

#[test]
fn an_append_never_replaces_a_manifest_that_changed_since_it_read_it() {
    let s = Seaweed::shared();
    let t = tempfile::tempdir().unwrap();
    let (a, _) = trees(t.path());
    let bkt = bucket(s, "appcas");
    let url = format!("s3://{bkt}/ds");
    ok(&bale(s, &["pack", "-q", "-o", &url, a.to_str().unwrap()]));
    let (p, found) = Publisher::open_append(&url, &options(s), WriteOptions::default()).unwrap();
    let found = found.expect("the dataset");
    assert_eq!(found.manifest.as_ref(), object(s, &url, "bale.json"));
    assert!(found.names.iter().any(|n| n == "shard-000000.tar"));
    assert!(!found.names.iter().any(|n| n == ".bale-tmp-lock"));
    // Someone replaces bale.json behind the lock's back.
    let mut theirs = found.manifest.to_vec();
    theirs.extend_from_slice(b"\n");
    put(s, t.path(), &bkt, "ds/bale.json", &theirs);
    let mut ours = found.manifest.to_vec();
    ours.extend_from_slice(b"\n\n");
    let e = p.commit(ours.into()).unwrap_err().to_string();
    assert!(e.contains("no longer the one this run read"), "{e}");
    p.abort().unwrap();
    assert_eq!(object(s, &url, "bale.json"), theirs);
    assert!(
        !listing(s, &bkt, "ds")
            .0
            .iter()
            .any(|n| n == ".bale-tmp-lock"),
        "the lock was let go"
    );
    // With the manifest as read, the commit goes through.
    let (p, found) = Publisher::open_append(&url, &options(s), WriteOptions::default()).unwrap();
    let mut ours = found.unwrap().manifest.to_vec();
    ours.extend_from_slice(b"\n\n");
    p.commit(ours.clone().into()).unwrap();
    assert_eq!(object(s, &url, "bale.json"), ours);
}

/// A dataset under `s3://bkt/ds` packed from 300 files of 16-64 KiB in
/// shards of 12 MiB, and a tree of 1,500 more (new keys) to append:
/// `(scratch, bucket, url, new tree, first new shard's number)`.
fn big_setup(tag: &str) -> (tempfile::TempDir, String, String, PathBuf, usize) {
    let s = Seaweed::shared();
    let t = tempfile::tempdir().unwrap();
    let all = t.path().join("all");
    random_tree(&all, 1800);
    // The first 300 files are the dataset's, the rest new.
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    for i in 0..1800 {
        let rel = format!("c{}/{i:05}.bin", i % 5);
        let to = if i < 300 { &a } else { &b }.join(&rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::rename(all.join(&rel), to).unwrap();
    }
    let bkt = bucket(s, tag);
    let url = format!("s3://{bkt}/ds");
    ok(&bale(
        s,
        &[
            "pack",
            "-q",
            "--shard-size",
            "12MiB",
            "-o",
            &url,
            a.to_str().unwrap(),
        ],
    ));
    let first = listed(s, &url).len();
    (t, bkt, url, b, first)
}

#[test]
fn an_append_holds_the_prefixs_lock_and_an_interrupted_one_leaves_the_dataset_as_it_was() {
    let s = Seaweed::shared();
    let (_t, bkt, url, b, first) = big_setup("appint");
    let before = objects_at(s, &bkt, "ds");
    let extra = ["--append", "--shard-size", "12MiB"];

    // SIGINT once the first new shard is up.
    let at = format!("shard-{first:06}.idx");
    let mut run = pack_until(s, &b, &url, &extra, &at).expect("the append finished first");
    // Meanwhile another append or pack of the prefix is refused.
    let other = tempfile::tempdir().unwrap();
    random_tree(other.path(), 3);
    let o = append(s, other.path(), &url, &[]);
    refused_with(
        &o,
        &["another bale run is writing here", "then append again"],
    );
    // Never the --force of a fresh pack, which would replace the dataset.
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("--force"),
        "{}",
        text(&o)
    );
    signal(&mut run, libc::SIGINT);
    let o = run.finish_within(Duration::from_secs(120));
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    refused_with(&o, &["the old dataset there is as it was"]);
    let (_, uploads) = listing(s, &bkt, "ds");
    assert!(uploads.is_empty(), "{uploads:?}");
    assert!(objects_at(s, &bkt, "ds") == before, "the prefix changed");
    assert_eq!(verified(s, &url).len(), 300);

    // A later append works.
    ok(&append(s, &b, &url, &extra[1..]));
    old_objects_kept(&before, &objects_at(s, &bkt, "ds"));
    assert_eq!(verified(s, &url).len(), 1800);
}

#[test]
fn an_upload_error_mid_append_removes_only_what_the_run_wrote() {
    let s = Seaweed::shared();
    let t = tempfile::tempdir().unwrap();
    let (a, b) = trees(t.path());
    let bkt = bucket(s, "apperr");
    let url = format!("s3://{bkt}/ds");
    let by25 = ["--shard-samples", "25"];
    let mut pack = vec!["pack", "-q", "-o", &url, a.to_str().unwrap()];
    pack.extend(by25);
    ok(&bale(s, &pack));
    let before = objects_at(s, &bkt, "ds");

    // The second new shard's PUT is refused: the first is up by then.
    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code><Message>forged by the test</Message></Error>";
    let answer = format!(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let gate = Gate::start(
        s,
        put_of(&bkt, "ds/shard-000004.tar"),
        GateDoes::Answer(answer.into_bytes()),
        1,
    );
    let mut args = vec!["pack", "-q", "--append", "-o", &url, b.to_str().unwrap()];
    args.extend(by25);
    let o = gate.bale(s, &args).finish_within(Duration::from_secs(120));
    assert_eq!(gate.acted(), 1, "{}", text(&o));
    refused_with(
        &o,
        &["shard-000004.tar", "the old dataset there is as it was"],
    );
    assert!(objects_at(s, &bkt, "ds") == before, "the prefix changed");
    assert_eq!(verified(s, &url).len(), 60);

    // A later append works.
    ok(&append(s, &b, &url, &by25));
    old_objects_kept(&before, &objects_at(s, &bkt, "ds"));
    assert_eq!(verified(s, &url).len(), 100);
}

#[test]
fn an_append_whose_manifest_put_meets_another_version_commits_nothing() {
    // bale.json is replaced after the run's last read of it, while its PUT
    // (If-Match on the ETag read) is held by a relay: the server refuses
    // the PUT, and the run removes what it wrote, the other manifest kept.
    let s = Seaweed::shared();
    let t = tempfile::tempdir().unwrap();
    let (a, b) = trees(t.path());
    let bkt = bucket(s, "app412");
    let url = format!("s3://{bkt}/ds");
    ok(&bale(s, &["pack", "-q", "-o", &url, a.to_str().unwrap()]));
    let before = objects_at(s, &bkt, "ds");
    let gate = Gate::start(s, put_of(&bkt, "ds/bale.json"), GateDoes::HoldRequest, 1);
    let run = gate.bale(
        s,
        &["pack", "-q", "--append", "-o", &url, b.to_str().unwrap()],
    );
    gate.wait_held(1, Duration::from_secs(120));
    let mut theirs = object(s, &url, "bale.json");
    theirs.extend_from_slice(b"\n");
    put(s, t.path(), &bkt, "ds/bale.json", &theirs);
    gate.release(0);
    let o = run.finish_within(Duration::from_secs(120));
    refused_with(&o, &["no longer the one this run read"]);
    assert_eq!(object(s, &url, "bale.json"), theirs);
    let now = objects_at(s, &bkt, "ds");
    assert_eq!(
        now.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "only the run's objects went, its lock with them"
    );
    old_objects_kept(&before, &now);
    assert!(listing(s, &bkt, "ds").1.is_empty());
}
