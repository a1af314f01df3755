"""Functions run in spawned processes (importable by module name, so spawn can find them)."""

from __future__ import annotations

import hashlib

import bale


def digest(sample: dict) -> tuple[str, str]:
    h = hashlib.sha256()
    for ext in sorted(sample):
        if ext in ("__key__", "__index__"):
            continue
        v = sample[ext]
        h.update(ext.encode())
        h.update(v.tobytes() if hasattr(v, "tobytes") else repr(v).encode() if isinstance(v, int) else v)
    return sample["__key__"], h.hexdigest()


def read_slice(args: tuple[bale.Dataset, int, int]) -> list[tuple[int, str, str]]:
    """Reads ds[start::step] with a dataset that came over pickle."""
    ds, start, step = args
    return [(i, *digest(ds[i])) for i in range(start, len(ds), step)]


def iterate(it: bale.IterableDataset) -> list[tuple[int, str, str]]:
    """Iterates a pickled IterableDataset."""
    return [(s["__index__"], *digest(s)) for s in it]
