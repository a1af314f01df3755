//! `bale pack` with its listing spilled to disk in sorted runs
//! (`BALE_PACK_RUN_FILES` makes the runs tiny): the same bytes as a pack
//! planned in memory, for whole packs and parts, and no runs left behind
//! when it fails.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use bale_tests::{assert_success as ok, bale_bin, describe as text};

/// Three classes, a file outside any class, `.json` beside every 4th image.
fn tree(root: &Path, n: usize) {
    for i in 0..n {
        let dir = root.join(format!("class_{}", i % 3));
        fs::create_dir_all(&dir).unwrap();
        let data: Vec<u8> = (0..(100 + (i * 37) % 900))
            .map(|j| ((i * 31 + j) % 256) as u8)
            .collect();
        fs::write(dir.join(format!("{i:05}.jpg")), data).unwrap();
        if i % 4 == 0 {
            fs::write(dir.join(format!("{i:05}.json")), format!("{{\"i\": {i}}}")).unwrap();
        }
    }
    fs::write(root.join("top.txt"), b"outside").unwrap();
}

fn pack(run: Option<usize>, args: &[&str], input: &Path, out: &Path) -> Output {
    let mut cmd = Command::new(bale_bin());
    cmd.arg("pack").arg(input).arg("-o").arg(out).args(args);
    cmd.args(["--shard-size", "20000", "-q"]);
    match run {
        Some(n) => cmd.env("BALE_PACK_RUN_FILES", n.to_string()),
        None => cmd.env_remove("BALE_PACK_RUN_FILES"),
    };
    cmd.output().unwrap()
}

/// Every file of a dataset directory: name -> bytes.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_spilled_pack_writes_the_bytes_of_one_planned_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    tree(&input, 200);
    for args in [
        &["--labels", "dir"][..],
        &["--labels", "none"][..],
        &["--labels", "auto", "--part", "1/3"][..],
        &["--labels", "dir", "--part", "0/3"][..],
    ] {
        let mem = dir.path().join("mem");
        let o = pack(None, args, &input, &mem);
        ok(&o);
        let want = files(&mem);
        assert!(want.len() > 3, "{args:?}: several shards");
        for run in [1, 7, 64] {
            let spilled = dir.path().join(format!("spilled-{run}"));
            let o = pack(Some(run), args, &input, &spilled);
            ok(&o);
            assert!(
                files(&spilled) == want,
                "{args:?}, runs of {run}: the output differs"
            );
            fs::remove_dir_all(&spilled).unwrap();
        }
        fs::remove_dir_all(&mem).unwrap();
    }
}

#[test]
fn a_spilled_pack_that_fails_leaves_no_runs() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    tree(&a, 30);
    // The same key and extension under a second root: a duplicate, found
    // while the runs are merged.
    let b = dir.path().join("b");
    fs::create_dir_all(b.join("class_2")).unwrap();
    fs::write(b.join("class_2/00029.jpg"), b"other").unwrap();
    let out = dir.path().join("out");
    let mut cmd = Command::new(bale_bin());
    cmd.arg("pack")
        .arg(&a)
        .arg(&b)
        .arg("-o")
        .arg(&out)
        .arg("-q");
    let o = cmd.env("BALE_PACK_RUN_FILES", "4").output().unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("00029.jpg"), "{}", text(&o));
    let left: Vec<String> = fs::read_dir(&out)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "left in the output: {left:?}");
}

#[test]
fn a_bad_file_found_while_spilling_leaves_no_runs() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    tree(&input, 60);
    let fifo = input.join("class_1/zz.jpg");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let out = dir.path().join("out");
    let o = pack(Some(2), &[], &input, &out);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("zz.jpg"), "{}", text(&o));
    let left: Vec<String> = fs::read_dir(&out)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "left in the output: {left:?}");
}

#[test]
fn a_forced_spilled_pack_keeps_an_input_an_old_shard_links_to() {
    // An old shard's name is a hard link to an input file: `--force`
    // must tell it from the old output, as a pack planned in memory does.
    let mut outcomes = Vec::new();
    for run in [None, Some(3)] {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in");
        tree(&input, 40);
        let out = dir.path().join("out");
        ok(&pack(None, &[], &input, &out));
        let shard = out.join("shard-000000.tar");
        fs::remove_file(&shard).unwrap();
        let linked = input.join("class_0/00000.jpg");
        fs::hard_link(&linked, &shard).unwrap();
        let before = fs::read(&linked).unwrap();
        let o = pack(run, &["--force"], &input, &out);
        assert_eq!(
            fs::read(&linked).unwrap(),
            before,
            "{run:?}: the input changed"
        );
        let said = String::from_utf8_lossy(&o.stderr).replace(&*dir.path().to_string_lossy(), "D");
        outcomes.push((o.status.code(), said, files(&out)));
    }
    assert!(
        outcomes[0] == outcomes[1],
        "{:?}\n{:?}",
        outcomes[0].0,
        outcomes[1].0
    );
}
