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

/// Verify's exit code, stdout and stderr as one text for a snapshot, the
/// dataset's path written `[DS]` and the time the summary says `[T]s`.
fn report(code: i32, out: &str, err: &str, ds: &Path) -> String {
    let text = format!("exit code: {code}\n--- stdout\n{out}--- stderr\n{err}")
        .replace(ds.to_str().unwrap(), "[DS]");
    let mut parts = text.split(" read in ");
    let mut shown = parts.next().unwrap_or_default().to_owned();
    for rest in parts {
        let time = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
                .len();
        shown.push_str(" read in [T]");
        shown.push_str(&rest[time..]);
    }
    shown
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
        // The summary says what was checked.
        insta::assert_snapshot!(format!("verify-clean-{c:?}"), report(code, &out, &err, &ds));
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
/// that starts with `line_start` contains every string of `contains`, and
/// the whole report is the snapshot `name` (`name-quick` for `--quick`).
fn caught(
    name: &str,
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
    let quick = if level.contains(&"--quick") {
        "-quick"
    } else {
        ""
    };
    insta::assert_snapshot!(
        format!("verify-{name}{quick}"),
        report(code, &out, &err, &ds)
    );
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
            "truncated",
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
        "flipped-member",
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
            "flipped-index",
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
        "missing-shard",
        &[],
        |ds, m| std::fs::remove_file(ds.join(&m.shards[0].file)).unwrap(),
        "shard-000000.tar: shard file is missing",
        &[],
    );
}

#[test]
fn extra_unknown_shard_is_caught() {
    let v = caught(
        "unknown-shard",
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
        "manifest-total-off",
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
        "manifest-shard-off",
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

// ---------------------------------------------------------------------------
// Datasets adopted with `bale index`: tars written by GNU tar, verified as
// `bale index` reads them (issues found while building `bale index`).

/// Runs GNU tar with `args`, panicking with its stderr when it fails.
fn gnu_tar(args: &[&str]) {
    let out = Command::new(bale_tests::gnu_tar())
        .args(args)
        .output()
        .expect("cannot run tar");
    assert!(out.status.success(), "tar {args:?}: {}", text(&out.stderr));
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `bale index -q --force -o DS EXTRA... TARS...`, which must succeed.
fn index(ds: &Path, extra: &[&str], tars: &[&Path]) {
    // Keys are not under test here: a tar may repeat another's sample.
    let mut args = vec![
        "index",
        "-q",
        "--force",
        "--allow-duplicate-keys",
        "-o",
        s(ds),
    ];
    args.extend_from_slice(extra);
    args.extend(tars.iter().map(|t| s(t)));
    let out = bale(&args);
    assert!(out.status.success(), "bale {args:?}: {}", text(&out.stderr));
}

/// Writes `n` samples `d/0000` ... (`jpg` of varied sizes, `cls`) under `root`.
fn small_tree(root: &Path, n: usize) {
    std::fs::create_dir_all(root.join("d")).unwrap();
    for i in 0..n {
        let jpg: Vec<u8> = (0..(i * 613) % 1900).map(|j| (i + j) as u8).collect();
        std::fs::write(root.join(format!("d/{i:04}.jpg")), jpg).unwrap();
        std::fs::write(root.join(format!("d/{i:04}.cls")), (i % 3).to_string()).unwrap();
    }
}

/// Renames the member `old` of a tar file to `new` (same length) in its
/// header, and rewrites the header checksum: the tar stays valid.
fn rename_member(tar: &Path, old: &str, new: &str) {
    assert_eq!(old.len(), new.len());
    let mut b = std::fs::read(tar).unwrap();
    let at = (0..b.len())
        .step_by(512)
        .find(|&h| b[h..].starts_with(old.as_bytes()) && b[h + old.len()] == 0)
        .unwrap_or_else(|| panic!("no header names {old}"));
    b[at..at + new.len()].copy_from_slice(new.as_bytes());
    let h = &mut b[at..at + 512];
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&x| u32::from(x)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    std::fs::write(tar, b).unwrap();
}

/// Both levels exit 0 and list no error (warnings allowed).
fn no_errors(ds: &Path) {
    for level in [&[][..], &["--quick"][..]] {
        let (code, v) = verify_json(ds, level);
        assert_eq!(code, 0, "verify {level:?}: {v:#}");
        assert_eq!(v["errors"], 0, "verify {level:?}: {v:#}");
    }
}

#[test]
fn indexed_without_checksum_says_checksums_are_absent_and_checks_structure() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    small_tree(&src, 6);
    let shards = t.path().join("shards");
    std::fs::create_dir_all(&shards).unwrap();
    let (a, b) = (shards.join("a.tar"), shards.join("b.tar"));
    gnu_tar(&["--sort=name", "-cf", s(&a), "-C", s(&src), "d"]);
    // The same sample under another key (a shared key would be a finding too).
    gnu_tar(&[
        "--transform=s,^d/,e/,",
        "-cf",
        s(&b),
        "-C",
        s(&src),
        "d/0000.jpg",
        "d/0000.cls",
    ]);
    let ds = t.path().join("ds");
    index(&ds, &[], &[&a, &b]);

    // Text: one warning line on stdout, the summary says what was checked; exit 0.
    let (code, out, err) = verify(&ds, &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert!(
        lines[0].starts_with(
            "warning: bale.json: member checksums are absent: the indexes of all 2 shards record none"
        ) && lines[0].contains("bale index --checksum"),
        "{out}"
    );
    assert!(
        err.contains(": ok, 1 warning (full check of 2 shards, 7 samples")
            && err.contains("no member checksums: structure only"),
        "{err}"
    );
    // JSON, at both levels.
    for level in [&[][..], &["--quick"][..]] {
        let (code, v) = verify_json(&ds, level);
        assert_eq!(code, 0);
        assert_eq!(v["checksums"], "absent", "{v:#}");
        assert_eq!(
            (v["errors"].as_u64(), v["warnings"].as_u64()),
            (Some(0), Some(1))
        );
        assert_eq!(v["problems"][0]["shard"], "bale.json");
        assert_eq!(v["problems"][0]["severity"], "warning");
        assert_eq!(v["samples_checked"], 7);
    }

    // The structure is still checked: a member renamed in its header (a valid tar).
    rename_member(&a, "d/0003.cls", "d/0003.clx");
    let (code, out, _) = verify(&ds, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.lines().any(
            |l| l.starts_with("../shards/a.tar: key \"d/0003\" member \"cls\"")
                && l.contains("tar member is \"clx\", the index says \"cls\"")
        ),
        "{out}"
    );
    let (code, out, _) = verify(&ds, &["--quick"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.lines().any(
            |l| l.starts_with("../shards/a.tar: key \"d/0003\" member \"cls\"")
                && l.contains("tar header names \"d/0003.clx\"")
        ),
        "{out}"
    );
    rename_member(&a, "d/0003.clx", "d/0003.cls");

    // With --checksum: present, nothing to say.
    index(&ds, &["--checksum"], &[&a, &b]);
    let (code, v) = verify_json(&ds, &[]);
    assert_eq!(code, 0);
    assert_eq!(v["checksums"], "present");
    assert_eq!(v["problems"], serde_json::json!([]));
    let (_, out, err) = verify(&ds, &[]);
    assert_eq!(out, "");
    assert!(!err.contains("no member checksums"), "{err}");
}

#[test]
fn dot_slash_member_names_verify_clean() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    small_tree(&src, 5);
    let shards = t.path().join("shards");
    std::fs::create_dir_all(&shards).unwrap();
    let tar = shards.join("dot.tar");
    // `tar cf x.tar .`: every name starts with `./`.
    gnu_tar(&["--sort=name", "-cf", s(&tar), "-C", s(&src), "."]);
    assert!(
        std::fs::read(&tar).unwrap().starts_with(b"./"),
        "the first member is ./"
    );
    let ds = t.path().join("ds");
    for extra in [&[][..], &["--checksum"][..]] {
        index(&ds, extra, &[&tar]);
        let idx = ShardIndex::open(ds.join("dot.idx")).unwrap();
        assert_eq!(idx.key(0), "d/0000");
        no_errors(&ds);
        let (_, v) = verify_json(&ds, &[]);
        assert_eq!(v["samples_checked"], 5);
        assert_eq!(v["members_checked"], 10);
    }
    // Names are still compared: a `./` name that differs from the index is caught.
    rename_member(&tar, "./d/0002.jpg", "./d/0002.jpx");
    for level in [&[][..], &["--quick"][..]] {
        let (code, out, _) = verify(&ds, level);
        assert_eq!(code, 1, "{level:?}: {out}");
        assert!(
            out.contains("key \"d/0002\" member \"jpg\""),
            "{level:?}: {out}"
        );
    }
}

#[test]
fn quick_check_steps_over_entries_between_members_of_a_sample() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("emptydir")).unwrap();
    // A directory name longer than the 100-byte ustar field: a GNU long-name
    // record (gnu) or a pax record (pax) precedes its header.
    let long = "x".repeat(130);
    std::fs::create_dir_all(src.join(&long)).unwrap();
    std::fs::write(
        src.join("README"),
        "a file without an extension\n".repeat(40),
    )
    .unwrap();
    for (name, data) in [
        ("a.jpg", "A-jpg".repeat(300)),
        ("a.cls", "1".into()),
        ("b.jpg", "B-jpg".repeat(100)),
        ("b.cls", "0".into()),
    ] {
        std::fs::write(src.join(name), data).unwrap();
    }
    for format in ["gnu", "pax"] {
        // Each tar in a directory of its own (verify lists other tars as unknown shards).
        let dir = t.path().join(format!("shards-{format}"));
        std::fs::create_dir_all(&dir).unwrap();
        let tar = dir.join(format!("{format}.tar"));
        // Sample "a": a.jpg, then a directory, a file without extension and a
        // long-named directory, then a.cls.
        gnu_tar(&[
            &format!("--format={format}"),
            "-cf",
            s(&tar),
            "-C",
            s(&src),
            "a.jpg",
            "emptydir",
            "README",
            &long,
            "a.cls",
            "b.jpg",
            "b.cls",
        ]);
        let ds = t.path().join(format!("ds-{format}"));
        for extra in [&[][..], &["--checksum"][..]] {
            index(&ds, extra, &[&tar]);
            let idx = ShardIndex::open(ds.join(format!("{format}.idx"))).unwrap();
            assert_eq!((idx.len(), idx.members(0).count()), (2, 2), "{format}");
            no_errors(&ds);
            let (_, v) = verify_json(&ds, &["--quick"]);
            assert_eq!(v["members_checked"], 4, "{format}: {v:#}");
        }
        // The member after the skipped entries is still checked.
        rename_member(&tar, "a.cls", "a.clz");
        let (code, out, _) = verify(&ds, &["--quick"]);
        assert_eq!(code, 1, "{format}: {out}");
        assert!(
            out.contains("key \"a\" member \"cls\"") && out.contains("tar header names \"a.clz\""),
            "{format}: {out}"
        );
    }
}

#[test]
fn renamed_split_runs_verify_clean_when_the_manifest_records_rename_split() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    for (name, data) in [
        ("a.jpg", "A1"),
        ("b.jpg", "B1"),
        ("a.cls", "2"),
        ("c.jpg", "C1"),
        ("a.txt", "A3"),
    ] {
        std::fs::write(src.join(name), data).unwrap();
    }
    let tar = t.path().join("split.tar");
    // Key "a" in three runs: a, a~2, a~3 in the index.
    gnu_tar(&[
        "-cf",
        s(&tar),
        "-C",
        s(&src),
        "a.jpg",
        "b.jpg",
        "a.cls",
        "c.jpg",
        "a.txt",
    ]);
    let ds = t.path().join("ds");
    for extra in [
        &["--rename-split"][..],
        &["--rename-split", "--checksum"][..],
    ] {
        index(&ds, extra, &[&tar]);
        let idx = ShardIndex::open(ds.join("split.idx")).unwrap();
        let keys: Vec<&str> = (0..idx.len()).map(|i| idx.key(i)).collect();
        assert_eq!(keys, ["a", "b", "a~2", "c", "a~3"]);
        no_errors(&ds);
        let (_, v) = verify_json(&ds, &[]);
        assert_eq!(v["samples_checked"], 5);
    }
    // Without the manifest's word for it, `a~2` does not match members named `a`.
    let path = ds.join("bale.json");
    let mut m: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(m["created_by"]["options"]["rename_split"], true);
    m["created_by"]["options"]["rename_split"] = false.into();
    std::fs::write(&path, m.to_string()).unwrap();
    let (code, out, _) = verify(&ds, &["--quick"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("key \"a~2\" member \"cls\"")
            && out.contains("tar header names \"a.cls\", the index says \"a~2.cls\""),
        "{out}"
    );
    let (code, out, _) = verify(&ds, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("key \"a\"") && out.contains("appears twice"),
        "{out}"
    );
}

// ---------------------------------------------------------------------------
// `--help`: each command's own long help, not the one-line summary.

/// The text of `bale ARGS` (stdout), which must succeed, laid out for a
/// terminal of 100 columns whatever the test's own.
fn help(args: &[&str]) -> String {
    let out = Command::new(bale_tests::bale_bin())
        .args(args)
        .env("COLUMNS", "100")
        .env("LINES", "50")
        .output()
        .expect("cannot run bale");
    assert!(out.status.success(), "bale {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn every_help_text_is_as_snapshotted() {
    // The whole text: a change of wording, order or layout shows in review.
    insta::assert_snapshot!("help", help(&["--help"]));
    for cmd in [
        "pack",
        "merge",
        "convert",
        "verify",
        "stat",
        "ls",
        "get",
        "index",
        "export-index",
        "stage",
        "unstage",
        "bench",
        "completions",
        "man",
    ] {
        insta::assert_snapshot!(format!("help-{cmd}"), help(&[cmd, "--help"]));
        insta::assert_snapshot!(format!("help-{cmd}-short"), help(&[cmd, "-h"]));
    }
}

#[test]
fn command_help_shows_the_long_help_and_the_list_shows_summaries() {
    let list = help(&["--help"]);
    for cmd in [
        "pack",
        "merge",
        "convert",
        "verify",
        "stat",
        "ls",
        "get",
        "index",
        "export-index",
        "stage",
        "unstage",
    ] {
        let line = list
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{cmd} ")))
            .unwrap_or_else(|| panic!("`bale --help` does not list {cmd}:\n{list}"));
        let summary = line.trim_start()[cmd.len()..].trim();
        let long = help(&[cmd, "--help"]);
        assert!(
            long.starts_with(summary),
            "`bale {cmd} --help` does not open with its summary {summary:?}:\n{long}"
        );
        let short = help(&[cmd, "-h"]);
        assert!(long.len() > short.len(), "{cmd}");
    }
    for cmd in ["pack", "verify"] {
        let long = help(&[cmd, "--help"]);
        let intro = &long[..long.find("Usage:").expect("a usage line")];
        let paragraphs = intro.split("\n\n").filter(|p| !p.trim().is_empty()).count();
        assert!(paragraphs >= 2, "`bale {cmd} --help` shows only:\n{intro}");
        // The long text is the command's own, not in the command list.
        let second = intro.split("\n\n").nth(1).unwrap();
        assert!(!list.contains(second.lines().next().unwrap()), "{second}");
    }
    let verify = help(&["verify", "--help"]);
    for want in [
        "Examples:\n  bale verify ds ",
        "checksums are absent",
        "\"checksums\"",
        "--rename-split",
    ] {
        assert!(
            verify.contains(want),
            "`bale verify --help` lacks {want:?}:\n{verify}"
        );
    }
}

/// Counts near 2**64 in a hand-edited manifest are a problem reported by
/// `verify` and a figure `stat` shows, never an overflow: before, their sums
/// panicked (exit 101, "attempt to add with overflow").
#[test]
fn counts_near_two_to_the_64_in_a_manifest_are_reported_not_a_panic() {
    for field in ["samples", "bytes", "members", "tar_bytes"] {
        let t = tempfile::tempdir().unwrap();
        let ds = t.path().join("ds");
        make_dataset(&ds, Compression::None, false);
        let path = ds.join("bale.json");
        let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        for s in v["shards"].as_array_mut().unwrap().iter_mut().take(2) {
            s[field] = u64::MAX.into();
        }
        std::fs::write(&path, v.to_string()).unwrap();
        for extra in [&[][..], &["--quick"][..]] {
            let (code, out, err) = verify(&ds, extra);
            assert!(
                matches!(code, 1 | 2),
                "{field} {extra:?}: {code}\n{out}\n{err}"
            );
            assert!(!err.contains("panicked"), "{field}: {err}");
        }
        let o = bale(&["stat", ds.to_str().unwrap()]);
        assert!(
            matches!(o.status.code(), Some(0..=2)),
            "stat, {field}: {:?}\n{}",
            o.status.code(),
            text(&o.stderr)
        );
        assert!(!text(&o.stderr).contains("panicked"), "{field}");
    }
}

/// Writes one shard of `n` samples `s/NNNNN` (a `bin` member each) into `dir`.
fn many_samples(dir: &Path, n: usize) -> Manifest {
    std::fs::create_dir_all(dir).unwrap();
    let mut w = ShardFileWriter::create(dir, "shard-000000.tar", Compression::None, 0).unwrap();
    for i in 0..n {
        let data = format!("sample {i}");
        w.writer()
            .write_sample(
                &format!("s/{i:05}"),
                &[Member {
                    ext: "bin",
                    data: data.as_bytes(),
                }],
            )
            .unwrap();
    }
    let created_by = CreatedBy {
        tool: "bale".into(),
        version: "test".into(),
        command: "e2e-fixture".into(),
        options: serde_json::Value::Null,
    };
    let m = Manifest::new(vec![w.finish().unwrap()], None, created_by);
    m.write(dir).unwrap();
    m
}

/// `bale verify ARGS` with its indexes read `window` bytes at a time.
fn verify_in_windows(dir: &Path, window: usize, extra: &[&str]) -> (i32, String) {
    let out = Command::new(bale_tests::bale_bin())
        .arg("verify")
        .arg(dir)
        .args(extra)
        .env("BALE_INDEX_WINDOW", window.to_string())
        .output()
        .expect("cannot run bale");
    (out.status.code().unwrap_or(-1), text(&out.stdout))
}

#[test]
fn an_index_read_in_many_windows_verifies_and_its_late_damage_is_found() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    let m = many_samples(&ds, 3_000);
    let idx_len = std::fs::metadata(ds.join(&m.shards[0].index))
        .unwrap()
        .len();
    // Tens of windows of 4 KiB over the index.
    assert!(idx_len > 64 * 4096, "{idx_len}");
    for level in [&[][..], &["--quick"]] {
        assert_eq!(verify_in_windows(&ds, 4096, level), (0, String::new()));
    }
    // A member's bytes near the end, in one of the last windows.
    let idx = ShardIndex::open(ds.join(&m.shards[0].index)).unwrap();
    let late = idx.members(2_990).next().unwrap();
    flip(&ds.join(&m.shards[0].file), late.offset + 1, 0x20);
    let (code, out) = verify_in_windows(&ds, 4096, &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("key \"s/02990\" member \"bin\"") && out.contains("checksum mismatch"),
        "{out}"
    );
    // A tar header near the end: the quick check reads it at the index's offset.
    let header = idx.sample(2_995).tar_offset;
    flip(&ds.join(&m.shards[0].file), header + 2, 0x01);
    let (code, out) = verify_in_windows(&ds, 4096, &["--quick"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("key \"s/02995\""), "{out}");
    // An index byte near the end: its checksum, hashed window by window.
    let mut b = std::fs::read(ds.join(&m.shards[0].index)).unwrap();
    let at = b.len() - 100;
    b[at] ^= 0x01;
    std::fs::write(ds.join(&m.shards[0].index), b).unwrap();
    let (code, out) = verify_in_windows(&ds, 4096, &["--quick"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("is damaged") && out.contains("checksum"),
        "{out}"
    );
}
