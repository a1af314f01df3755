"""The augmentation rows: RandomResizedCrop 224 + flip + TrivialAugmentWide +
RandomErasing(0.25), batches of 64, uint8, on the first packed dataset of the
ImageNet-like tree given with --dataset; and what ColorJitter and
TrivialAugmentWide cost bale over the plain crop + flip.

Rows:
- torchvision v2: ImageFolder(TREE) + DataLoader(num_workers=cores,
  batch_size=64, shuffle=True) with v2.RandomResizedCrop(224),
  RandomHorizontalFlip, TrivialAugmentWide (on the Pillow image, as the
  classification reference runs it), PILToTensor, RandomErasing(0.25);
- DALI CPU: nvidia.dali (device_id=None, num_threads=cores, conditionals on):
  fn.readers.webdataset over the shards (random_shuffle),
  fn.decoders.image_random_crop, fn.resize to 224x224, fn.flip with a coin,
  nvidia.dali.auto_aug.trivial_augment.trivial_augment_wide; it has no
  RandomErasing of torchvision's draws, so the row does without it (less work
  than the others);
- bale.Loader plain: crop + flip only (the baseline of the costs);
- bale.Loader + ColorJitter(0.4, 0.4, 0.4, 0.1);
- bale.Loader + TrivialAugmentWide (no erasing);
- bale.Loader: crop + flip + TrivialAugmentWide + RandomErasing(0.25), the
  row the ratios are taken against.

The notes give each augmentation's cost: bale's time per image with it over
its time without, less one (targets: ColorJitter at most 25%,
TrivialAugmentWide at most 40%).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import bale

from . import plain
from .common import OURS, Row, Workload, import_error

KEY = "augment"
BATCH = plain.BATCH
SIZE = plain.SIZE
PLAIN = "bale.Loader plain (crop + flip)"
CJ = "bale.Loader + ColorJitter"
TAW = "bale.Loader + TrivialAugmentWide"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The rows read the plain row's --tree and --dataset (its first)."""


def workloads(args: argparse.Namespace) -> list[Workload]:
    if not args.dataset:
        return []
    if args.tree is None:
        raise SystemExit("--dataset needs --tree (the loose files the torchvision row reads)")
    n, seed = args.cores, args.seed
    name, path = plain.datasets(args)[0]
    rows = [Row("torchvision v2 ImageFolder + DataLoader", lambda: torchvision_loader(args.tree, n, seed))]
    if not args.no_dali:
        rows.append(Row("DALI CPU pipeline (no erasing)", lambda: dali_loader(path, n, seed), import_error("nvidia.dali")))
    rows += [
        Row(PLAIN, lambda: bale_loader(path, n, seed)),
        Row(CJ, lambda: bale_loader(path, n, seed, color_jitter=(0.4, 0.4, 0.4, 0.1))),
        Row(TAW, lambda: bale_loader(path, n, seed, auto_augment="trivial_wide")),
        Row(OURS, lambda: bale_loader(path, n, seed, auto_augment="trivial_wide", random_erasing=0.25)),
    ]
    return [
        Workload(
            key=f"{KEY}/{name}",
            title=f"augmentations, {name} ({path})",
            about=f"RandomResizedCrop({SIZE}) + flip + TrivialAugmentWide + RandomErasing(0.25), uint8, {n} threads or workers",
            batch=BATCH,
            check=plain.check_batch,
            rows=rows,
            notes=[Cost(CJ, 0.25), Cost(TAW, 0.40)],
        )
    ]


class Cost:
    """A note on a row's cost over the plain bale row, from the medians."""

    def __init__(self, row: str, target: float) -> None:
        self.row, self.target = row, target

    def __call__(self, med: dict[str, float]) -> str:
        if self.row not in med or PLAIN not in med:
            return f"{self.row}: cost not measured"
        cost = med[PLAIN] / med[self.row] - 1
        verdict = "within" if cost <= self.target else "OVER"
        return f"{self.row} costs {cost:+.0%} per image over crop + flip ({verdict} the {self.target:.0%} target)"


# ---- rows --------------------------------------------------------------------------


def torchvision_loader(tree: Path, n_cores: int, seed: int):
    import torch
    from torchvision import datasets
    from torchvision.transforms import v2

    t = v2.Compose(
        [
            v2.RandomResizedCrop(SIZE),
            v2.RandomHorizontalFlip(),
            v2.TrivialAugmentWide(),
            v2.PILToTensor(),
            v2.RandomErasing(0.25),
        ]
    )
    ds = datasets.ImageFolder(str(tree), transform=t)
    g = torch.Generator().manual_seed(seed)
    return iter(torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=n_cores, generator=g))


def dali_loader(dataset: Path, n_cores: int, seed: int):
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.auto_aug import trivial_augment

    shards = sorted(str(p) for p in dataset.glob("*.tar"))

    @pipeline_def(
        batch_size=BATCH, num_threads=n_cores, device_id=None, seed=seed + 1, enable_conditionals=True
    )
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
        img = trivial_augment.trivial_augment_wide(img)
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


def bale_loader(dataset: Path, n_cores: int, seed: int, **augment):
    loader = bale.Loader(
        str(dataset),
        batch_size=BATCH,
        crop="random_resized",
        size=SIZE,
        flip=True,
        shuffle=True,
        seed=seed,
        threads=n_cores,
        **augment,
    )
    return iter(loader)
