"""The plain row: RandomResizedCrop 224 + flip, batches of 64, uint8, on every
packed dataset of the ImageNet-like tree given with --dataset.

Every row makes the same batches: 64 images cropped with torchvision's
RandomResizedCrop(224) rules (scale 0.08-1, ratio 3/4-4/3), flipped left-right
with probability 1/2, uint8 224x224x3 with int64 labels, in a shuffled order, on
--cores cores:

- torchvision: ImageFolder(TREE) (the loose files) + DataLoader(num_workers=cores,
  batch_size=64, shuffle=True) with RandomResizedCrop(224), RandomHorizontalFlip,
  PILToTensor; the user's starting point (for a pre-resized dataset too: the
  loose files are the originals);
- bale.Dataset + DataLoader: the same DataLoader and transforms over the packed
  dataset (Pillow decodes the `jpg` member's bytes);
- DALI CPU: nvidia.dali with device_id=None, num_threads=cores:
  fn.readers.webdataset over the dataset's tar shards (random_shuffle),
  fn.decoders.image_random_crop, fn.resize to 224x224, fn.flip with a coin flip,
  the batch copied out as one NumPy array (as bale.Loader hands one over);
- FFCV 1.0.2: a `.beton` written once from the dataset (workloads/ffcv_beton.py),
  holding its `jpg` members byte for byte (FFCV's RGBImageField would decode
  and re-encode each with OpenCV; the bytes stored as they are make both
  loaders decode the same JPEGs), read by ffcv.loader.Loader(batch_size=64,
  num_workers=cores, order=RANDOM, os_cache=True: the file mapped, read
  through the page cache as bale's shards are) with
  RandomResizedCropRGBImageDecoder((224, 224)) + RandomHorizontalFlip(), uint8
  NumPy out (no ToTensor);
- bale.Loader(DATASET, batch_size=64, crop="random_resized", size=224,
  flip=True, shuffle=True, threads=cores).
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np

import bale

from . import ffcv_beton
from .common import OURS, Row, Workload, import_error

KEY = "plain"
BATCH = 64
SIZE = 224


def add_arguments(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("plain row (RandomResizedCrop 224 + flip)")
    g.add_argument("--tree", type=Path, help="the ImageNet-like tree (loose files)")
    g.add_argument(
        "--dataset",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a packed dataset of the tree (repeat for several)",
    )
    g.add_argument("--no-ffcv", action="store_true", help="leave FFCV out")
    g.add_argument(
        "--ffcv-dir",
        type=Path,
        default=Path("target/bench/loader/ffcv"),
        help="where the .beton files are written once and reused",
    )


def datasets(args: argparse.Namespace) -> list[tuple[str, Path]]:
    out = []
    for d in args.dataset:
        name, _, path = d.partition("=")
        if not path:
            raise SystemExit(f"--dataset {d!r}: expected NAME=PATH")
        out.append((name, Path(path)))
    return out


def workloads(args: argparse.Namespace) -> list[Workload]:
    if not args.dataset:
        return []
    if args.tree is None:
        raise SystemExit("--dataset needs --tree (the loose files the torchvision row reads)")
    n, seed = args.cores, args.seed
    out = []
    for name, path in datasets(args):
        rows = [
            Row("torchvision ImageFolder + DataLoader", lambda: torchvision_loader(args.tree, n, seed)),
            Row("bale.Dataset + DataLoader", lambda p=path: bale_dataset_loader(p, n, seed)),
        ]
        if not args.no_dali:
            rows.append(
                Row("DALI CPU pipeline", lambda p=path: dali_loader(p, n, seed), import_error("nvidia.dali"))
            )
        if not args.no_ffcv:
            beton = args.ffcv_dir / f"{name}-original.beton"
            rows.append(
                Row(
                    "FFCV 1.0.2",
                    lambda b=beton: ffcv_loader(b, n, seed),
                    import_error("ffcv.loader"),
                    prepare=lambda p=path, b=beton: ffcv_beton.write_once(p, b, n),
                )
            )
        rows.append(Row(OURS, lambda p=path: bale_loader(p, n, seed)))
        out.append(
            Workload(
                key=f"{KEY}/{name}",
                title=f"plain row, {name} ({path})",
                about=f"RandomResizedCrop({SIZE}) + flip, uint8, {n} threads or workers",
                batch=BATCH,
                check=check_batch,
                rows=rows,
            )
        )
    return out


def check_batch(batch) -> int:
    images, labels = batch[0], batch[1]
    shape = tuple(images.shape)
    assert shape in ((BATCH, SIZE, SIZE, 3), (BATCH, 3, SIZE, SIZE)), shape
    assert str(images.dtype).endswith("uint8"), images.dtype
    assert len(labels) == BATCH
    return BATCH


# ---- rows --------------------------------------------------------------------------


def rrc_flip():
    from torchvision import transforms

    return transforms.Compose(
        [
            transforms.RandomResizedCrop(SIZE),
            transforms.RandomHorizontalFlip(),
            transforms.PILToTensor(),
        ]
    )


def torchvision_loader(tree: Path, n_cores: int, seed: int):
    import torch
    from torchvision import datasets

    ds = datasets.ImageFolder(str(tree), transform=rrc_flip())
    g = torch.Generator().manual_seed(seed)
    return iter(
        torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=n_cores, generator=g)
    )


class BaleTorch:
    """A map-style dataset over bale.Dataset with torchvision's transforms on Pillow images."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.ds = None
        self.n = len(bale.Dataset(path))
        self.t = rrc_flip()

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
            BaleTorch(str(dataset)), batch_size=BATCH, shuffle=True, num_workers=n_cores, generator=g
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


def ffcv_loader(beton: Path, n_cores: int, seed: int):
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import RandomHorizontalFlip

    loader = Loader(
        str(beton),
        batch_size=BATCH,
        num_workers=n_cores,
        order=OrderOption.RANDOM,
        os_cache=True,
        drop_last=True,
        seed=seed,
        pipelines={
            "image": [RandomResizedCropRGBImageDecoder((SIZE, SIZE)), RandomHorizontalFlip()],
            "label": [IntDecoder()],
        },
    )
    return iter(loader)


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
