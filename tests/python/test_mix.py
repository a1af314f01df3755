"""bale.Loader's MixUp and CutMix per batch against torchvision v2 given the
same draws (``batch_params`` reports them), and RandomErasing's
``value="random"``.

A loader that mixes draws the same samples as one that does not, so the
plain loader's batch, run through torchvision's ``MixUp`` / ``CutMix`` with
bale's lambda (and CutMix's centre), is what the mixing loader must give."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib import cbook
from PIL import Image

import torch
import torchvision.transforms.v2 as T

import bale
from conftest import run_bale

N = 30
CLASSES = 3


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """N JPEGs cut from a real photo (Grace Hopper), in three classes."""
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        full = Image.open(f).convert("RGB")
    root = tmp_path_factory.mktemp("mix") / "tree"
    rng = np.random.default_rng(1)
    for i in range(N):
        w, h = int(rng.integers(160, 512)), int(rng.integers(160, 600))
        x, y = int(rng.integers(0, 512 - w + 1)), int(rng.integers(0, 600 - h + 1))
        d = root / "abc"[i % 3]
        d.mkdir(parents=True, exist_ok=True)
        full.crop((x, y, x + w, y + h)).save(d / f"{i:03d}.jpg", quality=90)
    out = root.parent / "ds"
    run_bale("pack", root, "-o", out)
    return out


BASE = dict(batch_size=8, size=(64, 80), flip=True, shuffle=True, seed=11, channels_first=True)


def batches(loader: bale.Loader) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(np.array(x), np.array(y)) for x, y in loader]


def with_draws(tv: T.Transform, p: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes torchvision's transform draw bale's lambda (and CutMix's centre)."""
    lam = torch.tensor([p["lam"]], dtype=torch.float32)
    monkeypatch.setattr(tv._dist, "sample", lambda *a, **k: lam.clone())
    if p["center"] is not None:
        draws = iter([p["center"][0], p["center"][1]])
        monkeypatch.setattr(torch, "randint", lambda *a, **k: torch.tensor([next(draws)]))


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_mixup_matches_torchvision_given_lambda(photos: Path, dtype: str, monkeypatch) -> None:
    plain = bale.Loader(photos, **BASE, dtype=dtype)
    mixed = bale.Loader(photos, **BASE, dtype=dtype, mixup_alpha=0.4, num_classes=CLASSES)
    got, want = batches(mixed), batches(plain)
    assert len(got) == len(want) == 4
    lams = []
    for b, ((x, y), (x0, y0)) in enumerate(zip(got, want)):
        p = mixed.batch_params(b)
        assert p["mix"] == "MixUp" and p["box"] is None and p["label_lam"] == p["lam"]
        assert p["partners"] == [(k - 1) % len(x0) for k in range(len(x0))]
        lams.append(p["lam"])
        tv = T.MixUp(alpha=0.4, num_classes=CLASSES)
        with monkeypatch.context() as m:
            with_draws(tv, p, m)
            tx, ty = tv(torch.from_numpy(x0).float(), torch.from_numpy(y0))
        assert y.dtype == np.float32 and y.shape == (len(x0), CLASSES)
        # Soft labels: exact.
        np.testing.assert_array_equal(y, ty.numpy())
        if dtype == "float32":
            np.testing.assert_allclose(x, tx.numpy(), rtol=0, atol=1e-6)
        else:
            # uint8 (which torchvision's MixUp does not take): its float result, rounded.
            assert x.dtype == np.uint8
            assert np.abs(x.astype(np.float32) - tx.numpy()).max() <= 0.5 + 1e-4
    assert len(set(lams)) == len(lams) and all(0 < v < 1 for v in lams)


def test_cutmix_matches_torchvision_given_lambda_and_centre(photos: Path, monkeypatch) -> None:
    plain = bale.Loader(photos, **BASE)
    mixed = bale.Loader(photos, **BASE, cutmix_alpha=1.0, num_classes=CLASSES)
    got, want = batches(mixed), batches(plain)
    cut = 0
    for b, ((x, y), (x0, y0)) in enumerate(zip(got, want)):
        p = mixed.batch_params(b)
        assert p["mix"] == "CutMix"
        tv = T.CutMix(alpha=1.0, num_classes=CLASSES)
        images = torch.from_numpy(x0)
        with monkeypatch.context() as m:
            with_draws(tv, p, m)
            params = tv.make_params([images]) if hasattr(tv, "make_params") else tv._get_params([images])
        # The box, and lambda corrected by its area: torchvision's.
        assert params["box"] == p["box"]
        assert params["lam_adjusted"] == p["label_lam"]
        with monkeypatch.context() as m:
            with_draws(tv, p, m)
            tx, ty = tv(images, torch.from_numpy(y0))
        np.testing.assert_array_equal(x, tx.numpy())
        np.testing.assert_array_equal(y, ty.numpy())
        x1, y1, x2, y2 = p["box"]
        cut += (x2 - x1) * (y2 - y1) > 0
        # Outside the box each sample is its own; inside, its partner's.
        np.testing.assert_array_equal(x[1:, :, y1:y2, x1:x2], x0[:-1, :, y1:y2, x1:x2])
        np.testing.assert_array_equal(x[0, :, y1:y2, x1:x2], x0[-1, :, y1:y2, x1:x2])
    assert cut > 0


def test_both_choose_one_per_batch_and_draws_ignore_threads(photos: Path) -> None:
    opts = dict(BASE, mixup_alpha=0.8, cutmix_alpha=1.0, num_classes=CLASSES)
    one = bale.Loader(photos, **opts, threads=1)
    three = bale.Loader(photos, **opts, threads=3, prefetch=0)
    for epoch in range(3):
        one.set_epoch(epoch)
        three.set_epoch(epoch)
        a, b = batches(one), batches(three)
        assert len(a) == len(b)
        for (x, y), (u, v) in zip(a, b):
            np.testing.assert_array_equal(x, u)
            np.testing.assert_array_equal(y, v)
    kinds = [one.batch_params(b, epoch=e)["mix"] for e in range(8) for b in range(len(one))]
    assert set(kinds) == {"MixUp", "CutMix"}
    assert one.batch_params(2, epoch=1) == three.batch_params(2, epoch=1)
    assert one.batch_params(2, epoch=1) != one.batch_params(2, epoch=2)
    # A resumed epoch's batches are those of the whole one (batch numbers count from the start).
    one.set_epoch(1)
    whole = batches(one)
    one.resume(1, 2 * BASE["batch_size"])
    for (x, y), (u, v) in zip(batches(one), whole[2:], strict=True):
        np.testing.assert_array_equal(x, u)
        np.testing.assert_array_equal(y, v)
    # Every soft label sums to 1 (two one-hot rows mixed).
    for _, y in whole:
        np.testing.assert_allclose(y.sum(axis=1), 1.0, atol=1e-6)
    with pytest.raises(IndexError):
        one.batch_params(len(one))
    assert bale.Loader(photos, **BASE).batch_params(0) is None


def test_mixing_is_refused_with_masks_or_boxes_and_checked(photos: Path) -> None:
    with pytest.raises(ValueError, match="cutmix_alpha.*masks"):
        bale.Loader(photos, cutmix_alpha=1.0, num_classes=3, masks="seg.png")
    with pytest.raises(ValueError, match="mixup_alpha.*boxes"):
        bale.Loader(photos, mixup_alpha=0.2, num_classes=3, boxes="json")
    with pytest.raises(ValueError, match="num_classes"):
        bale.Loader(photos, mixup_alpha=0.2)
    with pytest.raises(ValueError, match="num_classes"):
        bale.Loader(photos, num_classes=3)
    with pytest.raises(ValueError, match="mixup_alpha"):
        bale.Loader(photos, mixup_alpha=-0.5, num_classes=3)
    with pytest.raises(ValueError, match="mixup_alpha.*labels"):
        bale.Loader(photos, mixup_alpha=0.5, num_classes=3, label=None)
    # A class outside num_classes is the sample's error, naming it.
    few = bale.Loader(photos, batch_size=8, size=32, mixup_alpha=0.5, num_classes=2)
    with pytest.raises(bale.FormatError, match="class 2 is outside num_classes=2"):
        list(few)
    skip = bale.Loader(photos, batch_size=8, size=32, mixup_alpha=0.5, num_classes=2, on_error="skip")
    with pytest.warns(UserWarning):
        ys = [np.array(y) for _, y in skip]
    assert skip.skipped == N // 3 and all(y.shape[1] == 2 for y in ys)


def test_random_erasing_value_is_normal_noise_drawn_per_sample(photos: Path) -> None:
    opts = dict(BASE, dtype="float32", random_erasing=1.0, erasing_value="random")
    noisy = bale.Loader(photos, **opts, threads=1)
    again = bale.Loader(photos, **opts, threads=3)
    plain = bale.Loader(photos, **BASE, dtype="float32")
    noise = []
    for (x, _), (u, _), (x0, _), idx in zip(batches(noisy), batches(again), batches(plain), _indices(noisy)):
        np.testing.assert_array_equal(x, u)
        for img, base, i in zip(x, x0, idx):
            e = noisy.sample_params(int(i))["erase"]
            if e is None:
                np.testing.assert_array_equal(img, base)
                continue
            top, left, h, w = e
            box = img[:, top : top + h, left : left + w]
            noise.append(box.ravel())
            outside = img.copy()
            outside[:, top : top + h, left : left + w] = base[:, top : top + h, left : left + w]
            np.testing.assert_array_equal(outside, base)
    z = np.concatenate(noise)
    assert len(noise) > N // 2 and z.size > 10_000
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1) < 0.03, (z.mean(), z.std())
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.02
    with pytest.raises(ValueError, match="erasing_value"):
        bale.Loader(photos, random_erasing=0.5, erasing_value="noise")


def _indices(loader: bale.Loader) -> list[np.ndarray]:
    out = []
    for _ in loader:
        out.append(np.array(loader.last_indices))
    return out
