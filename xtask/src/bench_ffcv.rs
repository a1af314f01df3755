//! FFCV 1.0.2 for `cargo xtask bench loader`'s plain row, installed into the test
//! venv when `import ffcv` fails there (never by `cargo xtask ci`: it is no test's
//! dependency and builds from source).
//!
//! FFCV has no wheel: pip builds its C++ extension, which links OpenCV and
//! libjpeg-turbo found through `pkg-config`. So:
//! 1. `pkg-config --exists opencv4 libturbojpeg`, else, as root,
//!    `apt-get install` of Debian's [`APT_PACKAGES`] (after an `apt-get update`
//!    when the first try fails); not as root, an error naming them;
//! 2. `pip install --no-deps -r` [`REQUIREMENTS`] (the Python packages FFCV
//!    imports, pinned: numba, llvmlite, OpenCV's, terminaltables, assertpy;
//!    numpy, torch and tqdm are the test venv's own), then [`FFCV`] built
//!    against them without build isolation.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::util;

/// FFCV's pinned version, built from its source distribution.
pub const FFCV: &str = "ffcv==1.0.2";
/// The Python packages FFCV imports, pinned, relative to the repository root.
pub const REQUIREMENTS: &str = "crates/bale-loader/benches/requirements-ffcv.txt";
/// Debian's packages that FFCV's build needs.
pub const APT_PACKAGES: [&str; 3] = ["pkg-config", "libopencv-dev", "libturbojpeg0-dev"];

/// True when `python` imports FFCV's loader.
pub fn importable(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "import ffcv.loader"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs FFCV into the venv of `python` unless it imports already.
pub fn ensure(root: &Path, python: &Path) -> Result<()> {
    if importable(python) {
        return Ok(());
    }
    eprintln!(
        "bench loader: `import ffcv` fails in {}: installing {FFCV} (built from source)",
        util::shown(python)
    );
    ensure_system_libraries()?;
    util::run(
        Command::new(python)
            .args(util::PIP_INSTALL)
            .arg("--no-deps")
            .arg("-r")
            .arg(root.join(REQUIREMENTS)),
    )
    .context("installing FFCV's dependencies")?;
    util::run(Command::new(python).args(util::PIP_INSTALL).args([
        "--no-deps",
        "--no-build-isolation",
        FFCV,
    ]))
    .with_context(|| format!("building {FFCV}"))?;
    if !importable(python) {
        bail!(
            "{FFCV} installed, but `import ffcv.loader` still fails in {} \
             (run it to see why, or pass `-- --no-ffcv`)",
            python.display()
        );
    }
    Ok(())
}

/// Makes sure `pkg-config` finds OpenCV and libjpeg-turbo, installing Debian's
/// packages as root.
fn ensure_system_libraries() -> Result<()> {
    let found = || {
        Command::new("pkg-config")
            .args(["--exists", "opencv4", "libturbojpeg"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if found() {
        return Ok(());
    }
    let packages = APT_PACKAGES.join(" ");
    if !util::is_root() || util::which("apt-get").is_none() {
        bail!(
            "FFCV's build needs OpenCV and libjpeg-turbo through pkg-config; install them \
             (Debian: `sudo apt-get install {packages}`) and run again, or pass `-- --no-ffcv`"
        );
    }
    let install = || {
        let mut cmd = Command::new("apt-get");
        cmd.args(["install", "-y", "-q", "--no-install-recommends"])
            .args(APT_PACKAGES)
            .env("DEBIAN_FRONTEND", "noninteractive");
        eprintln!("$ {}", util::display(&cmd));
        util::status(&mut cmd).map(|s| s.success())
    };
    if !install()? {
        // The package lists may be missing or stale.
        util::run(Command::new("apt-get").args(["update", "-q"]))?;
        if !install()? {
            bail!("`apt-get install {packages}` failed (see above)");
        }
    }
    if !found() {
        bail!("`pkg-config --exists opencv4 libturbojpeg` still fails after installing {packages}");
    }
    Ok(())
}
