"""bale.Loader: decoded, augmented batches, checked against Pillow and torchvision."""

from __future__ import annotations

import io
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import torch
import torchvision.transforms.functional as TF
from torchvision.transforms import InterpolationMode

import bale
from conftest import assert_refused_after_fork, run_bale

N = 48
CLASSES = ["ant", "bee", "cat"]


def photo(i: int, w: int, h: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    y, x = np.mgrid[0:h, 0:w]
    arr = np.stack([x * 255 // w, y * 255 // h, (x + y) * 255 // (w + h)], -1)
    arr = arr + rng.integers(-25, 25, (h, w, 3))
    return np.clip(arr, 0, 255).astype(np.uint8)


def make(root: Path, fmt: str, size_of) -> dict[str, np.ndarray]:
    """N images (JPEG quality 90 or PNG) in class dirs; returns key -> pixels as Pillow decodes them."""
    pixels = {}
    for i in range(N):
        w, h = size_of(i)
        cls = CLASSES[i % 3]
        d = root / cls
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"{i:04d}.{fmt}"
        img = Image.fromarray(photo(i, w, h))
        if fmt == "jpg":
            img.save(path, quality=90, progressive=(i % 4 == 0))
        else:
            img.save(path)
        with Image.open(path) as im:
            pixels[f"{cls}/{i:04d}"] = np.asarray(im.convert("RGB"))
    return pixels


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    root = tmp_path_factory.mktemp("loader") / "jpg"
    pixels = make(root, "jpg", lambda i: (300 + (i * 37) % 200, 220 + (i * 53) % 180))
    out = root.parent / "jpg-ds"
    run_bale("pack", root, "-o", out, "--shard-samples", "10")
    return out, pixels


@pytest.fixture(scope="module")
def same_size(tmp_path_factory):
    """JPEGs and PNGs all 160x120, to compare whole decodes."""
    base = tmp_path_factory.mktemp("loader")
    out = {}
    for fmt in ("jpg", "png"):
        root = base / fmt
        pixels = make(root, fmt, lambda i: (160, 120))
        ds = base / f"{fmt}-ds"
        run_bale("pack", root, "-o", ds)
        out[fmt] = (ds, pixels)
    return out


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def keys_of(path: Path) -> list[str]:
    ds = bale.Dataset(path)
    return [ds[i]["__key__"] for i in range(len(ds))]


@pytest.mark.parametrize("fmt", ["jpg", "png"])
def test_full_scale_pixels_match_pillow(same_size, fmt: str) -> None:
    path, pixels = same_size[fmt]
    keys = keys_of(path)
    loader = bale.Loader(path, batch_size=16, crop="resize", size=(120, 160), dct_scaling=False)
    n = 0
    for images, labels in loader:
        for img, label, index in zip(images, labels, loader.last_indices):
            want = pixels[keys[int(index)]]
            if fmt == "png":
                np.testing.assert_array_equal(img, want)
            else:
                assert psnr(img, want) >= 40, keys[int(index)]
            assert CLASSES[label] == keys[int(index)].split("/")[0]
            n += 1
    assert n == N


def test_random_crops_and_flips_match_torchvision(jpegs) -> None:
    path, pixels = jpegs
    keys = keys_of(path)
    loader = bale.Loader(path, batch_size=8, crop="random_resized", size=96, flip=True,
                         shuffle=True, seed=5, dct_scaling=False)
    loader.set_epoch(2)
    flips = 0
    for images, _ in loader:
        for img, index in zip(images, loader.last_indices):
            p = loader.sample_params(int(index))
            src = Image.fromarray(pixels[keys[int(index)]])
            want = TF.resized_crop(src, int(p["top"]), int(p["left"]), int(p["height"]), int(p["width"]),
                                   [96, 96], interpolation=InterpolationMode.BILINEAR, antialias=True)
            if p["flip"]:
                want = TF.hflip(want)
                flips += 1
            want = np.asarray(want)
            assert psnr(img, want) >= 40, (keys[int(index)], p, psnr(img, want))
    assert 0 < flips < N


def test_random_resized_crop_boxes_follow_torchvision_rules(jpegs) -> None:
    path, pixels = jpegs
    keys = keys_of(path)
    loader = bale.Loader(path, batch_size=8, size=64, seed=1)
    for index in range(N):
        h, w = pixels[keys[index]].shape[:2]
        p = loader.sample_params(index, epoch=0)
        assert p["top"] + p["height"] <= h and p["left"] + p["width"] <= w
        area = p["height"] * p["width"] / (h * w)
        ratio = p["width"] / p["height"]
        fallback = p["top"] == (h - p["height"]) // 2 and p["left"] == (w - p["width"]) // 2
        assert fallback or (0.079 <= area <= 1.0 and 0.74 <= ratio <= 1.35), p
        assert all(float(p[k]).is_integer() for k in ("top", "left", "height", "width"))


def test_center_crop_matches_resize_then_center_crop(jpegs) -> None:
    path, pixels = jpegs
    keys = keys_of(path)
    loader = bale.Loader(path, batch_size=16, crop="center", size=112, resize=128, dct_scaling=False)
    for images, _ in loader:
        for img, index in zip(images, loader.last_indices):
            src = Image.fromarray(pixels[keys[int(index)]])
            want = TF.center_crop(TF.resize(src, 128, interpolation=InterpolationMode.BILINEAR, antialias=True), 112)
            # One resize of the exact box against two steps: close, not equal.
            assert psnr(img, np.asarray(want)) >= 30


def test_every_sample_once_per_epoch_in_each_order_and_labels_match(jpegs) -> None:
    path, _ = jpegs
    keys = keys_of(path)
    for order in ("sequential", "shuffled", "shard_shuffled"):
        loader = bale.Loader(path, batch_size=7, size=32, order=order, seed=3, buffer=5)
        seen = []
        for images, labels in loader:
            assert images.shape[1:] == (32, 32, 3)
            for label, index in zip(labels, loader.last_indices):
                assert CLASSES[label] == keys[int(index)].split("/")[0]
                seen.append(int(index))
        assert sorted(seen) == list(range(N)), order
        assert len(loader) == (N + 6) // 7


def test_a_loader_continued_in_a_forked_child_raises_instead_of_hanging(jpegs) -> None:
    path, _ = jpegs
    it = iter(bale.Loader(path, batch_size=4, size=16, prefetch=1))
    next(it)
    holder = [it]
    del it
    assert_refused_after_fork(holder)
    assert sum(len(labels) for _, labels in holder[0]) == N - 4


def test_ctrl_c_interrupts_the_wait_for_a_batch_and_loses_it_not(tmp_path: Path) -> None:
    # One batch of eight full decodes of a 3000x3000 JPEG on one thread:
    # far longer than the 50 ms after which SIGALRM's handler raises
    # KeyboardInterrupt, as Ctrl-C's does. The wait must give way to it, and
    # the batch still comes on the next call (without the fix, the handler
    # only ran once the batch was handed out, and the batch was lost).
    root = tmp_path / "big" / "ant"
    root.mkdir(parents=True)
    buf = io.BytesIO()
    Image.fromarray(photo(0, 3000, 3000)).save(buf, format="JPEG", quality=90)
    for i in range(8):
        (root / f"{i}.jpg").write_bytes(buf.getvalue())
    out = tmp_path / "ds"
    run_bale("pack", tmp_path / "big", "-o", out)
    loader = bale.Loader(out, batch_size=8, size=2048, crop="resize", threads=1, prefetch=0, dct_scaling=False)
    batches = loader._native.epoch(0, 0)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(KeyboardInterrupt):
            next(batches)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    first = next(batches)
    assert list(np.frombuffer(first[2], dtype=np.uint64)) == list(range(8))


def test_partitions_are_disjoint_and_cover_the_epoch(jpegs) -> None:
    path, _ = jpegs
    seen = []
    for rank in range(3):
        loader = bale.Loader(path, batch_size=5, size=32, shuffle=True, seed=9, rank=rank, world_size=3)
        for _ in loader:
            seen.extend(int(i) for i in loader.last_indices)
    assert sorted(seen) == list(range(N))


def batches(loader) -> list[tuple[np.ndarray, np.ndarray, list[int]]]:
    return [(im.copy(), lb.copy(), list(loader.last_indices)) for im, lb in loader]


def test_same_run_same_batches_whatever_the_threads_and_resume_is_exact(jpegs) -> None:
    path, _ = jpegs
    kw = dict(batch_size=6, size=48, flip=True, shuffle=True, seed=11)
    one = bale.Loader(path, threads=1, **kw)
    two = bale.Loader(path, threads=2, prefetch=3, **kw)
    one.set_epoch(4)
    two.set_epoch(4)
    a, b = batches(one), batches(two)
    assert len(a) == len(b) == N // 6
    for (ia, la, xa), (ib, lb, xb) in zip(a, b):
        np.testing.assert_array_equal(ia, ib)
        np.testing.assert_array_equal(la, lb)
        assert xa == xb
    resumed = bale.Loader(path, threads=2, **kw)
    resumed.resume(4, 3 * 6)
    rest = batches(resumed)
    assert len(rest) == len(a) - 3
    for (ia, la, xa), (ib, lb, xb) in zip(a[3:], rest):
        np.testing.assert_array_equal(ia, ib)
        assert xa == xb


def test_layouts_dtypes_and_zero_copy_torch(jpegs) -> None:
    path, _ = jpegs
    hwc = bale.Loader(path, batch_size=4, size=(40, 56), crop="center", resize=64)
    chw = bale.Loader(path, batch_size=4, size=(40, 56), crop="center", resize=64, channels_first=True, dtype="float32")
    f16 = bale.Loader(path, batch_size=4, size=(40, 56), crop="center", resize=64, dtype="float16")
    (a, la), (b, lb), (c, _) = next(iter(hwc)), next(iter(chw)), next(iter(f16))
    assert a.shape == (4, 40, 56, 3) and a.dtype == np.uint8
    assert b.shape == (4, 3, 40, 56) and b.dtype == np.float32
    assert c.shape == (4, 40, 56, 3) and c.dtype == np.float16
    mean, std = np.array(bale.IMAGENET_MEAN), np.array(bale.IMAGENET_STD)
    want = (a.astype(np.float64) / 255 - mean) / std
    np.testing.assert_allclose(b.transpose(0, 2, 3, 1), want, atol=1e-5)
    np.testing.assert_allclose(c.astype(np.float64), want, atol=1e-2)
    np.testing.assert_array_equal(la, lb)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = torch.from_numpy(a)
        tl = torch.from_numpy(la)
    assert t.data_ptr() == a.ctypes.data and tl.dtype == torch.int64
    assert t.shape == (4, 40, 56, 3)


def test_a_loader_reads_as_the_dataset_it_is_given(tmp_path: Path, jpegs) -> None:
    src, _ = jpegs
    ds_dir = tmp_path / "ds"
    shutil.copytree(src, ds_dir)
    # One byte of the first image's JFIF header (its horizontal density)
    # flipped: the image decodes alike, only its checksum tells.
    first = bale.Dataset(ds_dir)[0]["jpg"]
    shard = ds_dir / "shard-000000.tar"
    data = bytearray(shard.read_bytes())
    at = data.find(first)
    assert at > 0 and first[6:11] == b"JFIF\0"
    data[at + 15] ^= 0x01
    with open(shard, "r+b") as f:
        f.seek(at + 15)
        f.write(data[at + 15 : at + 16])
    assert sum(len(labels) for _, labels in bale.Loader(ds_dir, batch_size=8, size=16)) == N
    with pytest.raises(FileNotFoundError, match="no such dataset"):
        bale.Loader(tmp_path / "nope")
    checked = bale.Loader(bale.Dataset(ds_dir, verify_on_read=True), batch_size=8, size=16)
    with pytest.raises(bale.FormatError, match="checksum"):
        list(checked)

    # backing="pread": a shard cut short while the loader reads it is an
    # error, not SIGBUS (in a process of its own: SIGBUS would end pytest).
    script = """
import os, sys, bale
path, backing = sys.argv[1:]
it = iter(bale.Loader(bale.Dataset(path, backing=backing), batch_size=2, size=16, threads=1, prefetch=0))
next(it)
os.truncate(os.path.join(path, "shard-000000.tar"), 1024)
try:
    list(it)
except bale.FormatError as e:
    print("error:", e)
"""
    for backing in ("pread", "mmap"):
        cut = tmp_path / f"cut-{backing}"
        shutil.copytree(src, cut)
        r = subprocess.run(
            [sys.executable, "-c", script, str(cut), backing], capture_output=True, text=True, timeout=120
        )
        if backing == "pread":
            assert r.returncode == 0 and "error:" in r.stdout and "shard-000000.tar" in r.stdout, (r.stdout, r.stderr)
        else:
            # The default backing maps the shard: the documented SIGBUS,
            # which shows that the test reaches the lost pages.
            assert r.returncode == -7, (r.returncode, r.stdout, r.stderr)


def test_damaged_images_fail_naming_the_sample_or_are_skipped(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    make(root, "jpg", lambda i: (100, 80))
    bad = root / "bee" / "0004.jpg"
    bad.write_bytes(bad.read_bytes()[:1500])
    out = tmp_path / "ds"
    run_bale("pack", root, "-o", out)
    keys = keys_of(out)
    loader = bale.Loader(out, batch_size=8, size=32)
    with pytest.raises(bale.FormatError, match="bee/0004"):
        for _ in loader:
            pass
    skipping = bale.Loader(out, batch_size=8, size=32, on_error="skip")
    seen = []
    with pytest.warns(UserWarning, match="bee/0004"):
        for images, labels in skipping:
            assert len(images) == len(labels)
            seen.extend(int(i) for i in skipping.last_indices)
    assert skipping.skipped == 1
    assert keys.index("bee/0004") not in seen and len(seen) == N - 1
    # A batch whose every image is skipped is not yielded: an empty batch
    # makes a mean loss NaN. `position` counts what was read, for resume.
    bad = keys.index("bee/0004")
    assert 0 < bad < N - 2
    ones = bale.Loader(out, batch_size=1, size=32, on_error="skip")
    with pytest.warns(UserWarning, match="bee/0004"):
        assert [len(labels) for _, labels in ones] == [1] * (N - 1)
    assert ones.position == N
    # With even=True every rank takes as many steps: the empty batch comes.
    evens = bale.Loader(out, batch_size=1, size=32, on_error="skip", even=True)
    with pytest.warns(UserWarning, match="bee/0004"):
        sizes = [len(labels) for _, labels in evens]
    assert sizes == [1] * bad + [0] + [1] * (N - bad - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        it = iter(ones)
        for _ in range(bad + 1):
            next(it)
        assert int(ones.last_indices[0]) == bad + 1 and ones.position == bad + 2
        rest = bale.Loader(out, batch_size=1, size=32, on_error="skip")
        rest.resume(0, ones.position)
        assert [int(i) for _ in rest for i in rest.last_indices] == list(range(bad + 2, N))


def test_fields_pass_through(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    make(root, "png", lambda i: (40, 30))
    for i, p in enumerate(sorted(root.glob("*/*.png"))):
        p.with_suffix(".txt").write_text(f"caption {p.stem}")
    out = tmp_path / "ds"
    run_bale("pack", root, "-o", out)
    keys = keys_of(out)
    loader = bale.Loader(out, batch_size=10, size=16, fields=["txt"])
    for images, labels, fields in loader:
        assert len(fields["txt"]) == len(images)
        for text, index in zip(fields["txt"], loader.last_indices):
            assert text == f"caption {keys[int(index)].split('/')[1]}".encode()
    # One name given as a string is that field, not its letters.
    _, _, one = next(iter(bale.Loader(out, batch_size=10, size=16, fields="txt")))
    assert list(one) == ["txt"] and all(t.startswith(b"caption ") for t in one["txt"])


def test_bad_options_are_value_errors(jpegs) -> None:
    path, _ = jpegs
    for kw in (dict(batch_size=0), dict(crop="diagonal"), dict(dtype="int7"), dict(scale=(0.5, 0.1)),
               dict(size=0), dict(on_error="retry"), dict(image="txt"), dict(threads=100_000),
               dict(prefetch=10**9), dict(batch_size=10**9), dict(std=(0.0, 1.0, 1.0), dtype="float32"),
               dict(rank=3, world_size=2), dict(mean=(float("nan"), 0.5, 0.5), dtype="float32"),
               dict(image="png"), dict(size=(5.9, 5.9)), dict(size=16.0), dict(size=-1), dict(size=(16,)),
               dict(size="16"), dict(size=(16, -2)), dict(size=True), dict(size=(True, 16)),
               dict(size=bytearray(b"\x10\x0c")), dict(size=2**40)):
        with pytest.raises(ValueError):
            bale.Loader(path, **kw)
    # A negative or too large count names its option (not an OverflowError
    # from the native side); a float or a bool is not a count.
    for kw in (dict(batch_size=-1), dict(resize=-1), dict(resize=2**32), dict(threads=-1),
               dict(prefetch=-1), dict(buffer=-1), dict(seed=-1), dict(seed=2**64),
               dict(max_pixels=-1), dict(cache_limit=-1), dict(rank=-1, world_size=2)):
        name = next(iter(kw))
        with pytest.raises(ValueError, match=f"^{name} must be from"):
            bale.Loader(path, **kw)
    # What the native types hold but the loader cannot use: named by the
    # loader's one check of its options.
    for kw in (dict(world_size=0, rank=0), dict(rank=2, world_size=2), dict(batch_size=0),
               dict(resize=(300, 200)), dict(scale=(0.5, 1.0), crop="center"), dict(mask_fill=300),
               dict(max_boxes=0, boxes="json")):
        name = next(iter(kw))
        with pytest.raises(ValueError, match=f"^invalid loader option {name}: "):
            bale.Loader(path, **kw)
    for kw in (dict(batch_size=2.0), dict(threads=True), dict(resize="256"), dict(seed=None)):
        with pytest.raises(TypeError, match=f"^{next(iter(kw))} must be an int"):
            bale.Loader(path, **kw)
    assert bale.Loader(path, batch_size=np.int32(3), size=16, resize=np.uint16(20)).batch_size == 3
    # Per-channel and range pairs name their option: another length is a
    # ValueError, a string, None or a non-number a TypeError.
    for kw in (dict(mean=(1, 2)), dict(std=(0.2,) * 4), dict(scale=(0.1, 0.5, 1.0)), dict(ratio=(1.0,))):
        with pytest.raises(ValueError, match=f"^{next(iter(kw))} must be [23] numbers"):
            bale.Loader(path, **kw)
    for kw in (dict(mean="abc"), dict(std=None), dict(scale=(0.1, "1")), dict(ratio=(True, 2.0)), dict(mean={1: 2})):
        with pytest.raises(TypeError, match=f"^{next(iter(kw))} must be [23] numbers"):
            bale.Loader(path, **kw)
    # A switch is True or False (a NumPy bool too), not 2 or "yes".
    for kw in (dict(flip=2), dict(shuffle="yes"), dict(even=1), dict(drop_last=None), dict(channels_first=0),
               dict(dct_scaling="no")):
        with pytest.raises(TypeError, match=f"^{next(iter(kw))} must be True or False"):
            bale.Loader(path, **kw)
    got = bale.Loader(path, size=16, flip=np.bool_(True), mean=np.array([0.5, 0.5, 0.5]), std=[0.25] * 3,
                      scale=np.array([0.5, 1.0]), dtype="float32")
    assert next(iter(got))[0].dtype == np.float32
    # The epoch and start of a resume, when set, not when iterated.
    loader = bale.Loader(path, size=16)
    with pytest.raises(TypeError, match="^epoch must be an int"):
        loader.set_epoch(1.5)
    with pytest.raises(ValueError, match="^epoch must be from"):
        loader.set_epoch(2**64)
    with pytest.raises(ValueError, match="^start must be from"):
        loader.resume(0, -1)
    loader.resume(np.int64(1), 2)
    assert (loader.epoch, loader.start) == (1, 2)
    # Whole pixels are taken in any integer type.
    assert next(iter(bale.Loader(path, size=(np.int64(16), 12))))[0].shape[1:3] == (16, 12)
    # A typo names the member and the ones there are.
    with pytest.raises(ValueError, match=r'no member "png".*jpg'):
        bale.Loader(path, image="png")
    with pytest.raises(ValueError, match="no field"):
        bale.Dataset(path, fields="jgp")


def test_an_extreme_aspect_ratio_still_crops_every_image(jpegs) -> None:
    path, pixels = jpegs
    n = len(pixels)
    # Ten tries fail; the central fallback keeps a side of at least one
    # pixel, where rounding it to none made every image an error.
    for ratio in ((1e300, 1e300), (1e-300, 1e-300)):
        loader = bale.Loader(path, batch_size=10, size=8, ratio=ratio)
        got = sum(len(im) for im, _ in loader)
        assert got == n
        for i in range(n):
            box = loader.sample_params(i, epoch=0)
            assert box["height"] >= 1 and box["width"] >= 1, (ratio, i, box)


def test_rank_without_world_size_in_the_environment_is_an_error(jpegs, monkeypatch) -> None:
    path, _ = jpegs
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match="together"):
        bale.Loader(path)


def test_batches_written_into_caller_buffers(jpegs) -> None:
    path, _ = jpegs
    kw = dict(batch_size=10, size=24, seed=2, shuffle=True)
    expected = [(im.copy(), lb.copy()) for im, lb in bale.Loader(path, **kw)]
    images = np.zeros((10, 24, 24, 3), dtype=np.uint8)
    labels = np.zeros(10, dtype=np.int64)
    loader = bale.Loader(path, **kw)
    sizes = []
    for k, n in enumerate(loader.into(images, labels)):
        np.testing.assert_array_equal(images[:n], expected[k][0])
        np.testing.assert_array_equal(labels[:n], expected[k][1])
        sizes.append(n)
    assert sizes == [10, 10, 10, 10, 8]
    with pytest.raises(ValueError, match="shape"):
        next(loader.into(np.zeros((10, 8, 8, 3), dtype=np.uint8), labels))


def test_decode_image_matches_pillow_and_refuses_damage(jpegs, same_size) -> None:
    path, pixels = jpegs
    ds = bale.Dataset(path)
    for i in range(0, len(ds), 7):
        got = bale.decode_image(ds[i]["jpg"])
        want = pixels[ds.key(i)]
        assert got.shape == want.shape and got.dtype == np.uint8
        assert psnr(got, want) >= 40, ds.key(i)
    got.fill(0)  # writable, owns its memory
    png_path, png_pixels = same_size["png"]
    pds = bale.Dataset(png_path)
    assert np.array_equal(bale.decode_image(pds[3]["png"], "png"), png_pixels[pds.key(3)])
    data = ds[0]["jpg"]
    with pytest.raises(bale.FormatError):
        bale.decode_image(data[: len(data) // 2])
    with pytest.raises(bale.FormatError):
        bale.decode_image(b"\x00" * 64, "png")
    arr = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    buf = io.BytesIO()
    np.save(buf, arr)
    assert np.array_equal(bale.decode_image(buf.getvalue(), "npy"), arr)


def bomb_png(w: int, h: int) -> bytes:
    """A PNG whose header claims w x h RGB pixels, with a few rows of data."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    rows = zlib.compress(b"\x00" * (1 + 3 * w) * 4)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


def bomb_jpeg(w: int, h: int) -> bytes:
    """A small JPEG with its frame header patched to claim w x h pixels."""
    buf = io.BytesIO()
    Image.fromarray(photo(1, 32, 32)).save(buf, "JPEG")
    b = bytearray(buf.getvalue())
    sof = b.index(b"\xff\xc0")
    b[sof + 5 : sof + 7] = h.to_bytes(2, "big")
    b[sof + 7 : sof + 9] = w.to_bytes(2, "big")
    return bytes(b)


def test_decompression_bombs_are_refused_from_their_header(tmp_path: Path) -> None:
    import resource

    for ext, data in [("png", bomb_png(60000, 60000)), ("jpg", bomb_jpeg(60000, 60000))]:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with pytest.raises(bale.FormatError, match="pixels"):
            bale.decode_image(data, ext)
        # Nothing near 60000 x 60000 x 3 bytes (10 GB) was allocated.
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB
        # Under a lower limit, a normal image is refused too; above it, decoded.
        ok = bale.decode_image(bomb_jpeg(32, 32) if ext == "jpg" else _png(32, 32), ext)
        assert ok.shape[:2] == (32, 32)
        with pytest.raises(bale.FormatError, match="pixels"):
            bale.decode_image(_png(32, 32) if ext == "png" else bomb_jpeg(32, 32), ext, max_pixels=1000)

    # In a dataset: the loader fails naming the sample, or skips it.
    root = tmp_path / "in"
    (root / "a").mkdir(parents=True)
    for i in range(6):
        Image.fromarray(photo(i, 64, 48)).save(root / "a" / f"{i}.png")
    (root / "a" / "3.png").write_bytes(bomb_png(60000, 60000))
    ds = tmp_path / "ds"
    run_bale("pack", root, "-o", ds)
    with pytest.raises(bale.FormatError, match="a/3"):
        list(bale.Loader(ds, batch_size=2, crop="center", size=16, image="png"))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        loader = bale.Loader(ds, batch_size=2, crop="center", size=16, image="png", on_error="skip")
        n = sum(len(labels) for _, labels in loader)
    assert n == 5 and loader.skipped == 1


def _png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(photo(2, w, h)).save(buf, "PNG")
    return buf.getvalue()
