//! `cargo xtask bench [NAME] [-- ARGS]`: runs benchmark groups from [`BENCHES`].
//!
//! Every benchmark reads the same tree, so it is generated first (20,000 JPEGs in 100
//! classes, in `target/bench/imagenet-like`; a no-op once it exists). Its absolute path
//! is passed to each benchmark in `BALE_BENCH_TREE`. `ARGS` after `--` go to every
//! benchmark run (to criterion, or to the Python script).

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::bench_trees::{SMALL_TREE, TREE, small_tree_params, tree_params};
use crate::gen_tree;
use crate::util::{self, Args};

/// One way to run a benchmark.
#[derive(Debug)]
#[allow(dead_code)] // Until the table below has entries of each kind.
enum Run {
    /// `cargo bench -p <package> --bench <bench>`.
    Cargo {
        package: &'static str,
        bench: &'static str,
    },
    /// `<venv python> <script>`, with the script path relative to the repository root.
    Python { script: &'static str },
    /// A function that builds what it needs and runs its own commands:
    /// `run(root, tree, venv python, extra args)`.
    Custom {
        run: fn(&Path, &Path, &Path, &[String]) -> Result<()>,
    },
}

/// A named group of benchmark runs, selected by `cargo xtask bench <name>`.
#[derive(Debug)]
struct Bench {
    name: &'static str,
    about: &'static str,
    runs: &'static [Run],
}

/// The benchmark groups, run in this order by `all`.
///
/// To add a benchmark, append a run to its group, e.g.
/// `Run::Cargo { package: "bale-pack", bench: "pack" }` for `crates/bale-pack/benches/pack.rs`
/// (with a `[[bench]] name = "pack" harness = false` entry in that crate), or
/// `Run::Python { script: "benches/python/read_peers.py" }`. Read the tree from
/// `BALE_BENCH_TREE`; put results under `target/bench/`.
const BENCHES: &[Bench] = &[
    Bench {
        name: "pack",
        about: "packing the tree into shards, against GNU tar (warm and cold cache)",
        runs: &[Run::Cargo {
            package: "bale-pack",
            bench: "pack",
        }],
    },
    Bench {
        name: "read",
        about: "random and sequential reads of a packed dataset, against loose files and raw reads",
        runs: &[Run::Cargo {
            package: "bale-reader",
            bench: "read",
        }],
    },
    Bench {
        name: "image",
        about: "pre-resize / re-encode / pre-decode transforms, against Pillow per core",
        runs: &[Run::Cargo {
            package: "bale-image",
            bench: "image",
        }],
    },
    Bench {
        name: "index",
        about: "`bale index`: header scan of existing tars, against `tar tf`",
        runs: &[Run::Cargo {
            package: "bale-format",
            bench: "scan",
        }],
    },
    Bench {
        name: "python",
        about: "the Python reader against its peers (lmdb, h5py, LitData, MosaicML, webdataset, ...), warm and cold",
        runs: &[Run::Custom {
            run: crate::bench_python::run,
        }],
    },
    Bench {
        name: "remote",
        about: "reading from object storage (SeaweedFS on 127.0.0.1): bale against raw GETs, WebDataset, MosaicML Streaming, LitData; stage against boto3",
        runs: &[Run::Custom {
            run: crate::bench_remote::run,
        }],
    },
    Bench {
        name: "loader",
        about: "bale.Loader's decoded, augmented batches (plain crop, segmentation, detection), against torchvision, bale.Dataset + DataLoader, DALI and FFCV",
        runs: &[Run::Custom {
            run: crate::bench_loader::run,
        }],
    },
    Bench {
        name: "scale",
        about: "pack, stat, verify, ls and the Python reader over 250k and 1M tiny files (`-- --sizes` for others): time per sample, peak RSS",
        runs: &[Run::Custom {
            run: crate::bench_scale::run,
        }],
    },
    Bench {
        name: "wheel",
        about: "bale.Loader from the release wheel (cargo xtask wheel) against the cargo-built module, on the plain loader row",
        runs: &[Run::Custom {
            run: crate::bench_wheel::run,
        }],
    },
];

fn usage() -> String {
    let mut s = String::from(
        "usage: cargo xtask bench [NAME] [-- ARGS]\n\n\
         Generates target/bench/imagenet-like (20,000 JPEGs, 100 classes) if needed, then runs\n\
         the benchmarks of NAME (default: all); `pack` and `python` also generate\n\
         target/bench/png-100k (100,000 PNGs). ARGS go to every benchmark run\n\
         (`bench python -- --list` lists the Python rows; `-- --tree PATH` reads only PATH;\n\
         `-- --quick` small trees and one pass per row, a check in a few minutes).\n\nnames:\n",
    );
    for b in BENCHES {
        s.push_str(&format!("  {:<8} {}\n", b.name, b.about));
    }
    s.push_str("  all      every group above, in order");
    s
}

/// `cargo xtask bench ...`
pub fn main(mut args: Args) -> Result<()> {
    // What follows `--` (even `--help`) goes to the benchmarks.
    let extra = args.passthrough();
    if args.wants_help() {
        println!("{}", usage());
        return Ok(());
    }
    let name = args.positional().unwrap_or_else(|| "all".to_string());
    args.finish()?;
    let selected: Vec<&Bench> = if name == "all" {
        BENCHES.iter().collect()
    } else {
        match BENCHES.iter().find(|b| b.name == name) {
            Some(b) => vec![b],
            None => {
                let names: Vec<&str> = BENCHES.iter().map(|b| b.name).collect();
                bail!(
                    "unknown benchmark {name:?}; expected one of: {}, all",
                    names.join(", ")
                );
            }
        }
    };

    let root = util::repo_root();
    let tree = root.join(TREE);
    // `bench python -- --tree PATH` reads only the trees it is given (`--quick` its
    // small ones, `--list` none).
    let own_trees = selected.iter().all(|b| b.name == "python")
        && !crate::bench_python::reads_default_trees(&extra);
    // A `--tree` naming one of the repository's own trees generates it too,
    // so that the commands docs/benchmarks.md quotes run on a fresh clone.
    let named = if crate::bench_python::lists_only(&extra) {
        Vec::new()
    } else {
        crate::bench_python::tree_paths(&extra)
    };
    let names = |own: &std::path::Path| named.iter().any(|p| root.join(p) == own);
    // `bench loader -- --only seg,det` reads its own corpora only.
    let loader_only_own =
        selected.iter().all(|b| b.name == "loader") && !crate::bench_loader::reads_tree(&extra);
    // `bench scale` makes trees of its own.
    let scale_only = selected.iter().all(|b| b.name == "scale");
    if (!own_trees && !loader_only_own && !scale_only) || names(&tree) {
        gen_tree::generate(&tree, &tree_params()).context("generating the benchmark tree")?;
    }
    // The pack group also packs a tree of many small files.
    let small = root.join(SMALL_TREE);
    if selected.iter().any(|b| b.name == "pack") || names(&small) {
        gen_tree::generate(&small, &small_tree_params())
            .context("generating the small-file benchmark tree")?;
    }

    let needs_python = selected
        .iter()
        .any(|b| b.runs.iter().any(|r| !matches!(r, Run::Cargo { .. })));
    let python = if needs_python {
        Some(crate::ci::ensure_venv(&root)?)
    } else {
        None
    };

    for bench in selected {
        eprintln!("\n==> bench {}: {}", bench.name, bench.about);
        if bench.runs.is_empty() {
            eprintln!(
                "bench {}: no benchmarks registered yet (add them to BENCHES in xtask/src/bench.rs)",
                bench.name
            );
        }
        for run in bench.runs {
            if let Run::Custom { run } = run {
                let python = python.as_deref().unwrap_or(Path::new("python3"));
                run(&root, &tree, python, &extra)?;
                continue;
            }
            let mut cmd = match run {
                Run::Cargo { package, bench } => {
                    let mut cmd = util::cargo();
                    cmd.args(["bench", "-p", package, "--bench", bench]);
                    if !extra.is_empty() {
                        cmd.arg("--").args(&extra);
                    }
                    cmd
                }
                Run::Python { script } => {
                    let python = python.as_deref().unwrap_or(Path::new("python3"));
                    let mut cmd = std::process::Command::new(python);
                    cmd.arg(root.join(script)).args(&extra);
                    cmd.env("BALE_TEST_PYTHON", python);
                    cmd
                }
                Run::Custom { .. } => continue,
            };
            let trees = if bench.name == "pack" {
                std::env::join_paths([&tree, &small]).context("joining the tree paths")?
            } else {
                tree.clone().into_os_string()
            };
            cmd.current_dir(&root).env("BALE_BENCH_TREE", trees);
            eprintln!("$ {}", util::display(&cmd));
            util::run(&mut cmd)?;
        }
    }
    Ok(())
}
