"""bale's pixel operations (bale-image's `ops`) against
torchvision.transforms.v2.functional on real photos, given the same argument.

Tolerances, per op:
- exact: brightness, contrast, posterize, solarize, autocontrast, equalize,
  invert, grayscale, the rotations by multiples of 90 degrees;
- at most 1 on any value, on a small share of them: saturation, sharpness, hue
  (float32 arithmetic whose last bit may fall otherwise than in torch's
  vectorised kernels, then truncated);
- affine ops (shear, translate, rotate), nearest interpolation: the sampled
  source pixel is torch's for all but a few pixels sitting on a rounding tie
  of the float32 grid.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib import cbook
from PIL import Image

import torch
import torchvision.transforms.v2.functional as F

from bale import _ops


def photos() -> list[np.ndarray]:
    """Grace Hopper (512 x 600), a 224 x 224 crop of her, a 97 x 131 downscale, a dark low-contrast crop."""
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        full = np.asarray(Image.open(f).convert("RGB"))
    crop = full[100:324, 150:374]
    small = np.asarray(Image.fromarray(full).resize((131, 97), Image.BILINEAR))
    dark = (crop[:120, :160].astype(np.int32) // 3 + 20).astype(np.uint8)
    return [full, crop, small, dark]


PHOTOS = photos()


def tv(fn, img: np.ndarray, *args, **kwargs) -> np.ndarray:
    t = torch.from_numpy(np.array(img)).permute(2, 0, 1).contiguous()
    return fn(t, *args, **kwargs).permute(1, 2, 0).contiguous().numpy()


def check(name: str, got: np.ndarray, want: np.ndarray, off_by_one: float = 0.0, moved: float = 0.0) -> None:
    """`got` equals `want`, or differs by 1 on at most `off_by_one` of the values,
    or (affine ops) differs on at most `moved` of the pixels."""
    assert got.shape == want.shape and got.dtype == want.dtype
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    if moved:
        share = np.mean(diff.max(-1) > 0)
        assert share <= moved, f"{name}: {share:.5f} of the pixels differ"
        return
    assert diff.max() <= (1 if off_by_one else 0), f"{name}: differs by {diff.max()}"
    share = np.mean(diff > 0)
    assert share <= off_by_one, f"{name}: {share:.5f} of the values differ by 1"


@pytest.mark.parametrize("photo", range(len(PHOTOS)))
def test_per_channel_ops_are_exact(photo: int) -> None:
    img = PHOTOS[photo]
    for f in [0.0, 0.3, 0.6, 1.0, 1.37, 1.99]:
        check(f"brightness {f}", _ops.apply("brightness", img, f), tv(F.adjust_brightness, img, f))
        check(f"contrast {f}", _ops.apply("contrast", img, f), tv(F.adjust_contrast, img, f))
    for bits in range(9):
        check(f"posterize {bits}", _ops.apply("posterize", img, bits), tv(F.posterize, img, bits))
    for t in [0.0, 1.0, 64.5, 127.5, 128.0, 200.0, 255.0]:
        check(f"solarize {t}", _ops.apply("solarize", img, t), tv(F.solarize, img, t))
    check("autocontrast", _ops.apply("autocontrast", img), tv(F.autocontrast, img))
    check("equalize", _ops.apply("equalize", img), tv(F.equalize, img))
    check("invert", _ops.apply("invert", img), tv(F.invert, img))
    check("grayscale", _ops.apply("grayscale", img), tv(F.rgb_to_grayscale, img, num_output_channels=3))


@pytest.mark.parametrize("photo", range(len(PHOTOS)))
def test_blending_ops_are_within_one(photo: int) -> None:
    img = PHOTOS[photo]
    for f in [0.0, 0.01, 0.5, 1.0, 1.4, 1.99]:
        check(f"saturation {f}", _ops.apply("saturation", img, f), tv(F.adjust_saturation, img, f), 1e-3)
        check(f"sharpness {f}", _ops.apply("sharpness", img, f), tv(F.adjust_sharpness, img, f), 1e-3)
    for h in [-0.5, -0.31, -0.1, 0.0, 0.05, 0.25, 0.5]:
        check(f"hue {h}", _ops.apply("hue", img, h), tv(F.adjust_hue, img, h), 1e-3)


def affine_tv(img: np.ndarray, name: str, m: float, fill: list[int]) -> np.ndarray:
    """torchvision's `_apply_image_or_video_transform` for the geometric ops (nearest)."""
    nearest = F.InterpolationMode.NEAREST
    if name == "Rotate":
        return tv(F.rotate, img, angle=m, interpolation=nearest, fill=fill)
    shear = [0.0, 0.0]
    translate = [0, 0]
    center = None
    if name == "ShearX":
        shear, center = [math.degrees(math.atan(m)), 0.0], [0, 0]
    elif name == "ShearY":
        shear, center = [0.0, math.degrees(math.atan(m))], [0, 0]
    elif name == "TranslateX":
        translate = [int(m), 0]
    else:
        translate = [0, int(m)]
    return tv(
        F.affine, img, angle=0.0, translate=translate, scale=1.0, shear=shear,
        interpolation=nearest, fill=fill, center=center,
    )


@pytest.mark.parametrize("photo", range(len(PHOTOS)))
def test_affine_ops_sample_torchvisions_pixels(photo: int) -> None:
    img = PHOTOS[photo]
    fill = [10, 200, 30]
    cases = {
        "ShearX": [-0.99, -0.3, 0.033, 0.5, 0.99],
        "ShearY": [-0.99, -0.1, 0.264, 0.99],
        "TranslateX": [-32.0, -10.7, 3.2, 32.0],
        "TranslateY": [-32.0, 0.5, 14.9, 32.0],
        "Rotate": [-135.0, -90.0, -30.0, 4.5, 45.0, 90.0, 180.0, 270.0],
    }
    for name, mags in cases.items():
        for m in mags:
            want = affine_tv(img, name, m, fill)
            got = _ops.apply(name, img, m, fill)
            exact = name.startswith("Translate") or m % 90 == 0
            check(f"{name} {m}", got, want, moved=0.0 if exact else 2e-3)
            if exact:
                np.testing.assert_array_equal(got, want, err_msg=f"{name} {m}")


def test_autoaugment_magnitude_ops_follow_torchvision() -> None:
    img = PHOTOS[1]
    for m in [-0.99, -0.5, 0.0, 0.33, 0.99]:
        check(f"Brightness {m}", _ops.apply("Brightness", img, m), tv(F.adjust_brightness, img, 1 + m))
        check(f"Contrast {m}", _ops.apply("Contrast", img, m), tv(F.adjust_contrast, img, 1 + m))
        check(f"Color {m}", _ops.apply("Color", img, m), tv(F.adjust_saturation, img, 1 + m), 1e-3)
        check(f"Sharpness {m}", _ops.apply("Sharpness", img, m), tv(F.adjust_sharpness, img, 1 + m), 1e-3)
    for m in [0.0, 0.5, 1.0]:
        check(f"Solarize {m}", _ops.apply("Solarize", img, m), tv(F.solarize, img, 255.0 * m))
    check("Identity", _ops.apply("Identity", img), img)


def test_unknown_ops_and_wrong_shapes_are_refused() -> None:
    img = PHOTOS[2]
    with pytest.raises(ValueError, match="no op"):
        _ops.apply("Blur", img, 1.0)
    from bale import _native

    with pytest.raises(ValueError, match="RGB pixels"):
        _native._apply_op("invert", b"\0" * 10, 2, 2, 0.0, [0, 0, 0])
