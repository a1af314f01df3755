//! `cargo xtask bench loader`: `bale.Loader` against torchvision, `bale.Dataset` +
//! DataLoader, NVIDIA DALI's CPU pipeline and FFCV, on three workloads.
//!
//! 1. builds `bale` and the Python package in release (as `bench python` does),
//!    into the test venv, which has DALI (pinned in tests/python/requirements.txt;
//!    its CPU pipelines need no GPU), and installs FFCV 1.0.2 there when it is
//!    missing ([`crate::bench_ffcv`]; `-- --no-ffcv` leaves it out);
//! 2. plain row: packs the benchmark tree twice, unless complete datasets are
//!    there: as it is (`target/bench/loader/as-is`) and pre-resized (`--resize
//!    shorter:256`, `target/bench/loader/short256`); the script writes FFCV's
//!    `.beton` of each once (`target/bench/loader/ffcv/`);
//! 3. segmentation: generates the Cityscapes-like corpus ([`SEG_TREE`], `gen-tree
//!    --kind seg`) and packs it (`target/bench/loader/seg`);
//! 4. detection: generates the COCO-like corpus ([`DET_TREE`], `gen-tree --kind
//!    det`) and packs it (`target/bench/loader/det`);
//! 5. augment: RandomResizedCrop + flip + TrivialAugmentWide + RandomErasing on
//!    the plain row's as-is dataset, and the cost of ColorJitter and
//!    TrivialAugmentWide over bale's crop + flip (`--only augment`);
//! 6. runs crates/bale-loader/benches/loader.py on them all, which prints
//!    images/s and CPU ms per image of each row with their ranges and the load
//!    average, the ratios of bale.Loader to each peer (of both), and the
//!    per-core decode rates, and writes `target/bench/loader/results.json`.
//!
//! `-- --only seg,det` (the script's option) makes and runs only those
//! workloads (without `plain`, the ImageNet-like tree is not generated
//! either); the other arguments after `--` go to the script too
//! (`-- --help` lists them).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::bench_python::{build_release, pack_once};
use crate::gen_tree::{self, Kind, Params};
use crate::util;

/// The benchmark script, relative to the repository root.
const SCRIPT: &str = "crates/bale-loader/benches/loader.py";
/// The Cityscapes-like corpus, relative to the repository root.
pub const SEG_TREE: &str = "target/bench/seg-cityscapes-like";
/// The COCO-like corpus, relative to the repository root.
pub const DET_TREE: &str = "target/bench/det-coco-like";

/// The segmentation corpus: 500 samples of 2048x1024 (about 250 MB).
fn seg_params() -> Params {
    Params {
        files: 500,
        classes: 19,
        kind: Kind::Segmentation,
        seed: 0,
        json_every: 0,
    }
}

/// The detection corpus: 2,000 samples of about 640x480 (about 250 MB).
fn det_params() -> Params {
    Params {
        files: 2_000,
        classes: 80,
        kind: Kind::Detection,
        seed: 0,
        json_every: 0,
    }
}

/// The workloads the script runs: its `--only` list, else all.
fn selected(extra: &[String]) -> Vec<String> {
    let mut args = extra.iter();
    let mut only = None;
    while let Some(a) = args.next() {
        if let Some(v) = a.strip_prefix("--only=") {
            only = Some(v.to_string());
        } else if a == "--only" {
            only = args.next().cloned();
        }
    }
    only.unwrap_or_else(|| "plain,seg,det,augment".into())
        .split(',')
        .map(str::to_string)
        .collect()
}

/// True when the run reads the ImageNet-like tree: its plain or augment row is selected,
/// and the script is not only asked for its `--help`.
pub fn reads_tree(extra: &[String]) -> bool {
    !wants_help(extra)
        && selected(extra)
            .iter()
            .any(|k| k == "plain" || k == "augment")
}

fn wants_help(extra: &[String]) -> bool {
    extra.iter().any(|a| a == "--help" || a == "-h")
}

/// Builds, installs, makes and packs the corpora and runs the loader benchmark;
/// `extra` goes to the script.
pub fn run(root: &Path, tree: &Path, python: &Path, extra: &[String]) -> Result<()> {
    if wants_help(extra) {
        return util::run(Command::new(python).arg(root.join(SCRIPT)).arg("--help"));
    }
    let only = selected(extra);
    let wants = |key: &str| only.iter().any(|k| k == key);
    let bale = build_release(root, python)?;
    let has_dali = Command::new(python)
        .args(["-c", "import nvidia.dali"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|st| st.success());
    if !has_dali
        && !extra.iter().any(|a| a == "--no-dali")
        && (wants("plain") || wants("seg") || wants("augment"))
    {
        anyhow::bail!(
            "`import nvidia.dali` fails in {}: the venv lacks tests/python/requirements.txt \
             (run `cargo xtask ci`, which installs it), or pass `-- --no-dali`",
            python.display()
        );
    }
    if wants("plain") && !extra.iter().any(|a| a == "--no-ffcv") {
        crate::bench_ffcv::ensure(root, python)?;
    }
    let base = root.join("target/bench/loader");
    let mut cmd = Command::new(python);
    cmd.current_dir(root).arg(root.join(SCRIPT));
    // The augment rows read the plain row's tree and datasets.
    if wants("plain") || wants("augment") {
        let as_is = base.join("as-is");
        let short = base.join("short256");
        pack_once(&bale, tree, &as_is, &[])?;
        pack_once(&bale, tree, &short, &["--resize", "shorter:256"])?;
        cmd.arg("--tree")
            .arg(tree)
            .arg("--dataset")
            .arg(format!("as-is={}", as_is.display()))
            .arg("--dataset")
            .arg(format!("short256={}", short.display()))
            .arg("--ffcv-dir")
            .arg(base.join("ffcv"));
    }
    for (key, rel, params) in [
        ("seg", SEG_TREE, seg_params()),
        ("det", DET_TREE, det_params()),
    ] {
        if !wants(key) {
            continue;
        }
        let corpus = root.join(rel);
        gen_tree::generate(&corpus, &params)
            .with_context(|| format!("generating the {key} corpus {rel}"))?;
        let dataset = base.join(key);
        pack_once(&bale, &corpus, &dataset, &["--labels", "none"])?;
        cmd.arg(format!("--{key}-tree"))
            .arg(&corpus)
            .arg(format!("--{key}-dataset"))
            .arg(&dataset);
    }
    cmd.arg("--json").arg(base.join("results.json")).args(extra);
    eprintln!("$ {}", util::display(&cmd));
    util::run(&mut cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_selects_the_workloads_to_make() {
        assert_eq!(
            selected(&args(&["--rounds", "1"])),
            ["plain", "seg", "det", "augment"]
        );
        assert!(reads_tree(&args(&["--only", "augment"])));
        assert_eq!(selected(&args(&["--only", "seg,det"])), ["seg", "det"]);
        assert_eq!(selected(&args(&["--only=det", "--batches", "2"])), ["det"]);
        assert!(reads_tree(&args(&["--only", "seg,plain"])));
        assert!(!reads_tree(&args(&["--only", "seg,det"])));
        assert!(!reads_tree(&args(&["--help"])));
    }
}
