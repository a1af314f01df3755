//! `cargo xtask demo`: the README's first command.
//!
//! Generates a small example tree (300 JPEGs in 5 classes; every 25th sample also
//! has a JSON sidecar, so some samples have two members) into `target/demo/tree`,
//! then packs it with the release build of `bale` into `target/demo/dataset`,
//! verifies it and prints its statistics.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};

use crate::gen_tree::{self, Kind, Params};
use crate::util::{self, Args};

const USAGE: &str = "\
usage: cargo xtask demo

Generates target/demo/tree (300 JPEGs in 5 classes, some with a .json sidecar), then runs
the release build of bale:
  bale pack target/demo/tree -o target/demo/dataset --labels dir --force
  bale verify target/demo/dataset
  bale stat target/demo/dataset";

const TREE: &str = "target/demo/tree";
const DATASET: &str = "target/demo/dataset";

/// `cargo xtask demo`
pub fn main(args: Args) -> Result<()> {
    if args.wants_help() {
        println!("{USAGE}");
        return Ok(());
    }
    args.finish()?;
    let root = util::repo_root();
    let params = Params {
        files: 300,
        classes: 5,
        kind: Kind::Jpeg,
        seed: 0,
        json_every: 25,
    };

    eprintln!(
        "demo [1/4] generating an example tree: {} JPEGs in {} class directories, \
         a JSON sidecar for every {}th image",
        params.files, params.classes, params.json_every
    );
    let tree = gen_tree::generate(&root.join(TREE), &params)?;

    eprintln!("\ndemo [2/4] packing it with the release build of bale (built first if needed)");
    bale(
        &root,
        &["pack", TREE, "-o", DATASET, "--labels", "dir", "--force"],
        false,
    )?;
    eprintln!("\ndemo [3/4] verifying the dataset against its manifest and indexes");
    bale(&root, &["verify", DATASET], true)?;
    eprintln!("\ndemo [4/4] statistics of the dataset");
    bale(&root, &["stat", DATASET], true)?;

    eprintln!(
        "\ndemo: done.\n  input:  {TREE}/  {} images ({}) and {} JSON sidecars in {} class directories\n  output: {DATASET}/",
        tree.images,
        util::bytes(tree.image_bytes),
        tree.sidecars,
        params.classes
    );
    list(&root.join(DATASET))?;
    Ok(())
}

/// Runs `cargo run --release -p bale-cli -- <args>` from the repository root.
fn bale(root: &Path, args: &[&str], quiet: bool) -> Result<()> {
    let mut cmd = util::cargo();
    cmd.current_dir(root).args(["run", "--release"]);
    if quiet {
        cmd.arg("--quiet");
    }
    cmd.args(["-p", "bale-cli", "--"]).args(args);
    eprintln!("$ bale {}", args.join(" "));
    util::run(&mut cmd).with_context(|| format!("`bale {}` failed", args[0]))
}

/// Prints the files of the dataset directory with their sizes.
fn list(dir: &Path) -> Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let size = entry.metadata()?.len();
        eprintln!(
            "          {:<24} {:>10}",
            entry.file_name().to_string_lossy(),
            util::bytes(size)
        );
    }
    Ok(())
}
