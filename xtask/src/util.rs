//! Small helpers shared by the tasks: paths, finding programs, running commands.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Requirements of the Python tests, relative to the repository root.
pub(crate) const REQUIREMENTS: &str = "tests/python/requirements.txt";

/// Whether we run as root (apt-get, chroot).
pub(crate) fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_ok_and(|uid| uid.trim() == "0")
}

/// `python` arguments of a quiet, non-interactive `pip install`, for ci's venvs
/// and the benches'. Without compiling every installed module to bytecode: for
/// the test requirements that is 32,000 files and 105 s of CPU, which `cargo
/// xtask ci` would take from clippy (it sets up the venv beside it); Python
/// compiles a module when it first imports it.
pub(crate) const PIP_INSTALL: &[&str] = &[
    "-m",
    "pip",
    "install",
    "--disable-pip-version-check",
    "--no-input",
    "--no-compile",
    // pip's cache would keep a second copy of every wheel (torch's CUDA
    // libraries and DALI: about 4 GB) beside the installed venv.
    "--no-cache-dir",
    "-q",
];

/// The repository root (the parent of `xtask/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask/ has a parent directory")
        .to_path_buf()
}

/// The cargo that runs us (`$CARGO`, set by `cargo run`), else `cargo` from PATH,
/// without the variables `cargo run` set for xtask itself (see
/// [`bale_tests::cargo`]: they would make cargo rebuild ring and all above it).
pub fn cargo() -> Command {
    bale_tests::cargo()
}

/// Finds an executable named `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Renders a command the way a user would type it, for messages.
pub fn display(cmd: &Command) -> String {
    let program = cmd.get_program();
    let mut out = if std::env::var_os("CARGO").is_some_and(|cargo| cargo == program) {
        "cargo".to_string()
    } else {
        program.to_string_lossy().into_owned()
    };
    for arg in cmd.get_args() {
        out.push(' ');
        out.push_str(&quote(arg));
    }
    out
}

fn quote(arg: &OsStr) -> String {
    let s = arg.to_string_lossy();
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Runs `cmd` with inherited stdio and returns its exit status.
pub fn status(cmd: &mut Command) -> Result<ExitStatus> {
    cmd.status()
        .with_context(|| format!("cannot start `{}`", display(cmd)))
}

/// Runs `cmd` with inherited stdio; fails unless it exits with status 0.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = status(cmd)?;
    if !status.success() {
        bail!("`{}` failed ({status})", display(cmd));
    }
    Ok(())
}

/// Runs `cmd` and returns its stdout; fails with its stderr unless it exits with 0.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot start `{}`", display(cmd)))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}):\n{}",
            display(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The sha256 of `file` in hex, computed by `python` (no hashing crate in xtask):
/// the stamp that tells a venv its requirements file changed.
pub fn sha256_of(python: &Path, file: &Path) -> Result<String> {
    Ok(output(
        Command::new(python)
            .args([
                "-c",
                "import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())",
            ])
            .arg(file),
    )?
    .trim()
    .to_owned())
}

/// Formats a duration as seconds with one decimal, e.g. `12.3s`.
pub fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// Formats a byte count in decimal units, e.g. `2.05 GB` (like `du -h --si`).
pub fn bytes(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2} GB", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1} MB", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1} KB", n / 1e3)
    } else {
        format!("{n} B")
    }
}

/// Makes `path` relative to the repository root for display, when it is inside it.
pub fn shown(path: &Path) -> String {
    let root = repo_root();
    path.strip_prefix(&root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Command-line arguments of one task, consumed as they are parsed.
#[derive(Debug)]
pub struct Args {
    rest: Vec<String>,
}

impl Args {
    /// Wraps the arguments that follow the task name.
    pub fn new(rest: Vec<String>) -> Self {
        Args { rest }
    }

    /// True when `-h` or `--help` was given.
    pub fn wants_help(&self) -> bool {
        self.rest.iter().any(|a| a == "-h" || a == "--help")
    }

    /// Removes and returns everything after a `--`, for passing through to a child.
    pub fn passthrough(&mut self) -> Vec<String> {
        match self.rest.iter().position(|a| a == "--") {
            Some(i) => {
                let tail = self.rest.split_off(i);
                tail[1..].to_vec()
            }
            None => Vec::new(),
        }
    }

    /// Removes `--name VALUE` or `--name=VALUE` and parses the value.
    pub fn value<T>(&mut self, name: &str) -> Result<Option<T>>
    where
        T: std::str::FromStr,
        T::Err: std::fmt::Display,
    {
        let prefix = format!("{name}=");
        let Some(i) = self
            .rest
            .iter()
            .position(|a| a == name || a.starts_with(&prefix))
        else {
            return Ok(None);
        };
        let arg = self.rest.remove(i);
        let raw = match arg.strip_prefix(&prefix) {
            Some(v) => v.to_string(),
            None => {
                if i >= self.rest.len() {
                    bail!("{name} needs a value");
                }
                self.rest.remove(i)
            }
        };
        raw.parse::<T>()
            .map(Some)
            .map_err(|e| anyhow::anyhow!("invalid value {raw:?} for {name}: {e}"))
    }

    /// Removes the flag `name` (one without a value); true when it was given.
    pub fn flag(&mut self, name: &str) -> bool {
        let before = self.rest.len();
        self.rest.retain(|a| a != name);
        self.rest.len() != before
    }

    /// Removes and returns the first argument that is not a flag.
    pub fn positional(&mut self) -> Option<String> {
        let i = self.rest.iter().position(|a| !a.starts_with('-'))?;
        Some(self.rest.remove(i))
    }

    /// Fails if any argument was left unparsed.
    pub fn finish(self) -> Result<()> {
        if let Some(first) = self.rest.first() {
            bail!("unexpected argument {first:?} (try --help)");
        }
        Ok(())
    }
}
