"""bale's pixel operations one at a time, for testing them against
torchvision (not a stable API): ``apply(name, image, value, fill)`` runs
one on an ``(H, W, 3)`` ``uint8`` array and returns a new one."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from . import _native


def apply(name: str, image: np.ndarray, value: float = 0.0, fill: Sequence[int] = (0, 0, 0)) -> np.ndarray:
    """``name`` with its torchvision argument ``value`` (see ``_native._apply_op``)."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    h, w, c = image.shape
    if c != 3:
        raise ValueError(f"want (H, W, 3) pixels, not {image.shape}")
    out = _native._apply_op(name, image.tobytes(), h, w, float(value), [int(v) for v in fill])
    return np.frombuffer(out, dtype=np.uint8).reshape(h, w, 3).copy()
