"""torchvision v2 pieces the reference scripts write themselves, for the peers'
rows: `PadIfSmaller` (references/segmentation/v2_extras.py's), and the file
datasets the segmentation and detection rows read the loose files with.

Images are decoded with torchvision.io (libjpeg-turbo into a uint8 tensor) and
transformed as tensors: on this machine that path is about 2.4x faster per
sample than the reference's default Pillow backend, so the peer gets its
fastest configuration.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torchvision import tv_tensors
from torchvision.io import decode_jpeg, decode_png, read_file
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2._utils import _convert_fill_arg, _get_fill, _setup_fill_arg, query_size


class PadIfSmaller(v2.Transform):
    """Pads right and bottom up to `size` (h, w) where the input is smaller, with
    a fill per type (the reference's: `{tv_tensors.Mask: 255, "others": 0}`)."""

    def __init__(self, size: tuple[int, int], fill=0) -> None:
        super().__init__()
        self.size = size
        self.fill = _setup_fill_arg(fill)

    def make_params(self, flat_inputs):
        h, w = query_size(flat_inputs)
        return dict(padding=[0, 0, max(self.size[1] - w, 0), max(self.size[0] - h, 0)])

    def transform(self, inpt, params):
        if not any(params["padding"]):
            return inpt
        fill = _convert_fill_arg(_get_fill(self.fill, type(inpt)))
        return F.pad(inpt, padding=params["padding"], fill=fill)


def jpegs(tree: Path) -> list[Path]:
    files = sorted(tree.glob("*.jpg"))
    if not files:
        raise SystemExit(f"{tree} has no *.jpg (make it with `cargo xtask gen-tree`)")
    return files


class SegmentationFiles(torch.utils.data.Dataset):
    """`<key>.jpg` and `<key>.mask.png` of a tree, as (Image, Mask) through `transform`."""

    def __init__(self, tree: Path, transform) -> None:
        self.files = jpegs(tree)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        p = self.files[i]
        image = tv_tensors.Image(decode_jpeg(read_file(str(p))))
        mask = tv_tensors.Mask(decode_png(read_file(str(p.with_suffix(".mask.png"))))[0])
        return self.transform(image, mask)


class DetectionFiles(torch.utils.data.Dataset):
    """`<key>.jpg` and `<key>.json` of a tree, as (Image, {"boxes", "labels"})
    through `transform`."""

    def __init__(self, tree: Path, transform) -> None:
        self.files = jpegs(tree)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        p = self.files[i]
        image = tv_tensors.Image(decode_jpeg(read_file(str(p))))
        d = json.loads(p.with_suffix(".json").read_bytes())
        target = {
            "boxes": tv_tensors.BoundingBoxes(
                torch.tensor(d["boxes"], dtype=torch.float32).reshape(-1, 4),
                format="XYXY",
                canvas_size=tuple(image.shape[-2:]),
            ),
            "labels": torch.tensor(d["labels"], dtype=torch.int64),
        }
        return self.transform(image, target)


def images_and_targets(batch):
    """Collates detection samples: images stacked (they share the fixed size),
    targets as a list (their box counts differ), as the reference's loop takes them."""
    images, targets = zip(*batch)
    return torch.stack(images), list(targets)
