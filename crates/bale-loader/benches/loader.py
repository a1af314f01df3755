"""Loader benchmark: bale.Loader against torchvision, bale.Dataset + DataLoader and DALI.

Run by `cargo xtask bench loader` (which builds the package in release, installs
DALI into the venv, packs the benchmark tree twice and passes the paths); by hand:

    .venv/bin/python crates/bale-loader/benches/loader.py --tree TREE \
        --dataset as-is=DATASET [--dataset short256=DATASET2] [--batches 40] [--rounds 3]

Every subject produces the same batches of work: 64 images cropped with
torchvision's RandomResizedCrop(224) rules (scale 0.08-1, ratio 3/4-4/3),
flipped left-right with probability 1/2, as uint8 224x224x3 with int64 labels,
in a shuffled order, on --cores cores (default: all of this machine's):

- torchvision: ImageFolder(TREE) (the loose files) + DataLoader(num_workers=cores,
  batch_size=64, shuffle=True) with RandomResizedCrop(224), RandomHorizontalFlip,
  PILToTensor; the baseline the issue names;
- bale.Dataset + DataLoader: the same DataLoader and transforms over the packed
  dataset (Pillow decodes the `jpg` member's bytes);
- DALI CPU: nvidia.dali with device_id=None, num_threads=cores:
  fn.readers.webdataset over the dataset's tar shards (random_shuffle),
  fn.decoders.image_random_crop, fn.resize to 224x224, fn.flip with a coin flip,
  the batch copied out as one NumPy array (as bale.Loader hands one over);
- bale.Loader(DATASET, batch_size=64, crop="random_resized", size=224,
  flip=True, shuffle=True, threads=cores).

Each round runs every subject once, in turn (so drift hits them alike): the first
--warmup batches (worker start-up, page cache) are not timed, then --batches
batches are. The median images/s over --rounds rounds counts; the ratios of
bale.Loader to each peer are printed.

Then, per core (one thread each, the same --decode-images JPEGs of the tree in
memory): Pillow's decode (Image.open + convert("RGB") + load), bale.decode_image
(libjpeg-turbo through bale's decoder, whole image at full scale: libjpeg-turbo's
own rate on this CPU, with the fewest layers around it), and the per-sample work
of a training loader: torchvision's RandomResizedCrop + flip + PILToTensor after
Pillow's decode against bale.Loader with one thread (which decodes only the crop,
at a reduced scale when the crop is at least twice the output).

Results go to stdout and, as JSON, to --json (default target/bench/loader/results.json).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import bale

BATCH = 64
SIZE = 224


def cores() -> int:
    return len(os.sched_getaffinity(0))


# ---- subjects: each returns an iterator of batches ------------------------------


def torchvision_loader(tree: Path, n_cores: int, seed: int):
    import torch
    from torchvision import datasets, transforms

    t = transforms.Compose(
        [
            transforms.RandomResizedCrop(SIZE),
            transforms.RandomHorizontalFlip(),
            transforms.PILToTensor(),
        ]
    )
    ds = datasets.ImageFolder(str(tree), transform=t)
    g = torch.Generator().manual_seed(seed)
    return iter(
        torch.utils.data.DataLoader(
            ds, batch_size=BATCH, shuffle=True, num_workers=n_cores, generator=g
        )
    )


class BaleTorch:
    """A map-style dataset over bale.Dataset with torchvision's transforms on Pillow images."""

    def __init__(self, path: str) -> None:
        from torchvision import transforms

        self.path = path
        self.ds = None
        self.n = len(bale.Dataset(path))
        self.t = transforms.Compose(
            [
                transforms.RandomResizedCrop(SIZE),
                transforms.RandomHorizontalFlip(),
                transforms.PILToTensor(),
            ]
        )

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        from PIL import Image

        if self.ds is None:
            self.ds = bale.Dataset(self.path)
        s = self.ds[i]
        img = Image.open(io.BytesIO(s["jpg"])).convert("RGB")
        return self.t(img), int(s["cls"])


def bale_dataset_loader(dataset: Path, n_cores: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    return iter(
        torch.utils.data.DataLoader(
            BaleTorch(str(dataset)),
            batch_size=BATCH,
            shuffle=True,
            num_workers=n_cores,
            generator=g,
        )
    )


def dali_loader(dataset: Path, n_cores: int, seed: int):
    from nvidia.dali import fn, pipeline_def, types

    shards = sorted(str(p) for p in dataset.glob("*.tar"))

    @pipeline_def(batch_size=BATCH, num_threads=n_cores, device_id=None, seed=seed + 1)
    def pipe():
        jpg, cls = fn.readers.webdataset(
            paths=shards,
            ext=["jpg", "cls"],
            missing_component_behavior="error",
            random_shuffle=True,
            initial_fill=1024,
            name="reader",
        )
        img = fn.decoders.image_random_crop(jpg, device="cpu", output_type=types.RGB)
        img = fn.resize(img, resize_x=SIZE, resize_y=SIZE)
        img = fn.flip(img, horizontal=fn.random.coin_flip())
        return img, cls

    p = pipe()
    p.build()

    def batches():
        while True:
            imgs, cls = p.run()
            images = imgs.as_array()
            labels = np.array([int(bytes(np.asarray(c))) for c in cls], dtype=np.int64)
            yield images, labels

    return batches()


def bale_loader(dataset: Path, n_cores: int, seed: int):
    loader = bale.Loader(
        str(dataset),
        batch_size=BATCH,
        crop="random_resized",
        size=SIZE,
        flip=True,
        shuffle=True,
        seed=seed,
        threads=n_cores,
    )
    return iter(loader)


def check_batch(batch) -> None:
    images, labels = batch[0], batch[1]
    shape = tuple(images.shape)
    assert shape in ((BATCH, SIZE, SIZE, 3), (BATCH, 3, SIZE, SIZE)), shape
    assert len(labels) == BATCH


def timed(make, warmup: int, batches: int) -> float:
    """Images/s of `batches` batches after `warmup` untimed ones."""
    it = make()
    for _ in range(warmup):
        check_batch(next(it))
    t0 = time.perf_counter()
    for _ in range(batches):
        check_batch(next(it))
    dt = time.perf_counter() - t0
    del it
    return batches * BATCH / dt


# ---- per core ---------------------------------------------------------------------


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


def per_core(tree: Path, dataset: Path, n: int, rounds: int) -> dict[str, float]:
    import torch
    from PIL import Image
    from torchvision import transforms

    torch.set_num_threads(1)
    data = first_jpegs(tree, n)
    pixels = 0
    for b in data:
        with Image.open(io.BytesIO(b)) as im:
            pixels += im.width * im.height
    t = transforms.Compose(
        [
            transforms.RandomResizedCrop(SIZE),
            transforms.RandomHorizontalFlip(),
            transforms.PILToTensor(),
        ]
    )

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
    rates = {k: statistics.median(v) for k, v in times.items()}
    rates["megapixels per image"] = pixels / len(data) / 1e6
    return rates


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", type=Path, required=True)
    ap.add_argument(
        "--dataset",
        action="append",
        required=True,
        metavar="NAME=PATH",
        help="a packed dataset of the tree (repeat for several)",
    )
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cores", type=int, default=cores())
    ap.add_argument("--decode-images", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-dali", action="store_true", help="leave DALI out")
    ap.add_argument("--json", type=Path, default=Path("target/bench/loader/results.json"))
    args = ap.parse_args()

    datasets = []
    for d in args.dataset:
        name, _, path = d.partition("=")
        if not path:
            ap.error(f"--dataset {d!r}: expected NAME=PATH")
        datasets.append((name, Path(path)))

    n = args.cores
    print(
        f"loader benchmark: batches of {BATCH}, RandomResizedCrop({SIZE}) + flip, {n} cores, "
        f"{args.batches} timed batches after {args.warmup}, median of {args.rounds} rounds",
        flush=True,
    )
    load0 = os.getloadavg()[0]
    print(f"load average at start: {load0:.2f}", flush=True)
    results: dict = {"cores": n, "batch": BATCH, "size": SIZE, "datasets": {}, "load_start": load0}
    for name, path in datasets:
        subjects = {
            "torchvision ImageFolder + DataLoader": lambda: torchvision_loader(args.tree, n, args.seed),
            "bale.Dataset + DataLoader": lambda p=path: bale_dataset_loader(p, n, args.seed),
        }
        if not args.no_dali:
            subjects["DALI CPU pipeline"] = lambda p=path: dali_loader(p, n, args.seed)
        subjects["bale.Loader"] = lambda p=path: bale_loader(p, n, args.seed)
        rates: dict[str, list[float]] = {k: [] for k in subjects}
        for r in range(args.rounds):
            for sname, make in subjects.items():
                rate = timed(make, args.warmup, args.batches)
                rates[sname].append(rate)
                print(f"  [{name}] round {r + 1}: {sname}: {rate:,.0f} images/s", flush=True)
        med = {k: statistics.median(v) for k, v in rates.items()}
        ours = med["bale.Loader"]
        print(f"\n{name} ({path}):")
        print(f"  {'subject':<40} {'images/s':>10} {'range':>13} {'bale.Loader is':>16}")
        for sname, rate in med.items():
            ratio = "" if sname == "bale.Loader" else f"{ours / rate:.2f}x"
            lo, hi = min(rates[sname]), max(rates[sname])
            print(f"  {sname:<40} {rate:>10,.0f} {f'{lo:,.0f}-{hi:,.0f}':>13} {ratio:>16}")
        results["datasets"][name] = {"path": str(path), "images_per_s": med, "rounds": rates}

    print(f"\nper core, {args.decode_images} JPEGs of the tree in memory, one thread:", flush=True)
    pc = per_core(args.tree, datasets[0][1], args.decode_images, args.rounds)
    mp = pc.pop("megapixels per image")
    lj = pc["bale.decode_image (libjpeg-turbo)"]
    for sname, rate in pc.items():
        print(f"  {sname:<40} {rate:>8,.0f} images/s {rate * mp:>7,.1f} Mpixel/s (source)")
    print(
        f"  decode: bale.decode_image is {lj / pc['Pillow decode']:.2f}x Pillow; "
        f"Pillow reaches {pc['Pillow decode'] / lj:.0%} of libjpeg-turbo's rate"
    )
    rrc = pc["bale.Loader RRC+flip, 1 thread"] / pc["torchvision RRC+flip (Pillow)"]
    print(
        f"  per sample: bale.Loader is {rrc:.2f}x torchvision, and "
        f"{pc['bale.Loader RRC+flip, 1 thread'] / lj:.2f}x a full libjpeg-turbo decode"
    )
    results["per_core"] = {**pc, "megapixels_per_image": mp}
    results["load_end"] = os.getloadavg()[0]
    print(f"load average at end: {results['load_end']:.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"\nresults: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
