//! `cargo xtask bench scale`: bale's commands and reader as the number of
//! samples grows.
//!
//! Generates trees of tiny files (256 bytes each, in 1,000 class
//! directories: `target/bench/scale/tree-N`, kept for the next run), builds
//! the release `bale` and Python module, then runs
//! `crates/bale-py/benches/scale.py`: pack, stat, verify and ls of each tree's
//! dataset (time per sample, peak RSS), and a Python open, 1,000 random reads
//! and a key lookup (resident bytes per sample).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::bench_python::build_release;
use crate::util;

const SCRIPT: &str = "crates/bale-py/benches/scale.py";
/// The sizes run when `--sizes` is not given.
const DEFAULT_SIZES: &[u64] = &[250_000, 1_000_000];
/// Bytes of each file.
const FILE_BYTES: usize = 256;
/// Class directories of each tree.
const CLASSES: u64 = 1_000;
/// Disk a sample takes: its file (a 4 KiB block and an inode) and its share of
/// the packed dataset (two tar members, about 2 KiB), rounded up.
const DISK_PER_SAMPLE: u64 = 7 << 10;

pub fn run(root: &Path, _tree: &Path, python: &Path, extra: &[String]) -> Result<()> {
    let sizes = sizes(extra)?;
    let base = root.join("target/bench/scale");
    fs::create_dir_all(&base).with_context(|| format!("cannot create {}", base.display()))?;
    let need: u64 = sizes.iter().map(|n| n * DISK_PER_SAMPLE).sum::<u64>() >> 30;
    if let Some(free) = crate::ci::free_gb(&base)
        && free < need
    {
        bail!(
            "bench scale: the trees and datasets of {sizes:?} samples need about {need} GB of disk, \
             {free} GB are free on {}; pass fewer with `-- --sizes 250000,1000000`",
            base.display()
        );
    }
    let mut trees = Vec::new();
    for &n in &sizes {
        let tree = base.join(format!("tree-{n}"));
        generate(&tree, n)?;
        trees.push((n, tree));
    }
    let bale = build_release(root, python)?;
    let mut cmd = Command::new(python);
    cmd.current_dir(root)
        .arg(root.join(SCRIPT))
        .arg("--bale")
        .arg(&bale)
        .arg("--out")
        .arg(&base)
        .arg("--json")
        .arg(base.join("results.json"));
    for (n, tree) in &trees {
        cmd.arg("--tree").arg(format!("{n}={}", tree.display()));
    }
    eprintln!("$ {}", util::display(&cmd));
    util::run(&mut cmd)
}

/// `--sizes N,N,...` among the arguments after `--`, else [`DEFAULT_SIZES`].
fn sizes(extra: &[String]) -> Result<Vec<u64>> {
    let Some(i) = extra.iter().position(|a| a == "--sizes") else {
        return Ok(DEFAULT_SIZES.to_vec());
    };
    let list = extra
        .get(i + 1)
        .context("--sizes needs a list, e.g. 250000,1000000")?;
    list.split(',')
        .map(|s| {
            let n: u64 = s
                .trim()
                .replace('_', "")
                .parse()
                .with_context(|| format!("--sizes {list:?}: {s:?} is not a whole number"))?;
            if n == 0 {
                bail!("--sizes {list:?}: a tree needs at least one file");
            }
            Ok(n)
        })
        .collect()
}

/// Writes `n` files of [`FILE_BYTES`] into `tree` (`cNNN/NNNNNNNNN.bin`), unless
/// the stamp beside it says a run made them all.
fn generate(tree: &Path, n: u64) -> Result<()> {
    let stamp = PathBuf::from(format!("{}.done", tree.display()));
    if stamp.exists() {
        return Ok(());
    }
    if tree.exists() {
        fs::remove_dir_all(tree).with_context(|| format!("cannot remove {}", tree.display()))?;
    }
    eprintln!(
        "bench scale: writing {n} files of {FILE_BYTES} bytes into {}",
        util::shown(tree)
    );
    for c in 0..CLASSES.min(n) {
        let dir = tree.join(format!("c{c:03}"));
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut body = [0u8; FILE_BYTES];
    for i in 0..n {
        fill(&mut body, i);
        let path = tree.join(format!("c{:03}/{i:09}.bin", i % CLASSES));
        fs::write(&path, body).with_context(|| format!("cannot write {}", path.display()))?;
    }
    fs::write(&stamp, format!("{n}\n")).with_context(|| format!("cannot write {}", stamp.display()))
}

/// The bytes of file `i`: a counter-based xorshift, so that files differ.
fn fill(body: &mut [u8], i: u64) {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in body.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn sizes_are_read_and_checked() {
        assert_eq!(sizes(&[]).unwrap(), DEFAULT_SIZES);
        assert_eq!(
            sizes(&args(&["--sizes", "3,4_000_000"])).unwrap(),
            [3, 4_000_000]
        );
        assert!(sizes(&args(&["--sizes", "3,x"])).is_err());
        assert!(sizes(&args(&["--sizes", "0"])).is_err());
        assert!(sizes(&args(&["--sizes"])).is_err());
    }

    #[test]
    fn a_tree_has_its_files_in_classes_and_is_kept() {
        let dir = std::env::temp_dir().join(format!("bale-scale-test-{}", std::process::id()));
        let tree = dir.join("tree-1200");
        generate(&tree, 1_200).unwrap();
        let classes = fs::read_dir(&tree).unwrap().count();
        assert_eq!(classes as u64, CLASSES);
        let a = fs::read(tree.join("c000/000000000.bin")).unwrap();
        let b = fs::read(tree.join("c199/000001199.bin")).unwrap();
        assert_eq!((a.len(), b.len()), (FILE_BYTES, FILE_BYTES));
        assert_ne!(a, b);
        // A second run finds the stamp and writes nothing.
        fs::remove_file(tree.join("c000/000000000.bin")).unwrap();
        generate(&tree, 1_200).unwrap();
        assert!(!tree.join("c000/000000000.bin").exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
