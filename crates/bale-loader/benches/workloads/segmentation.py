"""Segmentation: the Cityscapes recipe on a Cityscapes-like corpus.

The corpus (`cargo xtask gen-tree --kind seg`): `<key>.jpg`, 2048x1024 street
photos, with `<key>.mask.png`, 8-bit grey label maps of 19 classes and 255.

The work, on the image and its mask alike (torchvision's reference
segmentation recipe with Cityscapes' crop):
1. scale 0.5-2.0 of a base size of 1024: torchvision v2
   `RandomResize(512, 2048)`, the shorter side to a size drawn in [512, 2048)
   (bilinear with antialias for the image, nearest for the mask);
2. horizontal flip of the scaled image, p=1/2, before the pad and the crop,
   as the reference does and as bale.Loader's crop="random" does (the padding
   stays on the right and bottom of a flipped sample);
3. pad right and bottom where the scaled image is smaller than the crop (image
   0, mask 255: the reference's `PadIfSmaller`); with this corpus's 2:1 images
   the smallest scale is exactly 512x1024, so no sample needs it, but every row
   runs the step;
4. `RandomCrop(512, 1024)` (height, width, as mmsegmentation's Cityscapes crop);
5. batches of 8, uint8 images and masks out (the model's own float
   conversion is not the loader's work).

Batches of 8: mmsegmentation's 512x1024 Cityscapes schedules train on 8 images
per step (2 per GPU on 4 GPUs); 8 x 512x1024x3 is 12 MB a batch.

Rows:
- torchvision v2 in DataLoader(num_workers=cores, batch_size=8, shuffle=True)
  over the loose files: torchvision.io decodes (the JPEG with libjpeg-turbo, the
  PNG with libpng) into tv_tensors, then the v2 transforms above;
- DALI's CPU pipeline over the packed shards, written as DALI does it best
  (the same pixels as resizing the whole image, then cropping, to 80 dB, with
  a fraction of the work): fn.readers.webdataset; one shorter side S per
  sample (an integer drawn in [512, 2048)), the scaled size from
  fn.peek_image_shape, a random 512x1024 window of it, and that window's
  region of the source; fn.decoders.image_slice decodes only that region
  (with a margin for the filter) and fn.resize(roi_start, roi_end) scales it
  to the window (linear with antialias); the mask is decoded whole (GRAY) and
  scaled the same way with INTERP_NN; fn.flip of both with one coin, then
  fn.pad to 512x1024 (right and bottom, as PadIfSmaller; image 0, mask 255):
  a window drawn uniformly and flipped is a uniform window of the flipped
  image, so this is the flip-first order on the window's pixels alone. Where
  DALI cannot express the work exactly: its INTERP_NN samples each output
  pixel's centre (torchvision's NEAREST_EXACT), not torchvision's NEAREST
  (floor(i * in/out)), so some of the mask's scaled rows and columns come
  from a neighbouring source pixel; the cost is the same. The batches are
  copied out as arrays.
- bale.Loader(dataset, batch_size=8, image="jpg", masks="mask.png",
  label=None, resize=(512, 2048), crop="random", size=(512, 1024), fill=0,
  mask_fill=255, flip=True, shuffle=True, threads=cores).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import bale

from .common import OURS, Row, Workload, epochs, import_error

KEY = "seg"
BATCH = 8
CROP = (512, 1024)
SCALE = (512, 2048)  # 0.5-2.0 of a base size of 1024 (the shorter side)
MASK = "mask.png"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("segmentation (scale 0.5-2, flip, pad, crop 512x1024)")
    g.add_argument("--seg-tree", type=Path, help="the Cityscapes-like tree (loose files)")
    g.add_argument("--seg-dataset", type=Path, help="the tree, packed (`bale pack --labels none`)")


def workloads(args: argparse.Namespace) -> list[Workload]:
    if args.seg_dataset is None:
        return []
    if args.seg_tree is None:
        raise SystemExit("--seg-dataset needs --seg-tree (the loose files the torchvision row reads)")
    n, seed, tree, ds = args.cores, args.seed, args.seg_tree, args.seg_dataset
    rows = [Row("torchvision v2 + DataLoader", lambda: torchvision_loader(tree, n, seed))]
    if not args.no_dali:
        rows.append(Row("DALI CPU pipeline", lambda: dali_loader(ds, n, seed), import_error("nvidia.dali")))
    rows.append(Row(OURS, lambda: bale_loader(ds, n, seed)))
    return [
        Workload(
            key=KEY,
            title=f"segmentation ({ds})",
            about=(
                f"RandomResize{SCALE} of the shorter side, flip, pad, RandomCrop{CROP}, on image "
                f"and mask; uint8; {n} threads or workers"
            ),
            batch=BATCH,
            check=check_batch,
            rows=rows,
            batches=20,
            warmup=3,
            notes=[
                "DALI's INTERP_NN samples pixel centres, not torchvision's NEAREST rule "
                "(the masks differ on some rows and columns; the cost is the same)",
            ],
        )
    ]


def check_batch(batch) -> int:
    if isinstance(batch, dict):  # bale.Loader's
        images, masks = batch["images"], batch["masks"][MASK]
    else:
        images, masks = batch[0], batch[1]
    shape = tuple(images.shape)
    assert shape in ((BATCH, *CROP, 3), (BATCH, 3, *CROP)), shape
    assert str(images.dtype).endswith("uint8"), images.dtype
    assert tuple(masks.shape) in ((BATCH, *CROP), (BATCH, *CROP, 1)), masks.shape
    assert str(masks.dtype).endswith("uint8"), masks.dtype
    return BATCH


# ---- rows --------------------------------------------------------------------------


def torchvision_loader(tree: Path, n_cores: int, seed: int):
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    from .tv_extras import PadIfSmaller, SegmentationFiles

    t = v2.Compose(
        [
            v2.RandomResize(*SCALE),
            v2.RandomHorizontalFlip(),
            PadIfSmaller(CROP, fill={tv_tensors.Mask: 255, "others": 0}),
            v2.RandomCrop(CROP),
        ]
    )
    g = torch.Generator().manual_seed(seed)
    return epochs(
        torch.utils.data.DataLoader(
            SegmentationFiles(tree, t), batch_size=BATCH,
            shuffle=True,
            num_workers=n_cores,
            generator=g,
            drop_last=True,
        )
    )


def dali_loader(dataset: Path, n_cores: int, seed: int):
    import nvidia.dali.math as dmath
    from nvidia.dali import fn, pipeline_def, types

    shards = sorted(str(p) for p in dataset.glob("*.tar"))
    crop_h, crop_w = float(CROP[0]), float(CROP[1])

    def pair(a, b):
        return fn.cast(fn.stack(a, b), dtype=types.INT32)

    @pipeline_def(batch_size=BATCH, num_threads=n_cores, device_id=None, seed=seed + 1)
    def pipe():
        jpg, png = fn.readers.webdataset(
            paths=shards,
            ext=["jpg", MASK],
            missing_component_behavior="error",
            random_shuffle=True,
            initial_fill=64,
            name="reader",
        )
        shape = fn.peek_image_shape(jpg, dtype=types.FLOAT)
        h, w = shape[0], shape[1]
        # RandomResize: the shorter side to S, the longer to floor(S * long / short).
        shorter = dmath.floor(fn.random.uniform(range=[float(SCALE[0]), float(SCALE[1])]))
        short_side = dmath.min(h, w)
        nh = dmath.floor(h * shorter / short_side + 1e-3)
        nw = dmath.floor(w * shorter / short_side + 1e-3)
        # RandomCrop's window of the scaled image (all of it where smaller: padded below).
        ch, cw = dmath.min(nh, crop_h), dmath.min(nw, crop_w)
        top = dmath.floor(fn.random.uniform(range=[0.0, 1.0]) * (nh - ch))
        left = dmath.floor(fn.random.uniform(range=[0.0, 1.0]) * (nw - cw))
        # The window in the source, and the region to decode around it.
        sy, sx = nh / h, nw / w
        y0, y1, x0, x1 = top / sy, (top + ch) / sy, left / sx, (left + cw) / sx
        margin = 4.0
        a0 = dmath.max(dmath.floor(y0) - margin, 0.0)
        b0 = dmath.max(dmath.floor(x0) - margin, 0.0)
        a1 = dmath.min(dmath.ceil(y1) + margin, h)
        b1 = dmath.min(dmath.ceil(x1) + margin, w)
        part = fn.decoders.image_slice(
            jpg, start=pair(a0, b0), end=pair(a1, b1), axis_names="HW", output_type=types.RGB
        )
        img = fn.resize(
            part,
            size=fn.stack(ch, cw),
            roi_start=fn.stack(y0 - a0, x0 - b0),
            roi_end=fn.stack(y1 - a0, x1 - b0),
            roi_relative=False,
            interp_type=types.INTERP_LINEAR,
            antialias=True,
        )
        mask = fn.decoders.image(png, device="cpu", output_type=types.GRAY)
        mask = fn.resize(
            mask,
            size=fn.stack(ch, cw),
            roi_start=fn.stack(y0, x0),
            roi_end=fn.stack(y1, x1),
            roi_relative=False,
            interp_type=types.INTERP_NN,
        )
        # Flip first: the padding stays on the right and bottom.
        flip = fn.random.coin_flip()
        img, mask = fn.flip(img, horizontal=flip), fn.flip(mask, horizontal=flip)
        img = fn.pad(img, axis_names="HW", shape=list(CROP), fill_value=0)
        mask = fn.pad(mask, axis_names="HW", shape=list(CROP), fill_value=255)
        return img, mask

    p = pipe()
    p.build()

    def batches():
        while True:
            imgs, masks = p.run()
            yield imgs.as_array(), masks.as_array()

    return batches()


def bale_loader(dataset: Path, n_cores: int, seed: int):
    loader = bale.Loader(
        str(dataset),
        batch_size=BATCH,
        image="jpg",
        masks=MASK,
        label=None,
        resize=SCALE,
        crop="random",
        size=CROP,
        fill=0,
        mask_fill=255,
        flip=True,
        shuffle=True,
        drop_last=True,
        seed=seed,
        threads=n_cores,
    )
    return epochs(loader)
