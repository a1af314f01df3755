"""Writes the seeds made by NumPy and Pillow (see README.md beside this file):
fuzz/seeds/npy_header/*.npy and fuzz/seeds/jpeg_markers/*.jpg.

    .venv/bin/python fuzz/seeds/gen_numpy_pillow.py

The venv is the project's (`cargo xtask ci` makes it from
tests/python/requirements.txt, which pins numpy and Pillow). Small arrays and
images: the fuzzers mutate every byte, so every byte should be structure.
"""

import io
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format
from PIL import Image

HERE = Path(__file__).resolve().parent


def npy_seeds(out: Path) -> None:
    out.mkdir(exist_ok=True)
    structured = np.dtype([("a", "<i4"), ("b", "<f8", (2,))])
    seeds = {
        # The image stage's layout: C-order uint8 (height, width, channels).
        "u1-hwc-v1.0": ((1, 0), np.arange(36, dtype="|u1").reshape(4, 3, 3)),
        "f4-2d-v1.0": ((1, 0), np.linspace(0, 1, 12, dtype="<f4").reshape(3, 4)),
        "f8-fortran-v1.0": ((1, 0), np.asfortranarray(np.ones((2, 3), dtype="<f8"))),
        "i8-scalar-v1.0": ((1, 0), np.array(7, dtype="<i8")),
        "f4-empty-v1.0": ((1, 0), np.zeros((0, 3), dtype="<f4")),
        "c16-v1.0": ((1, 0), np.array([1 + 2j, 3 - 4j], dtype="<c16")),
        "structured-v1.0": ((1, 0), np.zeros(2, dtype=structured)),
        "u2-big-endian-v2.0": ((2, 0), np.arange(5, dtype=">u2")),
        "b1-v2.0": ((2, 0), np.array([[True, False], [False, True]])),
        "U3-v3.0": ((3, 0), np.array(["ab", "cde"], dtype="<U3")),
        # Version 3.0 exists for UTF-8 in the header: a non-ASCII field name.
        "structured-utf8-v3.0": ((3, 0), np.zeros(2, dtype=[("größe", "<i2")])),
    }
    for name, (version, arr) in seeds.items():
        buf = io.BytesIO()
        npy_format.write_array(buf, arr, version=version)
        (out / f"{name}.npy").write_bytes(buf.getvalue())


def jpeg_seeds(out: Path) -> None:
    out.mkdir(exist_ok=True)
    x = np.arange(16, dtype=np.uint8)
    rgb = np.stack(np.broadcast_arrays(x[:, None] * 16, x[None, :] * 16, 99), axis=-1)
    rgb = Image.fromarray(rgb.astype(np.uint8), "RGB")
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotated
    seeds = {
        "gray-baseline": (rgb.convert("L").resize((8, 8)), {}),
        "rgb-baseline-420": (rgb, {"subsampling": 2}),
        "rgb-progressive": (rgb, {"progressive": True, "optimize": True}),
        # Restart markers (RST0-7) inside the entropy-coded data: one after
        # each 8x8 MCU (4:4:4) but the last.
        "rgb-restart": (rgb, {"subsampling": 0, "restart_marker_blocks": 1}),
        # Four components: the Adobe APP14 segment, CMYK in the frame.
        "cmyk": (rgb.convert("CMYK").resize((8, 8)), {}),
        # APP1 (EXIF) and COM segments before the frame.
        "exif-comment": (rgb.resize((8, 8)), {"exif": exif.tobytes(), "comment": b"seed"}),
    }
    for name, (img, opts) in seeds.items():
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=75, **opts)
        (out / f"{name}.jpg").write_bytes(buf.getvalue())


if __name__ == "__main__":
    npy_seeds(HERE / "npy_header")
    jpeg_seeds(HERE / "jpeg_markers")
    print(f"seeds written under {HERE}")
