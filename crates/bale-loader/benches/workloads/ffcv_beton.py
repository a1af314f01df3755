"""FFCV's dataset for the plain row: a `.beton` written once from a packed dataset.

The `.beton` holds the dataset's images (its `jpg` members: the tree's JPEGs,
or their pre-resized versions for a resized dataset) byte for byte, and its
`cls` labels (IntField). FFCV's own RGBImageField(write_mode="jpg") decodes
each image and encodes it again with OpenCV (at quality 90, or the one given):
FFCV would then decode other bytes than bale does, smaller or larger, with
other Huffman tables and subsampling. So the field's `encode` is replaced, on
the one instance the writer uses, by one that stores the member's own JPEG
with its size, in the layout RGBImageField's "jpg" mode writes: FFCV's
decoders read it as they read their own (a `.beton` is a container; its
JPEG's encoder is not FFCV's business), and both loaders decode the same
bytes. The file is written under a temporary name and renamed when complete,
so a `.beton` that is there is whole; a rerun reuses it.
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
        data = s["jpg"]
        with Image.open(io.BytesIO(data)) as img:
            if img.format != "JPEG" or img.mode not in ("RGB", "L"):
                raise ValueError(
                    f"{self.path}: sample {i}: its jpg member is a {img.format} of mode {img.mode}, "
                    "not an RGB or grey JPEG, which FFCV's jpg mode decodes as it is"
                )
            width, height = img.size
        return (data, (height, width)), int(s["cls"])


def store_jpeg(destination, image, malloc) -> None:
    """RGBImageField's "jpg" mode over a JPEG's own bytes: `image` is
    `(bytes, (height, width))` from [`ImagesAndLabels`]."""
    import numpy as np
    from ffcv.fields.rgb_image import IMAGE_MODES

    data, (height, width) = image
    destination["mode"] = IMAGE_MODES["jpg"]
    destination["height"], destination["width"] = height, width
    destination["data_ptr"], storage = malloc(len(data))
    storage[:] = np.frombuffer(data, dtype=np.uint8)


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
    # The writer records the field's type (RGBImageField, which its reader
    # knows) and calls its encode in worker processes it forks.
    image = RGBImageField(write_mode="jpg")
    image.encode = store_jpeg
    writer = DatasetWriter(str(partial), {"image": image, "label": IntField()}, num_workers=workers)
    writer.from_indexed_dataset(source, chunksize=100)
    os.replace(partial, beton)
    size = beton.stat().st_size
    print(
        f"  wrote {beton}: {size / 1e6:,.0f} MB in {time.perf_counter() - t0:,.0f} s",
        flush=True,
    )
