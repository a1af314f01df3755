//! `cargo xtask <task>`: project automation for bale, in plain Rust.
//!
//! The `xtask` alias in `.cargo/config.toml` runs this crate. One module per task;
//! `util` holds what they share. Messages and progress go to stderr.

mod bench;
mod bench_ffcv;
mod bench_loader;
mod bench_python;
mod bench_remote;
mod bench_scale;
mod bench_trees;
mod bench_wheel;
mod ci;
mod demo;
mod gen_tree;
#[cfg(test)]
mod house;
mod pair;
mod util;
mod wheel;

use std::process::ExitCode;

use util::Args;

/// Every task, with its one-line description for `--help`.
const TASKS: &[(&str, &str)] = &[
    (
        "ci",
        "run every check and test in order, stopping at the first failure (installs missing tools)",
    ),
    (
        "gen-tree",
        "write a deterministic ImageNet-like tree: gen-tree OUT --files N --classes C [--kind jpeg|png] [--seed S]",
    ),
    (
        "demo",
        "generate a small example tree into target/demo and pack, verify and stat it with `bale`",
    ),
    (
        "pair",
        "time two shell commands against each other, alternating: pair --base CMD --new CMD [--runs N]",
    ),
    (
        "wheel",
        "build the release wheel (manylinux2014, abi3 and CPython 3.9/3.10) and check its tag: wheel [--check-old-glibc]",
    ),
    (
        "bench",
        "generate the benchmark tree, then run benchmarks: bench [pack|read|image|index|python|loader|all]",
    ),
];

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let task = args.next();
    let rest = Args::new(args.collect());
    let result = match task.as_deref() {
        None | Some("-h" | "--help" | "help") => {
            print_help();
            Ok(())
        }
        Some("ci") => ci::main(rest),
        Some("gen-tree") => gen_tree::main(rest),
        Some("demo") => demo::main(rest),
        Some("bench") => bench::main(rest),
        Some("pair") => pair::main(rest),
        Some("wheel") => wheel::main(rest),
        Some(other) => {
            print_help();
            Err(anyhow::anyhow!("unknown task {other:?}"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn print_help() {
    println!(
        "usage: cargo xtask <task> [options]   (cargo xtask <task> --help for a task's options)\n"
    );
    println!("tasks:");
    for (name, about) in TASKS {
        println!("  {name:<10} {about}");
    }
}
