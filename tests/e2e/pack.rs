//! `bale pack` and `bale merge` through the real binary: output that GNU tar
//! and zstd read, determinism across `--jobs`, refusals, `--on-error`,
//! failures that leave no dataset (disk full, Ctrl-C), parts and merge.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bale_format::Manifest;
use bale_tests::{assert_success as ok, describe as text, run_bale as bale};
use bale_tests::{bale_bin, extract_zstd_dict, gnu_tar, zstd_cli};

use crate::common::samples;

/// A small ImageFolder-like tree: 3 classes, `n` files of varied sizes, every 4th with a `.json`.
fn tree(root: &Path, n: usize) {
    for i in 0..n {
        let dir = root.join(format!("class_{}", i % 3));
        fs::create_dir_all(&dir).unwrap();
        let data: Vec<u8> = (0..(700 + (i * 37) % 1500))
            .map(|j| ((i * 31 + j) % 256) as u8)
            .collect();
        fs::write(dir.join(format!("{i:05}.jpg")), data).unwrap();
        if i % 4 == 0 {
            fs::write(dir.join(format!("{i:05}.json")), format!("{{\"i\": {i}}}")).unwrap();
        }
    }
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            m.insert(
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap_or_default(),
            );
        }
    }
    m
}

#[test]
fn gnu_tar_lists_and_extracts_the_shards_byte_for_byte() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 30);
    let out = t.path().join("out");
    let o = bale(&["pack", "--shard-size", "16KiB", "-o"], &[&out, &input]);
    ok(&o);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("packed 30 samples") && stdout.contains("labels: dir (3 classes)"),
        "{}",
        text(&o)
    );
    let m = Manifest::read(&out).unwrap();
    assert!(m.shards.len() > 1);
    assert_eq!(
        m.labels.as_deref().unwrap(),
        ["class_0", "class_1", "class_2"]
    );
    let x = t.path().join("x");
    fs::create_dir_all(&x).unwrap();
    let mut listed = Vec::new();
    for s in &m.shards {
        let shard = out.join(&s.file);
        let l = Command::new(gnu_tar())
            .arg("tf")
            .arg(&shard)
            .output()
            .unwrap();
        ok(&l);
        listed.extend(
            String::from_utf8(l.stdout)
                .unwrap()
                .lines()
                .map(str::to_owned),
        );
        ok(&Command::new(gnu_tar())
            .arg("xf")
            .arg(&shard)
            .arg("-C")
            .arg(&x)
            .output()
            .unwrap());
    }
    assert_eq!(
        listed.len() as u64,
        m.fields.values().map(|f| f.count).sum::<u64>()
    );
    assert!(listed.contains(&"class_1/00004.cls".to_owned()));
    for i in 0..30 {
        let rel = format!("class_{}/{i:05}.jpg", i % 3);
        assert_eq!(
            fs::read(x.join(&rel)).unwrap(),
            fs::read(input.join(&rel)).unwrap(),
            "{rel}"
        );
    }
    assert_eq!(fs::read(x.join("class_1/00004.cls")).unwrap(), b"1");
}

#[test]
fn zstd_shards_decompress_with_the_zstd_cli_into_a_tar() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 10);
    let out = t.path().join("out");
    ok(&bale(
        &["pack", "--compress", "zstd:7", "-q", "-o"],
        &[&out, &input],
    ));
    let shard = out.join("shard-000000.tar.zst");
    let dict = t.path().join("dict");
    extract_zstd_dict(&shard, &dict);
    let d = Command::new(zstd_cli())
        .arg("-D")
        .arg(&dict)
        .arg("-dc")
        .arg(&shard)
        .output()
        .unwrap();
    ok(&d);
    let tar = t.path().join("plain.tar");
    fs::write(&tar, &d.stdout).unwrap();
    let l = Command::new(gnu_tar())
        .arg("tf")
        .arg(&tar)
        .output()
        .unwrap();
    ok(&l);
    assert!(
        String::from_utf8_lossy(&l.stdout)
            .lines()
            .any(|n| n == "class_0/00000.json")
    );
    assert_eq!(
        Manifest::read(&out).unwrap().created_by.options["zstd_level"],
        7
    );
}

#[test]
fn output_is_byte_identical_with_1_and_4_jobs() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 80);
    let mut outs = Vec::new();
    for jobs in ["1", "4"] {
        let out = t.path().join(format!("out{jobs}"));
        ok(&bale(
            &[
                "pack",
                "--jobs",
                jobs,
                "--shuffle",
                "--seed",
                "5",
                "--shard-size",
                "20KiB",
                "-q",
                "-o",
            ],
            &[&out, &input],
        ));
        outs.push(files(&out));
    }
    assert!(outs[0].len() > 6, "several shards and indexes");
    assert_eq!(outs[0], outs[1]);
}

#[test]
fn refuses_a_non_empty_output_unless_forced() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 5);
    let out = t.path().join("out");
    fs::create_dir_all(&out).unwrap();
    fs::write(out.join("notes.txt"), b"keep").unwrap();
    let o = bale(&["pack", "-o"], &[&out, &input]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is not empty (use --force"),
        "{}",
        text(&o)
    );
    assert_eq!(files(&out).len(), 1);
    ok(&bale(&["pack", "--force", "-q", "-o"], &[&out, &input]));
    assert!(out.join("bale.json").exists() && out.join("notes.txt").exists());
}

#[test]
fn on_error_fail_stops_at_a_fifo_and_skip_lists_it() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 6);
    let fifo = input.join("class_1/00001.txt");
    ok(&Command::new("mkfifo").arg(&fifo).output().unwrap());
    let out = t.path().join("out");
    let o = bale(&["pack", "-o"], &[&out, &input]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("class_1/00001.txt") && err.contains("a FIFO, not a regular file"),
        "{err}"
    );
    assert!(err.contains("no dataset was written"), "{err}");
    assert!(
        !out.exists(),
        "no manifest, no directory: {:?}",
        files(&out).keys()
    );

    let o = bale(
        &["pack", "--on-error", "skip", "--json", "-o"],
        &[&out, &input],
    );
    ok(&o);
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let skipped = summary["skipped"].as_array().unwrap();
    assert_eq!(
        skipped.len(),
        2,
        "the FIFO and its sample's jpg: {skipped:?}"
    );
    assert!(
        skipped[0]["path"]
            .as_str()
            .unwrap()
            .ends_with("class_1/00001.txt")
    );
    assert_eq!(summary["samples"], 5);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("skipped 2 files"),
        "{}",
        text(&o)
    );
    assert_eq!(Manifest::read(&out).unwrap().skipped, 2);
}

#[test]
fn a_vanished_listed_file_fails_with_its_path_and_the_os_error() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 4);
    let list = t.path().join("list.txt");
    fs::write(
        &list,
        "class_0/00000.jpg\nclass_1/00001.jpg\nclass_2/gone.jpg\n",
    )
    .unwrap();
    let out = t.path().join("out");
    let o = bale(
        &["pack", "--files-from"],
        &[&list, Path::new("-o"), &out, &input],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("class_2/gone.jpg") && err.contains("No such file or directory"),
        "{err}"
    );
    assert!(!out.join("bale.json").exists());
    // From stdin, skipping the missing file.
    let mut child = Command::new(bale_bin())
        .args([
            "pack",
            "--files-from",
            "-",
            "--on-error",
            "skip",
            "-q",
            "-o",
        ])
        .arg(&out)
        .arg(&input)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&fs::read(&list).unwrap())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    ok(&o);
    let keys: Vec<String> = samples(&out).into_iter().map(|s| s.0).collect();
    assert_eq!(keys, ["class_0/00000", "class_1/00001"]);
}

/// A path's bytes as `--json` gives them (an array of numbers) in `v`.
fn json_bytes(a: &serde_json::Value, v: &serde_json::Value) -> Vec<u8> {
    a.as_array()
        .unwrap_or_else(|| panic!("no byte array: {v}"))
        .iter()
        .map(|b| u8::try_from(b.as_u64().unwrap()).unwrap())
        .collect()
}

#[test]
fn non_utf8_names_fail_or_are_skipped() {
    use std::os::unix::ffi::OsStrExt;
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 3);
    fs::write(
        input
            .join("class_0")
            .join(std::ffi::OsStr::from_bytes(b"caf\xe9.jpg")),
        b"latin-1 name",
    )
    .unwrap();
    // One with no extension is ignored as any such file is, not an error.
    fs::write(
        input
            .join("class_1")
            .join(std::ffi::OsStr::from_bytes(b"README\xff")),
        b"no extension",
    )
    .unwrap();
    // A hidden one is ignored, not an error, and named as an example.
    fs::write(
        input
            .join("class_0")
            .join(std::ffi::OsStr::from_bytes(b".h\xe9")),
        b"hidden",
    )
    .unwrap();
    let out = t.path().join("out");
    let o = bale(&["pack", "-o"], &[&out, &input]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not valid UTF-8"),
        "{}",
        text(&o)
    );
    let o = bale(&["pack", "--on-error", "skip", "-q", "-o"], &[&out, &input]);
    ok(&o);
    // Quiet, but a skipped file is an error: it is still named.
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("skipped 1 file (--on-error skip):") && err.contains("caf\\xe9.jpg"),
        "{}",
        text(&o)
    );
    assert_eq!(Manifest::read(&out).unwrap().samples, 3);
    assert_eq!(Manifest::read(&out).unwrap().skipped, 1);
    // As JSON, the path's own bytes come beside its lossy string, so that a
    // script can still name the file.
    let o = bale(
        &["pack", "--on-error", "skip", "--force", "--json", "-o"],
        &[&out, &input],
    );
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{v}");
    let raw = json_bytes(&skipped[0]["path_bytes"], &v);
    let named = std::path::Path::new(std::ffi::OsStr::from_bytes(&raw));
    assert!(
        named.ends_with(std::ffi::OsStr::from_bytes(b"class_0/caf\xe9.jpg")),
        "{v}"
    );
    assert!(named.is_file(), "{}", named.display());
    assert!(
        skipped[0]["path"]
            .as_str()
            .unwrap()
            .ends_with("caf\u{fffd}.jpg"),
        "{v}"
    );
    // So do the ignored files' examples; the summary line escapes the byte.
    let hidden = &v["ignored"]["hidden"];
    assert_eq!(hidden["count"], 1, "{v}");
    let raw = json_bytes(&hidden["examples_bytes"][0], &v);
    let named = std::path::Path::new(std::ffi::OsStr::from_bytes(&raw));
    assert!(
        named.ends_with(std::ffi::OsStr::from_bytes(b"class_0/.h\xe9")),
        "{v}"
    );
    assert!(named.is_file(), "{}", named.display());
    assert!(
        v["ignored"]["symlinks"].get("examples_bytes").is_none(),
        "{v}"
    );
    assert_eq!(v["ignored"]["no_extension"]["count"], 1, "{v}");
    assert_eq!(v["skipped"].as_array().unwrap().len(), 1, "{v}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("1 hidden, e.g. \"") && err.contains("/.h\\xe9\""),
        "{err}"
    );
}

#[test]
fn a_long_list_of_skipped_files_is_cut_on_stderr_and_whole_in_json() {
    use std::os::unix::ffi::OsStrExt;
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 2);
    for i in 0..25u8 {
        let name = [
            b"bad-".as_slice(),
            &[0xe9, b'0' + i / 10, b'0' + i % 10],
            b".jpg",
        ]
        .concat();
        fs::write(
            input
                .join("class_0")
                .join(std::ffi::OsStr::from_bytes(&name)),
            b"x",
        )
        .unwrap();
    }
    let out = t.path().join("out");
    let o = bale(&["pack", "--on-error", "skip", "-q", "-o"], &[&out, &input]);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("skipped 25 files"), "{}", text(&o));
    let named = err.lines().filter(|l| l.contains("bad-\\xe9")).count();
    assert_eq!(named, 20, "{}", text(&o));
    assert!(err.contains("... and 5 more"), "{}", text(&o));
    let o = bale(
        &["pack", "--on-error", "skip", "--force", "--json", "-o"],
        &[&out, &input],
    );
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["skipped"].as_array().unwrap().len(), 25, "{v}");
    assert_eq!(Manifest::read(&out).unwrap().skipped, 25);
}

#[test]
fn labels_from_a_csv_and_none() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 6);
    let csv = t.path().join("labels.csv");
    let mut rows = String::from("key,label\n");
    for i in 0..6 {
        let label = if i % 2 == 0 {
            "\"even, really\""
        } else {
            "odd"
        };
        rows.push_str(&format!("class_{}/{i:05},{label}\n", i % 3));
    }
    fs::write(&csv, rows).unwrap();
    let out = t.path().join("out");
    let arg = format!("csv:{}", csv.display());
    ok(&bale(
        &["pack", "-q", "--labels", &arg, "-o"],
        &[&out, &input],
    ));
    let m = Manifest::read(&out).unwrap();
    assert_eq!(m.labels.as_deref().unwrap(), ["even, really", "odd"]);
    let s = samples(&out);
    let cls = |key: &str| {
        s.iter()
            .find(|x| x.0 == key)
            .unwrap()
            .1
            .iter()
            .find(|m| m.0 == "cls")
            .map(|m| m.1.clone())
    };
    assert_eq!(cls("class_0/00000"), Some(b"0".to_vec()));
    assert_eq!(cls("class_1/00001"), Some(b"1".to_vec()));

    let out2 = t.path().join("out2");
    ok(&bale(
        &["pack", "-q", "--labels", "none", "-o"],
        &[&out2, &input],
    ));
    assert_eq!(Manifest::read(&out2).unwrap().labels, None);
    assert!(
        samples(&out2)
            .iter()
            .all(|s| s.1.iter().all(|m| m.0 != "cls"))
    );
}

#[test]
fn shard_limits_and_an_oversize_sample_warning() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 12);
    fs::write(input.join("class_0/huge.bin"), vec![9u8; 50_000]).unwrap();
    let out = t.path().join("out");
    let o = bale(
        &["pack", "--shard-size", "10KiB", "--labels", "none", "-o"],
        &[&out, &input],
    );
    ok(&o);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("warning: sample \"class_0/huge\""),
        "{}",
        text(&o)
    );
    let m = Manifest::read(&out).unwrap();
    for s in &m.shards {
        assert!(s.bytes <= 10 * 1024 || s.samples == 1, "{s:?}");
    }
    let out2 = t.path().join("out2");
    ok(&bale(
        &["pack", "-q", "--shard-samples", "5", "-o"],
        &[&out2, &input],
    ));
    let counts: Vec<u64> = Manifest::read(&out2)
        .unwrap()
        .shards
        .iter()
        .map(|s| s.samples)
        .collect();
    assert_eq!(counts, [5, 5, 3]);
    let o = bale(
        &["pack", "--shard-size", "12XB", "-o"],
        &[&t.path().join("o3"), &input],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn three_parts_merged_hold_exactly_the_samples_of_one_pack() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 40);
    let one = t.path().join("one");
    let shape = ["--shard-size", "8KiB", "--shuffle", "--seed", "9", "-q"];
    let mut args = vec!["pack"];
    args.extend(shape);
    args.push("-o");
    ok(&bale(&args, &[&one, &input]));
    let mut parts: Vec<PathBuf> = Vec::new();
    for i in 0..3 {
        let dir = t.path().join(format!("p{i}"));
        let part = format!("{i}/3");
        let mut a = args.clone();
        a.pop();
        a.extend(["--part", &part, "-o"]);
        ok(&bale(&a, &[&dir, &input]));
        assert!(
            dir.join(format!("part-{i:04}-of-0003-shard-000000.tar"))
                .exists()
        );
        parts.push(dir);
    }
    let merged = t.path().join("merged");
    // Missing a part: refused, nothing moved.
    let o = bale(&["merge", "-o"], &[&merged, &parts[0], &parts[2]]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("missing 1/3"),
        "{}",
        text(&o)
    );
    assert!(parts.iter().all(|p| p.join("bale.json").exists()));

    let p: Vec<&Path> = std::iter::once(merged.as_path())
        .chain(parts.iter().map(PathBuf::as_path))
        .collect();
    let o = bale(&["merge", "--json", "-o"], &p);
    ok(&o);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (s["parts"].as_u64(), s["copied"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(samples(&merged), samples(&one));
    let listed = Command::new(gnu_tar())
        .arg("tf")
        .arg(merged.join("shard-000000.tar"))
        .output()
        .unwrap();
    ok(&listed);
}

#[test]
fn merge_refuses_parts_cut_from_a_tree_that_changed_between_them() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 40);
    let pack_part = |i: u32, dir: &Path| {
        let part = format!("{i}/2");
        ok(&bale(
            &[
                "pack",
                "-q",
                "--shuffle",
                "--seed",
                "3",
                "--part",
                &part,
                "-o",
            ],
            &[dir, &input],
        ));
    };
    let (p0, p1) = (t.path().join("p0"), t.path().join("p1"));
    pack_part(0, &p0);
    // A sample added between the two runs moves the cut: without the
    // check, the merge would repeat some samples and lose others, and
    // verify would pass.
    fs::write(input.join("class_0/zz-added.jpg"), b"new sample").unwrap();
    pack_part(1, &p1);
    let merged = t.path().join("merged");
    let o = bale(&["merge", "-o"], &[&merged, &p0, &p1]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("another listing") && err.contains("41 samples") && err.contains("40 samples"),
        "{err}"
    );
    assert!(!merged.join("bale.json").exists());
    assert!(p0.join("bale.json").exists() && p1.join("bale.json").exists());

    // Part 1 packed again from the same tree as a new part 0: merged.
    fs::remove_dir_all(&p0).unwrap();
    pack_part(0, &p0);
    ok(&bale(&["merge", "-o"], &[&merged, &p0, &p1]));
    ok(&bale(&["verify"], &[&merged]));
    let m: serde_json::Value =
        serde_json::from_slice(&fs::read(merged.join("bale.json")).unwrap()).unwrap();
    assert_eq!(m["samples"].as_u64(), Some(41));
}

/// A tmpfs too small for the dataset, unmounted on drop.
struct SmallFs(PathBuf);
impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn disk_full_is_a_clean_error_with_no_manifest() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    for i in 0..40 {
        fs::create_dir_all(input.join("d")).unwrap();
        fs::write(input.join(format!("d/{i:03}.bin")), vec![i as u8; 20_000]).unwrap();
    }
    let mnt = t.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(
        m.status.success(),
        "this test mounts a small tmpfs (needs root): {}",
        text(&m)
    );
    let _guard = SmallFs(mnt.clone());
    let out = mnt.join("out");
    let o = bale(&["pack", "--shard-size", "64KiB", "-o"], &[&out, &input]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("No space left on device"), "{err}");
    assert!(err.contains("no dataset was written"), "{err}");
    assert!(!out.exists(), "left behind: {:?}", files(&out).keys());
}

#[test]
fn ctrl_c_leaves_no_dataset_and_says_so() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 5);
    let out = t.path().join("out");
    // The list comes from a pipe held open, so the pack waits in discovery until we close it.
    let mut child = Command::new(bale_bin())
        .args(["pack", "--files-from", "-", "-o"])
        .arg(&out)
        .arg(&input)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The output directory is made after the Ctrl-C handler is installed.
    let start = Instant::now();
    while !out.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "bale pack never created its output"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    ok(&Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .output()
        .unwrap());
    // The pack stops without waiting for the list (it may be gone before
    // this write, which then fails with a broken pipe).
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(b"class_0/00000.jpg\n");
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("interrupted: stopping at the next safe point")
            && err.contains("no dataset was written"),
        "{err}"
    );
    assert!(!out.exists(), "left behind: {:?}", files(&out).keys());
}

#[test]
fn merge_across_filesystems_needs_copy_and_then_keeps_the_parts() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 12);
    let mut parts = Vec::new();
    for i in 0..2 {
        let dir = t.path().join(format!("p{i}"));
        let part = format!("{i}/2");
        ok(&bale(
            &["pack", "-q", "--shard-samples", "4", "--part", &part, "-o"],
            &[&dir, &input],
        ));
        parts.push(dir);
    }
    let mnt = t.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(
        m.status.success(),
        "this test mounts a tmpfs (needs root): {}",
        text(&m)
    );
    let _guard = SmallFs(mnt.clone());
    let merged = mnt.join("merged");
    let o = bale(&["merge", "-o"], &[&merged, &parts[0], &parts[1]]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--copy"),
        "{}",
        text(&o)
    );
    assert!(!merged.join("bale.json").exists());
    assert!(
        parts.iter().all(|p| p.join("bale.json").exists()),
        "nothing moved"
    );

    let o = bale(
        &["merge", "--copy", "--json", "-o"],
        &[&merged, &parts[0], &parts[1]],
    );
    ok(&o);
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (s["renamed"].as_u64(), s["samples"].as_u64()),
        (Some(0), Some(12))
    );
    assert!(
        parts.iter().all(|p| p.join("bale.json").exists()),
        "copied parts stay whole"
    );
    let keys: Vec<String> = samples(&merged).into_iter().map(|s| s.0).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert_eq!(keys.len(), 12);
}

/// A pack that finds no sample fails (a typo in a path or a glob) and
/// writes nothing; with --allow-empty it writes the empty dataset, warns and
/// names the first file of each kind it left out.
#[test]
fn a_pack_of_no_sample_fails_unless_allowed_and_names_what_it_left_out() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    fs::create_dir_all(input.join(".hidden")).unwrap();
    fs::write(input.join(".hidden/a.txt"), b"x").unwrap();
    fs::write(input.join("README"), b"x").unwrap();
    let out = t.path().join("out");
    let o = bale(&["pack", "-o"], &[&out, &input]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("error: no sample to pack") && err.contains("--allow-empty"),
        "{err}"
    );
    assert!(!out.join("bale.json").exists(), "{}", text(&o));
    let o = bale(&["pack", "--allow-empty", "-o"], &[&out, &input]);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning: no sample was packed") && err.contains("0 samples"),
        "{err}"
    );
    assert!(
        err.contains("1 without an extension, e.g. ") && err.contains("README\""),
        "{err}"
    );
    assert!(
        err.contains("1 hidden, e.g. ") && err.contains(".hidden\""),
        "{err}"
    );
    // A pack with samples does not warn.
    fs::write(input.join("a.txt"), b"x").unwrap();
    let o = bale(&["pack", "--force", "-o"], &[&out, &input]);
    ok(&o);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("no sample was packed"));
}
