"""FFCV's dataset for the plain row: a `.beton` written once from a packed dataset.

The `.beton` holds the dataset's images (its `jpg` members, so the tree's
JPEGs, or their pre-resized versions for a resized dataset) and `cls` labels as
FFCV stores them: RGBImageField(write_mode="jpg", jpeg_quality=90) decodes each
image and encodes it again with OpenCV at the tree's quality (FFCV cannot keep
the original bytes), IntField the label. It is written under a temporary name
and renamed when complete, so a `.beton` that is there is whole; a rerun reuses
it.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import bale


class ImagesAndLabels:
    """(Pillow RGB image, int label) per sample of a bale dataset, opened lazily
    in each of FFCV's writer processes."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.ds = None
        self.n = len(bale.Dataset(self.path))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        from PIL import Image

        if self.ds is None:
            self.ds = bale.Dataset(self.path)
        s = self.ds[i]
        return Image.open(io.BytesIO(s["jpg"])).convert("RGB"), int(s["cls"])


def write_once(dataset: Path, beton: Path, workers: int) -> None:
    """Writes `beton` from `dataset` unless it is there."""
    if beton.exists():
        return
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter

    beton.parent.mkdir(parents=True, exist_ok=True)
    partial = beton.with_name(beton.name + ".partial")
    partial.unlink(missing_ok=True)
    source = ImagesAndLabels(dataset)
    print(f"  writing FFCV's {beton} from {dataset} ({len(source):,} images, once)", flush=True)
    t0 = time.perf_counter()
    writer = DatasetWriter(
        str(partial),
        {"image": RGBImageField(write_mode="jpg", jpeg_quality=90), "label": IntField()},
        num_workers=workers,
    )
    writer.from_indexed_dataset(source, chunksize=100)
    os.replace(partial, beton)
    size = beton.stat().st_size
    print(
        f"  wrote {beton}: {size / 1e6:,.0f} MB in {time.perf_counter() - t0:,.0f} s",
        flush=True,
    )
