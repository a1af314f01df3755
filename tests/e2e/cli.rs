//! The command line's conventions, through the real binary: generated shell
//! completions and manual pages, documented exit codes with usage errors
//! told apart, counts in the right number, binary units on every line, a
//! readable "made by" line, and progress estimates that do not start wild.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use bale_tests::{assert_success as ok, bale_bin, describe as text};

fn bale(args: &[&str]) -> Output {
    Command::new(bale_bin())
        .args(args)
        .output()
        .expect("cannot run bale")
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// One class directory holding one sample of two members.
fn one_sample_tree(root: &Path) {
    fs::create_dir_all(root.join("cat")).unwrap();
    fs::write(root.join("cat/0001.txt"), b"a cat").unwrap();
    fs::write(root.join("cat/0001.json"), b"{}").unwrap();
}

#[test]
fn completion_scripts_are_generated_for_bash_zsh_and_fish() {
    let bash = bale(&["completions", "bash"]);
    ok(&bash);
    let script = out(&bash);
    // Every command and a recent option are completed.
    for word in [
        "_bale()",
        "pack",
        "export-index",
        "completions",
        "--allow-empty",
    ] {
        assert!(script.contains(word), "bash script lacks {word:?}");
    }
    // bash itself parses it.
    let t = tempfile::tempdir().unwrap();
    let file = t.path().join("bale.bash");
    fs::write(&file, &script).unwrap();
    ok(&Command::new("bash").arg("-n").arg(&file).output().unwrap());

    let zsh = bale(&["completions", "zsh"]);
    ok(&zsh);
    assert!(out(&zsh).starts_with("#compdef bale"), "{}", text(&zsh));
    assert!(out(&zsh).contains("--shard-size"), "{}", text(&zsh));

    let fish = bale(&["completions", "fish"]);
    ok(&fish);
    assert!(
        out(&fish).contains("complete -c bale") && out(&fish).contains("stage"),
        "{}",
        text(&fish)
    );

    // An unknown shell is a usage error.
    let bad = bale(&["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(err(&bad).contains("possible values"), "{}", text(&bad));
}

#[test]
fn the_manual_pages_are_generated_with_the_exit_status() {
    let man = bale(&["man"]);
    ok(&man);
    let page = out(&man);
    assert!(
        page.starts_with(".ie") || page.contains(".TH bale"),
        "{page}"
    );
    assert!(page.contains(".TH bale 1"), "{page}");
    // The exit codes are in the page, as in --help.
    assert!(
        page.contains("Exit status:") && page.contains("130"),
        "{page}"
    );

    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("man1");
    ok(&bale(&["man", "--dir", s(&dir)]));
    for page in [
        "bale.1",
        "bale-pack.1",
        "bale-verify.1",
        "bale-completions.1",
    ] {
        let text = fs::read_to_string(dir.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page}: {text}");
    }
    let pack = fs::read_to_string(dir.join("bale-pack.1")).unwrap();
    assert!(pack.contains("allow\\-empty"), "{pack}");
}

#[test]
fn help_documents_the_exit_codes_and_usage_errors_are_told_apart() {
    let help = bale(&["--help"]);
    ok(&help);
    let h = out(&help);
    let status = &h[h.find("Exit status:").expect("no exit status in --help")..];
    for line in ["  0 ", "  1 ", "  2 ", "  130 "] {
        assert!(status.contains(line), "{status}");
    }

    // A usage error: clap's message, the usage line, exit 2.
    let usage = bale(&["pack", "--no-such-flag"]);
    assert_eq!(usage.status.code(), Some(2), "{}", text(&usage));
    assert!(
        err(&usage).contains("Usage: bale pack") && err(&usage).contains("For more information"),
        "{}",
        text(&usage)
    );
    // An error running a well-formed command: exit 2 too, with no usage line.
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("nothing-here");
    let failed = bale(&["verify", s(&missing)]);
    assert_eq!(failed.status.code(), Some(2), "{}", text(&failed));
    assert!(err(&failed).starts_with("error: "), "{}", text(&failed));
    assert!(!err(&failed).contains("Usage:"), "{}", text(&failed));

    // Problems found: exit 1.
    let (tree, ds) = (t.path().join("tree"), t.path().join("ds"));
    one_sample_tree(&tree);
    ok(&bale(&["pack", s(&tree), "-o", s(&ds)]));
    let shard = ds.join("shard-000000.tar");
    let mut bytes = fs::read(&shard).unwrap();
    bytes[512] ^= 0xff; // the first member's first byte
    fs::write(&shard, bytes).unwrap();
    let damaged = bale(&["verify", s(&ds)]);
    assert_eq!(damaged.status.code(), Some(1), "{}", text(&damaged));
}

#[test]
fn one_of_anything_is_singular_and_rates_are_in_mib_per_second() {
    let t = tempfile::tempdir().unwrap();
    let (tree, ds, dali) = (
        t.path().join("tree"),
        t.path().join("ds"),
        t.path().join("dali"),
    );
    one_sample_tree(&tree);
    let pack = bale(&["pack", s(&tree), "-o", s(&ds), "--labels", "dir"]);
    ok(&pack);
    let line = out(&pack);
    assert!(
        line.starts_with("packed 1 sample into 1 shard: ")
            && line.contains("labels: dir (1 class)"),
        "{line}"
    );
    // One unit family: sizes in KiB/MiB, the rate in MiB/s.
    assert!(
        line.contains(" B in ") && line.contains(" MiB/s, ") && !line.contains("MB/s"),
        "{line}"
    );

    let verify = bale(&["verify", s(&ds)]);
    ok(&verify);
    assert!(
        err(&verify).contains("of 1 shard, 1 sample,"),
        "{}",
        text(&verify)
    );

    let export = bale(&["export-index", "--dali", s(&ds), "-o", s(&dali)]);
    ok(&export);
    assert!(
        out(&export).contains("wrote 1 DALI index file (1 sample)"),
        "{}",
        text(&export)
    );

    let stat = bale(&["stat", s(&ds)]);
    ok(&stat);
    let st = out(&stat);
    assert!(st.contains("1 in 1 shard (3 members)"), "{st}");
    assert!(st.contains("labels (1 class;"), "{st}");

    let (part, merged) = (t.path().join("part"), t.path().join("merged"));
    ok(&bale(&["pack", s(&tree), "-o", s(&part), "--part", "0/1"]));
    let merge = bale(&["merge", s(&part), "-o", s(&merged)]);
    ok(&merge);
    assert!(
        out(&merge).contains("merged 1 part into") && out(&merge).contains("1 sample in 1 shard"),
        "{}",
        text(&merge)
    );

    let all = [line, err(&verify), out(&export), st, out(&merge)].concat();
    for wrong in [
        "1 shards",
        "1 samples",
        "1 classes",
        "1 parts",
        "1 DALI index files",
    ] {
        assert!(!all.contains(wrong), "{wrong:?} in:\n{all}");
    }
}

#[test]
fn stat_tells_how_a_dataset_was_made_in_words_not_json() {
    let t = tempfile::tempdir().unwrap();
    let (tree, ds) = (t.path().join("tree"), t.path().join("ds"));
    one_sample_tree(&tree);
    ok(&bale(&[
        "pack",
        s(&tree),
        "-o",
        s(&ds),
        "--shuffle",
        "--seed",
        "7",
    ]));
    let stat = bale(&["stat", s(&ds)]);
    ok(&stat);
    let st = out(&stat);
    let made = st
        .lines()
        .find(|l| l.starts_with("made by"))
        .unwrap_or_else(|| panic!("no made-by line:\n{st}"));
    assert!(
        made.starts_with(&format!(
            "made by      bale {} pack (",
            env!("CARGO_PKG_VERSION")
        )),
        "{made}"
    );
    assert!(!made.contains(['{', '"']), "{made}");
    assert!(made.contains("seed=7"), "{made}");
}

/// `bale pack` under a terminal (`script` gives it one): every estimate of
/// the time left is unknown (`?`) or in seconds, never minutes for a pack
/// that takes a second or two.
#[test]
fn progress_estimates_of_a_short_pack_are_seconds() {
    let t = tempfile::tempdir().unwrap();
    let (tree, ds) = (t.path().join("tree"), t.path().join("ds"));
    for i in 0..3000 {
        let dir = tree.join(format!("c{}", i % 4));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(format!("{i:05}.bin")), vec![(i % 251) as u8; 4096]).unwrap();
    }
    let command = format!(
        "{} pack {} -o {} --jobs 1",
        s(&bale_bin()),
        s(&tree),
        s(&ds)
    );
    let o = Command::new("script")
        .args(["-qefc", &command, "/dev/null"])
        .env("COLUMNS", "160")
        .output()
        .expect("cannot run `script` (util-linux)");
    ok(&o);
    let screen = out(&o);
    assert!(screen.contains("packed 3000 samples"), "{}", text(&o));
    let etas: Vec<&str> = screen
        .split("eta ")
        .skip(1)
        .map(|rest| rest.split(')').next().unwrap_or(""))
        .collect();
    for eta in &etas {
        let seconds = eta
            .strip_suffix('s')
            .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()));
        assert!(*eta == "?" || seconds, "eta {eta:?} in {etas:?}");
    }
}
