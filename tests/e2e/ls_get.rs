//! `bale ls` and `bale get` (issue 6): listing, lookup by index and key,
//! writing members, and refusing names that would escape the output directory.

use std::path::Path;

use bale_format::{Compression, CreatedBy, Manifest, Member, ShardFileWriter};
use serde_json::Value;

use crate::common::shown;
use crate::verify::{PNG, bale, caption, make_dataset, text};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn ls_lists_every_sample_in_order() {
    for c in [Compression::None, Compression::Zstd] {
        let tmp = tempfile::tempdir().unwrap();
        make_dataset(tmp.path(), c, false);
        let out = bale(&["ls", s(tmp.path())]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        // Every sample's line (index, key, label, members and sizes), the
        // same whichever the compression.
        insta::assert_snapshot!("ls", text(&out.stdout));
        let out = bale(&["ls", "--json", s(tmp.path())]);
        let first: Value = serde_json::from_str(text(&out.stdout).lines().nth(5).unwrap()).unwrap();
        assert_eq!(
            first,
            serde_json::json!({
                "index": 5, "key": "dog/0005", "shard": m_file(c, 1), "label": 1, "label_name": "dog",
                "members": [{"ext": "png", "size": PNG.len()}, {"ext": "cls", "size": 1}, {"ext": "txt", "size": caption(5).len()}],
            })
        );
        let out = bale(&["ls", "--no-labels", s(tmp.path())]);
        assert!(text(&out.stdout).starts_with("0\tcat/0000\t-\tpng:"));
    }
}

fn m_file(c: Compression, n: u64) -> String {
    bale_format::shard_file_name("shard", n, c)
}

#[test]
fn get_by_index_and_key_to_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    make_dataset(tmp.path(), Compression::Zstd, false);
    let by_index = bale(&["get", s(tmp.path()), "9", "--ext", "txt"]);
    assert!(by_index.status.success(), "{}", text(&by_index.stderr));
    assert_eq!(text(&by_index.stdout), caption(9));
    let by_key = bale(&["get", s(tmp.path()), "dog/0009", "--ext", "txt"]);
    assert_eq!(by_key.stdout, by_index.stdout);
    let png = bale(&["get", s(tmp.path()), "cat/0004", "--ext", "png"]);
    assert_eq!(png.stdout, PNG);
    // Unknown member, index out of range, unknown key: errors naming what
    // is missing; without --ext or -o, what to do. The whole messages.
    for (name, args) in [
        ("get-no-member", &["3", "--ext", "jpg"][..]),
        ("get-index-out-of-range", &["12", "--ext", "txt"]),
        ("get-no-key", &["bird/0001", "--ext", "txt"]),
        ("get-neither-ext-nor-out", &["3"]),
    ] {
        let mut all = vec!["get", s(tmp.path())];
        all.extend(args);
        let out = bale(&all);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", text(&out.stderr));
        insta::assert_snapshot!(name, shown(&out, &[(s(tmp.path()), "[DS]")]));
    }
}

#[test]
fn numeric_keys_and_the_key_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let mut w =
        ShardFileWriter::create(tmp.path(), "shard-000000.tar", Compression::None, 0).unwrap();
    for key in ["10", "3", "x"] {
        w.writer()
            .write_sample(
                key,
                &[Member {
                    ext: "txt",
                    data: format!("I am {key}").as_bytes(),
                }],
            )
            .unwrap();
    }
    let created_by = CreatedBy {
        tool: "bale".into(),
        version: "t".into(),
        command: "t".into(),
        options: Value::Null,
    };
    Manifest::new(vec![w.finish().unwrap()], None, created_by)
        .write(tmp.path())
        .unwrap();
    let get = |args: &[&str]| {
        let mut a = vec!["get", s(tmp.path())];
        a.extend_from_slice(args);
        text(&bale(&a).stdout)
    };
    assert_eq!(get(&["1", "--ext", "txt"]), "I am 3"); // index 1
    assert_eq!(get(&["3", "--ext", "txt"]), "I am 3"); // out of range as an index: a key
    assert_eq!(get(&["0", "--ext", "txt"]), "I am 10");
    assert_eq!(get(&["--key", "10", "--ext", "txt"]), "I am 10");
    assert_eq!(get(&["2", "--ext", "txt"]), "I am x");
}

#[test]
fn get_writes_a_sample_to_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let out_dir = tmp.path().join("out");
    let out = bale(&["get", s(&ds), "dog/0003", "-o", s(&out_dir)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read(out_dir.join("dog/0003.png")).unwrap(), PNG);
    assert_eq!(std::fs::read(out_dir.join("dog/0003.cls")).unwrap(), b"1");
    assert_eq!(
        std::fs::read_to_string(out_dir.join("dog/0003.txt")).unwrap(),
        caption(3)
    );
    // Existing files are not overwritten without --force.
    std::fs::write(out_dir.join("dog/0003.txt"), b"mine").unwrap();
    let out = bale(&["get", s(&ds), "dog/0003", "-o", s(&out_dir)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("already exists; use --force"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read(out_dir.join("dog/0003.txt")).unwrap(),
        b"mine"
    );
    let out = bale(&["get", s(&ds), "dog/0003", "-o", s(&out_dir), "--force"]);
    assert!(out.status.success());
    assert_eq!(
        std::fs::read_to_string(out_dir.join("dog/0003.txt")).unwrap(),
        caption(3)
    );
    // --ext with -o FILE.
    let file = tmp.path().join("one.txt");
    let out = bale(&["get", s(&ds), "5", "--ext", "txt", "-o", s(&file)]);
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), caption(5));
}

#[test]
fn get_refuses_to_write_through_symlinks_out_of_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let out_dir = tmp.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    // out/cat -> ../outside: writing cat/0000.* would land outside out/.
    std::os::unix::fs::symlink(&outside, out_dir.join("cat")).unwrap();
    let out = bale(&["get", s(&ds), "cat/0000", "-o", s(&out_dir)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("is a symlink; refusing to write through it"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    // A symlinked file name is not followed either, even with --force.
    std::fs::create_dir(out_dir.join("dog")).unwrap();
    let victim = outside.join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    std::os::unix::fs::symlink(&victim, out_dir.join("dog/0001.png")).unwrap();
    let out = bale(&["get", s(&ds), "dog/0001", "-o", s(&out_dir), "--force"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("symlink"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    let link_file = tmp.path().join("link.txt");
    std::os::unix::fs::symlink(&victim, &link_file).unwrap();
    let out = get_txt_forced(&ds, &link_file);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
}

/// `bale get DS 1 --ext txt -o TARGET --force`.
fn get_txt_forced(ds: &Path, target: &Path) -> std::process::Output {
    bale(&[
        "get",
        s(ds),
        "1",
        "--ext",
        "txt",
        "-o",
        s(target),
        "--force",
    ])
}

/// `get --force -o` at a FIFO nobody reads, a device or a folder: refused at
/// once, naming what it is (opening the FIFO to write would block for good).
#[test]
fn get_force_refuses_what_is_not_a_regular_file_without_blocking() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let fifo = tmp.path().join("out.txt");
    crate::common::mkfifo(&fifo);
    let folder = tmp.path().join("folder");
    std::fs::create_dir(&folder).unwrap();
    for (target, kind) in [
        (fifo.as_path(), "a FIFO"),
        (Path::new("/dev/null"), "a device"),
        (folder.as_path(), "a directory"),
    ] {
        let o = crate::common::run_bounded(
            &mut crate::common::bale_cmd(&[
                "get",
                s(&ds),
                "1",
                "--ext",
                "txt",
                "-o",
                s(target),
                "--force",
            ]),
            std::time::Duration::from_secs(60),
            1024,
        );
        assert!(
            o.killed.is_none(),
            "{} hung: {}",
            target.display(),
            o.describe()
        );
        assert_eq!(o.status.and_then(|s| s.code()), Some(2), "{}", o.describe());
        let err = text(&o.stderr);
        assert!(
            err.contains(kind) && err.contains("regular files only"),
            "{err}"
        );
    }
    assert!(std::fs::read_dir(&folder).unwrap().next().is_none());
}

#[test]
fn get_never_overwrites_a_file_of_the_dataset_it_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let m = Manifest::read(&ds).unwrap();
    let shard = ds.join(&m.shards[0].file);
    let index = ds.join(&m.shards[0].index);
    let manifest = ds.join("bale.json");
    // A hard link elsewhere reaches the shard too.
    let linked = tmp.path().join("linked.tar");
    std::fs::hard_link(&shard, &linked).unwrap();
    let before: Vec<Vec<u8>> = [&shard, &index, &manifest]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    for target in [&shard, &index, &manifest, &linked] {
        let out = get_txt_forced(&ds, target);
        assert_eq!(out.status.code(), Some(2), "{}", target.display());
        assert!(
            text(&out.stderr).contains("is a file of the dataset"),
            "{}",
            text(&out.stderr)
        );
    }
    for (p, b) in [&shard, &index, &manifest].iter().zip(&before) {
        assert_eq!(&std::fs::read(p).unwrap(), b, "{} changed", p.display());
    }
    let out = bale(&["verify", s(&ds)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn get_to_a_directory_writes_nothing_when_one_target_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let out_dir = tmp.path().join("out");
    std::fs::create_dir_all(out_dir.join("dog")).unwrap();
    // The last member's name is a symlink: the others are not written first.
    std::os::unix::fs::symlink("/dev/null", out_dir.join("dog/0003.txt")).unwrap();
    let out = bale(&["get", s(&ds), "dog/0003", "-o", s(&out_dir), "--force"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("symlink"),
        "{}",
        text(&out.stderr)
    );
    let mut left: Vec<String> = std::fs::read_dir(out_dir.join("dog"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["0003.txt"]);
}
