//! Replays the committed inputs of the fuzz target `jpeg_markers` through its
//! check (`bale_image::fuzzing::check_jpeg`): every file under
//! `fuzz/seeds/jpeg_markers/` and `fuzz/regressions/jpeg_markers/` (inputs
//! that once crashed it). bale-format's `tests/fuzz_inputs.rs` replays the
//! other targets and checks that every target is replayed somewhere.

use std::fs;
use std::panic;
use std::path::{Path, PathBuf};

use bale_image::fuzzing::check_jpeg;

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

#[test]
fn jpeg_markers_inputs() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let seeds = inputs(&fuzz.join("seeds/jpeg_markers"));
    assert!(!seeds.is_empty(), "no seeds under fuzz/seeds/jpeg_markers/");
    let regressions = inputs(&fuzz.join("regressions/jpeg_markers"));
    let mut failed = Vec::new();
    for path in seeds.iter().chain(&regressions) {
        let bytes = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // The panic message itself is printed by the hook, above the list.
        if panic::catch_unwind(|| check_jpeg(&bytes)).is_err() {
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
        "fuzz target jpeg_markers fails on {} committed input(s): {}",
        failed.len(),
        failed.join(", ")
    );
}
