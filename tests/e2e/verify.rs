//! `bale verify` on clean and damaged datasets (issue 6): each damage is
//! caught, named on stdout and in `--json`, with exit status 1.
//!
//! Also holds the dataset fixture the stat, ls/get and stage tests share.

use std::path::Path;
use std::process::{Command, Output};

use bale_format::{Compression, CreatedBy, Manifest, Member, ShardFileWriter, ShardIndex};
use serde_json::Value;

/// A valid 1x1 grey PNG.
pub(crate) const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x00, 0x00, 0x00, 0x3a, 0x7e, 0x9b,
    0x55, 0x00, 0x00, 0x00, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x68, 0x00, 0x00, 0x00,
    0x82, 0x00, 0x81, 0x77, 0xcd, 0x72, 0xb6, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

/// The caption of sample `i`: sizes differ from sample to sample.
pub(crate) fn caption(i: usize) -> String {
    format!("a photo, number {i}. ").repeat(1 + i % 5)
}

/// Writes a dataset of 3 shards x 4 samples into `dir`: keys `cat/0000`,
/// `dog/0001`, ... (even samples are cats, label 0), members `png` (a valid
/// image, except sample 5's when `bad_png`), `cls` and `txt`.
pub(crate) fn make_dataset(dir: &Path, compression: Compression, bad_png: bool) -> Manifest {
    std::fs::create_dir_all(dir).unwrap();
    let mut shards = Vec::new();
    for s in 0..3usize {
        let name = bale_format::shard_file_name("shard", s as u64, compression);
        let mut w = ShardFileWriter::create(dir, &name, compression, 0).unwrap();
        for j in 0..4usize {
            let i = s * 4 + j;
            let class = i % 2;
            let key = format!("{}/{i:04}", ["cat", "dog"][class]);
            let png: &[u8] = if bad_png && i == 5 {
                b"\x89PNG but not really"
            } else {
                PNG
            };
            let cls = class.to_string();
            let txt = caption(i);
            w.writer()
                .write_sample(
                    &key,
                    &[
                        Member {
                            ext: "png",
                            data: png,
                        },
                        Member {
                            ext: "cls",
                            data: cls.as_bytes(),
                        },
                        Member {
                            ext: "txt",
                            data: txt.as_bytes(),
                        },
                    ],
                )
                .unwrap();
        }
        shards.push(w.finish().unwrap());
    }
    let created_by = CreatedBy {
        tool: "bale".into(),
        version: "test".into(),
        command: "e2e-fixture".into(),
        options: serde_json::json!({ "shard_samples": 4 }),
    };
    let m = Manifest::new(shards, Some(vec!["cat".into(), "dog".into()]), created_by);
    m.write(dir).unwrap();
    m
}

/// Runs `bale ARGS`.
pub(crate) fn bale(args: &[&str]) -> Output {
    Command::new(bale_tests::bale_bin())
        .args(args)
        .output()
        .expect("cannot run bale")
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn verify(dir: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["verify", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = bale(&args);
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

fn verify_json(dir: &Path, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let (code, out, err) = verify(dir, &args);
    let v: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}\n{err}"));
    (code, v)
}

fn flip(path: &Path, at: u64, mask: u8) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= mask;
    std::fs::write(path, b).unwrap();
}

#[test]
fn clean_dataset_passes_both_levels() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    for c in [Compression::None, Compression::Zstd] {
        make_dataset(&ds, c, false);
        let (code, out, err) = verify(&ds, &[]);
        assert_eq!((code, out.as_str()), (0, ""), "{err}");
        assert!(
            err.contains(": ok (full check of 3 shards, 12 samples"),
            "{err}"
        );
        let (code, v) = verify_json(&ds, &["--quick"]);
        assert_eq!(code, 0);
        assert_eq!(v["ok"], true);
        assert_eq!(v["level"], "quick");
        assert_eq!(v["shards_checked"], 3);
        assert_eq!(v["samples_checked"], 12);
        assert_eq!(v["members_checked"], 36);
        assert_eq!(v["problems"], serde_json::json!([]));
        std::fs::remove_dir_all(&ds).unwrap();
    }
}

/// Damages a fresh copy of the fixture with `damage`, then checks that verify
/// (at the given level) exits 1 and names the problem: the first stdout line
/// that starts with `line_start` contains every string of `contains`.
fn caught(
    level: &[&str],
    damage: impl Fn(&Path, &Manifest),
    line_start: &str,
    contains: &[&str],
) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    let m = make_dataset(&ds, Compression::None, false);
    damage(&ds, &m);
    let (code, out, err) = verify(&ds, level);
    assert_eq!(
        code, 1,
        "verify {level:?} should fail\nstdout: {out}\nstderr: {err}"
    );
    let line = out
        .lines()
        .find(|l| l.starts_with(line_start))
        .unwrap_or_else(|| panic!("no line starting with {line_start:?} in:\n{out}"));
    for c in contains {
        assert!(line.contains(c), "{line:?} lacks {c:?}");
    }
    assert!(err.contains(" problem"), "{err}");
    let (code, v) = verify_json(&ds, level);
    assert_eq!(code, 1);
    assert_eq!(v["ok"], false);
    assert!(v["errors"].as_u64().unwrap() >= 1);
    v
}

#[test]
fn truncated_shard_is_caught() {
    for level in [&[][..], &["--quick"][..]] {
        caught(
            level,
            |ds, m| {
                let p = ds.join(&m.shards[1].file);
                let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                f.set_len(m.shards[1].bytes - 1000).unwrap();
            },
            "shard-000001.tar: shard is truncated",
            &["manifest records"],
        );
    }
}

#[test]
fn flipped_bit_in_a_member_is_caught_by_the_full_check() {
    let key = "dog/0007";
    let damage = |ds: &Path, m: &Manifest| {
        let idx = ShardIndex::open(ds.join(&m.shards[1].index)).unwrap();
        let i = idx.find(key).unwrap();
        let txt = idx.members(i).find(|m| m.ext == "txt").unwrap();
        flip(&ds.join(&m.shards[1].file), txt.offset + 5, 0x20);
    };
    let v = caught(
        &[],
        damage,
        "shard-000001.tar: key \"dog/0007\" member \"txt\" at offset ",
        &["checksum mismatch"],
    );
    let p = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["key"] == key)
        .expect("a problem naming the key");
    assert_eq!(p["shard"], "shard-000001.tar");
    assert_eq!(p["member"], "txt");
    assert_eq!(p["severity"], "error");
    assert!(p["offset"].as_u64().is_some());
    // The quick check reads headers only: documented not to see it.
    let tmp = tempfile::tempdir().unwrap();
    let m = make_dataset(tmp.path(), Compression::None, false);
    damage(tmp.path(), &m);
    assert_eq!(verify(tmp.path(), &["--quick"]).0, 0);
}

#[test]
fn flipped_bit_in_a_member_of_a_zstd_shard_is_caught() {
    let tmp = tempfile::tempdir().unwrap();
    let m = make_dataset(tmp.path(), Compression::Zstd, false);
    let idx = ShardIndex::open(tmp.path().join(&m.shards[2].index)).unwrap();
    let e = idx.sample(1);
    flip(
        &tmp.path().join(&m.shards[2].file),
        e.file_offset + e.file_len / 2,
        0x01,
    );
    let (code, out, _) = verify(tmp.path(), &[]);
    assert_eq!(code, 1);
    assert!(
        out.lines().any(|l| l.starts_with("shard-000002.tar.zst: ")),
        "{out}"
    );
}

#[test]
fn flipped_bit_in_an_index_is_caught() {
    for level in [&[][..], &["--quick"][..]] {
        caught(
            level,
            |ds, m| flip(&ds.join(&m.shards[2].index), 100, 0x04),
            "shard-000002.tar: index shard-000002.idx is damaged",
            &["checksum mismatch"],
        );
    }
}

#[test]
fn missing_shard_is_caught() {
    caught(
        &[],
        |ds, m| std::fs::remove_file(ds.join(&m.shards[0].file)).unwrap(),
        "shard-000000.tar: shard file is missing",
        &[],
    );
}

#[test]
fn extra_unknown_shard_is_caught() {
    let v = caught(
        &["--quick"],
        |ds, m| {
            std::fs::copy(ds.join(&m.shards[0].file), ds.join("shard-000003.tar")).unwrap();
        },
        "shard-000003.tar: unknown shard",
        &["not listed in the manifest"],
    );
    assert_eq!(v["problems"][0]["shard"], "shard-000003.tar");
}

#[test]
fn manifest_count_off_by_one_is_caught() {
    // The total.
    caught(
        &[],
        |ds, _| {
            let mut v: Value =
                serde_json::from_slice(&std::fs::read(ds.join("bale.json")).unwrap()).unwrap();
            v["samples"] = 13.into();
            std::fs::write(ds.join("bale.json"), v.to_string()).unwrap();
        },
        "bale.json: invalid manifest",
        &["samples is 13", "hold 12"],
    );
    // One shard's count, with the total kept consistent: the index disagrees.
    caught(
        &["--quick"],
        |ds, _| {
            let mut v: Value =
                serde_json::from_slice(&std::fs::read(ds.join("bale.json")).unwrap()).unwrap();
            v["samples"] = 11.into();
            v["shards"][1]["samples"] = 3.into();
            std::fs::write(ds.join("bale.json"), v.to_string()).unwrap();
        },
        "shard-000001.tar: index records 4 samples, the manifest records 3",
        &[],
    );
}

#[test]
fn decode_finds_images_that_do_not_decode() {
    let tmp = tempfile::tempdir().unwrap();
    make_dataset(tmp.path(), Compression::None, true);
    // Checksums match: only decoding shows the damage.
    assert_eq!(verify(tmp.path(), &[]).0, 0);
    let (code, out, _) = verify(tmp.path(), &["--decode"]);
    assert_eq!(code, 1);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert!(
        lines[0].starts_with("shard-000001.tar: key \"dog/0005\" member \"png\" at offset ")
            && lines[0].contains("image does not decode"),
        "{out}"
    );
}

#[test]
fn leftover_temporary_files_are_warnings_only() {
    let tmp = tempfile::tempdir().unwrap();
    make_dataset(tmp.path(), Compression::None, false);
    std::fs::write(
        tmp.path().join(".bale-tmp-123-shard-000009.tar"),
        b"partial",
    )
    .unwrap();
    let (code, v) = verify_json(tmp.path(), &[]);
    assert_eq!(code, 0);
    assert_eq!(v["ok"], true);
    assert_eq!(v["warnings"], 1);
    assert_eq!(v["problems"][0]["severity"], "warning");
    let (_, out, _) = verify(tmp.path(), &[]);
    assert!(
        out.starts_with("warning: .bale-tmp-123-shard-000009.tar: leftover temporary file"),
        "{out}"
    );
}

#[test]
fn not_a_dataset_is_an_error_not_a_finding() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out, err) = verify(&tmp.path().join("nope"), &[]);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.starts_with("error: cannot verify"), "{err}");
    let (code, _, err) = verify(tmp.path(), &[]);
    assert_eq!(code, 2);
    assert!(err.contains("no bale.json"), "{err}");
}
