//! `cargo xtask bench wheel`: the release wheel's loader against the cargo-built one.
//!
//! Users get the wheel `cargo xtask wheel` builds (linked by zig against glibc
//! 2.17's symbols, libjpeg-turbo copied in); the other benchmarks time the
//! module `maturin develop --release` builds into the test venv. Both must run
//! bale.Loader equally fast. This
//! 1. builds the release `bale` and the cargo-built module into `.venv` (as
//!    `bench loader` does), and the release abi3 wheel into
//!    `target/bench/wheel/dist`;
//! 2. installs the wheel, with numpy alone, into a fresh venv
//!    (`target/bench/wheel/venv`);
//! 3. packs the benchmark tree as it is (`target/bench/loader/as-is`, the
//!    plain loader row's dataset; reused when there);
//! 4. runs `crates/bale-py/benches/wheel_loader.py` (RandomResizedCrop(224) +
//!    flip, batches of 64, 2 threads) under each interpreter in turn, a round
//!    each, `--rounds` times, and prints the medians, ranges and their ratio.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::bench_python::{build_release, pack_once};
use crate::util;

const SCRIPT: &str = "crates/bale-py/benches/wheel_loader.py";

/// One subject: a label and the interpreter whose `bale` it times.
struct Subject {
    label: &'static str,
    python: PathBuf,
    /// The `bale` module must be loaded from below this directory.
    home: PathBuf,
    rates: Vec<f64>,
}

pub fn run(root: &Path, tree: &Path, python: &Path, extra: &[String]) -> Result<()> {
    let rounds = option(extra, "--rounds")?.unwrap_or(3);
    let batches = option(extra, "--batches")?.unwrap_or(40);
    let base = root.join("target/bench/wheel");
    let bale = build_release(root, python)?;
    let tools = crate::wheel::tool_venv(root)?;
    let wheel = crate::wheel::build(root, &tools, &base.join("dist"))?;
    let venv = base.join("venv");
    if venv.exists() {
        fs::remove_dir_all(&venv).with_context(|| format!("cannot remove {}", venv.display()))?;
    }
    util::run(Command::new(python).args(["-m", "venv"]).arg(&venv))
        .context("creating the wheel's venv")?;
    let wheel_python = venv.join("bin/python");
    util::run(
        Command::new(&wheel_python)
            .args(util::PIP_INSTALL)
            .arg(&wheel)
            .arg(crate::ci::pinned_numpy(root)?),
    )
    .context("installing the release wheel")?;
    let dataset = root.join("target/bench/loader/as-is");
    pack_once(&bale, tree, &dataset, &[])?;
    let mut subjects = [
        Subject {
            label: "bale.Loader, cargo-built (maturin develop --release)",
            python: python.to_path_buf(),
            // `maturin develop` installs the package editable: its module
            // is built into the source tree.
            home: root.join("crates/bale-py/python"),
            rates: Vec::new(),
        },
        Subject {
            label: "bale.Loader, release wheel (cargo xtask wheel)",
            python: wheel_python,
            home: venv.clone(),
            rates: Vec::new(),
        },
    ];
    eprintln!(
        "bench wheel: {rounds} rounds of {batches} batches of 64, load average {}",
        load_average()
    );
    for round in 0..rounds {
        for s in &mut subjects {
            let mut cmd = Command::new(&s.python);
            cmd.current_dir(root)
                .arg(root.join(SCRIPT))
                .arg("--dataset")
                .arg(&dataset)
                .arg("--batches")
                .arg(batches.to_string())
                .arg("--epoch")
                .arg(round.to_string());
            let out = util::output(&mut cmd)?;
            let (rate, module) =
                parse(&out).with_context(|| format!("{SCRIPT} printed {out:?}"))?;
            if !Path::new(&module).starts_with(&s.home) {
                bail!(
                    "{} ran the bale module {module}, not one in {}",
                    s.label,
                    s.home.display()
                );
            }
            eprintln!("  round {round}: {}: {rate:.0} images/s", s.label);
            s.rates.push(rate);
        }
    }
    println!("\n| images/s | median (range) |\n| --- | --- |");
    for s in &subjects {
        let (median, lo, hi) = spread(&s.rates);
        println!("| {} | {median:.0} ({lo:.0}-{hi:.0}) |", s.label);
    }
    let ratio = spread(&subjects[1].rates).0 / spread(&subjects[0].rates).0;
    println!(
        "\nthe release wheel runs at {ratio:.2}x the cargo-built module ({})",
        wheel.display()
    );
    Ok(())
}

/// `--name N` among the arguments after `--`.
fn option(extra: &[String], name: &str) -> Result<Option<usize>> {
    let Some(i) = extra.iter().position(|a| a == name) else {
        return Ok(None);
    };
    let value = extra
        .get(i + 1)
        .with_context(|| format!("{name} needs a number"))?;
    let n = value
        .parse()
        .with_context(|| format!("{name} {value:?}: expected a whole number"))?;
    if n == 0 {
        bail!("{name} must be at least 1");
    }
    Ok(Some(n))
}

/// `images_per_s=R version=V module=PATH`, the script's last line.
fn parse(out: &str) -> Option<(f64, String)> {
    let line = out.lines().rev().find(|l| l.starts_with("images_per_s="))?;
    let rate = line
        .split_whitespace()
        .next()?
        .strip_prefix("images_per_s=")?
        .parse()
        .ok()?;
    let module = line.split_once(" module=")?.1.to_owned();
    Some((rate, module))
}

/// Median, minimum and maximum.
fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    (median, v[0], v[n - 1])
}

fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_scripts_line_and_the_spread() {
        let out = "warming\nimages_per_s=812.5 version=0.1.0 module=/a b/bale/_native.abi3.so\n";
        assert_eq!(
            parse(out),
            Some((812.5, "/a b/bale/_native.abi3.so".into()))
        );
        assert_eq!(parse("images_per_s=x module=/m"), None);
        assert_eq!(spread(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(spread(&[4.0, 1.0]), (2.5, 1.0, 4.0));
        let args: Vec<String> = ["--rounds", "5"].iter().map(|s| s.to_string()).collect();
        assert_eq!(option(&args, "--rounds").unwrap(), Some(5));
        assert_eq!(option(&args, "--batches").unwrap(), None);
        assert!(option(&["--rounds".into(), "0".into()], "--rounds").is_err());
    }
}
