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
//! 3. generates the small-file tree when missing: `target/bench/png-100k` (100,000
//!    PNGs of ~2 KB, as the pack group's);
//! 4. runs `crates/bale-py/benches/read.py` on the two trees (with the benchmark
//!    tree of 20,000 JPEGs of ~103 KB), which writes each peer's dataset once under
//!    `target/bench/python/peers/<tree>/<peer>`, prints a table per tree and cache
//!    state (bale, the best peer of the same run, the ratio) with the load average,
//!    and writes `target/bench/python/results.json`;
//! 5. runs `crates/bale-py/benches/timed.py`: what `bale.timed` adds per step;
//! 6. runs `crates/bale-py/benches/checkpoint.py`: `state_dict()` and
//!    `load_state_dict()` at 1.28M samples, and a mix of two datasets against
//!    reading one (its datasets under `target/bench/python/checkpoint`).
//!
//! ARGS after `--` go to read.py (`-- --help`; `-- --list` lists its rows); with `--tree` among
//! them only those trees are read (and none is generated), e.g.
//! `cargo xtask bench python -- --tree /tmp/small --runs 3`. `-- --quick` (taken by
//! the xtask) reads two small trees instead, `target/bench/quick/jpeg-1k` (1,000
//! JPEGs) and `target/bench/quick/png-5k` (5,000 PNGs), one timed pass per row and pack writer,
//! results in `target/bench/python/quick.json`: every row and peer in a few minutes.
//!
//! A peer that cannot be installed or imported does not stop the run: the xtask
//! names it, and read.py reports each of its rows as failed, with the error.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::bench_trees::{SMALL_TREE, small_tree_params};
use crate::gen_tree::{self, Kind, Params};
use crate::util;

/// The benchmark script, relative to the repository root.
const SCRIPT: &str = "crates/bale-py/benches/read.py";
/// The cost of `bale.timed` per step.
const TIMED: &str = "crates/bale-py/benches/timed.py";
/// Checkpoint states and mixes.
const CHECKPOINT: &str = "crates/bale-py/benches/checkpoint.py";
/// Its datasets, relative to the repository root.
const CHECKPOINT_DATA: &str = "target/bench/python/checkpoint";
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
/// `--quick`: its trees (name, path relative to the repository root, parameters) and results.
const QUICK_TREES: [(&str, &str, Params); 2] = [
    (
        "jpeg-1k",
        "target/bench/quick/jpeg-1k",
        Params {
            files: 1_000,
            classes: 10,
            kind: Kind::Jpeg,
            seed: 0,
            json_every: 0,
        },
    ),
    (
        "png-5k",
        "target/bench/quick/png-5k",
        Params {
            files: 5_000,
            classes: 50,
            kind: Kind::Png,
            seed: 0,
            json_every: 0,
        },
    ),
];
const QUICK_RESULTS: &str = "target/bench/python/quick.json";
/// The modules the peers are imported by (distribution, module).
const PEER_MODULES: [(&str, &str); 5] = [
    ("lmdb", "lmdb"),
    ("h5py", "h5py"),
    ("litdata", "litdata"),
    ("mosaicml-streaming", "streaming"),
    ("webdataset", "webdataset"),
];

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
    // Without xtask's crate variables, as the cargo above ran: with them,
    // ring's build script would rerun and each build redo ring and what is
    // above it for the other (see `bale_tests::cargo`).
    util::run(
        bale_tests::without_crate_vars(&mut Command::new(bin.join("maturin")))
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

/// The paths the arguments' `--tree [NAME=]PATH` options name, in order.
pub fn tree_paths(extra: &[String]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut args = extra.iter();
    while let Some(a) = args.next() {
        let value = match a.strip_prefix("--tree=") {
            Some(v) => Some(v),
            None if a == "--tree" => args.next().map(String::as_str),
            None => None,
        };
        if let Some(v) = value {
            let path = v.split_once('=').map_or(v, |(_, p)| p);
            out.push(PathBuf::from(path));
        }
    }
    out
}

/// True unless the arguments name their own trees, ask for the quick trees, or only
/// list the rows or the options.
pub fn reads_default_trees(extra: &[String]) -> bool {
    !has_trees(extra) && !is_quick(extra) && !lists_only(extra)
}

fn is_quick(extra: &[String]) -> bool {
    extra.iter().any(|a| a == "--quick")
}

pub fn lists_only(extra: &[String]) -> bool {
    extra
        .iter()
        .any(|a| matches!(a.as_str(), "--list" | "--help" | "-h"))
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
        let failed = pip_install(&python, &requirements)?;
        if failed.is_empty() {
            fs::write(&stamp, format!("{want}\n"))
                .with_context(|| format!("cannot write {}", stamp.display()))?;
        } else {
            // No stamp: the next run tries them again.
            eprintln!(
                "bench python: WARNING: cannot install {} (their peers' rows will fail)",
                failed.join(", ")
            );
        }
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
    // A peer that does not import is named here, and its rows fail in read.py.
    for (dist, module) in PEER_MODULES {
        let ok = Command::new(&python)
            .args(["-c", &format!("import {module}")])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!(
                "bench python: WARNING: peer {dist} cannot be imported (`import {module}` \
                 fails in {VENV}; torch comes from the test venv, .venv): its rows will fail"
            );
        }
    }
    Ok(python)
}

/// `pip install --no-deps -r requirements` into the venv of `python`; when that fails,
/// each requirement on its own. Returns the requirements that could not be installed.
fn pip_install(python: &Path, requirements: &Path) -> Result<Vec<String>> {
    let pip = |what: &[&std::ffi::OsStr]| {
        Command::new(python)
            .args(util::PIP_INSTALL)
            .arg("--no-deps")
            .args(what)
            .status()
            .with_context(|| format!("cannot run {}", python.display()))
            .map(|s| s.success())
    };
    if pip(&["-r".as_ref(), requirements.as_os_str()])? {
        return Ok(Vec::new());
    }
    eprintln!("bench python: pip failed; installing the requirements one at a time");
    let text = fs::read_to_string(requirements)
        .with_context(|| format!("cannot read {}", requirements.display()))?;
    let mut failed = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !pip(&[line.as_ref()])? {
            failed.push(line.to_string());
        }
    }
    Ok(failed)
}

/// Makes the bench venv, builds, generates the trees and runs the Python benchmark;
/// `extra` goes to the script.
pub fn run(root: &Path, tree: &Path, python: &Path, extra: &[String]) -> Result<()> {
    let bench_python = ensure_bench_venv(root, python)?;
    let bale = build_release(root, &bench_python)?;

    let quick = is_quick(extra);
    let extra: Vec<String> = extra.iter().filter(|a| *a != "--quick").cloned().collect();
    let extra = extra.as_slice();
    let mut cmd = Command::new(&bench_python);
    cmd.current_dir(root).arg(root.join(SCRIPT));
    if quick {
        // One timed pass per row (an explicit --reps in ARGS comes later and wins).
        cmd.args(["--reps", "1", "--cold-reps", "1", "--pack-passes", "1"]);
    }
    if quick && !has_trees(extra) && !lists_only(extra) {
        for (name, rel, params) in &QUICK_TREES {
            let path = root.join(rel);
            gen_tree::generate(&path, params)
                .with_context(|| format!("generating the quick tree {rel}"))?;
            cmd.arg("--tree").arg(format!("{name}={}", path.display()));
        }
    } else if !has_trees(extra) && !lists_only(extra) {
        let png_100k = root.join(SMALL_TREE);
        gen_tree::generate(&png_100k, &small_tree_params())
            .context("generating the 100,000-PNG tree")?;
        for (name, path) in [("imagenet-like", tree), ("png-100k", png_100k.as_path())] {
            cmd.arg("--tree").arg(format!("{name}={}", path.display()));
        }
    }
    cmd.arg("--bale")
        .arg(&bale)
        .arg("--out")
        .arg(root.join(PEERS))
        .arg("--json")
        .arg(root.join(if quick { QUICK_RESULTS } else { RESULTS }))
        .args(extra);
    eprintln!("$ {}", util::display(&cmd));
    util::run(&mut cmd)?;
    if lists_only(extra) {
        return Ok(());
    }
    let mut cmd = Command::new(&bench_python);
    cmd.current_dir(root).arg(root.join(TIMED));
    if quick {
        cmd.args(["--steps", "200000", "--rounds", "3"]);
    }
    eprintln!("\n$ {}", util::display(&cmd));
    util::run(&mut cmd)?;
    let mut cmd = Command::new(&bench_python);
    cmd.current_dir(root)
        .arg(root.join(CHECKPOINT))
        .arg("--bale")
        .arg(&bale)
        .arg("--out")
        .arg(root.join(CHECKPOINT_DATA));
    if quick {
        cmd.args(["--reps", "1"]);
    }
    eprintln!("\n$ {}", util::display(&cmd));
    util::run(&mut cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_paths_are_the_values_of_every_tree_option() {
        let args: Vec<String> = [
            "--tree",
            "png-100k=target/bench/png-100k",
            "--runs",
            "3",
            "--tree=/data/imgs",
            "--tree=jpeg=a=b",
            "--tree",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            tree_paths(&args),
            vec![
                PathBuf::from("target/bench/png-100k"),
                PathBuf::from("/data/imgs"),
                PathBuf::from("a=b"),
            ]
        );
        assert!(tree_paths(&["--runs".to_string(), "3".to_string()]).is_empty());
    }
}
