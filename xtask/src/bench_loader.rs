//! `cargo xtask bench loader`: `bale.Loader` against torchvision, `bale.Dataset` +
//! DataLoader and NVIDIA DALI's CPU pipeline.
//!
//! 1. builds `bale` and the Python package in release (as `bench python` does),
//!    into the test venv, which has DALI (pinned in tests/python/requirements.txt;
//!    its CPU pipelines need no GPU);
//! 2. packs the benchmark tree twice, unless complete datasets are there: as it is
//!    (`target/bench/loader/as-is`) and pre-resized (`--resize shorter:256`,
//!    `target/bench/loader/short256`);
//! 3. runs crates/bale-loader/benches/loader.py on both, which prints images/s of
//!    each subject, the ratios, and the per-core decode rates.

use std::path::Path;
use std::process::Command;

use anyhow::Result;

use crate::bench_python::{build_release, pack_once};
use crate::util;

/// The benchmark script, relative to the repository root.
const SCRIPT: &str = "crates/bale-loader/benches/loader.py";

/// Builds, installs, packs and runs the loader benchmark; `extra` goes to the script.
pub fn run(root: &Path, tree: &Path, python: &Path, extra: &[String]) -> Result<()> {
    let bale = build_release(root, python)?;
    let has_dali = Command::new(python)
        .args(["-c", "import nvidia.dali"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|st| st.success());
    if !has_dali && !extra.iter().any(|a| a == "--no-dali") {
        anyhow::bail!(
            "`import nvidia.dali` fails in {}: the venv lacks tests/python/requirements.txt \
             (run `cargo xtask ci`, which installs it), or pass `-- --no-dali`",
            python.display()
        );
    }
    let base = root.join("target/bench/loader");
    let as_is = base.join("as-is");
    let short = base.join("short256");
    pack_once(&bale, tree, &as_is, &[])?;
    pack_once(&bale, tree, &short, &["--resize", "shorter:256"])?;
    let mut cmd = Command::new(python);
    cmd.current_dir(root)
        .arg(root.join(SCRIPT))
        .arg("--tree")
        .arg(tree)
        .arg("--dataset")
        .arg(format!("as-is={}", as_is.display()))
        .arg("--dataset")
        .arg(format!("short256={}", short.display()))
        .arg("--json")
        .arg(base.join("results.json"))
        .args(extra);
    eprintln!("$ {}", util::display(&cmd));
    util::run(&mut cmd)
}
