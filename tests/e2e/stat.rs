//! `bale stat` on a dataset and on a plain file tree (issue 6): the JSON
//! schema is pinned field by field, and the human output's main lines.

use std::collections::BTreeSet;

use bale_format::Compression;
use serde_json::{Value, json};

use crate::common::shown;
use crate::verify::{PNG, bale, caption, make_dataset, text};

fn stat_json(path: &std::path::Path) -> Value {
    let out = bale(&["stat", "--json", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

#[test]
fn dataset_json_schema_and_values() {
    for compression in [Compression::None, Compression::Zstd] {
        let tmp = tempfile::tempdir().unwrap();
        let m = make_dataset(tmp.path(), compression, false);
        let v = stat_json(tmp.path());
        assert_eq!(
            keys(&v),
            BTreeSet::from([
                "kind",
                "path",
                "format_version",
                "samples",
                "shards",
                "members",
                "bytes",
                "tar_bytes",
                "index_bytes",
                "compression",
                "shard_table",
                "extensions",
                "sample_bytes",
                "labels",
                "skipped",
                "created_by",
            ])
        );
        let index_bytes: u64 = m
            .shards
            .iter()
            .map(|s| std::fs::metadata(tmp.path().join(&s.index)).unwrap().len())
            .sum();
        let z = compression == Compression::Zstd;
        assert_eq!(v["kind"], "dataset");
        assert_eq!(v["format_version"], "1.0");
        assert_eq!(
            (
                v["samples"].clone(),
                v["shards"].clone(),
                v["members"].clone()
            ),
            (json!(12), json!(3), json!(36))
        );
        assert_eq!(v["bytes"], m.bytes);
        assert_eq!(
            v["tar_bytes"],
            m.shards.iter().map(|s| s.tar_bytes).sum::<u64>()
        );
        assert_eq!(v["index_bytes"], index_bytes);
        assert_eq!(v["compression"], if z { "zstd" } else { "none" });
        assert_eq!(v["skipped"], 0);
        assert_eq!(
            v["created_by"],
            json!({"tool": "bale", "version": "test", "command": "e2e-fixture", "options": {"shard_samples": 4}})
        );
        let row = &v["shard_table"][2];
        assert_eq!(
            keys(row),
            BTreeSet::from([
                "file",
                "index",
                "samples",
                "members",
                "bytes",
                "tar_bytes",
                "compression"
            ])
        );
        assert_eq!(row["file"], m.shards[2].file);
        assert_eq!(row["bytes"], m.shards[2].bytes);
        assert_eq!(row["compression"], if z { "zstd" } else { "none" });
        let txt_bytes: usize = (0..12).map(|i| caption(i).len()).sum();
        assert_eq!(
            v["extensions"],
            json!([
                {"ext": "cls", "count": 12, "bytes": 12},
                {"ext": "png", "count": 12, "bytes": 12 * PNG.len()},
                {"ext": "txt", "count": 12, "bytes": txt_bytes},
            ])
        );
        // Payload bytes per sample: png + 1 byte of cls + caption, all below 512 (exact).
        let mut sizes: Vec<usize> = (0..12).map(|i| PNG.len() + 1 + caption(i).len()).collect();
        sizes.sort_unstable();
        let rank = |p: usize| sizes[(12 * p).div_ceil(100) - 1];
        assert_eq!(
            v["sample_bytes"],
            json!({"count": 12, "mean": sizes.iter().sum::<usize>() / 12, "p50": rank(50), "p90": rank(90), "p99": rank(99), "max": sizes[11]})
        );
        assert_eq!(
            v["labels"],
            json!({
                "read": if z { "sequential" } else { "positioned" },
                "classes": [{"label": 0, "name": "cat", "count": 6}, {"label": 1, "name": "dog", "count": 6}],
                "unlabeled": 0,
                "unparsed": 0,
            })
        );
    }
}

#[test]
fn dataset_human_output() {
    let tmp = tempfile::tempdir().unwrap();
    make_dataset(tmp.path(), Compression::Zstd, false);
    let out = bale(&["stat", tmp.path().to_str().unwrap()]);
    assert!(out.status.success());
    // The whole report: the maker, the counts, the shard table, the label
    // histogram and the size percentiles.
    insta::assert_snapshot!(shown(&out, &[(tmp.path().to_str().unwrap(), "[DS]")]));
    // --no-labels skips the histogram.
    let out = bale(&[
        "stat",
        "--no-labels",
        "--json",
        tmp.path().to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["labels"], Value::Null);
}

#[test]
fn plain_tree_before_packing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    for (rel, size) in [
        ("train/cat/0001.jpg", 1000usize),
        ("train/cat/0001.json", 20),
        ("train/cat/0002.jpg", 3000),
        ("train/dog/0003.jpg", 600),
        ("train/dog/0003.seg.png", 50),
        ("README", 10),
        ("train/.DS_Store", 4),
    ] {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, vec![b'x'; size]).unwrap();
    }
    std::os::unix::fs::symlink(root.join("README"), root.join("link.txt")).unwrap();
    let v = stat_json(root);
    assert_eq!(
        keys(&v),
        BTreeSet::from([
            "kind",
            "path",
            "files",
            "bytes",
            "samples",
            "extensions",
            "file_bytes",
            "no_extension",
            "not_regular"
        ])
    );
    assert_eq!(v["kind"], "tree");
    assert_eq!(v["files"], 7);
    assert_eq!(v["bytes"], 4684);
    assert_eq!(v["samples"], 3);
    assert_eq!(v["no_extension"], 2);
    assert_eq!(v["not_regular"], 1);
    assert_eq!(
        v["extensions"],
        json!([
            {"ext": "jpg", "count": 3, "bytes": 4600},
            {"ext": "json", "count": 1, "bytes": 20},
            {"ext": "seg.png", "count": 1, "bytes": 50},
        ])
    );
    assert_eq!(v["file_bytes"]["max"], 3000);
    assert_eq!(v["file_bytes"]["p50"], 50);
    let out = bale(&["stat", root.to_str().unwrap()]);
    insta::assert_snapshot!(shown(&out, &[(root.to_str().unwrap(), "[TREE]")]));
}
