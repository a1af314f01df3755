"""Per core, one thread, the same JPEGs of the ImageNet-like tree in memory:
Pillow's decode (Image.open + convert("RGB") + load), bale.decode_image
(libjpeg-turbo through bale's decoder, whole image at full scale: libjpeg-turbo's
own rate on this CPU, with the fewest layers around it), and the per-sample work
of a training loader: torchvision's RandomResizedCrop + flip + PILToTensor after
Pillow's decode against bale.Loader with one thread (which decodes only the crop,
at a reduced scale when the crop is at least twice the output).
"""

from __future__ import annotations

import io
import statistics
import time
from pathlib import Path

import bale

from .plain import BATCH, SIZE, rrc_flip


def first_jpegs(tree: Path, n: int) -> list[bytes]:
    classes = sorted(p for p in tree.iterdir() if p.is_dir())
    lists = [sorted(c.glob("*.jpg")) for c in classes]
    out: list[bytes] = []
    i = 0
    while len(out) < n and any(i < len(l) for l in lists):
        for l in lists:
            if i < len(l) and len(out) < n:
                out.append(l[i].read_bytes())
        i += 1
    return out


def rates(tree: Path, dataset: Path, n: int, rounds: int) -> dict[str, float]:
    import torch
    from PIL import Image

    torch.set_num_threads(1)
    data = first_jpegs(tree, n)
    pixels = 0
    for b in data:
        with Image.open(io.BytesIO(b)) as im:
            pixels += im.width * im.height
    t = rrc_flip()

    def pillow_decode():
        for b in data:
            with Image.open(io.BytesIO(b)) as im:
                im.convert("RGB").load()

    def bale_decode():
        for b in data:
            bale.decode_image(b)

    def pillow_rrc():
        for b in data:
            with Image.open(io.BytesIO(b)) as im:
                t(im.convert("RGB"))

    n_loader = n - n % BATCH

    def bale_rrc():
        loader = bale.Loader(
            str(dataset),
            batch_size=BATCH,
            crop="random_resized",
            size=SIZE,
            flip=True,
            shuffle=True,
            threads=1,
            prefetch=1,
        )
        left = n_loader
        for images, _ in loader:
            left -= len(images)
            if left <= 0:
                break

    subjects = {
        "Pillow decode": (pillow_decode, len(data)),
        "bale.decode_image (libjpeg-turbo)": (bale_decode, len(data)),
        "torchvision RRC+flip (Pillow)": (pillow_rrc, len(data)),
        "bale.Loader RRC+flip, 1 thread": (bale_rrc, n_loader),
    }
    times: dict[str, list[float]] = {k: [] for k in subjects}
    for _ in range(rounds):
        for name, (f, count) in subjects.items():
            t0 = time.perf_counter()
            f()
            times[name].append(count / (time.perf_counter() - t0))
    out = {k: statistics.median(v) for k, v in times.items()}
    out["megapixels per image"] = pixels / len(data) / 1e6
    return out


def report(tree: Path, dataset: Path, n: int, rounds: int) -> dict[str, float]:
    print(f"\nper core, {n} JPEGs of the tree in memory, one thread:", flush=True)
    pc = rates(tree, dataset, n, rounds)
    mp = pc.pop("megapixels per image")
    lj = pc["bale.decode_image (libjpeg-turbo)"]
    for name, rate in pc.items():
        print(f"  {name:<40} {rate:>8,.0f} images/s {rate * mp:>7,.1f} Mpixel/s (source)")
    print(
        f"  decode: bale.decode_image is {lj / pc['Pillow decode']:.2f}x Pillow; "
        f"Pillow reaches {pc['Pillow decode'] / lj:.0%} of libjpeg-turbo's rate"
    )
    rrc = pc["bale.Loader RRC+flip, 1 thread"] / pc["torchvision RRC+flip (Pillow)"]
    print(
        f"  per sample: bale.Loader is {rrc:.2f}x torchvision, and "
        f"{pc['bale.Loader RRC+flip, 1 thread'] / lj:.2f}x a full libjpeg-turbo decode"
    )
    return {**pc, "megapixels_per_image": mp}
