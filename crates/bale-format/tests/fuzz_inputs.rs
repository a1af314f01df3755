//! Replays the committed fuzz inputs through the fuzz targets' checks
//! (`bale_format::fuzzing`): every file under `fuzz/seeds/<target>/` and
//! `fuzz/regressions/<target>/` (inputs that once crashed a target), so the
//! fuzzers' promises are held by `cargo test` without a fuzzer.

use std::fs;
use std::panic;
use std::path::{Path, PathBuf};

use bale_format::fuzzing::{check_foreign, check_index, check_manifest, check_npy, check_tar};
use bale_format::npy;

/// The fuzz targets of bale-format, by name in `fuzz/Cargo.toml`: one test
/// each below.
const TARGETS: &[&str] = &["index", "manifest", "tar_headers", "npy_header", "foreign"];

/// Targets of other crates, whose inputs their own tests replay.
const REPLAYED_ELSEWHERE: &[&str] = &[
    // crates/bale-image/tests/fuzz_inputs.rs
    "jpeg_markers",
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir`, sorted; none when it does not exist.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("read the directory").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// The names of the subdirectories of `dir`.
fn subdirs(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .map(|e| e.expect("read the directory").path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Runs `check` over every input of `target`; returns how many ran, and
/// panics naming every input that failed.
fn replay(target: &str, check: fn(&[u8])) -> usize {
    let fuzz = fuzz_dir();
    let seeds = inputs(&fuzz.join("seeds").join(target));
    assert!(!seeds.is_empty(), "no seeds under fuzz/seeds/{target}/");
    let regressions = inputs(&fuzz.join("regressions").join(target));
    let mut failed = Vec::new();
    for path in seeds.iter().chain(&regressions) {
        let bytes = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // The panic message itself is printed by the hook, above the list.
        if panic::catch_unwind(|| check(&bytes)).is_err() {
            failed.push(
                path.strip_prefix(&fuzz)
                    .unwrap_or(path)
                    .display()
                    .to_string(),
            );
        }
    }
    assert!(
        failed.is_empty(),
        "fuzz target {target} fails on {} committed input(s): {}",
        failed.len(),
        failed.join(", ")
    );
    seeds.len() + regressions.len()
}

#[test]
fn index_inputs() {
    replay("index", check_index);
}

#[test]
fn manifest_inputs() {
    replay("manifest", check_manifest);
}

#[test]
fn tar_headers_inputs() {
    replay("tar_headers", check_tar);
}

#[test]
fn npy_header_inputs() {
    replay("npy_header", check_npy);
}

#[test]
fn foreign_inputs() {
    replay("foreign", check_foreign);
}

/// The `npy_header` seeds are NumPy's own files: each plain array's data
/// fills the file from `data_offset` on, as `Header::data_len` says.
#[test]
fn numpy_seeds_hold_exactly_their_data() {
    for path in inputs(&fuzz_dir().join("seeds/npy_header")) {
        let bytes = fs::read(&path).unwrap();
        let header = npy::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let npy::Header::Simple { data_offset, .. } = header {
            assert_eq!(
                header.data_len().map(|n| n + data_offset as u64),
                Some(bytes.len() as u64),
                "{}: {header:?}",
                path.display()
            );
        }
    }
}

/// Every fuzz target has seeds, every input directory belongs to a target,
/// and every target's inputs are replayed (here or by its crate's tests).
#[test]
fn every_target_has_seeds_and_is_replayed() {
    let fuzz = fuzz_dir();
    let manifest = fs::read_to_string(fuzz.join("Cargo.toml")).expect("fuzz/Cargo.toml");
    let mut bins: Vec<String> = manifest
        .split("[[bin]]")
        .skip(1)
        .filter_map(|table| {
            let line = table.lines().find(|l| l.trim_start().starts_with("name"))?;
            Some(line.split('"').nth(1)?.to_owned())
        })
        .collect();
    bins.sort();
    let mut known: Vec<String> = TARGETS
        .iter()
        .chain(REPLAYED_ELSEWHERE)
        .map(|name| (*name).to_owned())
        .collect();
    known.sort();
    assert_eq!(
        bins, known,
        "fuzz/Cargo.toml's targets and the replayed ones"
    );
    assert_eq!(
        subdirs(&fuzz.join("seeds")),
        known,
        "fuzz/seeds/ per target"
    );
    for dir in subdirs(&fuzz.join("regressions")) {
        assert!(
            known.contains(&dir),
            "fuzz/regressions/{dir}/ is not a fuzz target"
        );
    }
}
