"""One decoder policy on every path: `bale.decode_image`, `bale.Loader`
(libjpeg-turbo's region decoder), `bale verify --decode` and the pack's
image stage refuse the same bombs with the same message, and bound what
one image costs. The bombs are made here from small images. Then the
smaller promises of `decode_image`, `Dataset(fields=...)` and `timed`."""

from __future__ import annotations

import io
import resource
import struct
import subprocess
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import bale
from conftest import bale_bin, run_bale

SCANS = "Too many scans, exceeded limit of 100"


def progressive(scans: int, size: tuple[int, int] = (64, 48)) -> bytes:
    """A progressive JPEG whose last scan is repeated until it holds `scans` scans."""
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 7) % 256, (y * 5) % 256, (x ^ y) % 256], axis=-1).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(img).save(out, "JPEG", progressive=True, quality=90)
    data = out.getvalue()
    # 0xFF 0xDA only starts a scan: entropy-coded 0xFF bytes are stuffed.
    sos = [i for i in range(len(data) - 1) if data[i : i + 2] == b"\xff\xda"]
    assert 2 <= len(sos) <= scans and data.endswith(b"\xff\xd9")
    last = data[sos[-1] : -2]
    return data[:-2] + last * (scans - len(sos)) + b"\xff\xd9"


def test_decode_image_refuses_a_jpeg_of_more_scans_than_the_limit() -> None:
    ok = bale.decode_image(progressive(100))
    assert ok.shape == (48, 64, 3)
    for scans in (101, 600):
        with pytest.raises(bale.FormatError, match=SCANS):
            bale.decode_image(progressive(scans))


@pytest.fixture(scope="module")
def bombed(tmp_path_factory) -> tuple[Path, Path]:
    """A tree of 4 good JPEGs and one of 101 scans, and its pack (kept bytes)."""
    root = tmp_path_factory.mktemp("policy")
    tree = root / "tree" / "a"
    tree.mkdir(parents=True)
    for i in range(4):
        (tree / f"{i}.jpg").write_bytes(progressive(10))
    (tree / "bomb.jpg").write_bytes(progressive(101))
    ds = root / "ds"
    run_bale("pack", root / "tree", "-o", ds)
    return root / "tree", ds


def test_the_loader_refuses_it_as_a_damaged_image(bombed) -> None:
    _, ds = bombed
    with pytest.raises(bale.FormatError, match=SCANS):
        for _ in bale.Loader(ds, batch_size=5, size=16, crop="random_resized", threads=1):
            pass
    loader = bale.Loader(ds, batch_size=5, size=16, crop="random_resized", on_error="skip")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        images = sum(len(x) for x, _ in loader)
    assert (images, loader.skipped) == (4, 1)
    assert any(SCANS in str(w.message) for w in caught), [str(w.message) for w in caught]


def test_verify_decode_and_the_image_stage_refuse_it_alike(bombed, tmp_path) -> None:
    tree, ds = bombed
    r = subprocess.run([str(bale_bin()), "verify", "--decode", str(ds)], capture_output=True, text=True)
    assert r.returncode != 0, r.stdout
    assert SCANS in r.stdout + r.stderr, (r.stdout, r.stderr)
    r = subprocess.run(
        [str(bale_bin()), "pack", str(tree), "-o", str(tmp_path / "out"), "--resize", "shorter:16"],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0
    assert "bomb.jpg" in r.stderr and SCANS in r.stderr, r.stderr
    assert not (tmp_path / "out" / "bale.json").exists()


# --- the smaller promises of decode_image, Dataset and timed -----------------


def test_decode_image_takes_a_2d_npy_as_grey() -> None:
    grey = (np.arange(12 * 7, dtype=np.uint8) * 3).reshape(12, 7)
    buf = io.BytesIO()
    np.save(buf, grey)
    got = bale.decode_image(buf.getvalue(), "npy")
    np.testing.assert_array_equal(got, np.repeat(grey[:, :, None], 3, axis=2))
    buf = io.BytesIO()
    np.save(buf, grey.astype(np.uint16))
    with pytest.raises(bale.FormatError, match=r"\(H, W\)"):
        bale.decode_image(buf.getvalue(), "npy")


def test_decode_image_max_pixels_out_of_range_is_a_value_error() -> None:
    data = progressive(10)
    for bad in (-1, 2**64, 2**70):
        with pytest.raises(ValueError, match="max_pixels must be from 0"):
            bale.decode_image(data, "jpg", max_pixels=bad)
    with pytest.raises(TypeError):
        bale.decode_image(data, "jpg", max_pixels=1.5)
    assert bale.decode_image(data, "jpg", max_pixels=np.int64(64 * 48)).shape == (48, 64, 3)


def test_a_field_no_sample_has_is_refused_in_every_form(bombed) -> None:
    _, ds = bombed
    for fields in ("typo", ["typo"], ["jpg", "typo"]):
        with pytest.raises(ValueError, match=r"no field .typo."):
            bale.Dataset(ds, fields=fields)
    assert set(bale.Dataset(ds, fields=["jpg", "__key__"])[0]) >= {"jpg", "__key__"}


def test_timed_every_must_be_a_whole_number_of_steps() -> None:
    for bad in (1.5, True, "10", None):
        with pytest.raises(TypeError, match="whole number of steps"):
            bale.timed([1, 2], every=bad)
    with pytest.raises(ValueError, match="positive"):
        bale.timed([1, 2], every=0)
    assert bale.timed([1, 2], every=np.int64(3), gpu=False).every == 3


def iccp_bomb(inflated_gib: int) -> bytes:
    """A 1x1 PNG whose iCCP chunk (a few MiB) inflates to `inflated_gib` GiB."""
    c = zlib.compressobj(9)
    first = c.compress(b"\0" * (16 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    head, body = first[:2], first[2:]  # the zlib header, then a block that needs no history
    n = inflated_gib << 30
    adler = ((n % 65521) << 16) | 1  # of n zero bytes
    stream = head + body * (n >> 24) + b"\x03\x00" + struct.pack(">I", adler)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"iCCP", b"icc\0\0" + stream)
            + chunk(b"IDAT", zlib.compress(b"\0\x10\x20\x30")) + chunk(b"IEND", b""))


def test_a_png_profile_that_inflates_to_gigabytes_is_not_inflated(tmp_path) -> None:
    # Under a 1 GiB address space, inflating the 2 GiB profile aborted the
    # process; the policy stops it at 64 MiB (the profile is dropped: no
    # decoder of bale uses it) and decodes the pixels, on every path.
    bomb = iccp_bomb(2)
    assert len(bomb) < 8 << 20
    tree = tmp_path / "tree" / "a"
    tree.mkdir(parents=True)
    (tree / "0.png").write_bytes(bomb)
    ds = tmp_path / "ds"
    run_bale("pack", tmp_path / "tree", "-o", ds)
    script = """
import resource, sys, bale
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
print("pixels", bale.decode_image(open(sys.argv[1], "rb").read(), "png").tolist())
(images, _), = bale.Loader(sys.argv[2], batch_size=1, size=1, crop="resize")
print("loader", images.tolist())
"""
    r = subprocess.run([sys.executable, "-c", script, str(tree / "0.png"), str(ds)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "pixels [[[16, 32, 48]]]" in r.stdout and "loader [[[[16, 32, 48]]]]" in r.stdout, r.stdout

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    r = subprocess.run([str(bale_bin()), "verify", "--decode", str(ds)], capture_output=True, text=True,
                       preexec_fn=limited, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
