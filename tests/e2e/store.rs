//! Fixtures the object-storage modules share: a bucket of each test's own on
//! the shared SeaweedFS server (`bale_tests::seaweed`), the storage options
//! that reach it, `bale` and the Rust reader run with them, and what a
//! prefix holds.

use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};

use bale_reader::{Dataset, DatasetOptions, EpochPlan, Partition};
use bale_storage::{StorageOptions, Store};
use bale_tests::seaweed::Seaweed;

use crate::common::snapshot;

/// A bucket of its own for each test.
pub(crate) fn bucket(s: &Seaweed, tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "bale-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    s.create_bucket(&name).unwrap();
    name
}

/// Storage options that reach the server `s`.
pub(crate) fn options(s: &Seaweed) -> StorageOptions {
    let mut o = StorageOptions::new();
    for (k, v) in s.options() {
        o.set(&k, &v);
    }
    o
}

/// Dataset options that reach the server `s`.
pub(crate) fn remote_opts(s: &Seaweed) -> DatasetOptions {
    Dataset::options().storage_options(options(s))
}

/// The dataset at `url` (a URL, or a local index naming its shards by URL),
/// opened through the server `s`.
pub(crate) fn open_at(s: &Seaweed, url: impl AsRef<Path>) -> Dataset {
    remote_opts(s).open(url).unwrap()
}

/// `ARGS` followed by the `--storage-option`s that reach the server `s`.
pub(crate) fn with_options(s: &Seaweed, args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    v.extend(s.cli_options());
    v
}

/// `s3://bucket/prefix` split into its bucket and prefix.
pub(crate) fn bucket_and_prefix(url: &str) -> (&str, &str) {
    url.strip_prefix("s3://")
        .and_then(|rest| rest.split_once('/'))
        .unwrap_or_else(|| panic!("{url} is not s3://bucket/prefix"))
}

/// Every object under `s3://bucket/prefix/` (relative names, sorted) and
/// the keys of the open multipart uploads there.
pub(crate) fn listing(s: &Seaweed, bucket: &str, prefix: &str) -> (Vec<String>, Vec<String>) {
    let out = s
        .boto(
            "p = sys.argv[2] + '/'\n\
             keys = []\n\
             for page in s3.get_paginator('list_objects_v2').paginate(Bucket=sys.argv[1], Prefix=p):\n\
             \x20   keys += [o['Key'][len(p):] for o in page.get('Contents', [])]\n\
             ups = [u['Key'][len(p):] for u in s3.list_multipart_uploads(Bucket=sys.argv[1], Prefix=p).get('Uploads', [])]\n\
             print('|'.join(sorted(keys)))\n\
             print('|'.join(sorted(ups)))\n",
            &[bucket, prefix],
        )
        .unwrap();
    let mut lines = out.lines();
    let split = |l: Option<&str>| -> Vec<String> {
        l.unwrap_or("")
            .split('|')
            .filter(|x| !x.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let objects = split(lines.next());
    let uploads = split(lines.next());
    (objects, uploads)
}

/// The objects of [`listing`] alone.
pub(crate) fn objects(s: &Seaweed, bucket: &str, prefix: &str) -> Vec<String> {
    listing(s, bucket, prefix).0
}

/// Whether `s3://bucket/prefix/name` is among [`objects`].
pub(crate) fn holds(s: &Seaweed, bucket: &str, prefix: &str, name: &str) -> bool {
    objects(s, bucket, prefix).iter().any(|o| o == name)
}

/// The whole object `name` under `url`.
pub(crate) fn object(s: &Seaweed, url: &str, name: &str) -> Vec<u8> {
    object_in(&Store::open(url, &options(s)).unwrap(), name)
}

/// The whole object `name` of `store`.
pub(crate) fn object_in(store: &Store, name: &str) -> Vec<u8> {
    let o = store.object(name).unwrap();
    let len = o.head().unwrap();
    o.get_range(0..len).unwrap().to_vec()
}

/// The lock object under `url`, parsed.
pub(crate) fn lock_at(s: &Seaweed, url: &str) -> serde_json::Value {
    serde_json::from_slice(&object(s, url, ".bale-tmp-lock")).unwrap()
}

/// Writes `bytes` to `s3://bucket/key` (by way of a file in `scratch`).
pub(crate) fn put(s: &Seaweed, scratch: &Path, bucket: &str, key: &str, bytes: &[u8]) {
    let file = scratch.join(format!("put-{}", key.replace('/', "_")));
    std::fs::write(&file, bytes).unwrap();
    s.put_file(&file, bucket, key).unwrap();
    std::fs::remove_file(&file).unwrap();
}

/// The objects under `url` equal the files of the local dataset `dir`, byte
/// for byte, and no upload is open there.
pub(crate) fn assert_same_objects(s: &Seaweed, url: &str, dir: &Path) {
    let store = Store::open(url, &options(s)).unwrap();
    let (bucket, prefix) = bucket_and_prefix(url);
    let (objects, uploads) = listing(s, bucket, prefix);
    let local = snapshot(dir);
    let names: Vec<String> = local.keys().cloned().collect();
    assert_eq!(objects, names, "the objects are the local dataset's files");
    assert!(uploads.is_empty(), "open uploads: {uploads:?}");
    for (name, bytes) in &local {
        assert!(
            object_in(&store, name) == *bytes,
            "{url}/{name} differs from {}",
            dir.join(name).display()
        );
    }
}

/// Each tar of `dir` has an object of the same bytes under `url`.
pub(crate) fn assert_same_tars(s: &Seaweed, url: &str, dir: &Path) {
    let store = Store::open(url, &options(s)).unwrap();
    for (name, bytes) in snapshot(dir)
        .into_iter()
        .filter(|(n, _)| n.ends_with(".tar"))
    {
        assert!(object_in(&store, &name) == bytes, "{url}/{name}");
    }
}

/// A sample as (key, [(ext, bytes)]).
pub(crate) type Flat = (String, Vec<(String, Vec<u8>)>);

/// Every sample of `ds`, in order.
pub(crate) fn samples_of(ds: &Dataset) -> Vec<Flat> {
    ds.iter(EpochPlan::sequential(), Partition::ALL)
        .unwrap()
        .map(|s| {
            let s = s.unwrap();
            (
                s.key().to_owned(),
                s.fields()
                    .map(|(e, b)| (e.to_owned(), b.to_vec()))
                    .collect(),
            )
        })
        .collect()
}

/// Every sample of the local dataset at `dir`, in order.
pub(crate) fn local_samples(dir: &Path) -> Vec<Flat> {
    samples_of(&Dataset::open(dir).unwrap())
}

/// Asserts that `o` exited with `code` and that its stderr holds each of `says`.
pub(crate) fn failed(o: &Output, code: i32, says: &[&str]) {
    assert_eq!(o.status.code(), Some(code), "{}", bale_tests::describe(o));
    let err = String::from_utf8_lossy(&o.stderr);
    for w in says {
        assert!(err.contains(w), "{w:?} not in: {}", bale_tests::describe(o));
    }
}
