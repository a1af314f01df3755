//! Unclear errors: a message must say what is wrong with what, in the
//! user's terms (the path that exists, the extension that is not valid, the
//! pattern that expands too far), and a failed command leaves nothing behind.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::time::Duration;

use bale_format::Compression;

use crate::common::{bale_bounded, bale_cmd, run_bounded};
use crate::verify::make_dataset;

/// Every path under `root` (relative), directories included.
fn tree_of(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            out.insert(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            if e.file_type().unwrap().is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

#[test]
fn convert_to_dir_names_the_path_that_exists_and_leaves_nothing_behind() {
    // The fixture's keys are cat/0000, dog/0001, ...: `cat` is a directory
    // the conversion needs.
    let t = tempfile::tempdir().unwrap();
    let ds = t.path().join("ds");
    make_dataset(&ds, Compression::None, false);
    let mut problems = Vec::new();
    for (case, prepare) in [
        (
            "OUT/cat is a directory",
            Box::new(|out: &Path| fs::create_dir(out.join("cat")).unwrap()) as Box<dyn Fn(&Path)>,
        ),
        (
            "OUT/cat is a file",
            Box::new(|out: &Path| fs::write(out.join("cat"), b"mine").unwrap()),
        ),
        (
            "OUT/dog is a file (cat/ would be written first)",
            Box::new(|out: &Path| fs::write(out.join("dog"), b"mine").unwrap()),
        ),
    ] {
        let out = t.path().join("out");
        let _ = fs::remove_dir_all(&out);
        fs::create_dir(&out).unwrap();
        fs::write(out.join("notes.txt"), b"the user's").unwrap();
        prepare(&out);
        let before = tree_of(&out);
        let o = bale_bounded(&[
            "convert".as_ref(),
            ds.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
            "--format".as_ref(),
            "dir".as_ref(),
            "--force".as_ref(),
        ]);
        let err = o.stderr_text();
        let name = if case.contains("dog") { "dog" } else { "cat" };
        let path = out.join(name);
        if !(o.failed_cleanly()
            && err.contains(&path.display().to_string())
            && err.contains("exists")
            && !err.contains("invalid option"))
        {
            problems.push(format!(
                "{case}: the error should name {} and say it exists, not call it an invalid option: {}",
                path.display(),
                o.describe()
            ));
        }
        let after = tree_of(&out);
        if after != before {
            problems.push(format!(
                "{case}: the failed conversion left {:?} in OUT",
                after.difference(&before).collect::<Vec<_>>()
            ));
        }
        assert_eq!(fs::read(out.join("notes.txt")).unwrap(), b"the user's");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn an_empty_dotted_extension_is_called_an_invalid_extension() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    fs::create_dir_all(input.join("x")).unwrap();
    fs::write(input.join("x/a..b.txt"), b"1").unwrap();
    fs::write(input.join("x/ok.txt"), b"2").unwrap();
    let out = t.path().join("out");
    let o = bale_bounded(&[
        "pack".as_ref(),
        input.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let err = o.stderr_text();
    assert!(
        o.failed_cleanly()
            && err.contains("x/a..b.txt")
            && err.contains("extension")
            && err.contains(".b.txt")
            && !err.contains("invalid member name"),
        "pack should say the extension \".b.txt\" of x/a..b.txt is not valid: {}",
        o.describe()
    );
    // The whole message: what, why, and that nothing was written.
    insta::assert_snapshot!(err.replace(t.path().to_str().unwrap(), "[TMP]"));
    assert!(!out.join("bale.json").exists());
}

#[test]
fn a_brace_pattern_expanding_too_far_fails_fast_naming_it() {
    let t = tempfile::tempdir().unwrap();
    let pattern = "nx-{0..999}{0..999}{0..999}.tar";
    let mut cmd = bale_cmd(&["index", pattern, "-o", "ds"]);
    cmd.current_dir(t.path());
    let o = run_bounded(&mut cmd, Duration::from_secs(20), 256);
    let err = o.stderr_text();
    assert!(
        o.failed_cleanly()
            && o.elapsed < Duration::from_secs(5)
            && err.contains(pattern)
            && err.contains("expands to more than")
            && err.contains("1000000"),
        "bale index {pattern:?} should fail at once, naming the pattern as typed and the limit: {}",
        o.describe()
    );
    insta::assert_snapshot!(err);
    assert!(!t.path().join("ds").exists(), "nothing written");
}
