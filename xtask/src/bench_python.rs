//! `cargo xtask bench python`: the Python reader against its peers (lmdb, h5py and
//! `os.pread` over an HDF5 file, a tar with an in-memory index, LitData, MosaicML
//! streaming, webdataset, loose files), warm and cold, and the pack and size rows.
//!
//! 1. makes the bench venv `target/bench/python/venv` (unless it records the sha256
//!    of crates/bale-py/benches/requirements.txt): a venv of the test venv's
//!    interpreter with the pinned bench-only packages (`pip install --no-deps`),
//!    which reads torch and torchvision from the test venv (`.venv`) through a
//!    `.pth` file placed after its own site-packages (see the requirements file);
//! 2. builds `bale` and the Python package (crates/bale-py) in release, the package
//!    into the bench venv with its maturin (`maturin develop --release`);
//! 3. generates the small-file trees when missing: `target/bench/png-20k` (20,000
//!    PNGs of ~2 KB) and `target/bench/png-100k` (100,000, as the pack group's);
//! 4. runs `crates/bale-py/benches/read.py` on the three trees (with the benchmark
//!    tree of 20,000 JPEGs), which writes each peer's dataset once under
//!    `target/bench/python/peers/<tree>/<peer>`, prints a table per tree and cache
//!    state and writes `target/bench/python/results.json`;
//! 5. runs `crates/bale-py/benches/timed.py`: what `bale.timed` adds per step.
//!
//! ARGS after `--` go to read.py (`-- --help`; `-- --list` lists its rows); with `--tree` among
//! them only those trees are read (and none is generated), e.g.
//! `cargo xtask bench python -- --tree /tmp/small --runs 3`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::bench::{SMALL_TREE, small_tree_params};
use crate::gen_tree::{self, Kind, Params};
use crate::util;

/// The benchmark script, relative to the repository root.
const SCRIPT: &str = "crates/bale-py/benches/read.py";
/// The cost of `bale.timed` per step.
const TIMED: &str = "crates/bale-py/benches/timed.py";
/// The pinned bench-only packages, relative to the repository root.
const REQUIREMENTS: &str = "crates/bale-py/benches/requirements.txt";
/// The bench venv, relative to the repository root.
const VENV: &str = "target/bench/python/venv";
/// In the bench venv: the sha256 of the requirements it was made from, and the Python version.
const VENV_STAMP: &str = ".bale-bench-requirements";
/// In the bench venv's site-packages: the test venv's site-packages, for torch.
const PTH: &str = "zz_bale_test_venv.pth";
/// The peers' datasets and the results, relative to the repository root.
const PEERS: &str = "target/bench/python/peers";
const RESULTS: &str = "target/bench/python/results.json";
/// The 20,000-PNG tree of the earlier runs, relative to the repository root.
const PNG_20K: &str = "target/bench/png-20k";

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

/// True when the script's arguments name their own trees (then no default tree is
/// generated or read).
pub fn has_trees(extra: &[String]) -> bool {
    extra
        .iter()
        .any(|a| a == "--tree" || a.starts_with("--tree="))
}

/// Makes (or reuses) the bench venv from the test venv's `python`; returns its python.
pub fn ensure_bench_venv(root: &Path, test_python: &Path) -> Result<PathBuf> {
    let requirements = root.join(REQUIREMENTS);
    if !requirements.exists() {
        bail!("{} is missing", requirements.display());
    }
    // The requirements' sha256, the interpreter's version and the test venv's site-packages.
    let probe = util::output(
        Command::new(test_python)
            .args([
                "-c",
                "import hashlib, sys, sysconfig\n\
                 print(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())\n\
                 print(sys.version.split()[0])\n\
                 p = sysconfig.get_paths()\n\
                 print(p['purelib']); print(p['platlib'])",
            ])
            .arg(&requirements),
    )?;
    let lines: Vec<&str> = probe.lines().map(str::trim).collect();
    let [sha, version, purelib, platlib] = lines[..] else {
        bail!(
            "unexpected answer from {}: {probe:?}",
            test_python.display()
        );
    };
    let venv = root.join(VENV);
    let python = venv.join("bin/python");
    let stamp = venv.join(VENV_STAMP);
    let want = format!("{sha} python {version}");
    if python.exists() && fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == want) {
        eprintln!(
            "bench python: {VENV}: {REQUIREMENTS} already installed (sha256 {})",
            &sha[..12]
        );
    } else {
        if venv.exists() {
            eprintln!("bench python: {VENV} is out of date: making it again");
            fs::remove_dir_all(&venv)
                .with_context(|| format!("cannot remove {}", venv.display()))?;
        }
        eprintln!("bench python: {} -m venv {VENV}", test_python.display());
        util::run(Command::new(test_python).args(["-m", "venv"]).arg(&venv))
            .context("creating the bench venv")?;
        eprintln!("bench python: pip install --no-deps -r {REQUIREMENTS} (about 1 GB)");
        util::run(
            Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--no-deps",
                    "--disable-pip-version-check",
                    "--no-input",
                    "-q",
                    "-r",
                ])
                .arg(&requirements),
        )
        .context("installing the bench requirements")?;
        fs::write(&stamp, format!("{want}\n"))
            .with_context(|| format!("cannot write {}", stamp.display()))?;
    }
    // torch and torchvision from the test venv, after the bench venv's own packages.
    let site = util::output(Command::new(&python).args([
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
    ]))?;
    let mut pth = format!("{purelib}\n");
    if platlib != purelib {
        pth.push_str(&format!("{platlib}\n"));
    }
    let pth_path = Path::new(site.trim()).join(PTH);
    fs::write(&pth_path, pth).with_context(|| format!("cannot write {}", pth_path.display()))?;
    util::output(Command::new(&python).args([
        "-c",
        "import h5py, lmdb, litdata, streaming, torch, webdataset",
    ]))
    .context("the bench venv cannot import its peers (torch comes from the test venv, .venv)")?;
    Ok(python)
}

/// Makes the bench venv, builds, generates the trees and runs the Python benchmark;
/// `extra` goes to the script.
pub fn run(root: &Path, tree: &Path, python: &Path, extra: &[String]) -> Result<()> {
    let bench_python = ensure_bench_venv(root, python)?;
    let bale = build_release(root, &bench_python)?;

    let mut cmd = Command::new(&bench_python);
    cmd.current_dir(root).arg(root.join(SCRIPT));
    if !has_trees(extra) {
        let png_20k = root.join(PNG_20K);
        gen_tree::generate(
            &png_20k,
            &Params {
                files: 20_000,
                classes: 100,
                kind: Kind::Png,
                seed: 0,
                json_every: 0,
            },
        )
        .context("generating the 20,000-PNG tree")?;
        let png_100k = root.join(SMALL_TREE);
        gen_tree::generate(&png_100k, &small_tree_params())
            .context("generating the 100,000-PNG tree")?;
        for (name, path) in [
            ("imagenet-like", tree),
            ("png-20k", png_20k.as_path()),
            ("png-100k", png_100k.as_path()),
        ] {
            cmd.arg("--tree").arg(format!("{name}={}", path.display()));
        }
    }
    cmd.arg("--bale")
        .arg(&bale)
        .arg("--out")
        .arg(root.join(PEERS))
        .arg("--json")
        .arg(root.join(RESULTS))
        .args(extra);
    eprintln!("$ {}", util::display(&cmd));
    util::run(&mut cmd)?;
    if extra
        .iter()
        .any(|a| matches!(a.as_str(), "--list" | "--help" | "-h"))
    {
        return Ok(());
    }
    let mut cmd = Command::new(&bench_python);
    cmd.current_dir(root).arg(root.join(TIMED));
    eprintln!("\n$ {}", util::display(&cmd));
    util::run(&mut cmd)
}
