"""The decoder policy bounds a GIF by its first frame's extent, not only by
the logical screen its header gives: `bale.decode_image` and the Loader
refuse a frame past the pixel limit as Pillow does, whatever the header
says."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from PIL import Image

import bale
from conftest import run_bale


def gif_past_its_screen(frame: int, screen: int) -> bytes:
    buf = io.BytesIO()
    Image.new("P", (frame, frame), 3).save(buf, "GIF")
    data = bytearray(buf.getvalue())
    data[6:10] = struct.pack("<HH", screen, screen)
    return bytes(data)


def test_decode_image_counts_the_frame_past_the_screen() -> None:
    data = gif_past_its_screen(1200, 10)
    # Pillow sizes the image to its frame and refuses it over its limit.
    assert Image.open(io.BytesIO(data)).size == (1200, 1200)
    with pytest.raises(bale.FormatError, match=r"1200x1200 = 1440000 pixels, more than the limit of 1000000"):
        bale.decode_image(data, "gif", max_pixels=1_000_000)
    assert bale.decode_image(data, "gif", max_pixels=1_440_000).shape == (10, 10, 3)


def test_the_loader_skips_it_as_a_refused_image(tmp_path) -> None:
    root = tmp_path / "tree" / "a"
    root.mkdir(parents=True)
    (root / "0.gif").write_bytes(gif_past_its_screen(1200, 10))
    Image.fromarray(np.full((10, 10, 3), 9, np.uint8)).save(root / "1.gif")
    run_bale("pack", tmp_path / "tree", "-o", tmp_path / "ds")
    loader = bale.Loader(tmp_path / "ds", image="gif", batch_size=2, size=8, crop="resize", max_pixels=1_000_000,
                         on_error="skip")
    with pytest.warns(Warning, match="1200x1200"):
        assert sum(len(x) for x, _ in loader) == 1
    assert loader.skipped == 1
