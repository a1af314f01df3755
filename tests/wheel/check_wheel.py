"""Run by `cargo xtask ci` in a fresh venv that has only the built `bale` wheel (and numpy):
no Rust toolchain on PATH, no checkout on sys.path. Packs a small tree with the wheel's
`bale` command (its entry point), checks that the command behaves as the cargo-built
binary given as argv[1] (output and exit codes), and reads the dataset back through the
installed package.

    python check_wheel.py /path/to/cargo-built/bale WORKDIR

With `-` for the binary (where none runs: an old-glibc root), the command's exit codes
and output are checked on their own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def run(argv: list[str], code: int) -> subprocess.CompletedProcess[bytes]:
    """Runs argv, asserting its exit code."""
    done = subprocess.run(argv, capture_output=True)
    assert done.returncode == code, (
        f"{argv} exited {done.returncode}, expected {code}\nstdout: {done.stdout!r}\nstderr: {done.stderr!r}"
    )
    return done


def same(
    wheel: list[str], cargo: list[str] | None, args: list[str], code: int, stderr: bool = True
) -> subprocess.CompletedProcess[bytes]:
    """Runs args with the wheel's command and with the cargo-built binary: the same exit
    code (`code`), stdout and (with `stderr`, for output that holds no timing) stderr."""
    w = run([*wheel, *args], code)
    if cargo is None:
        return w
    c = run([*cargo, *args], code)
    assert w.stdout == c.stdout, f"bale {args}: stdout differs\nwheel: {w.stdout!r}\ncargo: {c.stdout!r}"
    assert not stderr or w.stderr == c.stderr, f"bale {args}: stderr differs\nwheel: {w.stderr!r}\ncargo: {c.stderr!r}"
    return w


def main() -> int:
    cargo_bale = None if sys.argv[1] == "-" else Path(sys.argv[1])
    work = Path(sys.argv[2])
    for tool in ("cargo", "rustc", "maturin"):
        assert shutil.which(tool) is None, f"{tool} is on PATH: the wheel check must run without a Rust toolchain"
    import bale
    import numpy as np

    here = Path(bale.__file__).resolve()
    assert "site-packages" in here.parts, f"bale imported from {here}, not from the installed wheel"
    # The entry point pip wrote into the venv: a Python script, not the cargo binary.
    entry = Path(sys.executable).parent / "bale"
    assert entry.is_file(), f"the wheel installed no `bale` command at {entry}"
    assert entry.read_bytes().startswith(b"#!"), f"{entry} is not the wheel's entry-point script"
    wheel = [str(entry)]
    module = [sys.executable, "-m", "bale"]
    cargo = None if cargo_bale is None else [str(cargo_bale)]

    tree = work / "tree"
    expected = {}
    for i in range(30):
        d = tree / ("cat", "dog")[i % 2]
        d.mkdir(parents=True, exist_ok=True)
        payload = os.urandom(10 + i * 7)
        (d / f"{i:03d}.bin").write_bytes(payload)
        np.save(d / f"{i:03d}.npy", np.arange(i, dtype=np.int32))
        expected[f"{d.name}/{i:03d}"] = (payload, i % 2, np.arange(i, dtype=np.int32))

    # --help and --version, from the entry point and from `python -m bale`.
    for args in (["--help"], ["pack", "--help"], ["--version"]):
        help_text = same(wheel, cargo, args, 0).stdout
        assert run([*module, *args], 0).stdout == help_text, f"python -m bale {args} differs"
    # A usage error: clap's message and code 2.
    usage = same(wheel, cargo, ["pack", str(tree)], 2)
    assert b"--output" in usage.stderr, usage.stderr
    assert run([*module, "no-such-command"], 2).stderr == run([*(cargo or wheel), "no-such-command"], 2).stderr

    out = work / "ds"
    run([*wheel, "pack", str(tree), "-o", str(out), "--shard-samples", "7", "-q"], 0)
    same(wheel, cargo, ["verify", str(out)], 0, stderr=False)
    got = same(wheel, cargo, ["get", str(out), "dog/003", "--ext", "bin"], 0)
    assert got.stdout == expected["dog/003"][0]
    same(wheel, cargo, ["ls", str(out)], 0)
    # An error (not a usage error): code 2, the same message.
    same(wheel, cargo, ["get", str(out), "no/such-key", "--ext", "bin"], 2)

    ds = bale.Dataset(str(out))
    assert len(ds) == len(expected)
    for i in range(len(ds)):
        s = ds[i]
        payload, label, arr = expected[s["__key__"]]
        assert s["bin"] == payload, s["__key__"]
        assert s["cls"] == label
        np.testing.assert_array_equal(s["npy"], arr)
    seen = [s["__key__"] for s in bale.IterableDataset(str(out), shuffle=True, seed=1)]
    assert sorted(seen) == sorted(expected)

    # A verify that finds problems: code 1 from both, the same report.
    shard = sorted(p for p in out.iterdir() if p.name.endswith(".tar"))[0]
    data = bytearray(shard.read_bytes())
    data[1024] ^= 0xFF  # inside the first member's data, after its 512-byte header
    shard.write_bytes(bytes(data))
    report = same(wheel, cargo, ["verify", str(out)], 1, stderr=False)
    assert b"checksum mismatch" in report.stdout, report.stdout

    # The wheel's command is built without HDF5 (it would link the system library):
    # `--format h5` says so and how to get it.
    h5 = run([*wheel, "pack", str(tree), "-o", str(work / "h5"), "--format", "h5", "-q"], 2)
    assert b"without HDF5 support" in h5.stderr and b"--features hdf5" in h5.stderr, h5.stderr

    print(f"wheel check: bale {getattr(bale, '__version__', '?')} from {here.parent}: {len(ds)} samples read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
