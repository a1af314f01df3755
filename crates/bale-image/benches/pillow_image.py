"""Pillow's side of `cargo xtask bench image`.

usage: pillow_image.py LIST RESIZED_DIR RAW_DIR SHORTER QUALITY REPEAT

LIST holds one JPEG path per line. Prints one JSON object: images per second
(one process, one thread) for
  - transform: open, convert("RGB"), resize with LANCZOS so the shorter side
    is SHORTER (never up), save as JPEG at QUALITY (what bale's image stage does);
  - transform_draft: the same with Image.draft() first (DCT-domain downscale
    by a power of two while staying at or above the target size);
  - decode_original / decode_resized: open + convert("RGB") + numpy array of
    the originals and of the images bale pre-resized (RESIZED_DIR);
  - load_npy: numpy.load of the .npy files bale wrote (RAW_DIR).
Every file is read into memory first: the disk is not measured.
"""

import io
import json
import os
import sys
import time

import numpy as np
from PIL import Image


def target(w, h, n):
    """The size bale's `shorter:N` gives (halves rounded up), or None."""
    if min(w, h) <= n:
        return None
    if w <= h:
        return n, (h * n + w // 2) // w
    return (w * n + h // 2) // h, n


def transform(data, n, quality, draft):
    im = Image.open(io.BytesIO(data))
    size = target(im.width, im.height, n)
    if draft and size is not None:
        im.draft("RGB", size)
    im = im.convert("RGB")
    if size is not None:
        im = im.resize(size, Image.LANCZOS)
    out = io.BytesIO()
    im.save(out, "JPEG", quality=quality)
    return out.getvalue()


def decode(data):
    im = Image.open(io.BytesIO(data))
    return np.asarray(im.convert("RGB"))


def rate(fn, items, repeat):
    best = 0.0
    for _ in range(repeat):
        t = time.perf_counter()
        for x in items:
            fn(x)
        dt = time.perf_counter() - t
        best = max(best, len(items) / dt)
    return best


def read_dir(d, ext):
    names = sorted(n for n in os.listdir(d) if n.endswith(ext))
    return [open(os.path.join(d, n), "rb").read() for n in names]


def main():
    lst, resized_dir, raw_dir, n, quality, repeat = sys.argv[1:7]
    n, quality, repeat = int(n), int(quality), int(repeat)
    paths = [p for p in open(lst).read().splitlines() if p]
    originals = [open(p, "rb").read() for p in paths]
    resized = read_dir(resized_dir, ".jpg")
    raw = read_dir(raw_dir, ".npy")
    out = {
        "pillow": Image.__version__,
        "images": len(originals),
        "transform": rate(lambda d: transform(d, n, quality, False), originals, repeat),
        "transform_draft": rate(lambda d: transform(d, n, quality, True), originals, repeat),
        "decode_original": rate(decode, originals, repeat),
        "decode_resized": rate(decode, resized, repeat),
        "load_npy": rate(lambda d: np.load(io.BytesIO(d)), raw, repeat),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
