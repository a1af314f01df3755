"""Detection: large-scale jitter on a COCO-like corpus.

The corpus (`cargo xtask gen-tree --kind det`): `<key>.jpg`, photo-like JPEGs
of COCO's sizes (640x480 most often), with `<key>.json` holding 1-50 boxes
(xyxy, pixels) and their labels.

The work: torchvision's reference detection recipe "lsj" (large-scale jitter,
as detectron2's and the reference's `--data-augmentation lsj`), on the image
and its boxes alike:
1. torchvision v2 `ScaleJitter(target_size=(1024, 1024), scale_range=(0.1,
   2.0))`: the image scaled by min(1024/h, 1024/w) x U(0.1, 2.0), so a
   640x480 photo becomes 64x48 to 2048x1536;
2. horizontal flip of the scaled image, p=1/2, before the crop, as
   bale.Loader's crop="random" flips (the reference's lsj flips after its
   FixedSizeCrop: the same distribution, but the padding of a flipped sample
   then lands on the left);
3. `FixedSizeCrop(1024, 1024)`: pad right and bottom to 1024 where smaller
   (fill 0), then a random 1024x1024 crop where larger; v2 has no
   FixedSizeCrop (the reference writes its own), so the torchvision row does
   it as the segmentation reference does, `PadIfSmaller` then `RandomCrop`
   (which clips the boxes to the crop);
4. `SanitizeBoundingBoxes()` (min_size 1: a box narrower or lower than one
   pixel after the clip is dropped with its label);
5. batches of 8, uint8 1024x1024 images, boxes and labels.

Batches of 8: detectron2's LSJ schedules train on 64 images over 8 GPUs;
8 x 1024x1024x3 is 25 MB a batch.

Rows:
- torchvision v2 in DataLoader(num_workers=cores, batch_size=8, shuffle=True)
  over the loose files: torchvision.io decodes the JPEG, `json` the boxes, as
  tv_tensors.Image and BoundingBoxes, then the v2 transforms above; images
  stacked, targets as a list of dicts (their box counts differ);
- bale.Loader(dataset, batch_size=8, image="jpg", boxes="json", label=None,
  scale_jitter=((1024, 1024), (0.1, 2.0)), crop="random", size=(1024, 1024),
  flip=True, max_boxes=50, shuffle=True, threads=cores): boxes padded to 50 per
  image with counts and labels;
- DALI's CPU pipeline over the packed shards, as close as DALI comes:
  fn.readers.webdataset (jpg, json); the JSON parsed by fn.python_function
  (DALI has no JSON operator; a Python function in the graph makes DALI run
  without its pipelined, asynchronous executor); fn.peek_image_shape for the
  scale to ScaleJitter's floor(h r) x floor(w r) and FixedSizeCrop's random
  window of it; fn.decoders.image_slice decodes only the window's region of
  the source (with a margin for the filter) and fn.resize(roi_start, roi_end)
  scales it to the window (the same pixels as scaling all, then cropping),
  fn.flip, then fn.pad to 1024x1024 (right and bottom: a uniform window,
  flipped, is a uniform window of the flipped image, so this is the
  flip-first order on the window's pixels alone); the boxes scaled, shifted,
  clipped and flipped in the window by DALI's arithmetic operators. DALI
  cannot drop boxes: no operator removes the elements of a tensor by a
  condition (fn.random_bbox_crop prunes boxes, but by its own rules of a crop it
  picks), so the graph computes SanitizeBoundingBoxes' keep mask (width and
  height at least 1) and the row applies it per sample after the batch, in
  NumPy, inside the timed loop.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import bale

from .common import OURS, Row, Workload, epochs, import_error

KEY = "det"
BATCH = 8
SIZE = (1024, 1024)
JITTER = (0.1, 2.0)
MAX_BOXES = 50


def add_arguments(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("detection (ScaleJitter, flip, FixedSizeCrop 1024, sanitize)")
    g.add_argument("--det-tree", type=Path, help="the COCO-like tree (loose files)")
    g.add_argument("--det-dataset", type=Path, help="the tree, packed (`bale pack --labels none`)")


def workloads(args: argparse.Namespace) -> list[Workload]:
    if args.det_dataset is None:
        return []
    if args.det_tree is None:
        raise SystemExit("--det-dataset needs --det-tree (the loose files the torchvision row reads)")
    n, seed, tree, ds = args.cores, args.seed, args.det_tree, args.det_dataset
    rows = [Row("torchvision v2 + DataLoader", lambda: torchvision_loader(tree, n, seed))]
    if not args.no_dali:
        rows.append(Row("DALI CPU pipeline", lambda: dali_loader(ds, n, seed), import_error("nvidia.dali")))
    rows.append(Row(OURS, lambda: bale_loader(ds, n, seed)))
    return [
        Workload(
            key=KEY,
            title=f"detection ({ds})",
            about=(
                f"ScaleJitter({SIZE}, {JITTER}), flip, FixedSizeCrop{SIZE}, SanitizeBoundingBoxes; "
                f"uint8; {n} threads or workers"
            ),
            batch=BATCH,
            check=check_batch,
            rows=rows,
            batches=30,
            warmup=3,
            notes=[
                "DALI parses the JSON in fn.python_function (no pipelined executor) and cannot drop "
                "boxes in its graph: its row applies the keep mask in NumPy after each batch",
            ],
        )
    ]


def check_batch(batch) -> int:
    if isinstance(batch, dict):  # bale.Loader's
        images = batch["images"]
        assert tuple(batch["boxes"].shape) == (BATCH, MAX_BOXES, 4), batch["boxes"].shape
        assert tuple(batch["box_labels"].shape) == (BATCH, MAX_BOXES)
        assert tuple(batch["box_counts"].shape) == (BATCH,)
    else:
        images, targets = batch
        assert len(targets) == BATCH
        assert all(len(t["boxes"]) == len(t["labels"]) for t in targets)
    shape = tuple(images.shape)
    assert shape in ((BATCH, *SIZE, 3), (BATCH, 3, *SIZE)), shape
    assert str(images.dtype).endswith("uint8"), images.dtype
    return BATCH


# ---- rows --------------------------------------------------------------------------


def torchvision_loader(tree: Path, n_cores: int, seed: int):
    import torch
    from torchvision.transforms import v2

    from .tv_extras import DetectionFiles, PadIfSmaller, images_and_targets

    t = v2.Compose(
        [
            v2.ScaleJitter(SIZE, JITTER),
            v2.RandomHorizontalFlip(),
            PadIfSmaller(SIZE, fill=0),
            v2.RandomCrop(SIZE),
            v2.SanitizeBoundingBoxes(),
        ]
    )
    g = torch.Generator().manual_seed(seed)
    return epochs(
        torch.utils.data.DataLoader(
            DetectionFiles(tree, t),
            batch_size=BATCH,
            shuffle=True,
            num_workers=n_cores,
            generator=g,
            drop_last=True,
            collate_fn=images_and_targets,
        )
    )


def dali_loader(dataset: Path, n_cores: int, seed: int):
    import json

    import numpy as np
    import nvidia.dali.math as dmath
    from nvidia.dali import fn, pipeline_def, types

    shards = sorted(str(p) for p in dataset.glob("*.tar"))
    (height, width), (lo, hi) = SIZE, JITTER

    def parse(member):
        d = json.loads(member.tobytes())
        boxes = np.asarray(d["boxes"], dtype=np.float32).reshape(-1, 4)
        return boxes, np.asarray(d["labels"], dtype=np.int64)

    @pipeline_def(
        batch_size=BATCH,
        num_threads=n_cores,
        device_id=None,
        seed=seed + 1,
        exec_async=False,
        exec_pipelined=False,
    )
    def pipe():
        jpg, js = fn.readers.webdataset(
            paths=shards,
            ext=["jpg", "json"],
            missing_component_behavior="error",
            random_shuffle=True,
            initial_fill=256,
            name="reader",
        )
        boxes, labels = fn.python_function(js, function=parse, num_outputs=2)
        shape = fn.peek_image_shape(jpg, dtype=types.FLOAT)
        h, w = shape[0], shape[1]
        # ScaleJitter: r = min(H/h, W/w) * U(lo, hi), sizes floor(h r) x floor(w r).
        r = dmath.min(height / h, width / w) * fn.random.uniform(range=[lo, hi])
        nh, nw = dmath.floor(h * r), dmath.floor(w * r)
        # FixedSizeCrop: a random window where larger, padding right and bottom where smaller.
        ch, cw = dmath.min(nh, float(height)), dmath.min(nw, float(width))
        top = dmath.floor(fn.random.uniform(range=[0.0, 1.0]) * (nh - ch))
        left = dmath.floor(fn.random.uniform(range=[0.0, 1.0]) * (nw - cw))
        # Decode only the window's region of the source (with a margin for the
        # filter) and scale it to the window: as resizing all, then cropping.
        sy, sx = nh / h, nw / w
        y0, y1, x0, x1 = top / sy, (top + ch) / sy, left / sx, (left + cw) / sx
        margin = 4.0
        a0 = dmath.max(dmath.floor(y0) - margin, 0.0)
        b0 = dmath.max(dmath.floor(x0) - margin, 0.0)
        a1 = dmath.min(dmath.ceil(y1) + margin, h)
        b1 = dmath.min(dmath.ceil(x1) + margin, w)
        part = fn.decoders.image_slice(
            jpg,
            start=fn.cast(fn.stack(a0, b0), dtype=types.INT32),
            end=fn.cast(fn.stack(a1, b1), dtype=types.INT32),
            axis_names="HW",
            output_type=types.RGB,
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
        sx, sy = nw / w, nh / h
        b = boxes * fn.stack(sx, sy, sx, sy) - fn.stack(left, top, left, top)
        b = dmath.clamp(b, 0.0, float(max(height, width)))
        x1, y1 = dmath.min(b[:, 0], cw), dmath.min(b[:, 1], ch)
        x2, y2 = dmath.min(b[:, 2], cw), dmath.min(b[:, 3], ch)
        # Flip first (in the window, cw wide), then pad right and bottom.
        flip = fn.random.coin_flip()
        f = fn.cast(flip, dtype=types.FLOAT)
        fx1 = f * (cw - x2) + (1.0 - f) * x1
        fx2 = f * (cw - x1) + (1.0 - f) * x2
        img = fn.flip(img, horizontal=flip)
        img = fn.pad(img, axis_names="HW", shape=[height, width], fill_value=0)
        keep = ((fx2 - fx1) >= 1.0) & ((y2 - y1) >= 1.0)
        return img, fn.stack(fx1, y1, fx2, y2, axis=1), labels, keep

    p = pipe()
    p.build()

    def batches():
        while True:
            imgs, boxes, labels, keep = p.run()
            targets = []
            for i in range(BATCH):
                k = np.asarray(keep[i])
                targets.append({"boxes": np.asarray(boxes[i])[k], "labels": np.asarray(labels[i])[k]})
            yield imgs.as_array(), targets

    return batches()


def bale_loader(dataset: Path, n_cores: int, seed: int):
    loader = bale.Loader(
        str(dataset),
        batch_size=BATCH,
        image="jpg",
        boxes="json",
        label=None,
        scale_jitter=(SIZE, JITTER),
        crop="random",
        size=SIZE,
        flip=True,
        max_boxes=MAX_BOXES,
        shuffle=True,
        drop_last=True,
        seed=seed,
        threads=n_cores,
    )
    return epochs(loader)
