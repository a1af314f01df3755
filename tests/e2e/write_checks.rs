//! What the writers refuse to write, and what `bale verify` and `bale get`
//! refuse to let pass (docs/reliability.md): member names the readers
//! reserve, `.cls` labels no reader can parse, keys two samples share, an
//! index in place over a dataset another command wrote, and a key that looks
//! like another sample's index.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bale_tests::{assert_success as ok, bale_bin, describe, gnu_tar};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn bale(args: &[&str]) -> Output {
    Command::new(bale_bin())
        .args(args)
        .output()
        .expect("run bale")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A plain tar at `tar` of the files `(name, bytes)`, in that order.
fn tar_of(tar: &Path, files: &[(&str, &[u8])]) {
    let src = tar.with_extension("src");
    fs::create_dir_all(&src).unwrap();
    for (name, data) in files {
        let path = src.join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, data).unwrap();
    }
    let o = Command::new(gnu_tar())
        .args(["--format=ustar", "-cf", p(tar), "-C", p(&src)])
        .args(files.iter().map(|(n, _)| *n))
        .output()
        .expect("run tar");
    ok(&o);
    fs::remove_dir_all(&src).unwrap();
}

/// Asserts `o` failed (exit 2) with every one of `expect` in its stderr.
fn fails(o: &Output, expect: &[&str]) -> String {
    assert_eq!(o.status.code(), Some(2), "{}", describe(o));
    let err = stderr(o);
    for e in expect {
        assert!(err.contains(e), "stderr lacks {e:?}:\n{err}");
    }
    err
}

/// Indexes `tars` into `ds` with `extra` options.
fn index(ds: &Path, tars: &[&Path], extra: &[&str]) -> Output {
    let mut args = vec!["index", "-q", "-o", p(ds)];
    args.extend_from_slice(extra);
    args.extend(tars.iter().map(|t| p(t)));
    bale(&args)
}

// ---- reserved names -----------------------------------------------------

#[test]
fn reserved_member_names_are_refused_by_index_pack_and_convert() {
    let t = tempfile::tempdir().unwrap();
    for ext in ["__key__", "__index__", "__source__", "__url__"] {
        let tar = t.path().join(format!("r{ext}.tar"));
        let name = format!("a.{ext}");
        tar_of(&tar, &[("a.txt", b"x"), (&name, b"hi\n")]);
        let ds = t.path().join(format!("ds{ext}"));
        fails(&index(&ds, &[&tar], &[]), &[p(&tar), &name, "reserved"]);
        assert!(!ds.join("bale.json").exists());
    }
    // Pack: the file is named, and nothing is written.
    let input = t.path().join("in");
    fs::create_dir_all(input.join("d")).unwrap();
    fs::write(input.join("d/a.txt"), b"x").unwrap();
    fs::write(input.join("d/a.__key__"), b"hi\n").unwrap();
    let out = t.path().join("packed");
    let o = bale(&["pack", "-q", "--labels", "none", "-o", p(&out), p(&input)]);
    assert!(!o.status.success(), "{}", describe(&o));
    let err = stderr(&o);
    assert!(
        err.contains("a.__key__") && err.contains("reserved"),
        "{err}"
    );
    assert!(!out.join("bale.json").exists());
}

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

/// An MDS dataset in `dir` of one shard with one column `name` of type
/// `encoding` (fixed `size` bytes, or sized when `None`) holding `values`.
fn mds_one_column(dir: &Path, name: &str, encoding: &str, size: Option<u32>, values: &[Vec<u8>]) {
    fs::create_dir_all(dir).unwrap();
    let samples: Vec<Vec<u8>> = values
        .iter()
        .map(|v| match size {
            Some(_) => v.clone(),
            None => {
                let mut s = (v.len() as u32).to_le_bytes().to_vec();
                s.extend_from_slice(v);
                s
            }
        })
        .collect();
    let shard = mds_shard(&samples);
    fs::write(dir.join("shard.00000.mds"), &shard).unwrap();
    let size = size.map_or("null".to_owned(), |s| s.to_string());
    fs::write(
        dir.join("index.json"),
        format!(
            r#"{{"shards":[{{"column_encodings":["{encoding}"],"column_names":["{name}"],"column_sizes":[{size}],"compression":null,"format":"mds","hashes":[],"raw_data":{{"basename":"shard.00000.mds","bytes":{},"hashes":{{}}}},"samples":{},"size_limit":67108864,"version":2,"zip_data":null}}],"version":2}}"#,
            shard.len(),
            values.len()
        ),
    )
    .unwrap();
}

fn convert(src: &Path, out: &Path) -> Output {
    bale(&["convert", "-q", p(src), "-o", p(out)])
}

#[test]
fn convert_refuses_a_reserved_column_and_labels_no_reader_parses() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("key");
    mds_one_column(&src, "__key__", "str", None, &[b"hi".to_vec()]);
    let out = t.path().join("o1");
    fails(
        &convert(&src, &out),
        &["index.json", "\"__key__\"", "reserved"],
    );
    assert!(!out.exists());

    let bad: [(&str, &str, Option<u32>, Vec<u8>); 4] = [
        ("float32", "float32", Some(4), 3.0f32.to_le_bytes().to_vec()),
        ("str", "str", None, b"abc".to_vec()),
        ("str empty", "str", None, Vec::new()),
        (
            "uint64",
            "uint64",
            Some(8),
            (1u64 << 63).to_le_bytes().to_vec(),
        ),
    ];
    for (what, encoding, size, value) in bad {
        let src = t.path().join(what);
        mds_one_column(&src, "cls", encoding, size, &[value]);
        let out = t.path().join(format!("out {what}"));
        let err = fails(&convert(&src, &out), &["\"cls\"", encoding, "integer"]);
        assert!(!out.exists(), "{what}: {err}");
    }
    // An integer column converts, and every reader reads it.
    let src = t.path().join("int");
    mds_one_column(
        &src,
        "cls",
        "int64",
        Some(8),
        &[(-7i64).to_le_bytes().to_vec()],
    );
    let out = t.path().join("out int");
    ok(&convert(&src, &out));
    let o = bale(&["ls", p(&out)]);
    ok(&o);
    assert!(stdout(&o).contains("\t-7\t"), "{}", stdout(&o));
}

// ---- labels -------------------------------------------------------------

#[test]
fn labels_no_reader_can_parse_are_refused_at_index_and_pack_time() {
    let t = tempfile::tempdir().unwrap();
    let bad: [&[u8]; 8] = [
        b"abc",
        b"3.0",
        b"",
        b"9223372036854775808",
        b"1_000",
        "\u{663}".as_bytes(), // ARABIC-INDIC DIGIT THREE
        "\u{a0}3".as_bytes(), // a NO-BREAK SPACE before it
        b"3\0",
    ];
    for (n, label) in bad.iter().enumerate() {
        let tar = t.path().join(format!("bad{n}.tar"));
        tar_of(&tar, &[("k7.txt", b"x"), ("k7.cls", label)]);
        let ds = t.path().join(format!("ds{n}"));
        fails(
            &index(&ds, &[&tar], &[]),
            &[
                p(&tar),
                "\"k7\"",
                ".cls member that is not a decimal integer",
            ],
        );
        // With checksums too (the sequential pass).
        fails(
            &index(&ds, &[&tar], &["--checksum"]),
            &["\"k7\"", "decimal integer"],
        );
        assert!(!ds.join("bale.json").exists());

        let input = t.path().join(format!("in{n}"));
        fs::create_dir_all(input.join("d")).unwrap();
        fs::write(input.join("d/k7.txt"), b"x").unwrap();
        fs::write(input.join("d/k7.cls"), label).unwrap();
        let out = t.path().join(format!("packed{n}"));
        let o = bale(&["pack", "-q", "--labels", "none", "-o", p(&out), p(&input)]);
        assert!(!o.status.success(), "{}", describe(&o));
        let err = stderr(&o);
        assert!(
            err.contains("k7.cls") && err.contains("decimal integer"),
            "{err}"
        );
        assert!(!out.join("bale.json").exists());
    }
    // What the readers parse is accepted, and read as they read it.
    let good: [(&[u8], &str); 5] = [
        (b"+3", "3"),
        (b" 3\n", "3"),
        (b"03", "3"),
        (b"-0", "0"),
        (b"-9223372036854775808", "-9223372036854775808"),
    ];
    for (n, (label, shown)) in good.iter().enumerate() {
        let tar = t.path().join(format!("good{n}.tar"));
        tar_of(&tar, &[("k.txt", b"x"), ("k.cls", label)]);
        let ds = t.path().join(format!("good{n}"));
        ok(&index(&ds, &[&tar], &["--checksum"]));
        let o = bale(&["ls", p(&ds)]);
        ok(&o);
        assert!(
            stdout(&o).contains(&format!("\tk\t{shown}\t")),
            "{}",
            stdout(&o)
        );
    }
}

#[test]
fn verify_reports_a_label_no_reader_can_parse() {
    let t = tempfile::tempdir().unwrap();
    let tar = t.path().join("a.tar");
    tar_of(&tar, &[("k.cls", b"1"), ("k.txt", b"x")]);
    let ds = t.path().join("ds");
    ok(&index(&ds, &[&tar], &[]));
    ok(&bale(&["verify", "-q", p(&ds)]));
    // The label turns into one no reader parses, at the same length: an
    // index without checksums cannot tell, the label check can.
    let mut bytes = fs::read(&tar).unwrap();
    assert_eq!(bytes[512], b'1');
    bytes[512] = b'x';
    fs::write(&tar, bytes).unwrap();
    let o = bale(&["verify", p(&ds)]);
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    let out = stdout(&o);
    assert!(
        out.contains("key \"k\"") && out.contains("not a decimal integer"),
        "{}",
        describe(&o)
    );
}

// ---- index --force over another command's dataset -----------------------

#[test]
fn index_force_refuses_a_dataset_pack_wrote() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    fs::create_dir_all(input.join("d")).unwrap();
    for i in 0..5 {
        fs::write(input.join(format!("d/{i}.txt")), format!("sample {i}")).unwrap();
    }
    let ds = t.path().join("ds");
    ok(&bale(&[
        "pack",
        "-q",
        "--labels",
        "none",
        "--shard-size",
        "1K",
        "-o",
        p(&ds),
        p(&input),
    ]));
    let before = fs::read(ds.join("bale.json")).unwrap();
    let tars: Vec<PathBuf> = fs::read_dir(&ds)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tar"))
        .collect();
    assert!(!tars.is_empty());
    let refs: Vec<&Path> = tars.iter().map(PathBuf::as_path).collect();
    fails(
        &index(&ds, &refs[..1], &["--force"]),
        &["bale pack", "bale.json", "-o"],
    );
    assert_eq!(
        fs::read(ds.join("bale.json")).unwrap(),
        before,
        "the manifest is untouched"
    );
    ok(&bale(&["verify", "-q", p(&ds)]));
}

// ---- keys ---------------------------------------------------------------

#[test]
fn a_key_that_looks_like_an_index_resolves_as_the_key_or_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let tar = t.path().join("a.tar");
    // Sample 0 is "000002", 1 is "000001", 2 is "000000", 3 is "000042".
    tar_of(
        &tar,
        &[
            ("000002.txt", b"two"),
            ("000001.txt", b"one"),
            ("000000.txt", b"zero"),
            ("000042.txt", b"forty-two"),
        ],
    );
    let ds = t.path().join("ds");
    ok(&index(&ds, &[&tar], &[]));
    let get = |extra: &[&str]| {
        let mut args = vec!["get", p(&ds)];
        args.extend_from_slice(extra);
        args.extend(["--ext", "txt"]);
        bale(&args)
    };
    // A key and an index of the same sample: no doubt.
    let o = get(&["000001"]);
    ok(&o);
    assert_eq!(stdout(&o), "one");
    // A key that is also the index of another sample: refused, naming both.
    let err = fails(
        &get(&["000002"]),
        &["ambiguous", "sample 0", "sample 2", "--key", "--index"],
    );
    assert!(err.contains("000000"), "{err}");
    let o = get(&["000002", "--key"]);
    ok(&o);
    assert_eq!(stdout(&o), "two");
    let o = get(&["000002", "--index"]);
    ok(&o);
    assert_eq!(stdout(&o), "zero");
    // A key beyond the sample count is that key.
    let o = get(&["000042"]);
    ok(&o);
    assert_eq!(stdout(&o), "forty-two");
    // --index never takes a key.
    fails(&get(&["000042", "--index"]), &["not a sample index"]);
    fails(
        &get(&["000042", "--index", "--key"]),
        &["cannot be used with"],
    );
}

#[test]
fn duplicate_keys_are_refused_unless_asked_then_lookups_are_ambiguous() {
    let t = tempfile::tempdir().unwrap();
    let a = t.path().join("a.tar");
    let b = t.path().join("b.tar");
    tar_of(&a, &[("x.txt", b"a-x"), ("shared.txt", b"a-shared")]);
    tar_of(&b, &[("shared.txt", b"b-shared"), ("y.txt", b"b-y")]);
    let ds = t.path().join("ds");
    fails(
        &index(&ds, &[&a, &b], &[]),
        &["\"shared\"", p(&a), p(&b), "--allow-duplicate-keys"],
    );
    assert!(!ds.join("bale.json").exists());
    assert!(!ds.join("a.tar.idx").exists() && !ds.join("b.tar.idx").exists());

    ok(&index(&ds, &[&a, &b], &["--allow-duplicate-keys"]));
    let err = fails(
        &bale(&["get", p(&ds), "shared", "--key", "--ext", "txt"]),
        &["\"shared\"", "1, 2", "--index"],
    );
    assert!(err.contains("not unique"), "{err}");
    let o = bale(&["get", p(&ds), "2", "--index", "--ext", "txt"]);
    ok(&o);
    assert_eq!(stdout(&o), "b-shared");
    // verify names the key and both shards (a warning: the run allowed it).
    let o = bale(&["verify", p(&ds)]);
    ok(&o);
    let out = stdout(&o);
    assert!(
        out.contains("key \"shared\"") && out.contains("a.tar") && out.contains("b.tar"),
        "{}",
        describe(&o)
    );
}

// ---- bounds of convert --------------------------------------------------

#[test]
fn convert_refuses_a_sample_a_small_zstd_shard_decompresses_to_past_the_limit() {
    use std::io::Write;
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("mds");
    fs::create_dir_all(&src).unwrap();
    // One sample of one sized `bytes` column holding 300 MiB of zeros.
    let data_len: u32 = 300 << 20;
    let config = br#"{"format":"mds"}"#;
    let start = (4 + 4 * 2 + config.len()) as u32;
    let sample_len = 4 + data_len;
    let mut head = 1u32.to_le_bytes().to_vec();
    head.extend_from_slice(&start.to_le_bytes());
    head.extend_from_slice(&(start + sample_len).to_le_bytes());
    head.extend_from_slice(config);
    head.extend_from_slice(&data_len.to_le_bytes());
    let raw_bytes = u64::from(start + sample_len);
    let zip = src.join("shard.00000.mds.zstd");
    let mut z = Command::new(bale_tests::zstd_cli())
        .args(["-q", "-3", "-o", p(&zip)])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("run zstd");
    let mut w = z.stdin.take().unwrap();
    w.write_all(&head).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..300 {
        w.write_all(&zeros).unwrap();
    }
    drop(w);
    assert!(z.wait().unwrap().success());
    let zip_len = fs::metadata(&zip).unwrap().len();
    assert!(zip_len < 1 << 20, "a small shard: {zip_len} bytes");
    fs::write(
        src.join("index.json"),
        format!(
            r#"{{"shards":[{{"column_encodings":["bytes"],"column_names":["bin"],"column_sizes":[null],"compression":"zstd","format":"mds","hashes":[],"raw_data":{{"basename":"shard.00000.mds","bytes":{raw_bytes},"hashes":{{}}}},"samples":1,"size_limit":67108864,"version":2,"zip_data":{{"basename":"shard.00000.mds.zstd","bytes":{zip_len},"hashes":{{}}}}}}],"version":2}}"#
        ),
    )
    .unwrap();
    let out = t.path().join("out");
    let o = crate::common::run_bounded(
        &mut crate::common::bale_cmd(&["convert", "-q", p(&src), "-o", p(&out)]),
        std::time::Duration::from_secs(120),
        200,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.killed, None, "bale ran out of its bounds: {err}");
    assert_eq!(o.status.and_then(|s| s.code()), Some(2), "{err}");
    for want in [
        "shard.00000.mds.zstd",
        "sample 0",
        &sample_len.to_string(),
        "256 MiB",
    ] {
        assert!(err.contains(want), "stderr lacks {want:?}:\n{err}");
    }
    assert!(!out.exists(), "{err}");
}

/// Packs the files `names` (each holding its name) under `root` as part
/// `part` of `out`, without labels.
fn pack_part(root: &Path, names: &[&str], part: &str, out: &Path) {
    for n in names {
        let path = root.join(n);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, format!("{} {n}", root.display())).unwrap();
    }
    ok(&bale(&[
        "pack",
        "-q",
        "--labels",
        "none",
        "--part",
        part,
        "-o",
        p(out),
        p(root),
    ]));
}

#[test]
fn merge_and_convert_refuse_shared_keys_unless_asked_and_verify_reports_them() {
    let t = tempfile::tempdir().unwrap();
    // Parts of two inputs packed with the same options: part 0 of `a`
    // holds d/0 and d/1, part 1 of `b` holds d/0 and d/9.
    let (p0, p1) = (t.path().join("p0"), t.path().join("p1"));
    pack_part(
        &t.path().join("a"),
        &["d/0.txt", "d/1.txt", "d/2.txt", "d/3.txt"],
        "0/2",
        &p0,
    );
    pack_part(
        &t.path().join("b"),
        &["c/0.txt", "c/1.txt", "d/0.txt", "d/9.txt"],
        "1/2",
        &p1,
    );
    let merged = t.path().join("merged");
    // Parts of two inputs are not parts of one listing: refused first.
    fails(
        &bale(&["merge", "-q", p(&p0), p(&p1), "-o", p(&merged)]),
        &["another listing", "nothing was merged"],
    );
    // Parts written by an older bale record no listing: the keys are what
    // is left to check.
    for part in [&p0, &p1] {
        let path = part.join("bale.json");
        let mut m: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        m["created_by"]["options"]
            .as_object_mut()
            .unwrap()
            .remove("listing")
            .expect("a part records its listing");
        fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    }
    let before = (crate::common::snapshot(&p0), crate::common::snapshot(&p1));
    let err = fails(
        &bale(&["merge", "-q", p(&p0), p(&p1), "-o", p(&merged)]),
        &["\"d/0\"", "--allow-duplicate-keys", "nothing was merged"],
    );
    assert!(
        err.contains(p(&p0.join("part-0000-of-0002-shard-000000.tar")))
            && err.contains(p(&p1.join("part-0001-of-0002-shard-000000.tar"))),
        "{err}"
    );
    assert_eq!(
        (crate::common::snapshot(&p0), crate::common::snapshot(&p1)),
        before,
        "the parts are untouched"
    );
    assert!(!merged.join("bale.json").exists());

    ok(&bale(&[
        "merge",
        "-q",
        "--allow-duplicate-keys",
        p(&p0),
        p(&p1),
        "-o",
        p(&merged),
    ]));
    // Allowed: verify warns of the key, a lookup by it is ambiguous.
    let o = bale(&["verify", p(&merged)]);
    ok(&o);
    assert!(
        stdout(&o).contains("warning: ") && stdout(&o).contains("key \"d/0\""),
        "{}",
        describe(&o)
    );
    fails(
        &bale(&["get", p(&merged), "d/0", "--key", "--ext", "txt"]),
        &["\"d/0\"", "not unique"],
    );

    // Convert repeats the ambiguity only when asked, and says so.
    let conv = t.path().join("converted");
    fails(
        &bale(&["convert", "-q", p(&merged), "-o", p(&conv)]),
        &[
            "\"d/0\"",
            "shard-000000.tar",
            "shard-000001.tar",
            "--allow-duplicate-keys",
        ],
    );
    assert!(!conv.exists());
    for format in ["tar", "tar.zst"] {
        let conv = t.path().join(format!("converted.{format}"));
        ok(&bale(&[
            "convert",
            "-q",
            "--format",
            format,
            "--allow-duplicate-keys",
            p(&merged),
            "-o",
            p(&conv),
        ]));
        let o = bale(&["verify", p(&conv)]);
        ok(&o);
        assert!(stdout(&o).contains("key \"d/0\""), "{}", describe(&o));
    }

    // Not allowed by the manifest (hand-edited here): verify's error.
    let path = merged.join("bale.json");
    let mut m: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    m["created_by"]["options"]["allow_duplicate_keys"] = false.into();
    fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    for level in [&[][..], &["--quick"][..]] {
        let mut args = vec!["verify"];
        args.extend_from_slice(level);
        args.push(p(&merged));
        let o = bale(&args);
        assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
        let out = stdout(&o);
        let line = out
            .lines()
            .find(|l| l.contains("key \"d/0\""))
            .unwrap_or_else(|| panic!("{}", describe(&o)));
        assert!(
            !line.starts_with("warning")
                && line.contains("not unique")
                && line.contains("shard-000000.tar"),
            "{line}"
        );
    }
}

#[test]
fn verify_quick_checks_labels_too() {
    let t = tempfile::tempdir().unwrap();
    let tar = t.path().join("a.tar");
    tar_of(&tar, &[("k.cls", b"1"), ("k.txt", b"x"), ("m.cls", b"2")]);
    let ds = t.path().join("ds");
    ok(&index(&ds, &[&tar], &[]));
    ok(&bale(&["verify", "-q", "--quick", p(&ds)]));
    let mut bytes = fs::read(&tar).unwrap();
    assert_eq!(bytes[512], b'1');
    bytes[512] = b'x';
    fs::write(&tar, bytes).unwrap();
    let o = bale(&["verify", "--quick", p(&ds)]);
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    let out = stdout(&o);
    assert!(
        out.contains("key \"k\" member \"cls\"") && out.contains("not a decimal integer"),
        "{}",
        describe(&o)
    );
    assert!(!out.contains("key \"m\""), "{out}");
}

#[test]
fn verify_decode_takes_the_max_pixels_its_message_names() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    fs::create_dir_all(input.join("d")).unwrap();
    image::RgbImage::from_pixel(20, 10, image::Rgb([9, 9, 9]))
        .save(input.join("d/big.png"))
        .unwrap();
    let ds = t.path().join("ds");
    ok(&bale(&[
        "pack",
        "-q",
        "--labels",
        "none",
        "-o",
        p(&ds),
        p(&input),
    ]));
    ok(&bale(&["verify", "-q", "--decode", p(&ds)]));
    let o = bale(&["verify", "--decode", "--max-pixels", "199", p(&ds)]);
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    let out = stdout(&o);
    assert!(
        out.contains("key \"d/big\"")
            && out.contains("20x10 = 200 pixels")
            && out.contains("--max-pixels"),
        "{out}"
    );
    ok(&bale(&[
        "verify",
        "-q",
        "--decode",
        "--max-pixels",
        "200",
        p(&ds),
    ]));
    // Only with --decode, and at least 1.
    assert_eq!(
        bale(&["verify", "--max-pixels", "200", p(&ds)])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        bale(&["verify", "--decode", "--max-pixels", "0", p(&ds)])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn convert_follows_a_symlinked_shard_as_the_readers_do_and_refuses_what_they_refuse() {
    let t = tempfile::tempdir().unwrap();
    let outside = t.path().join("elsewhere");
    fs::create_dir_all(&outside).unwrap();
    // A bale dataset and an MDS one, each with its shard moved out of its
    // directory and a symlink left in its place.
    let input = t.path().join("in");
    fs::create_dir_all(input.join("d")).unwrap();
    fs::write(input.join("d/a.txt"), b"bale sample").unwrap();
    let bale_ds = t.path().join("bale");
    ok(&bale(&[
        "pack",
        "-q",
        "--labels",
        "none",
        "-o",
        p(&bale_ds),
        p(&input),
    ]));
    let mds = t.path().join("mds");
    mds_one_column(&mds, "txt", "str", None, &[b"mds sample".to_vec()]);
    let shards = [
        (bale_ds.join("shard-000000.tar"), outside.join("bale.tar")),
        (mds.join("shard.00000.mds"), outside.join("shard.mds")),
    ];
    for (at, to) in &shards {
        fs::rename(at, to).unwrap();
        std::os::unix::fs::symlink(to, at).unwrap();
    }
    // Followed to a regular file: read by every reader, converted by convert.
    let o = bale(&["get", p(&bale_ds), "d/a", "--ext", "txt"]);
    ok(&o);
    assert_eq!(stdout(&o), "bale sample");
    for (src, want) in [(&bale_ds, "bale sample"), (&mds, "mds sample")] {
        let out = t.path().join(format!(
            "out-{}",
            src.file_name().unwrap().to_str().unwrap()
        ));
        ok(&convert(src, &out));
        let all = crate::common::samples(&out);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].1[0].1, want.as_bytes());
    }
    // A link to a device, a FIFO or nothing: refused by the readers and by
    // convert alike, naming the shard, never read or waited on.
    let fifo = outside.join("fifo");
    crate::common::mkfifo(&fifo);
    for (target, what) in [
        (Path::new("/dev/zero"), "not a regular file"),
        (fifo.as_path(), "not a regular file"),
        (outside.join("gone").as_path(), "No such file"),
    ] {
        for (at, _) in &shards {
            fs::remove_file(at).unwrap();
            std::os::unix::fs::symlink(target, at).unwrap();
        }
        let o = crate::common::output_within(
            &mut crate::common::bale_cmd(&["get", p(&bale_ds), "d/a", "--ext", "txt"]),
            std::time::Duration::from_secs(20),
        );
        fails(&o, &["shard-000000.tar", what]);
        for src in [&bale_ds, &mds] {
            let out = t.path().join("refused");
            let o = crate::common::output_within(
                &mut crate::common::bale_cmd(&["convert", "-q", p(src), "-o", p(&out)]),
                std::time::Duration::from_secs(20),
            );
            let name = if src == &mds {
                "shard.00000.mds"
            } else {
                "shard-000000.tar"
            };
            fails(&o, &[name, what]);
            assert!(!out.join("bale.json").exists());
        }
    }
}

#[test]
fn pack_makes_one_sample_of_a_key_and_refuses_two_files_for_one_member() {
    let t = tempfile::tempdir().unwrap();
    let (r1, r2) = (t.path().join("r1"), t.path().join("r2"));
    for (root, ext) in [(&r1, "txt"), (&r2, "txt"), (&r2, "json")] {
        fs::create_dir_all(root.join("a")).unwrap();
        fs::write(
            root.join(format!("a/0001.{ext}")),
            format!("{}", root.display()),
        )
        .unwrap();
    }
    // Two files for member .txt of key a/0001: refused, naming both.
    let out = t.path().join("out");
    let o = bale(&[
        "pack",
        "-q",
        "--labels",
        "none",
        "-o",
        p(&out),
        p(&r1),
        p(&r2),
    ]);
    assert!(!o.status.success(), "{}", describe(&o));
    let err = stderr(&o);
    for want in [
        p(&r1.join("a/0001.txt")),
        p(&r2.join("a/0001.txt")),
        "\"a/0001\"",
        "unique",
    ] {
        assert!(err.contains(want), "stderr lacks {want:?}:\n{err}");
    }
    assert!(!out.join("bale.json").exists());
    // One file listed twice (by two spellings of its path) is one member.
    let list = t.path().join("list");
    fs::write(
        &list,
        "a/0001.txt\n./a/0001.txt\na/../a/0001.json\na/0001.json\n",
    )
    .unwrap();
    ok(&bale(&[
        "pack",
        "-q",
        "--labels",
        "none",
        "--files-from",
        p(&list),
        "-o",
        p(&out),
        p(&r2),
    ]));
    let all = crate::common::samples(&out);
    assert_eq!(all.len(), 1, "{all:?}");
    let exts: Vec<&str> = all[0].1.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!((all[0].0.as_str(), exts), ("a/0001", vec!["json", "txt"]));
}

// ---- decoder bounds -----------------------------------------------------

/// A GIF whose logical screen is `screen` x `screen` pixels and whose one
/// frame is `frame` x `frame`, at the screen's corner.
fn gif_past_its_screen(frame: u16, screen: u16) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut enc = image::codecs::gif::GifEncoder::new_with_speed(&mut out, 30);
        let img = image::RgbaImage::from_pixel(
            u32::from(frame),
            u32::from(frame),
            image::Rgba([7, 7, 7, 255]),
        );
        enc.encode_frame(image::Frame::new(img)).unwrap();
    }
    out[6..8].copy_from_slice(&screen.to_le_bytes());
    out[8..10].copy_from_slice(&screen.to_le_bytes());
    out
}

#[test]
fn a_gif_frame_past_its_screen_counts_against_the_pixel_limit() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    fs::create_dir_all(input.join("d")).unwrap();
    fs::write(input.join("d/wide.gif"), gif_past_its_screen(1200, 10)).unwrap();
    let ds = t.path().join("ds");
    ok(&bale(&[
        "pack",
        "-q",
        "--labels",
        "none",
        "-o",
        p(&ds),
        p(&input),
    ]));
    // The header says 10x10 = 100 pixels; the frame holds 1,440,000.
    let o = bale(&["verify", "--decode", "--max-pixels", "1000000", p(&ds)]);
    assert_eq!(o.status.code(), Some(1), "{}", describe(&o));
    assert!(
        stdout(&o).contains("1200x1200 = 1440000 pixels, more than the limit of 1000000"),
        "{}",
        describe(&o)
    );
    ok(&bale(&[
        "verify",
        "-q",
        "--decode",
        "--max-pixels",
        "1440000",
        p(&ds),
    ]));
    // The pack's image stage gives the same verdict.
    let out = t.path().join("staged");
    let o = bale(&[
        "pack",
        "-q",
        "--labels",
        "none",
        "--image-format",
        "png",
        "--max-pixels",
        "1000000",
        "-o",
        p(&out),
        p(&input),
    ]);
    assert!(!o.status.success(), "{}", describe(&o));
    assert!(
        stderr(&o).contains("1200x1200 = 1440000 pixels"),
        "{}",
        describe(&o)
    );
}
