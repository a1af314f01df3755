"""bale.Loader's share of the read side's reliability: what a user's
options reach never aborts the process, labels are never cast, an empty
dataset and an index out of range say so, 16-bit PNGs decode as Pillow
decodes them, and on_error="skip" never hides an error of the storage."""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import bale
from conftest import run_bale


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    root = tmp_path_factory.mktemp("rel") / "tree"
    for i in range(6):
        (root / "a").mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((40, 50, 3), i * 40, np.uint8)).save(root / "a" / f"{i}.png")
    out = root.parent / "ds"
    run_bale("pack", root, "-o", out)
    return out


def test_the_batches_in_flight_are_checked_whole_when_the_loader_is_made(small) -> None:
    # One batch of 7.5 GiB passed the old check of a single batch; the
    # three in flight then aborted the process when they were allocated.
    with pytest.raises(ValueError, match=r"batch_size.*prefetch=2.*3 of them"):
        bale.Loader(small, batch_size=10, size=(8192, 8192), dtype="float32", prefetch=2)
    # Masks count in the total.
    with pytest.raises(ValueError, match="mask"):
        bale.Loader(small, batch_size=64, size=(4096, 4096), masks="png", mask_dtype="int64", prefetch=0)
    assert len(bale.Loader(small, batch_size=10, size=(8192, 8192), dtype="float32", prefetch=0)) == 1


def run_limited(script: str, *args: str, limit_gib: int = 3) -> subprocess.CompletedProcess[str]:
    """Runs `script` in a Python whose address space is limited: memory the
    machine would not give (an allocation past the limit fails)."""
    prelude = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit_gib} << 30, {limit_gib} << 30))\n"
    return subprocess.run([sys.executable, "-c", prelude + script, *args], capture_output=True, text=True,
                          timeout=300)


def bomb_png(w: int, h: int) -> bytes:
    """A PNG whose header claims w x h RGB pixels, with a few rows of data."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    rows = zlib.compress(b"\x00" * (1 + 3 * w) * 4)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def test_no_allocation_the_options_reach_aborts_the_process(small, tmp_path) -> None:
    # Batches under the in-flight bound, on a machine without the memory:
    # a MemoryError, not SIGABRT ("memory allocation of ... failed").
    script = """
import sys, bale
loader = bale.Loader(sys.argv[1], batch_size=6, size=(8192, 8192), prefetch=0)
try:
    for _ in loader:
        pass
except MemoryError as e:
    print("MemoryError:", e)
"""
    r = run_limited(script, str(small), limit_gib=1)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "MemoryError: out of memory" in r.stdout, (r.stdout, r.stderr[-2000:])
    # An image a raised pixel limit lets through, decoded on a machine
    # without the memory for it: a damaged sample, not an abort.
    root = tmp_path / "tree" / "a"
    root.mkdir(parents=True)
    for i in range(3):
        Image.fromarray(np.full((40, 50, 3), 9, np.uint8)).save(root / f"{i}.png")
    (root / "1.png").write_bytes(bomb_png(40000, 40000))
    ds = tmp_path / "ds"
    run_bale("pack", tmp_path / "tree", "-o", ds)
    script = """
import sys, warnings, bale
warnings.simplefilter("ignore")
loader = bale.Loader(sys.argv[1], batch_size=3, size=16, crop="resize", max_pixels=2**40, on_error="skip")
print("images:", sum(len(x) for x, _ in loader), "skipped:", loader.skipped)
try:
    bale.decode_image(open(sys.argv[2], "rb").read(), "png", max_pixels=2**40)
except bale.FormatError as e:
    print("FormatError:", e)
"""
    r = run_limited(script, str(ds), str(root / "1.png"))
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "images: 2 skipped: 1" in r.stdout and "FormatError:" in r.stdout, (r.stdout, r.stderr[-2000:])


def test_into_requires_int64_labels(small) -> None:
    loader = bale.Loader(small, batch_size=4, size=8)
    images = np.zeros((4, 8, 8, 3), np.uint8)
    for dtype in (np.int32, np.float64, np.uint64):
        with pytest.raises(ValueError, match="labels must be int64"):
            next(loader.into(images, np.zeros(4, dtype)))
    assert list(loader.into(images, np.zeros(4, np.int64))) == [4, 2]


def test_an_empty_dataset_says_it_is_empty(tmp_path) -> None:
    (tmp_path / "tree").mkdir()
    run_bale("pack", tmp_path / "tree", "-o", tmp_path / "ds", "--allow-empty")
    with pytest.raises(ValueError, match="is empty"):
        bale.Loader(tmp_path / "ds")


def test_sample_params_out_of_range_is_an_index_error(small) -> None:
    loader = bale.Loader(small, batch_size=2, size=8)
    for bad in (-1, 6, 2**64):
        with pytest.raises(IndexError, match="sample index"):
            loader.sample_params(bad)
    with pytest.raises(TypeError):
        loader.sample_params(1.0)
    with pytest.raises(ValueError, match="^epoch must be from"):
        loader.sample_params(0, epoch=-1)
    assert loader.sample_params(np.int64(5))["size"] == (8, 8)


def png16(values: list[int], color_type: int) -> bytes:
    """A 16-bit PNG of one row holding `values` in every channel."""
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[color_type]

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + b"".join(struct.pack(">H", v) * channels for v in values)
    ihdr = struct.pack(">IIBBBBB", len(values), 1, 16, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(row)) + chunk(b"IEND", b"")


@pytest.mark.parametrize("color_type", [0, 2, 4, 6])
def test_16_bit_pngs_decode_as_pillow_decodes_them(tmp_path, color_type) -> None:
    values = [0, 1, 255, 256, 13650, 0x7FFF, 0x80FF, 0xFF00, 0xFF7F, 0xFFFF]
    data = png16(values, color_type)
    want = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    np.testing.assert_array_equal(bale.decode_image(data, "png"), want)
    root = tmp_path / "tree"
    root.mkdir()
    (root / "x.png").write_bytes(data)
    run_bale("pack", root, "-o", tmp_path / "ds")
    (images, _), = list(bale.Loader(tmp_path / "ds", batch_size=1, size=(1, len(values)), crop="resize"))
    np.testing.assert_array_equal(images[0], want)


# --- on_error="skip" never hides a storage error ---------------------------


def shard_tree(root: Path, n: int) -> Path:
    """`n` small PNGs in two classes, each of its own pixels."""
    for i in range(n):
        d = root / ("a" if i % 2 else "b")
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((12, 14, 3), i % 251, np.uint8)).save(d / f"{i:04d}.png")
    return root


def skipping_loader(ds: Path, **kw) -> bale.Loader:
    return bale.Loader(ds, batch_size=10, size=8, crop="resize", on_error="skip", threads=1, prefetch=0, **kw)


def test_skip_raises_when_the_dataset_is_repacked_into_fewer_shards_mid_epoch(tmp_path) -> None:
    tree = shard_tree(tmp_path / "tree", 300)
    ds = tmp_path / "ds"
    run_bale("pack", tree, "-o", ds, "--shard-size", "40KiB")
    shards = sorted(p.name for p in ds.glob("shard-*.tar"))
    assert len(shards) >= 5, shards
    loader = skipping_loader(ds)
    it = iter(loader)
    next(it)
    # Repacked under the loader, as `bale pack --force` does: fewer shards.
    run_bale("pack", tree, "-o", ds, "--force", "--shard-size", "1GiB")
    assert sorted(p.name for p in ds.glob("shard-*.tar")) == ["shard-000000.tar"]
    with pytest.raises(bale.FormatError, match=r"shard-0000(0[1-9]|[1-9]\d)\.tar: the shard was (removed|replaced)"):
        for _ in it:
            pass
    assert loader.skipped == 0


def test_skip_raises_when_a_shard_is_cut_short_under_pread_or_before_its_map(tmp_path) -> None:
    tree = shard_tree(tmp_path / "tree", 120)
    ds = tmp_path / "ds"
    run_bale("pack", tree, "-o", ds, "--shard-size", "40KiB")
    for backing, shard in (("pread", "shard-000000.tar"), ("mmap", "shard-000001.tar")):
        loader = skipping_loader(ds, backing=backing)
        it = iter(loader)
        next(it)  # shard 0 is open now (read through its descriptor, or mapped)
        path = ds / shard
        size = path.stat().st_size
        os.truncate(path, size // 2)
        try:
            with pytest.raises(bale.FormatError, match=rf"{shard}: the shard was replaced or changed"):
                for _ in it:
                    pass
            assert loader.skipped == 0, backing
        finally:
            run_bale("pack", tree, "-o", ds, "--force", "--shard-size", "40KiB")


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_skip_raises_when_a_shard_becomes_a_fifo_or_a_directory(tmp_path, kind) -> None:
    tree = shard_tree(tmp_path / "tree", 60)
    ds = tmp_path / "ds"
    run_bale("pack", tree, "-o", ds, "--shard-size", "40KiB")
    loader = skipping_loader(ds)
    it = iter(loader)
    next(it)
    shard = ds / "shard-000001.tar"
    shard.unlink()
    if kind == "fifo":
        os.mkfifo(shard)
    else:
        shard.mkdir()
    with pytest.raises(bale.FormatError, match=r"shard-000001\.tar"):
        for _ in it:
            pass
    assert loader.skipped == 0


@pytest.mark.parametrize("backing", ["mmap", "pread"])
def test_skip_raises_when_an_open_shard_is_written_over_in_place(tmp_path, backing) -> None:
    # The bytes the loader reads are another file's: images that do not
    # decode, which skip must not take for damaged samples.
    tree = shard_tree(tmp_path / "tree", 60)
    ds = tmp_path / "ds"
    run_bale("pack", tree, "-o", ds, "--shard-size", "1GiB")
    loader = skipping_loader(ds, backing=backing)
    it = iter(loader)
    next(it)
    shard = ds / "shard-000000.tar"
    size = shard.stat().st_size
    time.sleep(0.05)  # past the file system's clock step
    with open(shard, "r+b") as f:
        f.seek(size // 3)
        f.write(b"\x5a" * (size - size // 3 - 1024))
    with pytest.raises(bale.FormatError, match=r"shard-000000\.tar: the shard was replaced or changed"):
        for _ in it:
            pass
    assert loader.skipped == 0
