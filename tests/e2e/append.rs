//! `bale pack --append`: new shards after the old ones, a new manifest as
//! the commit point, old shards never rewritten, old readers keep their
//! view, and a refused, failed or killed append leaves the dataset as it
//! was.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use bale_format::Manifest;
use bale_reader::Dataset;

use crate::common::{Bounded, bale_bounded, bale_cmd, pack_quiet, samples, snapshot, text_tree};

/// `bale pack -q ARGS... -o OUT IN --append`.
fn append(input: &Path, out: &Path, extra: &[&str]) -> Bounded {
    let mut args: Vec<&OsStr> = vec!["pack".as_ref(), "-q".as_ref(), "--append".as_ref()];
    args.extend(extra.iter().map(OsStr::new));
    args.extend(["-o".as_ref(), out.as_os_str(), input.as_os_str()]);
    bale_bounded(&args)
}

pub(crate) fn ok(o: &Bounded) -> bool {
    o.killed.is_none() && o.status.is_some_and(|s| s.success())
}

pub(crate) fn verifies(dir: &Path) {
    let o = bale_bounded(&["verify".as_ref(), dir.as_os_str()]);
    assert!(ok(&o), "bale verify: {}", o.describe());
}

/// Every listed file of the dataset: name -> (bytes, mtime).
pub(crate) fn shard_files(dir: &Path) -> Vec<(String, Vec<u8>, SystemTime)> {
    let m = Manifest::read(dir).unwrap();
    m.shards
        .iter()
        .flat_map(|s| [s.file.clone(), s.index.clone()])
        .map(|f| {
            let p = dir.join(&f);
            (
                f,
                fs::read(&p).unwrap(),
                fs::metadata(&p).unwrap().modified().unwrap(),
            )
        })
        .collect()
}

/// Two trees of an ImageFolder-like layout: `a` (classes `cat`, `dog`)
/// and `b` (new keys, class `cat` only).
pub(crate) fn trees(t: &Path) -> (PathBuf, PathBuf) {
    let a = t.join("a");
    text_tree(&a, "cat", "a-cat", 30);
    text_tree(&a, "dog", "a-dog", 30);
    let b = t.join("b");
    text_tree(&b, "cat", "b-cat", 40);
    // New keys: text_tree numbers from 0, like `a`'s.
    for i in 0..40 {
        fs::rename(
            b.join(format!("cat/{i:04}.txt")),
            b.join(format!("cat/n{i:04}.txt")),
        )
        .unwrap();
    }
    (a, b)
}

#[test]
fn append_adds_shards_after_the_old_ones_which_stay_byte_for_byte_and_old_readers_keep_their_view()
{
    let t = tempfile::tempdir().unwrap();
    let (a, b) = trees(t.path());
    let ds = t.path().join("ds");
    pack_quiet(&a, &ds, &["--shard-samples", "25"]);
    let before = shard_files(&ds);
    let old_samples = samples(&ds);
    let old = Dataset::open(&ds).unwrap();
    assert_eq!(old.len(), 60);
    // mtimes have a coarse clock: a rewrite within it would keep them.
    std::thread::sleep(Duration::from_millis(20));

    let o = append(&b, &ds, &["--shard-samples", "25"]);
    assert!(ok(&o), "{}", o.describe());

    // The old files are untouched, the new ones come after them.
    let after = shard_files(&ds);
    assert_eq!(after[..before.len()], before[..]);
    let m = Manifest::read(&ds).unwrap();
    let names: Vec<&str> = m.shards.iter().map(|s| s.file.as_str()).collect();
    assert_eq!(
        names,
        [
            "shard-000000.tar",
            "shard-000001.tar",
            "shard-000002.tar",
            "shard-000003.tar",
            "shard-000004.tar"
        ]
    );
    assert_eq!(m.samples, 100);
    assert_eq!(m.labels, Some(vec!["cat".to_owned(), "dog".to_owned()]));
    assert_eq!(m.created_by.options["appends"], 1);

    // The reader opened before still reads exactly its own samples.
    assert_eq!(old.len(), 60);
    for (i, (key, members)) in old_samples.iter().enumerate() {
        let s = old.get(i as u64).unwrap();
        assert_eq!(s.key(), key);
        for (ext, bytes) in members {
            assert_eq!(s.field(ext), Some(&bytes[..]), "{key}.{ext}");
        }
    }
    // A new open sees old and new; the new samples have the dataset's
    // class numbers (`cat` is 0 in both).
    let new = Dataset::open(&ds).unwrap();
    assert_eq!(new.len(), 100);
    let all = samples(&ds);
    assert_eq!(all[..60], old_samples[..]);
    let s = new.get_by_key("cat/n0007").unwrap();
    assert_eq!(s.label(), Some(0));
    assert_eq!(s.field("txt").unwrap(), b"b-cat sample 7: xxxxxxx\n");
    verifies(&ds);

    // stat and ls show all of it.
    let o = bale_bounded(&["ls".as_ref(), ds.as_os_str()]);
    assert!(ok(&o), "{}", o.describe());
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 100);
    let o = bale_bounded(&["stat".as_ref(), "--json".as_ref(), ds.as_os_str()]);
    assert!(ok(&o), "{}", o.describe());
    let j: serde_json::Value = serde_json::from_str(&String::from_utf8_lossy(&o.stdout)).unwrap();
    assert_eq!(j["samples"], 100, "{j}");
}

#[test]
fn a_key_the_dataset_holds_is_refused_before_anything_is_written_naming_key_and_file() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = trees(t.path());
    let ds = t.path().join("ds");
    pack_quiet(&a, &ds, &[]);
    // One file of `b` takes a key of `a`'s.
    fs::write(b.join("cat/0003.txt"), b"again").unwrap();
    let before = snapshot(&ds);
    let o = append(&b, &ds, &[]);
    assert!(!ok(&o), "{}", o.describe());
    let err = o.stderr_text();
    assert!(
        err.contains("\"cat/0003\"") && err.contains("cat/0003.txt") && err.contains("already"),
        "{err}"
    );
    assert_eq!(snapshot(&ds), before);

    // A key repeated within the new files (two roots holding the same
    // file) is refused as a fresh pack refuses it, naming both files.
    fs::remove_file(b.join("cat/0003.txt")).unwrap();
    let c = t.path().join("c");
    text_tree(&c, "cat", "c-cat", 1);
    fs::rename(c.join("cat/0000.txt"), c.join("cat/n0001.txt")).unwrap();
    let o = bale_bounded(&[
        "pack".as_ref(),
        "-q".as_ref(),
        "--append".as_ref(),
        "-o".as_ref(),
        ds.as_os_str(),
        b.as_os_str(),
        c.as_os_str(),
    ]);
    let err = o.stderr_text();
    assert!(o.failed_cleanly(), "{}", o.describe());
    assert!(
        err.contains("n0001.txt") && err.contains("both map to member .txt"),
        "{err}"
    );
    assert_eq!(snapshot(&ds), before);
}

#[test]
fn options_unlike_the_datasets_are_refused_naming_the_option() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = trees(t.path());
    let ds = t.path().join("ds");
    pack_quiet(&a, &ds, &["--shard-size", "1MiB"]);
    let before = snapshot(&ds);
    for (extra, named) in [
        (
            &["--shard-size", "1MiB", "--compress", "zstd"][..],
            "compression",
        ),
        (&["--shard-size", "2MiB"][..], "shard size"),
        (
            &["--shard-size", "1MiB", "--shard-samples", "10"][..],
            "shard sample limit",
        ),
        (&["--shard-size", "1MiB", "--labels", "none"][..], "labels"),
    ] {
        let o = append(&b, &ds, extra);
        assert!(!ok(&o), "{extra:?}: {}", o.describe());
        assert!(
            o.stderr_text().contains(named),
            "{extra:?}: {}",
            o.describe()
        );
        assert_eq!(snapshot(&ds), before, "{extra:?}");
    }
    // A class the dataset does not have.
    text_tree(&b, "bird", "b-bird", 2);
    let o = append(&b, &ds, &["--shard-size", "1MiB"]);
    assert!(
        !ok(&o) && o.stderr_text().contains("\"bird\""),
        "{}",
        o.describe()
    );
    assert_eq!(snapshot(&ds), before);
    // `--force` and `--part` do not go with it.
    for extra in [&["--force"][..], &["--part", "0/2"][..]] {
        let o = append(&b, &ds, extra);
        assert!(!ok(&o), "{extra:?}: {}", o.describe());
        assert_eq!(snapshot(&ds), before, "{extra:?}");
    }
}

#[test]
fn an_input_that_is_the_dataset_or_inside_it_is_refused_and_nothing_is_written() {
    let t = tempfile::tempdir().unwrap();
    let (a, _) = trees(t.path());
    let ds = t.path().join("ds");
    pack_quiet(&a, &ds, &[]);
    let inner = ds.join("new");
    text_tree(&inner, "cat", "n-cat", 3);
    let before = snapshot(&ds);
    // Without the check, the dataset's own shards and bale.json were
    // packed into it as samples.
    for input in [&ds, &inner] {
        let o = append(input, &ds, &[]);
        assert_eq!(o.status.and_then(|s| s.code()), Some(2), "{}", o.describe());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("is the output directory"), "{err}");
        assert_eq!(snapshot(&ds), before);
    }
    verifies(&ds);
}

#[test]
fn a_failed_append_leaves_the_dataset_as_it_was_and_a_later_one_works() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = trees(t.path());
    let ds = t.path().join("ds");
    pack_quiet(&a, &ds, &["--shard-samples", "10"]);
    let before = snapshot(&ds);
    // A file that cannot be read, met once several new shards are written.
    let bad = b.join("cat/n0035.txt");
    fs::remove_file(&bad).unwrap();
    crate::common::mkfifo(&bad);
    let o = append(&b, &ds, &["--shard-samples", "10"]);
    assert!(!ok(&o), "{}", o.describe());
    assert!(
        o.stderr_text()
            .contains("the old dataset there is as it was"),
        "{}",
        o.describe()
    );
    assert_eq!(snapshot(&ds), before);
    verifies(&ds);
    fs::remove_file(&bad).unwrap();
    let o = append(&b, &ds, &["--shard-samples", "10"]);
    assert!(ok(&o), "{}", o.describe());
    assert_eq!(Manifest::read(&ds).unwrap().samples, 60 + 39);
    verifies(&ds);
}

/// Starts an append and kills it once `out` holds `files` new shard files
/// (at once when 0); returns whether it was killed.
pub(crate) fn kill_append_after(args: &[&OsStr], out: &Path, files: usize, sig: i32) -> bool {
    let listed = fs::read_dir(out).unwrap().count();
    let mut child = bale_cmd(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while fs::read_dir(out).map_or(0, Iterator::count) < listed + files {
        if child.try_wait().unwrap().is_some() || start.elapsed() > Duration::from_secs(60) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let killed = child.try_wait().unwrap().is_none();
    // SAFETY: a plain syscall on the child's pid (not reaped yet).
    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    let _ = child.wait();
    killed
}

#[test]
fn an_append_killed_or_interrupted_leaves_the_old_dataset_and_a_later_append_or_force_works() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    crate::common::random_tree(&input, 600);
    // New keys: the same tree one folder down.
    let more = t.path().join("more");
    crate::common::random_tree(&more.join("new"), 900);
    let ds = t.path().join("ds");
    let mut problems = Vec::new();
    let mut kills = 0;
    for (k, (files, sig)) in [
        (0, libc::SIGKILL),
        (3, libc::SIGKILL),
        (8, libc::SIGKILL),
        (4, libc::SIGINT),
        (10, libc::SIGINT),
    ]
    .into_iter()
    .enumerate()
    {
        let _ = fs::remove_dir_all(&ds);
        pack_quiet(&input, &ds, &["--shard-size", "1MiB", "--labels", "none"]);
        let before = shard_files(&ds);
        let manifest = fs::read(ds.join("bale.json")).unwrap();
        let args: Vec<&OsStr> = vec![
            "pack".as_ref(),
            "-q".as_ref(),
            "--append".as_ref(),
            "--shard-size".as_ref(),
            "1MiB".as_ref(),
            "--labels".as_ref(),
            "none".as_ref(),
            "-o".as_ref(),
            ds.as_os_str(),
            more.as_os_str(),
        ];
        let killed = kill_append_after(&args, &ds, files, sig);
        let case = format!("kill {k} (signal {sig} after {files} files, killed {killed})");
        let now = fs::read(ds.join("bale.json")).unwrap();
        kills += usize::from(killed);
        if killed && now != manifest {
            problems.push(format!("{case}: the manifest changed"));
        }
        // The old files, whatever happened, are as they were.
        if shard_files(&ds)[..before.len()] != before[..] {
            problems.push(format!("{case}: old shard files changed"));
        }
        let v = bale_bounded(&["verify".as_ref(), ds.as_os_str()]);
        if !ok(&v) {
            problems.push(format!("{case}: verify: {}", v.describe()));
        }
        if sig == libc::SIGINT && killed {
            let left: Vec<String> = fs::read_dir(&ds)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(".bale-tmp-"))
                .collect();
            if !left.is_empty() || fs::read_dir(&ds).unwrap().count() != before.len() + 1 {
                problems.push(format!("{case}: an interrupted append left {left:?}"));
            }
        }
        // A later append (even kills) or --force pack (odd) works.
        let redo = if k % 2 == 0 {
            bale_bounded(&args)
        } else {
            bale_bounded(&[
                "pack".as_ref(),
                "-q".as_ref(),
                "--force".as_ref(),
                "--shard-size".as_ref(),
                "1MiB".as_ref(),
                "-o".as_ref(),
                ds.as_os_str(),
                input.as_os_str(),
            ])
        };
        if !ok(&redo) {
            problems.push(format!("{case}: the redo failed: {}", redo.describe()));
            continue;
        }
        let v = bale_bounded(&["verify".as_ref(), ds.as_os_str()]);
        if !ok(&v) {
            problems.push(format!("{case}: verify after the redo: {}", v.describe()));
        }
        let want = if k % 2 == 0 { 1500 } else { 600 };
        let m = Manifest::read(&ds).unwrap();
        if m.samples != want {
            problems.push(format!("{case}: {} samples after the redo", m.samples));
        }
        let temps = fs::read_dir(&ds)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with(".bale-tmp-")
            })
            .count();
        let listed = 1 + 2 * m.shards.len();
        let entries = fs::read_dir(&ds).unwrap().count();
        if temps != 0 || entries != listed {
            problems.push(format!(
                "{case}: after the redo, {entries} entries for {listed} listed ({temps} temporary)"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        kills >= 3,
        "only {kills} of 5 runs were stopped before they ended"
    );
}

#[test]
fn an_append_to_an_empty_or_missing_output_is_a_fresh_pack() {
    let t = tempfile::tempdir().unwrap();
    let (a, _) = trees(t.path());
    let ds = t.path().join("new");
    let o = append(&a, &ds, &[]);
    assert!(ok(&o), "{}", o.describe());
    let fresh = t.path().join("fresh");
    pack_quiet(&a, &fresh, &[]);
    assert_eq!(snapshot(&ds), snapshot(&fresh));
    // A directory holding something else is refused, as by a fresh pack.
    let other = t.path().join("other");
    fs::create_dir(&other).unwrap();
    fs::write(other.join("notes.txt"), b"mine").unwrap();
    let o = append(&a, &other, &[]);
    assert!(
        !ok(&o) && o.stderr_text().contains("not empty"),
        "{}",
        o.describe()
    );
}

#[test]
fn an_append_to_a_merged_zstd_dataset_reads_its_compressed_indexes_for_keys() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = trees(t.path());
    let parts: Vec<PathBuf> = (0..2).map(|i| t.path().join(format!("p{i}"))).collect();
    for (i, p) in parts.iter().enumerate() {
        pack_quiet(&a, p, &["--compress", "zstd", "--part", &format!("{i}/2")]);
    }
    let ds = t.path().join("ds");
    let o = bale_bounded(&[
        "merge".as_ref(),
        "-q".as_ref(),
        "-o".as_ref(),
        ds.as_os_str(),
        parts[0].as_os_str(),
        parts[1].as_os_str(),
    ]);
    assert!(ok(&o), "{}", o.describe());
    let before = snapshot(&ds);
    // Without --compress zstd: refused, naming compression.
    let o = append(&b, &ds, &[]);
    assert!(
        !ok(&o) && o.stderr_text().contains("compression"),
        "{}",
        o.describe()
    );
    // A key of part 1's, in a compressed index.
    let last = samples(&ds).last().unwrap().0.clone();
    let clash = b.join(format!("{last}.json"));
    fs::create_dir_all(clash.parent().unwrap()).unwrap();
    fs::write(&clash, b"{}").unwrap();
    let o = append(&b, &ds, &["--compress", "zstd"]);
    assert!(
        !ok(&o) && o.stderr_text().contains(&format!("{last:?}")),
        "{}",
        o.describe()
    );
    assert_eq!(snapshot(&ds), before);
    fs::remove_file(&clash).unwrap();
    let o = append(&b, &ds, &["--compress", "zstd"]);
    assert!(ok(&o), "{}", o.describe());
    let m = Manifest::read(&ds).unwrap();
    assert_eq!((m.samples, m.created_by.command.as_str()), (100, "merge"));
    assert!(m.shards.iter().all(|s| s.file.ends_with(".tar.zst")));
    verifies(&ds);
}
