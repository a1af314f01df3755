//! `cargo xtask bench python`: the Python package against loose files and webdataset.
//!
//! 1. builds `bale` and the Python package (crates/bale-py) in release, the package
//!    into the venv with the venv's maturin (`maturin develop --release`);
//! 2. packs each tree into `target/bench/python/<tree>` (plain tar shards, which
//!    webdataset reads as they are), unless a complete dataset is there:
//!    the benchmark tree (20,000 JPEGs of ~110 KB) and a small-file tree
//!    (20,000 PNGs of ~2 KB in `target/bench/png-20k`, generated when missing);
//! 3. runs `crates/bale-py/benches/read.py` on each, which prints samples/s for
//!    `bale.Dataset` random access, loose files with `open()` in the same order and
//!    `webdataset` sequential iteration, and the ratios;
//! 4. runs `crates/bale-py/benches/timed.py`: what `bale.timed` adds per step.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::gen_tree::{self, Kind, Params};
use crate::util;

/// The benchmark script, relative to the repository root.
const SCRIPT: &str = "crates/bale-py/benches/read.py";
/// The cost of `bale.timed` per step.
const TIMED: &str = "crates/bale-py/benches/timed.py";

/// Builds `bale` and the Python package in release (the package into the venv
/// of `python` with its maturin); returns the path of the `bale` binary.
pub fn build_release(root: &Path, python: &Path) -> Result<PathBuf> {
    util::run(
        util::cargo()
            .current_dir(root)
            .args(["build", "--release", "-p", "bale-cli"]),
    )?;
    let bin = python
        .parent()
        .context("the venv's python has no directory")?;
    let venv = bin.parent().context("the venv's bin has no parent")?;
    let path = std::env::var_os("PATH").unwrap_or_default();
    let paths = std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path));
    util::run(
        Command::new(bin.join("maturin"))
            .current_dir(root)
            .args([
                "develop",
                "--release",
                "--quiet",
                "-m",
                "crates/bale-py/Cargo.toml",
            ])
            .env("VIRTUAL_ENV", venv)
            .env("PATH", std::env::join_paths(paths)?),
    )
    .context("building the Python package (crates/bale-py) in release failed")?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    Ok(target.join("release/bale"))
}

/// Packs `tree` into `dataset` with `bale` and the `options`, unless a complete
/// dataset (one with its `bale.json`) is there.
pub fn pack_once(bale: &Path, tree: &Path, dataset: &Path, options: &[&str]) -> Result<()> {
    if dataset.join("bale.json").exists() {
        return Ok(());
    }
    let mut cmd = Command::new(bale);
    cmd.arg("pack")
        .arg(tree)
        .arg("-o")
        .arg(dataset)
        .args(options)
        .args(["--force", "--quiet"]);
    eprintln!("$ {}", util::display(&cmd));
    util::run(&mut cmd)
}

/// Builds, packs and runs the Python read benchmark; `extra` goes to the script.
pub fn run(root: &Path, tree: &Path, python: &Path, extra: &[String]) -> Result<()> {
    let bale = build_release(root, python)?;
    let small = root.join("target/bench/png-20k");
    gen_tree::generate(
        &small,
        &Params {
            files: 20_000,
            classes: 100,
            kind: Kind::Png,
            seed: 0,
            json_every: 0,
        },
    )
    .context("generating the small-file tree")?;

    for (name, tree) in [("imagenet-like", tree), ("png-20k", small.as_path())] {
        let dataset = root.join("target/bench/python").join(name);
        pack_once(&bale, tree, &dataset, &[])?;
        eprintln!("\n--- {name}: {}", util::shown(tree));
        let mut cmd = Command::new(python);
        cmd.current_dir(root)
            .arg(root.join(SCRIPT))
            .arg("--tree")
            .arg(tree)
            .arg("--dataset")
            .arg(&dataset)
            .args(extra);
        eprintln!("$ {}", util::display(&cmd));
        util::run(&mut cmd)?;
    }
    let mut cmd = Command::new(python);
    cmd.current_dir(root).arg(root.join(TIMED));
    eprintln!("\n$ {}", util::display(&cmd));
    util::run(&mut cmd)
}
