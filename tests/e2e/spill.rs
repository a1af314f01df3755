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
