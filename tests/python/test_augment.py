"""bale.Loader's pixel augmentations against torchvision v2 given the same
draws (``sample_params`` reports them): ColorJitter, TrivialAugmentWide,
RandAugment, AutoAugment's ImageNet policy, RandomGrayscale and
RandomErasing; their determinism and their distributions.

A loader with augmentations draws the same geometry as one without, so the
plain loader's crop, run through torchvision's functional ops with the
reported parameters, is what the augmented loader must give."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from matplotlib import cbook
from PIL import Image

import torch
import torchvision.transforms.v2 as T
import torchvision.transforms.v2.functional as F

import bale
from conftest import run_bale

N = 24


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """N JPEGs cut from a real photo (Grace Hopper) at several sizes, in two classes."""
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        full = Image.open(f).convert("RGB")
    root = tmp_path_factory.mktemp("augment") / "tree"
    rng = np.random.default_rng(0)
    for i in range(N):
        w, h = int(rng.integers(200, 512)), int(rng.integers(200, 600))
        x, y = int(rng.integers(0, 512 - w + 1)), int(rng.integers(0, 600 - h + 1))
        img = full.crop((x, y, x + w, y + h))
        if i % 3 == 0:
            img = img.resize((w * 2 // 3, h * 2 // 3), Image.BILINEAR)
        d = root / ("a" if i % 2 else "b")
        d.mkdir(parents=True, exist_ok=True)
        img.save(d / f"{i:03d}.jpg", quality=92)
    out = root.parent / "ds"
    run_bale("pack", root, "-o", out)
    return out


BASE = dict(batch_size=8, size=(96, 112), flip=True, seed=5)


def images(loader: bale.Loader) -> dict[int, np.ndarray]:
    out = {}
    for batch, _ in loader:
        for img, i in zip(batch, loader.last_indices):
            out[int(i)] = np.array(img)
    return out


def chw(img: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).contiguous()


def hwc(t: torch.Tensor) -> np.ndarray:
    return t.permute(1, 2, 0).contiguous().numpy()


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def jitter_tv(img: torch.Tensor, j: dict) -> torch.Tensor:
    for fn_id in j["order"]:
        if fn_id == 0 and j["brightness"] is not None:
            img = F.adjust_brightness(img, j["brightness"])
        elif fn_id == 1 and j["contrast"] is not None:
            img = F.adjust_contrast(img, j["contrast"])
        elif fn_id == 2 and j["saturation"] is not None:
            img = F.adjust_saturation(img, j["saturation"])
        elif fn_id == 3 and j["hue"] is not None:
            img = F.adjust_hue(img, j["hue"])
    return img


def test_color_jitter_matches_torchvision_given_the_draws(photos: Path) -> None:
    plain = images(bale.Loader(photos, **BASE))
    loader = bale.Loader(photos, color_jitter=(0.4, 0.4, 0.4, 0.1), **BASE)
    got = images(loader)
    orders = set()
    for i, img in got.items():
        p = loader.sample_params(i)
        j = p["color_jitter"]
        orders.add(tuple(j["order"]))
        assert sorted(j["order"]) == [0, 1, 2, 3]
        assert 0.6 <= j["brightness"] <= 1.4 and 0.6 <= j["contrast"] <= 1.4
        assert 0.6 <= j["saturation"] <= 1.4 and -0.1 <= j["hue"] <= 0.1
        want = hwc(jitter_tv(chw(plain[i]), j))
        # Exact per op but for the last float32 bit of saturation and hue.
        assert psnr(img, want) >= 40, (i, j)
        assert np.mean(img != want) < 0.01, (i, j)
    assert len(orders) > 5
    # One component given as a range; the others left out.
    loader = bale.Loader(photos, color_jitter=(0, (0.5, 0.6), 0, 0), **BASE)
    got = images(loader)
    for i, img in got.items():
        j = loader.sample_params(i)["color_jitter"]
        assert j["brightness"] is None and j["hue"] is None and 0.5 <= j["contrast"] <= 0.6
        np.testing.assert_array_equal(img, hwc(F.adjust_contrast(chw(plain[i]), j["contrast"])))


def apply_policy_tv(img: torch.Tensor, ops: list, fill: list[int]) -> torch.Tensor:
    """The ops through torchvision's own `_apply_image_or_video_transform`."""
    t = T.TrivialAugmentWide(fill=fill)
    for name, m in ops:
        img = t._apply_image_or_video_transform(img, name, m, interpolation=t.interpolation, fill=t._fill)
    return img


@pytest.mark.parametrize("policy", ["trivial_wide", "rand", "imagenet"])
def test_auto_augment_policies_match_torchvision_given_the_draws(photos: Path, policy: str) -> None:
    fill = [30, 60, 90]
    seen = Counter()
    for epoch in range(3):
        plain_loader = bale.Loader(photos, fill=fill, **BASE)
        plain_loader.set_epoch(epoch)
        plain = images(plain_loader)
        loader = bale.Loader(photos, auto_augment=policy, fill=fill, **BASE)
        loader.set_epoch(epoch)
        for i, img in images(loader).items():
            ops = loader.sample_params(i)["augment"]
            seen.update(name for name, _ in ops)
            if policy == "rand":
                assert len(ops) == 2
            want = hwc(apply_policy_tv(chw(plain[i]), ops, fill))
            moved = np.mean(np.any(img != want, axis=-1))
            # Nearest sampling may pick another pixel where the float32 grid
            # sits on a tie; photometric ops are within 1 of torchvision's.
            assert moved < 0.003 or psnr(img, want) >= 40, (i, ops, moved)
    assert len(seen) >= 8, seen


def test_grayscale_and_erasing_on_the_output_match_torchvision(photos: Path) -> None:
    opts = dict(BASE, dtype="float32", channels_first=True)
    plain = images(bale.Loader(photos, **opts))
    loader = bale.Loader(
        photos, random_grayscale=0.5, random_erasing=0.7, erasing_value=(0.5, -1.0, 2.0), **opts
    )
    got = images(loader)
    greys = erased = 0
    mean = torch.tensor(bale.IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(bale.IMAGENET_STD).view(3, 1, 1)
    for i, img in got.items():
        p = loader.sample_params(i)
        want = torch.from_numpy(plain[i].copy())
        if p["grayscale"]:
            greys += 1
            u8 = (want * std + mean).mul(255).round().clamp(0, 255).to(torch.uint8)
            grey = F.rgb_to_grayscale(u8, num_output_channels=3).float() / 255
            want = (grey - mean) / std
        if p["erase"] is not None:
            erased += 1
            top, left, h, w = p["erase"]
            assert 0.02 * 96 * 112 * 0.8 <= h * w <= 0.33 * 96 * 112 * 1.2
            want = F.erase(want, top, left, h, w, torch.tensor([0.5, -1.0, 2.0]).view(3, 1, 1))
        np.testing.assert_allclose(img, want.numpy(), atol=1e-5, err_msg=str(p))
    assert 0 < greys < N and 0 < erased < N


def test_draws_are_the_same_whatever_the_threads(photos: Path) -> None:
    kw = dict(BASE, color_jitter=(0.4, 0.4, 0.4, 0.1), auto_augment="trivial_wide", random_erasing=0.25)
    one = images(bale.Loader(photos, threads=1, **kw))
    two = images(bale.Loader(photos, threads=2, **kw))
    assert one.keys() == two.keys()
    for i in one:
        np.testing.assert_array_equal(one[i], two[i])
    other = images(bale.Loader(photos, threads=2, **dict(kw, seed=6)))
    assert sum(not np.array_equal(one[i], other[i]) for i in one) > N // 2


def chi_square(counts: list[int]) -> float:
    total = sum(counts)
    e = total / len(counts)
    return sum((c - e) ** 2 / e for c in counts)


def test_trivial_augment_ops_and_bins_are_uniform_over_10000_draws(photos: Path) -> None:
    loader = bale.Loader(photos, auto_augment="trivial_wide", **BASE)
    ops = Counter()
    bins = Counter()
    table = torch.linspace(0.0, 135.0, 31).tolist()
    draws = 0
    for epoch in range(10_000 // N + 1):
        for i in range(N):
            [(name, m)] = loader.sample_params(i, epoch)["augment"]
            ops[name] += 1
            if name == "Rotate":
                bins[table.index(abs(m))] += 1
            draws += 1
    assert len(ops) == 14
    # Critical values at p = 0.001: 34.53 for 13 degrees of freedom, 59.70 for 30.
    assert chi_square(list(ops.values())) < 34.53, ops
    assert len(bins) == 31 and chi_square(list(bins.values())) < 59.70, bins
    assert draws >= 10_000


def test_augmentation_options_are_checked(photos: Path) -> None:
    with pytest.raises(ValueError, match="auto_augment"):
        bale.Loader(photos, auto_augment="trivial")
    with pytest.raises(ValueError, match="auto_augment.*masks"):
        bale.Loader(photos, auto_augment="trivial_wide", masks=["seg.png"])
    with pytest.raises(ValueError, match="hue"):
        bale.Loader(photos, color_jitter=(0, 0, 0, 0.7))
    with pytest.raises(ValueError, match="color_jitter"):
        bale.Loader(photos, color_jitter=(0.4, 0.4))
    with pytest.raises(ValueError, match="random_erasing"):
        bale.Loader(photos, random_erasing=1.5)
    with pytest.raises(ValueError, match="random_grayscale"):
        bale.Loader(photos, random_grayscale=-0.1)
    # ColorJitter is photometric: it takes masks (checked before the dataset is read).
    with pytest.raises(Exception) as e:
        bale.Loader(photos, color_jitter=(0.4, 0, 0, 0), masks=["seg.png"])
    assert "color_jitter" not in str(e.value)
