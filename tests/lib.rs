//! Shared helpers for the end-to-end tests: where the `bale` binary, the Python
//! interpreter and the standard tools (GNU tar, zstd) are.
//!
//! The tests need all of them and never skip silently: a missing one panics with what
//! to do. `cargo xtask ci` installs the tools and makes the Python venv, so it is the
//! one command that runs every test.
//!
//! ```no_run
//! let version = bale_tests::run_python("import sys; print(sys.version_info[0])", &[]).unwrap();
//! assert_eq!(version.trim(), "3");
//! ```

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};

pub mod seaweed;

/// The repository root (the parent of `tests/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent directory")
        .to_path_buf()
}

/// The Python interpreter of the tests: `$BALE_TEST_PYTHON`, else `<repo>/.venv/bin/python`.
///
/// # Panics
///
/// When neither exists, with a message saying to run `cargo xtask ci` (which creates
/// the venv with the packages in `tests/python/requirements.txt`).
pub fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("BALE_TEST_PYTHON") {
        return PathBuf::from(python);
    }
    let venv = repo_root().join(".venv/bin/python");
    if venv.exists() {
        return venv;
    }
    panic!(
        "no Python for the tests: BALE_TEST_PYTHON is unset and {} does not exist; \
         run `cargo xtask ci` once, which creates the venv with tests/python/requirements.txt",
        venv.display()
    );
}

/// Runs `python -c script args...` and returns its stdout.
///
/// # Errors
///
/// When Python cannot start or exits non-zero; the error holds the script's stderr.
pub fn run_python(script: &str, args: &[&OsStr]) -> Result<String> {
    let python = python();
    let out = Command::new(&python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .with_context(|| format!("cannot start {}", python.display()))?;
    let stdout = String::from_utf8(out.stdout).context("python printed non-UTF-8 output")?;
    if !out.status.success() {
        bail!(
            "python script failed ({}):\n--- script ---\n{script}\n--- stderr ---\n{}\n--- stdout ---\n{stdout}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(stdout)
}

/// A `cargo` command: `$CARGO` (set when cargo runs this program), else `cargo`
/// from PATH, without the variables cargo sets for the crate it runs.
///
/// ring's build script asks to be rerun when `CARGO_PKG_NAME`,
/// `CARGO_MANIFEST_DIR` and the like change, and cargo compares them in its own
/// environment. A cargo started with one crate's values (a test's, xtask's) and
/// then one started from a shell would each rebuild ring and everything above it
/// (rustls, reqwest, object_store, bale-storage, ...) for the other.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    without_crate_vars(&mut cmd);
    cmd
}

/// Removes from `cmd`'s environment the variables cargo sets for the crate it
/// runs (see [`cargo`]), for a program that runs cargo itself (maturin).
pub fn without_crate_vars(cmd: &mut Command) -> &mut Command {
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(set_by_cargo_for_a_crate) {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// Whether `var` is one of the variables cargo sets for the program or test it
/// runs (and for build scripts), naming that crate.
fn set_by_cargo_for_a_crate(var: &str) -> bool {
    var.starts_with("CARGO_PKG_")
        || var.starts_with("CARGO_BIN_EXE_")
        || matches!(
            var,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
        )
}

/// The `bale` binary under test: `$BALE_BIN` if set, else `target/<profile>/bale`
/// beside this test executable.
///
/// It is brought up to date once per test process with `cargo build -p bale-cli`
/// (in the test executable's profile, with `hdf5` when the tests have it; a no-op
/// when nothing changed), so the tests never run a stale binary after an edit.
///
/// # Panics
///
/// When the build fails or does not produce the binary.
pub fn bale_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("BALE_BIN") {
            return PathBuf::from(bin);
        }
        // current_exe() is target/<profile>/deps/<test>-<hash>.
        let exe = std::env::current_exe().expect("cannot find the test executable");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test executable is not in target/<profile>/deps");
        let bin = profile_dir.join(format!("bale{}", std::env::consts::EXE_SUFFIX));
        build_bale(profile_dir);
        assert!(
            bin.exists(),
            "`cargo build -p bale-cli` did not produce {}",
            bin.display()
        );
        bin
    })
    .clone()
}

/// Builds the `bale` binary in the profile whose output directory is `profile_dir`.
fn build_bale(profile_dir: &Path) {
    let mut cmd = cargo();
    cmd.current_dir(repo_root())
        .args(["build", "--quiet", "-p", "bale-cli"]);
    if cfg!(feature = "hdf5") {
        cmd.args(["--features", "hdf5"]);
    }
    match profile_dir.file_name().and_then(OsStr::to_str) {
        Some("debug") | None => {}
        Some(profile) => {
            cmd.args(["--profile", profile]);
        }
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run `cargo build -p bale-cli`: {e}"));
    assert!(
        status.success(),
        "`cargo build -p bale-cli` failed ({status})"
    );
}

/// GNU tar, from PATH (`gtar` is preferred where both exist, as on macOS).
///
/// # Panics
///
/// When no GNU tar is on PATH, with the command that installs it.
pub fn gnu_tar() -> PathBuf {
    static TAR: OnceLock<PathBuf> = OnceLock::new();
    TAR.get_or_init(|| {
        ["gtar", "tar"]
            .into_iter()
            .filter_map(which)
            .find(|tar| {
                Command::new(tar)
                    .arg("--version")
                    .output()
                    .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("GNU tar"))
            })
            .unwrap_or_else(|| {
                panic!("GNU tar is not on PATH; install it with `apt-get install -y tar` (or run `cargo xtask ci`)")
            })
    })
    .clone()
}

/// The `zstd` command-line tool, from PATH.
///
/// # Panics
///
/// When `zstd` is not on PATH, with the command that installs it.
pub fn zstd_cli() -> PathBuf {
    which("zstd").unwrap_or_else(|| {
        panic!("the zstd CLI is not on PATH; install it with `apt-get install -y zstd` (or run `cargo xtask ci`)")
    })
}

/// The shell commands docs/format.md gives to write a `.tar.zst` shard's
/// zstd dictionary (its opening skippable frame) to a file, for `zstd -D`.
pub const ZSTD_DICT_RECIPE: &str =
    r#"n=$(od -An -tu4 -j4 -N4 "$1"); tail -c +9 "$1" | head -c $n > "$2""#;

/// Runs [`ZSTD_DICT_RECIPE`] with `sh`: `shard`'s dictionary into `dict`.
pub fn extract_zstd_dict(shard: &Path, dict: &Path) {
    let out = std::process::Command::new("sh")
        .args(["-c", ZSTD_DICT_RECIPE, "sh"])
        .arg(shard)
        .arg(dict)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Finds an executable file named `name` in a directory of PATH.
fn which(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Runs the `bale` binary with `args` followed by `paths` and returns what it did.
///
/// # Panics
/// When the binary cannot be started.
pub fn run_bale(args: &[&str], paths: &[&Path]) -> Output {
    let mut cmd = Command::new(bale_bin());
    cmd.args(args);
    for p in paths {
        cmd.arg(p);
    }
    cmd.output().expect("run bale")
}

/// A command's exit status, stdout and stderr, for assertion messages.
pub fn describe(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Asserts that a command succeeded, showing its output when it did not.
///
/// # Panics
/// When it did not succeed.
pub fn assert_success(o: &Output) {
    assert!(o.status.success(), "{}", describe(o));
}
