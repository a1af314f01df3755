//! `bale convert` from MosaicML Streaming (MDS) datasets built here byte by
//! byte (the real writers are exercised by tests/python/test_migrate.py),
//! and what a hostile source cannot do: reach outside its directory, make
//! bale allocate what a size field claims, hang on a FIFO, or leave output
//! behind; plus `bale export-index --dali` against a hostile user.

use std::fs;
use std::path::Path;
use std::process::Command;

use bale_tests::{assert_success as ok, bale_bin, describe, run_bale as bale};

/// One MDS shard: u32 count, u32 offsets, config JSON, the samples.
fn mds_shard(samples: &[Vec<u8>]) -> Vec<u8> {
    let config = br#"{"format":"mds"}"#;
    let n = samples.len();
    let mut at = (4 + 4 * (n + 1) + config.len()) as u32;
    let mut out = (n as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&at.to_le_bytes());
    for s in samples {
        at += s.len() as u32;
        out.extend_from_slice(&at.to_le_bytes());
    }
    out.extend_from_slice(config);
    for s in samples {
        out.extend_from_slice(s);
    }
    out
}

/// A sample of the columns `cls` (int) and `txt` (str).
fn sample(i: i64) -> Vec<u8> {
    let txt = format!("text {i}");
    // Column order is the names' (sorted): cls (fixed, 8 bytes), txt (sized).
    let mut out = (txt.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&i.to_le_bytes());
    out.extend_from_slice(txt.as_bytes());
    out
}

/// An `index.json` of shards `(basename, bytes, samples)`.
fn mds_index(shards: &[(&str, u64, u64)]) -> String {
    let list: Vec<String> = shards
        .iter()
        .map(|(name, bytes, samples)| {
            format!(
                r#"{{"column_encodings":["int","str"],"column_names":["cls","txt"],"column_sizes":[8,null],"compression":null,"format":"mds","hashes":[],"raw_data":{{"basename":"{name}","bytes":{bytes},"hashes":{{}}}},"samples":{samples},"size_limit":67108864,"version":2,"zip_data":null}}"#
            )
        })
        .collect();
    format!(r#"{{"shards":[{}],"version":2}}"#, list.join(","))
}

/// A valid two-shard MDS dataset of 7 samples.
fn mds_dataset(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    let a = mds_shard(&(0..4).map(sample).collect::<Vec<_>>());
    let b = mds_shard(&(4..7).map(sample).collect::<Vec<_>>());
    fs::write(dir.join("shard.00000.mds"), &a).unwrap();
    fs::write(dir.join("shard.00001.mds"), &b).unwrap();
    fs::write(
        dir.join("index.json"),
        mds_index(&[
            ("shard.00000.mds", a.len() as u64, 4),
            ("shard.00001.mds", b.len() as u64, 3),
        ]),
    )
    .unwrap();
}

fn convert_fails(src: &Path, out: &Path, expect: &[&str]) -> String {
    let o = bale(&["convert"], &[src, Path::new("-o"), out]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    for e in expect {
        assert!(err.contains(e), "stderr lacks {e:?}:\n{err}");
    }
    assert!(!out.exists(), "a failed convert leaves no output: {err}");
    err
}

#[test]
fn an_mds_dataset_converts_with_numbered_keys_and_text_values() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("mds");
    mds_dataset(&src);
    let out = t.path().join("out");
    ok(&bale(&["convert"], &[&src, Path::new("-o"), &out]));
    ok(&bale(&["verify"], &[&out]));
    let ls = bale(&["ls"], &[&out]);
    ok(&ls);
    let text = String::from_utf8_lossy(&ls.stdout);
    assert_eq!(text.lines().count(), 7, "{text}");
    assert!(text.contains("00000006"), "{text}");
    let get = bale(&["get", "--ext", "txt"], &[&out, Path::new("00000005")]);
    ok(&get);
    assert_eq!(get.stdout, b"text 5");
    let get = bale(&["get", "--ext", "cls"], &[&out, Path::new("00000005")]);
    assert_eq!(get.stdout, b"5");
    let m = bale_format::Manifest::read(&out).unwrap();
    assert_eq!(m.samples, 7);
    assert_eq!(m.created_by.options["source"], "mds");
}

#[test]
fn a_truncated_mds_shard_is_an_error_naming_the_file_and_offset() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("mds");
    mds_dataset(&src);
    let shard = src.join("shard.00001.mds");
    let bytes = fs::read(&shard).unwrap();
    fs::write(&shard, &bytes[..bytes.len() - 3]).unwrap();
    // index.json still records the full size: refused before any sample.
    convert_fails(&src, &t.path().join("out"), &["shard.00001.mds", "records"]);
    // With the size in index.json cut too, the offsets give it away.
    let a = fs::metadata(src.join("shard.00000.mds")).unwrap().len();
    fs::write(
        src.join("index.json"),
        mds_index(&[
            ("shard.00000.mds", a, 4),
            ("shard.00001.mds", bytes.len() as u64 - 3, 3),
        ]),
    )
    .unwrap();
    convert_fails(&src, &t.path().join("out"), &["shard.00001.mds", "offset"]);
    // Cut inside the offset table.
    fs::write(&shard, &bytes[..10]).unwrap();
    fs::write(
        src.join("index.json"),
        mds_index(&[("shard.00000.mds", a, 4), ("shard.00001.mds", 10, 3)]),
    )
    .unwrap();
    convert_fails(
        &src,
        &t.path().join("out"),
        &["shard.00001.mds", "truncated"],
    );
}

#[test]
fn index_json_cannot_point_outside_its_directory() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("mds");
    mds_dataset(&src);
    fs::copy(src.join("shard.00000.mds"), t.path().join("outside.mds")).unwrap();
    let len = fs::metadata(t.path().join("outside.mds")).unwrap().len();
    for name in ["../outside.mds", "/etc/passwd", "./../outside.mds", ""] {
        fs::write(src.join("index.json"), mds_index(&[(name, len, 4)])).unwrap();
        convert_fails(
            &src,
            &t.path().join("out"),
            &["index.json", "not a plain relative path"],
        );
    }
}

#[test]
fn huge_counts_and_sizes_in_index_json_allocate_nothing() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("mds");
    mds_dataset(&src);
    let a = fs::metadata(src.join("shard.00000.mds")).unwrap().len();
    // A sample count of 4 billion: the shard says 4.
    fs::write(
        src.join("index.json"),
        mds_index(&[("shard.00000.mds", a, 4_000_000_000)]),
    )
    .unwrap();
    convert_fails(&src, &t.path().join("out"), &["holds 4 samples"]);
    // Sizes near u64::MAX, and totals that overflow.
    fs::write(
        src.join("index.json"),
        mds_index(&[
            ("shard.00000.mds", u64::MAX, u64::MAX),
            ("shard.00001.mds", u64::MAX, u64::MAX),
        ]),
    )
    .unwrap();
    convert_fails(&src, &t.path().join("out"), &["index.json", "overflow"]);
    // A shard whose header claims 2^32-1 samples, and a sample whose size
    // field claims 4 GiB.
    let mut evil = u32::MAX.to_le_bytes().to_vec();
    evil.extend_from_slice(&[0; 64]);
    fs::write(src.join("shard.00000.mds"), &evil).unwrap();
    fs::write(
        src.join("index.json"),
        mds_index(&[("shard.00000.mds", evil.len() as u64, u64::from(u32::MAX))]),
    )
    .unwrap();
    convert_fails(&src, &t.path().join("out"), &["shard.00000.mds"]);
    let mut s = sample(1);
    s[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    let shard = mds_shard(&[s]);
    fs::write(src.join("shard.00000.mds"), &shard).unwrap();
    fs::write(
        src.join("index.json"),
        mds_index(&[("shard.00000.mds", shard.len() as u64, 1)]),
    )
    .unwrap();
    convert_fails(
        &src,
        &t.path().join("out"),
        &["shard.00000.mds", "sample 0", "txt"],
    );
}

#[test]
fn a_fifo_as_a_shard_is_refused_without_blocking() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("mds");
    mds_dataset(&src);
    let shard = src.join("shard.00000.mds");
    fs::remove_file(&shard).unwrap();
    let st = Command::new("mkfifo").arg(&shard).status().unwrap();
    assert!(st.success());
    let start = std::time::Instant::now();
    convert_fails(&src, &t.path().join("out"), &["shard.00000.mds", "FIFO"]);
    assert!(start.elapsed().as_secs() < 20);
    // index.json as a FIFO too.
    fs::remove_file(src.join("index.json")).unwrap();
    let st = Command::new("mkfifo")
        .arg(src.join("index.json"))
        .status()
        .unwrap();
    assert!(st.success());
    convert_fails(&src, &t.path().join("out"), &["index.json"]);
}

#[test]
fn a_directory_that_is_no_dataset_is_named_as_such() {
    let t = tempfile::tempdir().unwrap();
    fs::write(t.path().join("index.json"), br#"{"something": "else"}"#).unwrap();
    convert_fails(t.path(), &t.path().join("out"), &["index.json"]);
    let empty = tempfile::tempdir().unwrap();
    convert_fails(
        empty.path(),
        &t.path().join("out2"),
        &["no bale.json", "MDS"],
    );
}

/// A packed dataset of 5 text samples for the export-index tests.
fn packed(root: &Path) -> std::path::PathBuf {
    let tree = root.join("tree");
    fs::create_dir_all(tree.join("a")).unwrap();
    for i in 0..5 {
        fs::write(tree.join(format!("a/{i}.txt")), format!("t{i}")).unwrap();
    }
    let ds = root.join("ds");
    ok(&bale(
        &["pack", "--labels", "none"],
        &[&tree, Path::new("-o"), &ds],
    ));
    ds
}

fn export(ds: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["export-index", "--dali"];
    args.extend_from_slice(extra);
    bale(&args, &[ds, Path::new("-o"), out])
}

#[test]
fn export_index_never_writes_into_the_dataset_or_over_a_file() {
    let t = tempfile::tempdir().unwrap();
    let ds = packed(t.path());
    let before: Vec<_> = fs::read_dir(&ds)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    // The dataset directory itself, also through a symlink.
    let o = export(&ds, &ds, &["--force"]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("dataset directory"));
    std::os::unix::fs::symlink(&ds, t.path().join("link")).unwrap();
    let o = export(&ds, &t.path().join("link"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    let after: Vec<_> = fs::read_dir(&ds)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(before.len(), after.len());
    // A file path as the output.
    let file = t.path().join("notes.txt");
    fs::write(&file, b"mine").unwrap();
    let o = export(&ds, &file, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a directory"));
    assert_eq!(fs::read(&file).unwrap(), b"mine");
    // A file of the same name is the user's unless --force.
    let out = t.path().join("dali");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("shard-000000.dali.idx"), b"user's").unwrap();
    let o = export(&ds, &out, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("already exists"));
    assert_eq!(
        fs::read(out.join("shard-000000.dali.idx")).unwrap(),
        b"user's"
    );
    ok(&export(&ds, &out, &["--force"]));
    let text = fs::read_to_string(out.join("shard-000000.dali.idx")).unwrap();
    assert!(text.starts_with("v1.2 5\ntxt 512 2 a/0.txt\n"), "{text}");
}

#[test]
fn two_exports_at_once_leave_one_complete_set() {
    let t = tempfile::tempdir().unwrap();
    let ds = packed(t.path());
    let out = t.path().join("dali");
    let spawn = || {
        Command::new(bale_bin())
            .args(["export-index", "--dali"])
            .arg(&ds)
            .arg("-o")
            .arg(&out)
            .output()
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(spawn);
        let b = s.spawn(spawn);
        (a.join().unwrap().unwrap(), b.join().unwrap().unwrap())
    });
    let wins = [&a, &b].iter().filter(|o| o.status.success()).count();
    assert!(wins >= 1, "{}\n{}", describe(&a), describe(&b));
    for o in [&a, &b].into_iter().filter(|o| !o.status.success()) {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("another bale command") || err.contains("already exists"),
            "{err}"
        );
    }
    let names: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["shard-000000.dali.idx"],
        "no temporary file is left"
    );
    let text = fs::read_to_string(out.join("shard-000000.dali.idx")).unwrap();
    assert_eq!(text.lines().count(), 6);
}

#[test]
fn bale_index_writes_the_same_dali_files_as_export_index() {
    let t = tempfile::tempdir().unwrap();
    let ds = packed(t.path());
    let exported = t.path().join("exported");
    ok(&export(&ds, &exported, &[]));
    let indexed = t.path().join("indexed");
    let dali = t.path().join("dali");
    let o = bale(
        &["index", "--dali-index"],
        &[
            &dali,
            &ds.join("shard-000000.tar"),
            Path::new("-o"),
            &indexed,
        ],
    );
    ok(&o);
    assert_eq!(
        fs::read(dali.join("shard-000000.dali.idx")).unwrap(),
        fs::read(exported.join("shard-000000.dali.idx")).unwrap()
    );
    // --dali-index naming the output itself is refused before anything is written.
    let again = t.path().join("again");
    let o = bale(
        &["index", "--dali-index"],
        &[
            &again,
            &ds.join("shard-000000.tar"),
            Path::new("-o"),
            &again,
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", describe(&o));
    assert!(!again.exists());
}
