"""bale.Loader's targets, checked against torchvision.transforms.v2 given the
same parameters: masks equal pixel for pixel through scale, crop, pad and
flips; images within 40 dB; boxes within 0.5 px with the same boxes kept;
labels from JSON and .npy; image members chosen per sample; targets that do
not fit their image handled as damaged samples."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

import bale
from conftest import run_bale

N = 18


def photo(i: int, w: int, h: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    y, x = np.mgrid[0:h, 0:w]
    arr = np.stack([x * 255 // w, y * 255 // h, (x * 3 + y) % 256], -1)
    arr = arr + rng.integers(-20, 20, (h, w, 3))
    return np.clip(arr, 0, 255).astype(np.uint8)


def label_map(i: int, w: int, h: int) -> np.ndarray:
    """Region-shaped classes 0-18 with 255 (ignore) lines, as a label map."""
    y, x = np.mgrid[0:h, 0:w]
    m = ((x // (5 + i % 7) + y // (3 + i % 5)) % 19).astype(np.uint8)
    m[(x + 2 * y) % 29 == 0] = 255
    return m


def size_of(i: int) -> tuple[int, int]:
    return 150 + 17 * (i % 4), 90 + 11 * (i % 3)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


@pytest.fixture(scope="module")
def seg(tmp_path_factory):
    """N samples: a JPEG or PNG image, an 8-bit grey mask, a palette mask,
    a 16-bit mask (.png) and a uint16 .npy mask, all of the image's size."""
    root = tmp_path_factory.mktemp("seg") / "tree"
    root.mkdir()
    for i in range(N):
        w, h = size_of(i)
        img = Image.fromarray(photo(i, w, h))
        if i % 2:
            img.save(root / f"{i:04d}.jpg", quality=95)
        else:
            img.save(root / f"{i:04d}.png")
        m = label_map(i, w, h)
        Image.fromarray(m).save(root / f"{i:04d}.mask.png")
        pal = Image.fromarray(m % 16, mode="L").convert("P")
        pal.putpalette([(v * 37) % 256 for v in range(768)])
        pal.save(root / f"{i:04d}.pal.png")
        Image.fromarray(m.astype(np.uint16) * 1000 + 7).save(root / f"{i:04d}.deep.png")
        np.save(root / f"{i:04d}.seg.npy", m.astype(np.uint16) + 300)
    out = root.parent / "ds"
    run_bale("pack", root, "-o", out, "--shard-samples", "5")
    return out


def source(ds: bale.Dataset, index: int, member: str) -> Image.Image | np.ndarray:
    data = ds[index][member]
    if member.endswith("npy"):
        return data
    return Image.open(io.BytesIO(data))


def image_of(ds: bale.Dataset, index: int) -> tv_tensors.Image:
    s = ds[index]
    data = s.get("jpg", s.get("png"))
    arr = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).copy()
    return tv_tensors.Image(torch.from_numpy(arr).permute(2, 0, 1))


def mask_of(ds: bale.Dataset, index: int, member: str) -> tv_tensors.Mask:
    src = source(ds, index, member)
    arr = np.array(src).astype(np.int64) if not isinstance(src, np.ndarray) else src.astype(np.int64)
    return tv_tensors.Mask(torch.from_numpy(arr))


def flips(p: dict, x):
    if p["flip"]:
        x = F.horizontal_flip(x)
    if p["vflip"]:
        x = F.vertical_flip(x)
    return x


def reference(p: dict, x, fill, resized: bool):
    """torchvision v2's functional ops with the loader's decisions `p`:
    resize to the scaled size, pad, crop (then resize, for the resizing
    crops), flips; or, with `flip_first` (the segmentation reference's
    order), resize, flips, pad, crop."""
    if tuple(p["scaled_size"]) != tuple(p["image_size"]):
        x = F.resize(x, list(p["scaled_size"]), antialias=True)
    if p["flip_first"]:
        x = flips(p, x)
    top, left, h, w = p["crop"]
    if resized:
        x = F.resized_crop(x, top, left, h, w, list(p["size"]), antialias=True)
    else:
        pl, pt, pr, pb = p["padding"]
        if any(p["padding"]):
            x = F.pad(x, [pl, pt, pr, pb], fill=fill)
        x = F.crop(x, top + pt, left + pl, h, w)
    return x if p["flip_first"] else flips(p, x)


MASKS = ["mask.png", "pal.png", "deep.png", "seg.npy"]


@pytest.mark.parametrize(
    "geometry",
    [
        # The segmentation recipe: RandomResize, pad where smaller, RandomCrop, flips.
        dict(resize=(60, 150), crop="random", size=(96, 128), flip=True, vflip=True),
        # Resize then CenterCrop, padded where the crop is wider.
        dict(resize=80, crop="center", size=(72, 200), flip=True),
        # RandomResizedCrop after a Resize.
        dict(resize=100, crop="random_resized", size=(64, 64), flip=True, vflip=True),
        # ScaleJitter, FixedSizeCrop.
        dict(scale_jitter=((140, 100), (0.3, 1.6)), crop="fixed_size", size=(100, 140), flip=True),
        dict(crop="resize", size=(50, 70), vflip=True),
    ],
)
def test_masks_equal_torchvision_pixel_for_pixel_and_images_within_40_db(seg, geometry) -> None:
    ds = bale.Dataset(seg)
    loader = bale.Loader(seg, batch_size=4, masks=MASKS, mask_dtype="int64", fill=(10, 200, 30),
                         mask_fill=254, shuffle=True, seed=7, dct_scaling=False, **geometry)
    resized = geometry["crop"] in ("random_resized", "resize")
    # A scale stage then a resizing crop: bale resizes once, from the
    # source, where torchvision resamples twice; close, not equal.
    db = 35 if resized and "resize" in geometry else 40
    seen, padded, flipped, flipped_padded = 0, 0, 0, 0
    for batch in loader:
        assert set(batch) == {"images", "labels", "masks", "indices"}
        for k, index in enumerate(batch["indices"]):
            index = int(index)
            p = loader.sample_params(index)
            assert tuple(p["image_size"]) == image_of(ds, index).shape[1:]
            padded += any(p["padding"])
            flipped += p["flip"] + p["vflip"]
            flipped_padded += p["flip"] and p["padding"][2] > 0
            assert p["flip_first"] == (geometry["crop"] == "random")
            want = reference(p, image_of(ds, index), [10, 200, 30], resized).permute(1, 2, 0).numpy()
            assert psnr(batch["images"][k], want) >= db, (index, p, psnr(batch["images"][k], want))
            for member in MASKS:
                want = reference(p, mask_of(ds, index, member), 254, resized).numpy()
                got = batch["masks"][member][k]
                assert got.dtype == np.int64
                np.testing.assert_array_equal(got, want, err_msg=f"{member} of sample {index}: {p}")
            seen += 1
    assert seen == N and flipped > 0
    if geometry["crop"] in ("random", "center", "fixed_size"):
        assert padded > 0, "the geometry should pad some samples"
    if geometry["crop"] in ("random", "fixed_size"):
        assert flipped_padded > 0, "the geometry should flip some padded samples"


def test_masks_hold_only_source_values_and_dct_scaling_stays_close(seg) -> None:
    ds = bale.Dataset(seg)
    loader = bale.Loader(seg, batch_size=6, masks="mask.png", resize=(40, 300), crop="random",
                         size=(80, 120), flip=True, seed=2)
    for batch in loader:
        assert batch["masks"]["mask.png"].dtype == np.uint8
        for k, index in enumerate(batch["indices"]):
            index = int(index)
            values = set(np.unique(np.asarray(source(ds, index, "mask.png")))) | {255}
            assert set(np.unique(batch["masks"]["mask.png"][k])) <= values
            # With DCT scaling (the default) the image stays close to torchvision's.
            p = loader.sample_params(index)
            want = reference(p, image_of(ds, index), 0, False).permute(1, 2, 0).numpy()
            assert psnr(batch["images"][k], want) >= 30, (index, p)


def test_the_same_targets_whatever_the_threads(seg) -> None:
    kw = dict(batch_size=5, masks=MASKS[:2], resize=(60, 150), crop="random", size=(64, 96), flip=True,
              vflip=True, shuffle=True, seed=11)

    def run(threads: int):
        out = []
        for b in bale.Loader(seg, threads=threads, **kw):
            out.append((b["images"].copy(), {m: a.copy() for m, a in b["masks"].items()}, list(b["indices"])))
        return out

    one, two = run(1), run(2)
    for (ia, ma, xa), (ib, mb, xb) in zip(one, two):
        np.testing.assert_array_equal(ia, ib)
        assert xa == xb
        for m in ma:
            np.testing.assert_array_equal(ma[m], mb[m])


def test_a_16_bit_mask_in_uint8_masks_is_a_damaged_sample(seg) -> None:
    loader = bale.Loader(seg, batch_size=4, masks="deep.png", crop="resize", size=32)
    with pytest.raises(bale.FormatError, match=r"deep\.png.*int64"):
        list(loader)


@pytest.fixture(scope="module")
def det(tmp_path_factory):
    """Images with boxes in JSON (with labels) and in .npy (labels beside)."""
    root = tmp_path_factory.mktemp("det") / "tree"
    root.mkdir()
    truth = {}
    for i in range(N):
        w, h = size_of(i)
        Image.fromarray(photo(i, w, h)).save(root / f"{i:04d}.jpg", quality=92)
        rng = np.random.default_rng(100 + i)
        n = 1 + i % 9
        x1 = rng.uniform(0, w - 2, n)
        y1 = rng.uniform(0, h - 2, n)
        x2 = np.minimum(x1 + rng.uniform(0.5, w / 2, n), w)
        y2 = np.minimum(y1 + rng.uniform(0.5, h / 2, n), h)
        boxes = np.stack([x1, y1, x2, y2], -1).round(2)
        boxes[0] = [0, 0, w, h]  # one box the whole image: touches every edge
        labels = rng.integers(1, 80, n)
        (root / f"{i:04d}.json").write_text(json.dumps({"boxes": boxes.tolist(), "labels": labels.tolist()}))
        np.save(root / f"{i:04d}.boxes.npy", boxes.astype(np.float32))
        (root / f"{i:04d}.cats.json").write_text(json.dumps(labels.tolist()))
        truth[f"{i:04d}"] = (boxes.astype(np.float32), labels)
    out = root.parent / "ds"
    run_bale("pack", root, "-o", out, "--shard-samples", "7")
    return out, truth


def reference_boxes(p: dict, boxes: np.ndarray, labels: np.ndarray, crop: str, min_size=1.0, min_area=1.0):
    h, w = p["image_size"]
    b = tv_tensors.BoundingBoxes(torch.from_numpy(boxes.copy()), format="XYXY", canvas_size=(h, w))
    if tuple(p["scaled_size"]) != (h, w):
        b = F.resize(b, list(p["scaled_size"]))
    if p["flip_first"]:
        b = flips(p, b)
    top, left, ch, cw = p["crop"]
    if crop in ("random_resized", "resize"):
        b = F.resized_crop(b, top, left, ch, cw, list(p["size"])) if crop == "random_resized" else F.resize(b, list(p["size"]))
    else:
        pl, pt, pr, pb = p["padding"]
        if any(p["padding"]):
            b = F.pad(b, [pl, pt, pr, pb])
        if (ch, cw) != tuple(b.canvas_size) or top + pt or left + pl:
            b = F.crop(b, top + pt, left + pl, ch, cw)
    if not p["flip_first"]:
        b = flips(p, b)
    out = v2.SanitizeBoundingBoxes(min_size=min_size, min_area=min_area)(
        {"boxes": b, "labels": torch.from_numpy(labels)}
    )
    return out["boxes"].numpy(), out["labels"].numpy()


@pytest.mark.parametrize(
    "geometry",
    [
        # The detection recipe (LSJ): ScaleJitter, FixedSizeCrop, flip.
        dict(scale_jitter=((200, 200), (0.1, 2.0)), crop="fixed_size", size=(200, 200), flip=True),
        dict(resize=(50, 200), crop="random", size=(96, 128), flip=True, vflip=True),
        dict(crop="random_resized", size=(80, 80), flip=True),
        dict(resize=120, crop="center", size=(100, 100), vflip=True),
        dict(crop="resize", size=(64, 96), flip=True),
    ],
)
@pytest.mark.parametrize("member", ["json", "npy"])
def test_boxes_follow_torchvision_and_the_same_boxes_are_kept(det, geometry, member) -> None:
    path, truth = det
    ds = bale.Dataset(path)
    kw = dict(boxes="json") if member == "json" else dict(boxes="boxes.npy", box_labels="cats.json")
    loader = bale.Loader(path, batch_size=4, max_boxes=12, min_box_size=2.0, shuffle=True, seed=5,
                         **kw, **geometry)
    dropped = kept = 0
    for batch in loader:
        assert batch["boxes"].shape[1:] == (12, 4) and batch["boxes"].dtype == np.float32
        assert batch["box_labels"].shape[1:] == (12,) and batch["box_counts"].dtype == np.int64
        for k, index in enumerate(batch["indices"]):
            index = int(index)
            p = loader.sample_params(index)
            boxes, labels = truth[ds.key(index)]
            want, want_labels = reference_boxes(p, boxes, labels, geometry["crop"], min_size=2.0)
            n = int(batch["box_counts"][k])
            got = batch["boxes"][k]
            assert n == len(want), (index, p, got[:n], want)
            np.testing.assert_array_equal(batch["box_labels"][k][:n], want_labels)
            np.testing.assert_allclose(got[:n], want, atol=0.5, err_msg=f"sample {index}: {p}")
            # Padding past the count: zero boxes, label -1.
            assert not got[n:].any() and (batch["box_labels"][k][n:] == -1).all()
            dropped += len(boxes) - n
            kept += n
    assert kept > 0
    if geometry["crop"] != "resize":
        assert dropped > 0, "some boxes should fall outside the crops"


def test_a_sample_keeping_more_boxes_than_max_boxes_is_damaged(det) -> None:
    path, _ = det
    with pytest.raises(bale.FormatError, match="max_boxes"):
        list(bale.Loader(path, batch_size=4, boxes="json", max_boxes=2, crop="resize", size=64))


def write_tree(root: Path, samples: dict[str, dict[str, bytes]]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for key, members in samples.items():
        for ext, data in members.items():
            (root / f"{key}.{ext}").write_bytes(data)


def jpeg(i: int, w: int = 64, h: int = 48, fmt: str = "JPEG") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(photo(i, w, h)).save(buf, fmt)
    return buf.getvalue()


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def png_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize(
    "case, member, match",
    [
        ("mask of another size", "mask.png", "mask is 30x20 pixels, its image 64x48"),
        ("boxes outside the image", "json", "outside the image"),
        ("NaN coordinates", "boxes.npy", "not a number"),
        ("JSON that is no JSON (NaN)", "json", "does not parse as JSON"),
        ("negative coordinates", "json", "negative"),
        ("a JSON label that does not parse", "meta.json", "does not parse as JSON"),
        ("a label that is no integer", "meta.json", "not an integer"),
        ("boxes without labels", "json", "without labels"),
        ("a mask that is not one channel", "mask.png", "one channel"),
    ],
)
def test_targets_that_do_not_fit_fail_naming_the_sample_or_are_skipped(tmp_path, case, member, match) -> None:
    good_mask = png_bytes(label_map(0, 64, 48))
    samples = {}
    for i in range(8):
        samples[f"s{i}"] = {
            "jpg": jpeg(i),
            "mask.png": good_mask,
            "json": json.dumps({"boxes": [[1, 2, 30, 40]], "labels": [3]}).encode(),
            "meta.json": json.dumps({"category": i}).encode(),
            "boxes.npy": npy_bytes(np.array([[1, 2, 30, 40]], np.float32)),
            "cats.json": b"[3]",
        }
    bad = samples["s5"]
    if case == "mask of another size":
        bad["mask.png"] = png_bytes(label_map(0, 30, 20))
    elif case == "a mask that is not one channel":
        bad["mask.png"] = png_bytes(photo(0, 64, 48))
    elif case == "boxes outside the image":
        bad["json"] = json.dumps({"boxes": [[1, 2, 30, 40], [10, 10, 65, 20]], "labels": [3, 4]}).encode()
    elif case == "NaN coordinates":
        bad["boxes.npy"] = npy_bytes(np.array([[np.nan, 2, 30, 40]], np.float32))
    elif case == "JSON that is no JSON (NaN)":
        # What Python's json.dumps writes for a NaN.
        bad["json"] = json.dumps({"boxes": [[float("nan"), 2, 30, 40]], "labels": [3]}).encode()
    elif case == "negative coordinates":
        bad["json"] = json.dumps({"boxes": [[-0.5, 2, 30, 40]], "labels": [3]}).encode()
    elif case == "a JSON label that does not parse":
        bad["meta.json"] = b'{"category": 5'
    elif case == "a label that is no integer":
        bad["meta.json"] = b'{"category": 5.5}'
    elif case == "boxes without labels":
        bad["json"] = b"[[1, 2, 30, 40]]"
    write_tree(tmp_path / "tree", samples)
    out = tmp_path / "ds"
    run_bale("pack", tmp_path / "tree", "-o", out)
    boxes = dict(boxes="boxes.npy", box_labels="cats.json") if member == "boxes.npy" else dict(boxes="json")
    kw = dict(batch_size=3, crop="resize", size=32, masks="mask.png", label="json:meta.json:category", **boxes)
    with pytest.raises(bale.FormatError, match=match) as e:
        for _ in bale.Loader(out, **kw):
            pass
    assert "s5" in str(e.value) and member in str(e.value)
    loader = bale.Loader(out, on_error="skip", **kw)
    seen = []
    with pytest.warns(UserWarning, match="s5"):
        for batch in loader:
            assert len(batch["images"]) == len(batch["labels"]) == len(batch["masks"]["mask.png"])
            assert len(batch["boxes"]) == len(batch["indices"])
            seen += list(batch["labels"])
    assert loader.skipped == 1 and sorted(seen) == [0, 1, 2, 3, 4, 6, 7]


def test_labels_from_json_and_npy_members(tmp_path) -> None:
    samples = {}
    for i in range(7):
        tags = np.zeros(5, dtype=np.float32 if i % 2 else np.uint8)
        tags[i % 5] = 1
        tags[(i * 3) % 5] = 1
        buf = io.BytesIO()
        np.save(buf, tags)
        samples[f"k{i}"] = {
            "png": png_bytes(photo(i, 20, 16)),
            "json": json.dumps(100 + i).encode(),
            "info.json": json.dumps({"class": 200 + i, "name": "x"}).encode(),
            "tags.npy": buf.getvalue(),
        }
    write_tree(tmp_path / "tree", samples)
    out = tmp_path / "ds"
    run_bale("pack", tmp_path / "tree", "-o", out)
    ds = bale.Dataset(out)
    for label, want in [("json:json", lambda i: 100 + i), ("json:info.json:class", lambda i: 200 + i)]:
        got = {}
        for batch in bale.Loader(out, batch_size=3, size=8, crop="resize", label=label):
            assert set(batch) == {"images", "labels", "indices"} and batch["labels"].dtype == np.int64
            got.update({int(i): int(v) for i, v in zip(batch["indices"], batch["labels"])})
        assert got == {i: want(int(ds.key(i)[1:])) for i in range(len(ds))}
    vectors = []
    for batch in bale.Loader(out, batch_size=3, size=8, crop="resize", label="npy:tags.npy"):
        assert batch["labels"].dtype == np.float32 and batch["labels"].shape[1:] == (5,)
        for i, v in zip(batch["indices"], batch["labels"]):
            np.testing.assert_array_equal(v, ds[int(i)]["tags.npy"].astype(np.float32))
            vectors.append(v)
    assert len(vectors) == 7
    # No labels at all.
    batch = next(iter(bale.Loader(out, batch_size=3, size=8, crop="resize", label=None)))
    assert set(batch) == {"images", "indices"}
    # A member no sample has is refused when the loader is made.
    with pytest.raises(ValueError, match='no member "tag.npy"'):
        bale.Loader(out, label="npy:tag.npy")
    with pytest.raises(ValueError, match="label"):
        bale.Loader(out, label="yaml:x")


def test_image_members_are_chosen_per_sample_regardless_of_case(tmp_path) -> None:
    # An ImageNet tree (*.JPEG), and one mixing .jpg, .png and .Jpeg.
    inet = tmp_path / "inet"
    for c in ("n01", "n02"):
        write_tree(inet / c, {f"{c}_{i}": {"JPEG": jpeg(i)} for i in range(3)})
    out = tmp_path / "inet-ds"
    run_bale("pack", inet, "-o", out)
    loader = bale.Loader(out, batch_size=4, size=16)
    assert sorted(int(x) for _, labels in loader for x in labels) == [0, 0, 0, 1, 1, 1]
    assert loader.image_member == "JPEG"
    mixed = tmp_path / "mixed"
    write_tree(mixed, {"a": {"jpg": jpeg(0)}, "b": {"png": png_bytes(photo(1, 30, 20))}, "c": {"Jpeg": jpeg(2)},
                       "d": {"txt": b"no image"}})
    out = tmp_path / "mixed-ds"
    run_bale("pack", mixed, "-o", out)
    ds = bale.Dataset(out)
    with pytest.raises(bale.FormatError, match=r'"d".*jpg or jpeg or png or webp or npy.*txt'):
        list(bale.Loader(out, batch_size=4, size=16))
    loader = bale.Loader(out, batch_size=4, size=16, crop="resize", on_error="skip", dct_scaling=False)
    with pytest.warns(UserWarning, match='"d"'):
        (images, _), = list(loader)
    keys = [ds.key(int(i)) for i in loader.last_indices]
    assert keys == ["a", "b", "c"]
    want = F.resize(tv_tensors.Image(torch.from_numpy(photo(1, 30, 20)).permute(2, 0, 1)), [16, 16], antialias=True)
    assert psnr(images[1], want.permute(1, 2, 0).numpy()) >= 40
    # A list names the order of preference.
    both = tmp_path / "both"
    write_tree(both, {"x": {"jpg": jpeg(0), "png": png_bytes(np.zeros((48, 64, 3), np.uint8))}})
    out = tmp_path / "both-ds"
    run_bale("pack", both, "-o", out)
    (img, _), = list(bale.Loader(out, batch_size=1, size=8, crop="resize", image=["PNG", "jpg"]))
    assert not img.any()
    (img, _), = list(bale.Loader(out, batch_size=1, size=8, crop="resize", image=["jpg", "png"]))
    assert img.any()
