"""Shared fixtures of the Python package tests: trees written here, packed by the real `bale`.

`cargo xtask ci` installs the package (the wheel of crates/bale-py it built) into the venv
and sets BALE_BIN; run by hand:

    .venv/bin/maturin develop -m crates/bale-py/Cargo.toml   # with VIRTUAL_ENV=.venv
    .venv/bin/python -m pytest -q tests/python
"""

from __future__ import annotations

import gc
import hashlib
import os
import signal
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

try:
    import bale  # noqa: F401
except ImportError as e:  # a clear message instead of a collection error in every file
    raise ImportError(
        f"the bale package is not installed in {sys.prefix}: run "
        "`VIRTUAL_ENV=.venv .venv/bin/maturin develop -m crates/bale-py/Cargo.toml` "
        "(or `cargo xtask ci`)"
    ) from e


def bale_bin() -> Path:
    """The `bale` binary: $BALE_BIN, else target/debug/bale (built with cargo when missing)."""
    env = os.environ.get("BALE_BIN")
    if env:
        return Path(env)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    exe = target / "debug" / "bale"
    if not exe.exists():
        subprocess.run(["cargo", "build", "-p", "bale-cli"], cwd=ROOT, check=True)
    return exe


def run_bale(*args: str | os.PathLike[str]) -> str:
    r = subprocess.run([str(bale_bin()), *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"bale {' '.join(map(str, args))} failed ({r.returncode}):\n{r.stderr}")
    return r.stdout


def assert_refused_after_fork(holder: list) -> None:
    """Forks; the child goes on with the iterator `holder[0]` (its only
    reference) and must get bale's RuntimeError about the fork, then drop the
    iterator without waiting for the parent's threads: the alarm kills a
    child still waiting after 20 s."""
    status = continue_after_fork(holder)
    assert os.WIFEXITED(status), f"the child was killed (signal {os.WTERMSIG(status)}): it hung"
    assert os.WEXITSTATUS(status) == 0, os.WEXITSTATUS(status)


def continue_after_fork(holder: list) -> int:
    """Forks; the child goes on with the iterator `holder[0]` and exits 0 when
    bale refuses it with a RuntimeError about the fork (after dropping the
    iterator, which must not wait for the parent's threads either), 1 when it
    yields to the end, 3 on any other error; the alarm kills a child still
    waiting after 20 s. Returns the child's wait status."""
    pid = os.fork()
    if pid == 0:
        code = 4
        try:
            signal.alarm(20)
            try:
                for _ in holder[0]:
                    pass
                code = 1
            except RuntimeError as e:
                code = 0 if "forked" in str(e) else 3
            holder.clear()
            gc.collect()
        except BaseException:
            code = 5
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status


@dataclass
class Packed:
    """A packed dataset and what its samples must hold (key -> {ext: bytes or array})."""

    path: Path
    expected: dict[str, dict[str, object]]
    classes: list[str] | None = None
    labels: dict[str, int] = field(default_factory=dict)


def arrays_for(i: int) -> dict[str, np.ndarray]:
    """The .npy fields of sample i: several dtypes, shapes and memory orders."""
    rng = np.random.default_rng(i)
    return {
        "npy": rng.standard_normal((3, 4 + i % 3)).astype(np.float32),
        "ids.npy": np.arange(i, i + 5 + i % 4, dtype=np.int64),
        "fort.npy": np.asfortranarray(rng.integers(0, 255, (2, 3, 2), dtype=np.uint8)),
        "scalar.npy": np.array(float(i), dtype=np.float64),
        "empty.npy": np.zeros((0, 3), dtype=np.int16),
        "mask.npy": rng.integers(0, 2, 7).astype(bool),
        "rec.npy": np.array([(i, 1.5), (i + 1, 2.5)], dtype=[("a", "<i4"), ("b", "<f8")]),
    }


def write_tree(root: Path, n: int, classes: list[str] | None) -> dict[str, dict[str, object]]:
    """Writes n samples (bytes, text and .npy fields), in class dirs when classes is given."""
    expected: dict[str, dict[str, object]] = {}
    for i in range(n):
        sub = classes[i % len(classes)] if classes else f"part{i % 2}"
        d = root / sub
        d.mkdir(parents=True, exist_ok=True)
        key = f"{sub}/{i:05d}"
        payload = hashlib.sha256(str(i).encode()).digest() * (1 + i % 50)
        fields: dict[str, object] = {"bin": payload, "txt": f"sample {i}".encode()}
        (d / f"{i:05d}.bin").write_bytes(payload)
        (d / f"{i:05d}.txt").write_bytes(fields["txt"])  # type: ignore[arg-type]
        for ext, arr in arrays_for(i).items():
            np.save(d / f"{i:05d}.{ext}", arr)
            fields[ext] = arr
        expected[key] = fields
    return expected


CLASSES = ["cat", "dog", "eel"]
N = 40


@pytest.fixture(scope="session")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, dict[str, object]]]]:
    base = tmp_path_factory.mktemp("trees")
    labelled = base / "labelled"
    plain = base / "plain"
    return {
        "labelled": (labelled, write_tree(labelled, N, CLASSES)),
        "plain": (plain, write_tree(plain, N, None)),
    }


def _labels(expected: dict[str, dict[str, object]]) -> dict[str, int]:
    return {k: CLASSES.index(k.split("/")[0]) for k in expected}


@pytest.fixture(scope="session")
def tar_ds(trees, tmp_path_factory) -> Packed:
    """Labelled, plain tar, several shards."""
    src, expected = trees["labelled"]
    out = tmp_path_factory.mktemp("ds") / "tar"
    run_bale("pack", src, "-o", out, "--shard-samples", "7")
    return Packed(out, expected, CLASSES, _labels(expected))


@pytest.fixture(scope="session")
def zst_ds(trees, tmp_path_factory) -> Packed:
    """Labelled, tar.zst, shuffled at pack time."""
    src, expected = trees["labelled"]
    out = tmp_path_factory.mktemp("ds") / "zst"
    run_bale("pack", src, "-o", out, "--shard-samples", "9", "--compress", "zstd", "--shuffle", "--seed", "3")
    return Packed(out, expected, CLASSES, _labels(expected))


@pytest.fixture(scope="session")
def plain_ds(trees, tmp_path_factory) -> Packed:
    """Unlabelled tar."""
    src, expected = trees["plain"]
    out = tmp_path_factory.mktemp("ds") / "plain"
    run_bale("pack", src, "-o", out, "--labels", "none", "--shard-size", "64KiB")
    return Packed(out, expected)


@pytest.fixture(scope="session")
def merged_ds(trees, tmp_path_factory) -> Packed:
    """`bale pack --part I/3` three times, then `bale merge`."""
    src, expected = trees["labelled"]
    base = tmp_path_factory.mktemp("parts")
    parts = [base / f"part-{i}" for i in range(3)]
    for i, p in enumerate(parts):
        run_bale("pack", src, "-o", p, "--part", f"{i}/3", "--shard-samples", "5")
    out = base / "merged"
    run_bale("merge", *parts, "-o", out)
    return Packed(out, expected, CLASSES, _labels(expected))


@pytest.fixture(scope="session")
def indexed_ds(trees, tmp_path_factory) -> Packed:
    """WebDataset-style tars written by Python's tarfile, indexed by `bale index`."""
    src, expected = trees["plain"]
    base = tmp_path_factory.mktemp("wds")
    keys = sorted(expected)
    for t in range(2):
        with tarfile.open(base / f"train-{t:02d}.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
            for key in keys[t::2]:
                for p in sorted((src / key).parent.glob(Path(key).name + ".*")):
                    tf.add(p, arcname=f"{key}{p.name[len(Path(key).name):]}")
    out = base / "ds"
    run_bale("index", "-o", out, base / "train-00.tar", base / "train-01.tar")
    exp = {k: expected[k] for k in keys[0::2] + keys[1::2]}
    return Packed(out, exp)


@pytest.fixture(params=["tar", "zst", "plain", "merged", "indexed"])
def any_ds(request) -> Packed:
    """Every kind of dataset a bale command writes."""
    return request.getfixturevalue(f"{request.param}_ds")


def assert_sample(got: dict, key: str, packed: Packed, views: bool = True) -> None:
    """got (a sample dict) holds exactly what the packer was given for key.

    With ``views``, its arrays are read-only views of bale's buffers (read in
    this process; a DataLoader worker's samples arrive unpickled, as copies).
    """
    want = packed.expected[key]
    assert got["__key__"] == key
    assert set(got) - {"__key__", "__index__", "cls"} == set(want), key
    if packed.classes is not None:
        assert got["cls"] == packed.labels[key]
    else:
        assert "cls" not in got
    for ext, value in want.items():
        if isinstance(value, np.ndarray):
            arr = got[ext]
            assert isinstance(arr, np.ndarray), (key, ext)
            assert arr.dtype == value.dtype and arr.shape == value.shape, (key, ext)
            np.testing.assert_array_equal(arr, value)
            assert not views or not arr.flags.writeable
        else:
            assert got[ext] == value, (key, ext)
