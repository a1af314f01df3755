//! Datasets in object storage, against a real S3 server (SeaweedFS on
//! 127.0.0.1, see `bale_tests::seaweed`): every read path gives the local
//! dataset's bytes; faults (a flipped byte, a missing object, wrong
//! credentials, an unreachable endpoint, the server killed in the middle of
//! `bale stage`) are clear errors, and a rerun of `stage` resumes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bale_reader::{Dataset, EpochPlan, Partition, ReaderError, Sample};
use bale_storage::StorageOptions;
use bale_tests::seaweed::Seaweed;
use bale_tests::{assert_success, describe};

use crate::common::{pack_quiet, random_tree, snapshot};
use crate::store::{bucket, bucket_and_prefix, open_at, options, remote_opts, with_options};

/// A packed dataset of `n` files in several shards, uploaded to `s3://bucket/ds`.
fn packed(
    s: &Seaweed,
    tag: &str,
    n: usize,
    extra: &[&str],
) -> (tempfile::TempDir, PathBuf, String) {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("tree");
    random_tree(&tree, n);
    let ds = tmp.path().join("ds");
    let mut args = vec!["--shard-samples", "40"];
    args.extend_from_slice(extra);
    pack_quiet(&tree, &ds, &args);
    let b = bucket(s, tag);
    s.upload_dir(&ds, &b, "ds").unwrap();
    (tmp, ds, format!("s3://{b}/ds"))
}

/// A sample as (key, index, label, [(ext, bytes)]).
type Flat = (String, u64, Option<i64>, Vec<(String, Vec<u8>)>);

fn flat(s: &Sample) -> Flat {
    (
        s.key().to_owned(),
        s.index(),
        s.label(),
        s.fields()
            .map(|(e, b)| (e.to_owned(), b.to_vec()))
            .collect(),
    )
}

fn all(ds: &Dataset, plan: EpochPlan, part: Partition) -> Vec<Flat> {
    ds.iter(plan, part)
        .unwrap()
        .map(|s| flat(&s.unwrap()))
        .collect()
}

fn check_every_path(local: &Dataset, remote: &Dataset) {
    assert_eq!(remote.len(), local.len());
    assert_eq!(remote.manifest(), local.manifest());
    let n = local.len();
    for i in [0, 1, n / 2, n - 1] {
        assert_eq!(flat(&remote.get(i).unwrap()), flat(&local.get(i).unwrap()));
        let key = local.key(i).unwrap().to_owned();
        assert_eq!(
            flat(&remote.get_by_key(&key).unwrap()),
            flat(&local.get(i).unwrap())
        );
        let ext = local.members(i).unwrap().next().unwrap().ext.to_owned();
        assert_eq!(
            remote.read_member(i, &ext).unwrap(),
            local.read_member(i, &ext).unwrap()
        );
    }
    // A batch with neighbours (coalesced), far samples, repeats, out of order.
    let batch: Vec<u64> = vec![n - 1, 0, 1, 2, 3, n / 2, 2, n / 3, 5];
    let got: Vec<Flat> = remote.get_batch(&batch).unwrap().iter().map(flat).collect();
    let want: Vec<Flat> = local.get_batch(&batch).unwrap().iter().map(flat).collect();
    assert_eq!(got, want);
    for plan in [
        EpochPlan::sequential(),
        EpochPlan::shuffled(7, 1),
        EpochPlan::shard_shuffled(7, 1, 16),
    ] {
        for part in [Partition::ALL, Partition::new(1, 2).with_workers(1, 2)] {
            assert_eq!(
                all(remote, plan, part),
                all(local, plan, part),
                "{plan:?} {part:?}"
            );
        }
        // With an explicit prefetch budget too.
        let it = remote
            .iter(plan, Partition::ALL)
            .unwrap()
            .prefetch(2, 8, 1 << 20);
        let got: Vec<Flat> = it.map(|s| flat(&s.unwrap())).collect();
        assert_eq!(got, all(local, plan, Partition::ALL));
    }
}

#[test]
fn every_read_path_gives_the_local_datasets_bytes() {
    let s = Seaweed::shared();
    let (_tmp, ds, url) = packed(s, "paths", 200, &[]);
    let local = Dataset::open(&ds).unwrap();
    let remote = remote_opts(s).verify_on_read(true).open(&url).unwrap();
    assert!(remote.is_remote());
    check_every_path(&local, &remote);
    // Small requests and no coalescing: the same bytes.
    let small = remote_opts(s)
        .coalesce_gap(0)
        .max_requests(1)
        .read_chunk(1)
        .read_ahead(1)
        .open(&url)
        .unwrap();
    check_every_path(&local, &small);
}

#[test]
fn zstd_shards_read_the_same_from_a_bucket() {
    let s = Seaweed::shared();
    let (_tmp, ds, url) = packed(s, "zstd", 120, &["--compress", "zstd"]);
    let local = Dataset::open(&ds).unwrap();
    let remote = remote_opts(s).verify_on_read(true).open(&url).unwrap();
    check_every_path(&local, &remote);
}

#[test]
fn a_shard_replaced_at_the_same_size_before_its_first_read_is_an_error_not_other_bytes() {
    // The reader pins a shard object's version at its first read; before
    // it, only its size is checked. An object replaced in between by one of
    // the same size (here: the dataset's other shard, cut or padded to it)
    // must not be read with the index taken at the open.
    let s = Seaweed::shared();
    for (extra, ext) in [(&[][..], "tar"), (&["--compress", "zstd"][..], "tar.zst")] {
        let (tmp, ds, url) = packed(s, "replaced", 80, extra);
        let local = Dataset::open(&ds).unwrap();
        let open = || remote_opts(s).open(&url).unwrap();
        let (single, batch, epoch) = (open(), open(), open());
        let first = std::fs::read(ds.join(format!("shard-000000.{ext}"))).unwrap();
        let mut other = std::fs::read(ds.join(format!("shard-000001.{ext}"))).unwrap();
        other.resize(first.len(), 0);
        let f = tmp.path().join("other");
        std::fs::write(&f, &other).unwrap();
        let b = bucket_and_prefix(&url).0;
        s.put_file(&f, b, &format!("ds/shard-000000.{ext}"))
            .unwrap();

        let said = |r: Result<Sample, ReaderError>| match r {
            Ok(got) => panic!(
                "{ext}: sample {} read from the other object: {:?}",
                got.index(),
                flat(&got).0
            ),
            Err(e) => e,
        };
        let e = said(single.get(1));
        // A plain tar's record begins with a header where the other object
        // has a member's data; a .tar.zst's frame there does not decompress.
        if ext == "tar" {
            assert!(matches!(e, ReaderError::ShardReplaced { .. }), "{e}");
            assert!(e.to_string().contains("shard-000000.tar"), "{e}");
        }
        assert!(batch.get_batch(&[1, 2]).is_err(), "{ext}");
        // An epoch reads a run of samples in one request.
        let mut it = epoch.iter(EpochPlan::sequential(), Partition::ALL).unwrap();
        let e = said(it.next().unwrap());
        if ext == "tar" {
            assert!(matches!(e, ReaderError::ShardReplaced { .. }), "{e}");
        }
        // The other shard still reads as it was.
        let n = local.len();
        assert_eq!(
            flat(&single.get(n - 1).unwrap()),
            flat(&local.get(n - 1).unwrap())
        );
    }

    // The same layout under other names: the tree with its folders
    // renamed, packed alike (every member at the same offset, of the same
    // size). The names in the headers tell.
    let (tmp, ds, url) = packed(s, "renamed", 80, &[]);
    let remote = open_at(s, &url);
    let renamed = tmp.path().join("renamed");
    for class in 0..5 {
        let from = tmp.path().join("tree").join(format!("c{class}"));
        let to = renamed.join(format!("d{class}"));
        std::fs::create_dir_all(&to).unwrap();
        for f in std::fs::read_dir(&from).unwrap().flatten() {
            std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
        }
    }
    let other = tmp.path().join("other-ds");
    pack_quiet(&renamed, &other, &["--shard-samples", "40"]);
    let (a, b2) = (
        std::fs::read(ds.join("shard-000000.tar")).unwrap(),
        std::fs::read(other.join("shard-000000.tar")).unwrap(),
    );
    assert_eq!(a.len(), b2.len());
    assert_ne!(a, b2);
    let b = bucket_and_prefix(&url).0.to_owned();
    s.put_file(&other.join("shard-000000.tar"), &b, "ds/shard-000000.tar")
        .unwrap();
    for i in [0, 1, 39] {
        let e = remote.get(i).unwrap_err();
        assert!(matches!(e, ReaderError::ShardReplaced { .. }), "{i}: {e}");
    }

    // Tars indexed in place (no checksum of the whole shard to check a
    // cached copy by), read through the cache: the copy of a replaced
    // object is refused as it is filled in.
    let (tmp, ds, url) = packed(s, "replacedcache", 80, &[]);
    let b = bucket_and_prefix(&url).0.to_owned();
    let index = tmp.path().join("in-place");
    let mut args = with_options(s, &["index", "-q", "-o", index.to_str().unwrap()]);
    args.extend((0..2).map(|k| format!("{url}/shard-{k:06}.tar")));
    assert_success(&bale(&args));
    let cache = tmp.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let cached = remote_opts(s).cache(&cache, 1 << 30).open(&index).unwrap();
    let first = std::fs::read(ds.join("shard-000000.tar")).unwrap();
    let mut other = std::fs::read(ds.join("shard-000001.tar")).unwrap();
    other.resize(first.len(), 0);
    let f = tmp.path().join("other");
    std::fs::write(&f, &other).unwrap();
    s.put_file(&f, &b, "ds/shard-000000.tar").unwrap();
    let e = cached.get(1).unwrap_err();
    assert!(
        matches!(&e, ReaderError::ShardReplaced { path } if path.ends_with("shard-000000.tar")),
        "{e}"
    );
    // The other tar is filled into the cache, checked, and read from it.
    let local = Dataset::open(&ds).unwrap();
    let n = local.len();
    assert_eq!(
        flat(&cached.get(n - 1).unwrap()),
        flat(&local.get(n - 1).unwrap())
    );
    let files = walk_files(&cache);
    assert!(
        files
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "tar")),
        "{files:?}"
    );
}

#[test]
fn a_split_tar_replaced_at_the_same_size_is_refused_member_by_member() {
    // A tar indexed with --allow-split is read member by member (a
    // scattered index): each member's own header block comes along and is
    // checked, from the object and in a cached copy.
    let s = Seaweed::shared();
    let tmp = tempfile::tempdir().unwrap();
    let files = tmp.path().join("files");
    std::fs::create_dir_all(&files).unwrap();
    for (name, len) in [("a.txt", 5), ("b.txt", 5), ("a.bin", 3000), ("b.bin", 3000)] {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 31 + name.len() * 7) as u8).collect();
        std::fs::write(files.join(name), bytes).unwrap();
    }
    let tar = |out: &Path, order: &[&str]| {
        let o = Command::new("tar")
            .args(["--format=gnu", "-cf", out.to_str().unwrap(), "-C"])
            .arg(&files)
            .args(order)
            .output()
            .unwrap();
        assert_success(&o);
    };
    // `a` and `b` interleaved: split samples.
    let split = tmp.path().join("split.tar");
    tar(&split, &["a.txt", "b.txt", "a.bin", "b.bin"]);
    // The same members grouped: the same size, other offsets.
    let grouped = tmp.path().join("grouped.tar");
    tar(&grouped, &["a.txt", "a.bin", "b.txt", "b.bin"]);
    assert_eq!(
        std::fs::metadata(&split).unwrap().len(),
        std::fs::metadata(&grouped).unwrap().len()
    );
    let b = bucket(s, "splitreplaced");
    s.put_file(&split, &b, "ds/split.tar").unwrap();
    let index = tmp.path().join("index");
    let mut args = with_options(
        s,
        &[
            "index",
            "-q",
            "--allow-split",
            "-o",
            index.to_str().unwrap(),
        ],
    );
    args.push(format!("s3://{b}/ds/split.tar"));
    assert_success(&bale(&args));
    let cache = tmp.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let open = || remote_opts(s).open(&index).unwrap();
    let cached = || remote_opts(s).cache(&cache, 1 << 30).open(&index).unwrap();

    // As it was: both samples read whole, from the object and the cache.
    let fields = |s: &Sample| flat(s).3;
    let want = |k: &str| {
        vec![
            (
                "bin".to_owned(),
                std::fs::read(files.join(format!("{k}.bin"))).unwrap(),
            ),
            (
                "txt".to_owned(),
                std::fs::read(files.join(format!("{k}.txt"))).unwrap(),
            ),
        ]
    };
    let (ds, before) = (open(), open());
    for (i, k) in [(0u64, "a"), (1, "b")] {
        assert_eq!(before.get(i).unwrap().key(), k);
        let mut got = fields(&before.get(i).unwrap());
        got.sort();
        assert_eq!(got, want(k), "{k}");
    }
    let mut got = fields(&before.get_batch(&[1]).unwrap()[0]);
    got.sort();
    assert_eq!(got, want("b"));

    s.put_file(&grouped, &b, "ds/split.tar").unwrap();
    for i in 0..2 {
        let e = ds.get(i).unwrap_err();
        assert!(
            matches!(&e, ReaderError::ShardReplaced { path } if path.ends_with("split.tar")),
            "{i}: {e}"
        );
        assert!(ds.get_batch(&[i]).is_err(), "{i}");
    }
    let e = cached().get(0).unwrap_err();
    assert!(matches!(e, ReaderError::ShardReplaced { .. }), "{e}");
    assert!(
        !walk_files(&cache)
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "tar")),
        "a refused copy stays out of the cache"
    );

    // Put back, the cache fills and reads.
    s.put_file(&split, &b, "ds/split.tar").unwrap();
    let c = cached();
    let mut got = fields(&c.get(1).unwrap());
    got.sort();
    assert_eq!(got, want("b"));
}

/// The files under `dir`, recursively (relative paths).
fn walk_files(dir: &Path) -> Vec<PathBuf> {
    snapshot(dir)
        .into_keys()
        .filter(|k| !k.ends_with('/'))
        .map(PathBuf::from)
        .collect()
}

#[test]
fn the_cache_fills_checked_copies_and_reads_them() {
    let s = Seaweed::shared();
    let (tmp, ds, url) = packed(s, "cache", 120, &[]);
    let local = Dataset::open(&ds).unwrap();
    let cache = tmp.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::write(cache.join("keep.txt"), b"not the cache's").unwrap();
    let largest = local
        .manifest()
        .shards
        .iter()
        .map(|e| e.bytes)
        .max()
        .unwrap();
    // Too small for one shard: refused at open, naming the figures.
    let err = remote_opts(s)
        .cache(&cache, largest - 1)
        .open(&url)
        .unwrap_err()
        .to_string();
    assert!(err.contains("largest shard"), "{err}");
    // Room for two shards of three: every epoch still reads right, the
    // cache stays within its limit and never deletes the user's file.
    let limit = 2 * largest;
    for _ in 0..2 {
        let remote = remote_opts(s).cache(&cache, limit).open(&url).unwrap();
        check_every_path(&local, &remote);
    }
    let cached: u64 = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("bc-"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(
        cached > 0 && cached <= limit,
        "{cached} bytes cached, limit {limit}"
    );
    assert_eq!(
        std::fs::read(cache.join("keep.txt")).unwrap(),
        b"not the cache's"
    );
}

/// Flips one byte of member data of the first sample of shard 0 and uploads
/// the shard over the original; returns the sample's key.
fn flip_one_byte(s: &Seaweed, ds: &Path, url: &str) -> String {
    let local = Dataset::open(ds).unwrap();
    let key = local.key(0).unwrap().to_owned();
    let entry = &local.manifest().shards[0];
    let shard = ds.join(&entry.file);
    let mut bytes = std::fs::read(&shard).unwrap();
    // The first member's data starts after its 512-byte header.
    bytes[512 + 10] ^= 0x40;
    let damaged = ds.parent().unwrap().join("damaged.tar");
    std::fs::write(&damaged, &bytes).unwrap();
    let (bucket, prefix) = bucket_and_prefix(url);
    s.put_file(&damaged, bucket, &format!("{prefix}/{}", entry.file))
        .unwrap();
    key
}

#[test]
fn a_flipped_byte_is_named_by_verify_on_read_and_by_verify() {
    let s = Seaweed::shared();
    let (_tmp, ds, url) = packed(s, "flip", 80, &[]);
    let key = flip_one_byte(s, &ds, &url);
    let remote = remote_opts(s).verify_on_read(true).open(&url).unwrap();
    let err = remote.get(0).unwrap_err().to_string();
    assert!(err.contains(&key) && err.contains("checksum"), "{err}");
    let errs: Vec<String> = remote
        .iter(EpochPlan::sequential(), Partition::ALL)
        .unwrap()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].contains(&key), "{errs:?}");
    let o = bale(&with_options(s, &["verify", &url]));
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&key) && out.contains("checksum"),
        "{}",
        describe(&o)
    );
}

#[test]
fn missing_objects_wrong_credentials_and_bad_urls_are_clear_errors() {
    let s = Seaweed::shared();
    let (_tmp, _ds, url) = packed(s, "faults", 80, &[]);
    let (bucket, _) = bucket_and_prefix(&url);
    // No manifest under the prefix: not a dataset.
    let err = remote_opts(s)
        .open(format!("s3://{bucket}/nothing-here"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a complete bale dataset"), "{err}");
    // No such bucket.
    let err = remote_opts(s)
        .open("s3://bale-no-such-bucket-x/ds")
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not exist"), "{err}");
    // Wrong credentials: an unknown key, and the right key with a wrong secret.
    for (k, v) in [
        ("aws_access_key_id", "bale-wrong-key"),
        ("aws_secret_access_key", "wrong"),
    ] {
        let mut o = options(s);
        o.set(k, v);
        let err = Dataset::options()
            .storage_options(o)
            .open(&url)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("refused the credentials"), "{k}: {err}");
    }
    // A missing shard: open succeeds (indexes are there), the read names the object.
    s.delete(bucket, "ds/shard-000001.tar").unwrap();
    let remote = remote_opts(s).open(&url).unwrap();
    let i = remote.shard_sizes()[0];
    let err = remote.get(i).unwrap_err().to_string();
    assert!(
        err.contains("shard-000001.tar") && err.contains("does not exist"),
        "{err}"
    );
    // A missing index: open fails naming it.
    s.delete(bucket, "ds/shard-000000.idx").unwrap();
    let err = remote_opts(s).open(&url).unwrap_err().to_string();
    assert!(
        err.contains("shard-000000.idx") && err.contains("does not exist"),
        "{err}"
    );
    // URLs with a fragment, an unknown scheme.
    let err = remote_opts(s)
        .open(format!("{url}#x"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("%23"), "{err}");
    let err = Dataset::open("ftp://host/ds").unwrap_err().to_string();
    assert!(err.contains("unsupported URL scheme"), "{err}");
}

#[test]
fn garbage_manifests_and_indexes_of_the_wrong_size_are_refused_cheaply() {
    let s = Seaweed::shared();
    let (tmp, ds, url) = packed(s, "garbage", 80, &[]);
    let (bucket, _) = bucket_and_prefix(&url);
    // An index object of the wrong size.
    let idx = tmp.path().join("short.idx");
    let bytes = std::fs::read(ds.join("shard-000000.idx")).unwrap();
    std::fs::write(&idx, &bytes[..bytes.len() - 9]).unwrap();
    s.put_file(&idx, bucket, "ds/shard-000000.idx").unwrap();
    let err = remote_opts(s).open(&url).unwrap_err().to_string();
    assert!(err.contains("shard-000000.idx"), "{err}");
    // A manifest that is not JSON; then one larger than the cap (65 MiB of zeros).
    let m = tmp.path().join("bad.json");
    std::fs::write(&m, b"\x00\x01garbage").unwrap();
    s.put_file(&m, bucket, "ds/bale.json").unwrap();
    let err = remote_opts(s).open(&url).unwrap_err().to_string();
    assert!(err.contains("bale.json"), "{err}");
    let big = std::fs::File::create(&m).unwrap();
    big.set_len(65 << 20).unwrap();
    s.put_file(&m, bucket, "ds/bale.json").unwrap();
    let t = Instant::now();
    let err = remote_opts(s).open(&url).unwrap_err().to_string();
    assert!(
        err.contains("more than the") && err.contains("manifest"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[test]
fn an_endpoint_that_refuses_connections_fails_within_the_stated_time() {
    // A port with nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut o = StorageOptions::new();
    o.set("aws_endpoint_url", &format!("http://127.0.0.1:{port}"))
        .set("allow_http", "true")
        .set("aws_access_key_id", "k")
        .set("aws_secret_access_key", "s")
        .set("aws_region", "us-east-1")
        .set("max_retries", "2")
        .set("retry_timeout", "3s");
    let t = Instant::now();
    let err = Dataset::options()
        .storage_options(o)
        .open("s3://bucket/ds")
        .unwrap_err()
        .to_string();
    assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
    assert!(
        err.contains("bale.json") && err.contains(&port.to_string()),
        "{err}"
    );
}

fn bale(args: &[String]) -> std::process::Output {
    Command::new(bale_tests::bale_bin())
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn read_commands_take_urls() {
    let s = Seaweed::shared();
    let (tmp, ds, url) = packed(s, "cli", 120, &[]);
    let o = bale(&with_options(s, &["verify", &url]));
    assert_success(&o);
    let o = bale(&with_options(s, &["verify", "--quick", &url]));
    assert_success(&o);
    for cmd in [
        vec!["stat"],
        vec!["ls"],
        vec!["ls", "--json"],
        vec!["stat", "--json"],
    ] {
        let mut a = cmd.clone();
        a.push(&url);
        let remote = bale(&with_options(s, &a));
        assert_success(&remote);
        let mut a = cmd.clone();
        let local_path = ds.display().to_string();
        a.push(&local_path);
        let local = bale(&with_options(s, &a));
        let shown = |o: &std::process::Output| {
            String::from_utf8_lossy(&o.stdout)
                .replace(&url, "DS")
                .replace(&local_path, "DS")
        };
        assert_eq!(shown(&remote), shown(&local), "{cmd:?}");
    }
    let local = Dataset::open(&ds).unwrap();
    let key = local.key(3).unwrap().to_owned();
    let out = tmp.path().join("got");
    let o = bale(&with_options(
        s,
        &["get", &url, &key, "-o", &out.display().to_string()],
    ));
    assert_success(&o);
    let s3 = local.get(3).unwrap();
    for (ext, bytes) in s3.fields() {
        let f = bale_format::files::member_path(&key, ext).unwrap();
        assert_eq!(std::fs::read(out.join(f)).unwrap(), bytes);
    }
    let o = bale(&with_options(
        s,
        &["bench", &url, "--json", "-q", "--budget", "0.5"],
    ));
    assert_success(&o);
    // Neither pass reads a page cache here: the report says where the
    // bytes came from, and the diagnosis names the store, not RAM or a disk.
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let src = &report["sources"][0];
    assert_eq!(src["object_storage"], true, "{src}");
    assert_eq!(src["ram_backed"], false, "{src}");
    assert_eq!(src["diagnosis"]["bound"], "object_storage", "{src}");
    let remedy = src["diagnosis"]["remedy"].as_str().unwrap();
    assert!(remedy.starts_with("bale stage URL"), "{remedy}");
    let o = bale(&with_options(
        s,
        &["bench", &url, "--budget", "0.2", "--threads", "1"],
    ));
    assert_success(&o);
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(
        shown.contains("in object storage: every pass reads from the store")
            && !shown.contains("RAM-backed"),
        "{shown}"
    );
}

#[test]
fn stage_from_a_bucket_is_checked_atomic_and_resumes_after_the_server_dies() {
    // A server of this test's own: it is killed and restarted.
    let mut server = Seaweed::start().unwrap();
    let b = bucket(&server, "stage");
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("tree");
    random_tree(&tree, 400);
    let ds = tmp.path().join("ds");
    pack_quiet(&tree, &ds, &["--shard-samples", "20"]);
    server.upload_dir(&ds, &b, "ds").unwrap();
    let url = format!("s3://{b}/ds");
    let to = tmp.path().join("staged");
    let args = with_options(
        &server,
        &[
            "stage",
            &url,
            "--to",
            &to.display().to_string(),
            "-j",
            "1",
            "--assume-free",
            "1000000000000",
        ],
    );
    // Kill the server once the first shards are staged.
    let mut child = Command::new(bale_tests::bale_bin())
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let staged = std::fs::read_dir(&to)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".tar"))
                    .count()
            })
            .unwrap_or(0);
        if staged >= 2 || Instant::now() > deadline {
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill();
    let o = child.wait_with_output().unwrap();
    assert!(
        !o.status.success(),
        "stage finished before the server died: {}",
        describe(&o)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&b) && err.contains("did not finish"),
        "{}",
        describe(&o)
    );
    assert!(!to.join("bale.json").exists());
    // Restarted, the rerun resumes: the shards already staged are kept.
    server.restart().unwrap();
    for f in ["bale.json", "shard-000019.tar"] {
        server.wait_object(&b, &format!("ds/{f}")).unwrap();
    }
    let o = bale(&with_options(
        &server,
        &[
            "stage",
            &url,
            "--to",
            &to.display().to_string(),
            "--assume-free",
            "1000000000000",
        ],
    ));
    assert_success(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("resum"), "{}", describe(&o));
    let local = Dataset::open(&ds).unwrap();
    let staged = Dataset::open(&to).unwrap();
    assert_eq!(
        all(&staged, EpochPlan::sequential(), Partition::ALL),
        all(&local, EpochPlan::sequential(), Partition::ALL)
    );
    let o = bale(&["verify".into(), to.display().to_string()]);
    assert_success(&o);
}

#[test]
fn index_reads_the_headers_of_tars_in_a_bucket() {
    let s = Seaweed::shared();
    let b = bucket(s, "index");
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("tree");
    random_tree(&tree, 90);
    // WebDataset tars made by GNU tar: three of them.
    let wds = tmp.path().join("wds");
    std::fs::create_dir_all(&wds).unwrap();
    for (t, class) in ["c0", "c1", "c2"].iter().enumerate() {
        let tar = wds.join(format!("train-{t:06}.tar"));
        let st = Command::new(bale_tests::gnu_tar())
            .arg("cf")
            .arg(&tar)
            .arg("-C")
            .arg(&tree)
            .arg(class)
            .status()
            .unwrap();
        assert!(st.success());
    }
    s.upload_dir(&wds, &b, "wds").unwrap();
    let out_remote = tmp.path().join("from-bucket");
    let o = bale(&with_options(
        s,
        &[
            "index",
            &format!("s3://{b}/wds/train-{{000000..000002}}.tar"),
            "-o",
            &out_remote.display().to_string(),
            "--checksum",
        ],
    ));
    assert_success(&o);
    let out_local = tmp.path().join("from-disk");
    let o = bale(&[
        "index".into(),
        format!("{}/train-{{000000..000002}}.tar", wds.display()),
        "-o".into(),
        out_local.display().to_string(),
        "--checksum".into(),
    ]);
    assert_success(&o);
    // The indexes are the same; the dataset reads the tars in the bucket.
    for t in 0..3 {
        let name = format!("train-{t:06}.idx");
        assert_eq!(
            std::fs::read(out_remote.join(&name)).unwrap(),
            std::fs::read(out_local.join(&name)).unwrap(),
            "{name}"
        );
    }
    let remote = remote_opts(s)
        .verify_on_read(true)
        .open(&out_remote)
        .unwrap();
    let local = Dataset::open(&out_local).unwrap();
    assert_eq!(
        all(&remote, EpochPlan::sequential(), Partition::ALL),
        all(&local, EpochPlan::sequential(), Partition::ALL)
    );
    let o = bale(&with_options(
        s,
        &["verify", &out_remote.display().to_string()],
    ));
    assert_success(&o);
}
