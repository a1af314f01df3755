//! `cargo xtask demo`: the README's first command.
//!
//! Generates a small example tree (300 JPEGs in 5 classes; every 25th sample also
//! has a JSON sidecar, so some samples have two members) into `target/demo/tree`,
//! then packs it with the release build of `bale` into `target/demo/dataset`,
//! verifies it and prints its statistics.
//!
//! The generator's stamp (which lets a second run skip the generation) waits
//! beside the tree, not in it, while bale packs: in the tree it is a hidden
//! file the pack would report as ignored, as if the user's tree held it.

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
/// Where the generator's stamp waits while the tree is packed.
const STAMP_ASIDE: &str = "target/demo/tree.stamp";
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
    let (tree_dir, aside) = (root.join(TREE), root.join(STAMP_ASIDE));
    stamp_back(&tree_dir, &aside)?;
    let tree = gen_tree::generate(&tree_dir, &params)?;
    stamp_aside(&tree_dir, &aside)?;

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

/// Moves the generator's stamp out of `tree` to `aside`, so that the tree
/// holds only the example's files.
fn stamp_aside(tree: &Path, aside: &Path) -> Result<()> {
    let stamp = tree.join(gen_tree::STAMP);
    if stamp.exists() {
        fs::rename(&stamp, aside)
            .with_context(|| format!("cannot move {} to {}", stamp.display(), aside.display()))?;
    }
    Ok(())
}

/// Puts a stamp [`stamp_aside`] moved back into `tree`, so that the
/// generator sees the tree is complete and skips it.
fn stamp_back(tree: &Path, aside: &Path) -> Result<()> {
    if aside.exists() && tree.is_dir() {
        let stamp = tree.join(gen_tree::STAMP);
        fs::rename(aside, &stamp)
            .with_context(|| format!("cannot move {} to {}", aside.display(), stamp.display()))?;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The tree bale packs holds no file of the generator's, and a second
    /// run finds the stamp again (so it skips the generation).
    #[test]
    fn the_stamp_waits_outside_the_tree_while_it_is_packed() {
        let t = std::env::temp_dir().join(format!("xtask-demo-{}", std::process::id()));
        let _ = fs::remove_dir_all(&t);
        let (tree, aside) = (t.join("tree"), t.join("tree.stamp"));
        let params = Params {
            files: 4,
            classes: 2,
            kind: Kind::Jpeg,
            seed: 0,
            json_every: 0,
        };
        gen_tree::generate(&tree, &params).unwrap();
        assert!(tree.join(gen_tree::STAMP).exists());
        stamp_aside(&tree, &aside).unwrap();
        let hidden: Vec<_> = walk(&tree)
            .into_iter()
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .collect();
        assert!(hidden.is_empty(), "{hidden:?}");
        assert!(aside.exists());
        stamp_back(&tree, &aside).unwrap();
        assert!(tree.join(gen_tree::STAMP).exists() && !aside.exists());
        // Nothing to put back: no error.
        stamp_back(&tree, &aside).unwrap();
        fs::remove_dir_all(&t).unwrap();
    }

    fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.extend(walk(&p));
            }
            out.push(p);
        }
        out
    }
}
