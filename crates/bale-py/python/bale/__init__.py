"""Read bale datasets from Python: PyTorch DataLoader, DALI, JAX or plain loops.

A bale dataset is a directory written by ``bale pack`` (tar or tar.zst shards,
each with a ``.idx`` index, and a ``bale.json`` manifest). Two classes read it:

- :class:`Dataset`: map-style random access (``len(ds)``, ``ds[i]``,
  ``ds.get_by_key(key)``), for samplers and ``DataLoader(shuffle=True)``;
- :class:`IterableDataset`: epochs of large sequential (or shuffled) reads,
  split across ranks and DataLoader workers, with ``set_epoch`` and resume.

Each sample is a dict::

    {"__key__": "n01440764/0001", "__index__": 17, "cls": 3,
     "jpg": b"...", "npy": numpy.ndarray(...)}

``cls`` is present for labelled datasets (the class index; names in
``Dataset.classes``). ``.npy`` fields are read-only NumPy arrays that are views of
the sample's bytes (zero-copy from the page cache with the default ``mmap``
backing on tar shards); other fields are ``bytes``.

Example with PyTorch::

    import bale, torch
    from torch.utils.data import DataLoader

    def collate(samples):
        return [s["__key__"] for s in samples], torch.tensor([s["cls"] for s in samples])

    ds = bale.Dataset("/data/imagenet-train")
    loader = DataLoader(ds, batch_size=256, shuffle=True, num_workers=8, collate_fn=collate)

    it = bale.IterableDataset("/data/imagenet-train", shuffle=True, seed=1)
    loader = DataLoader(it, batch_size=256, num_workers=8, collate_fn=collate)
    for epoch in range(90):
        it.set_epoch(epoch)
        for keys, labels in loader:
            ...

Both classes pickle as their arguments (a worker reopens the dataset from its
path; no file handle crosses processes) and release the GIL while reading.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any, Callable, Iterator, Sequence

from bale._native import BaleError, Dataset, FormatError, SampleBuffer, SampleIterator
from bale._native import __version__

__all__ = [
    "BaleError",
    "Dataset",
    "FormatError",
    "IterableDataset",
    "SampleBuffer",
    "SampleIterator",
    "worker_offsets",
    "__version__",
]

# DataLoader tells iterable datasets from map-style ones with isinstance(ds,
# torch.utils.data.IterableDataset), so IterableDataset subclasses it when torch
# is installed (importing bale then imports torch.utils.data).
if os.environ.get("BALE_NO_TORCH") != "1" and importlib.util.find_spec("torch") is not None:
    try:
        from torch.utils.data import IterableDataset as _IterableBase
    except Exception:  # a broken torch install must not break bale
        _IterableBase = object  # type: ignore[assignment,misc]
else:
    _IterableBase = object  # type: ignore[assignment,misc]

_PLANS = ("sequential", "shuffled", "shard_shuffled")


def _env_int(name: str) -> int | None:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"environment variable {name}={v!r} is not an integer") from None


def _dist_rank_world() -> tuple[int, int] | None:
    """(rank, world_size) from torch.distributed when it is initialised here."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:
        return None
    return None


def _torch_worker() -> tuple[int, int] | None:
    """(worker id, num_workers) inside a DataLoader worker, else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        info = torch.utils.data.get_worker_info()
    except Exception:
        return None
    if info is None:
        return None
    return info.id, info.num_workers


def worker_offsets(batches: int, batch_size: int, num_workers: int) -> list[int]:
    """Samples each DataLoader worker has yielded after the loader returned ``batches``.

    A DataLoader over an IterableDataset with ``num_workers`` workers takes
    whole batches from the workers in turn (worker 0, 1, ..., 0, 1, ...). Pass
    the result as ``start=`` to resume each worker where it stopped. Assumes
    full batches (no ``drop_last`` remainder) and ``num_workers >= 1``.
    """
    if batches < 0 or batch_size < 1 or num_workers < 1:
        raise ValueError("need batches >= 0, batch_size >= 1 and num_workers >= 1")
    q, r = divmod(batches, num_workers)
    return [(q + (1 if w < r else 0)) * batch_size for w in range(num_workers)]


class IterableDataset(_IterableBase):  # type: ignore[misc,valid-type]
    """Epochs over a bale dataset, split by rank and DataLoader worker.

    Example::

        it = bale.IterableDataset("/data/train", shuffle=True, seed=1)
        loader = torch.utils.data.DataLoader(it, batch_size=64, num_workers=4,
                                             collate_fn=list)
        for epoch in range(10):
            it.set_epoch(epoch)
            for batch in loader:  # every sample once per epoch, across workers and ranks
                ...

    Args:
        path: the dataset directory (holding ``bale.json``).
        shuffle: ``False`` (default) reads shard by shard in order;
            ``True`` reads a full random permutation of the samples.
        seed: the run's seed for shuffled plans.
        epoch: the epoch number (see :meth:`set_epoch`); each epoch of a
            shuffled plan has its own order.
        plan: ``"sequential"``, ``"shuffled"`` or ``"shard_shuffled"``
            (shards in random order, read sequentially, samples mixed in a
            reservoir of ``buffer`` samples). Wins over ``shuffle``.
        buffer: reservoir size of ``"shard_shuffled"``, in samples.
        rank, world_size: this process's share of a distributed run. When
            not given: from ``torch.distributed`` when it is initialised, else
            from the ``RANK`` and ``WORLD_SIZE`` environment variables, else
            rank 0 of 1.
        worker, num_workers: the split among loader workers of one rank. When
            not given: from ``torch.utils.data.get_worker_info()`` inside a
            DataLoader worker, else worker 0 of 1.
        even: every rank yields the same number of samples (a few samples
            repeat), as ``DistributedSampler(drop_last=False)``.
        start: resume: samples this partition has already yielded in this
            epoch; an int (the same for every worker) or a sequence indexed
            by worker id (see :func:`worker_offsets`).
        fields, decode, verify_on_read, backing: as :class:`Dataset`.
        prefetch: background read-ahead threads per iterator (0: none).

    The partitions of one epoch are disjoint and cover every sample exactly
    once (``even`` aside). Pickling keeps only the arguments (and the rank
    and world size detected in the pickling process), so each DataLoader
    worker reopens the dataset itself.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        shuffle: bool = False,
        seed: int = 0,
        epoch: int = 0,
        plan: str | None = None,
        buffer: int = 1024,
        rank: int | None = None,
        world_size: int | None = None,
        worker: int | None = None,
        num_workers: int | None = None,
        even: bool = False,
        start: int | Sequence[int] = 0,
        fields: Sequence[str] | None = None,
        decode: None | str | Callable[[str, Any], Any] = None,
        verify_on_read: bool = False,
        backing: str = "mmap",
        prefetch: int = 1,
    ) -> None:
        if plan is None:
            plan = "shuffled" if shuffle else "sequential"
        if plan not in _PLANS:
            raise ValueError(f"plan must be one of {_PLANS}, not {plan!r}")
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if (worker is None) != (num_workers is None):
            raise ValueError("give both worker and num_workers, or neither")
        for name, v in (("seed", seed), ("epoch", epoch), ("buffer", buffer), ("prefetch", prefetch)):
            if v < 0:
                raise ValueError(f"{name} must be >= 0, not {v}")
        self.path = os.fspath(path)
        self.plan = plan
        self.seed = seed
        self.epoch = epoch
        self.buffer = buffer
        self.rank = rank
        self.world_size = world_size
        self.worker = worker
        self.num_workers = num_workers
        self.even = even
        self.start = start if isinstance(start, int) else list(start)
        self.fields = None if fields is None else list(fields)
        self.decode = decode
        self.verify_on_read = verify_on_read
        self.backing = backing
        self.prefetch = prefetch
        self._detected: tuple[int, int] | None = None
        self._ds: Dataset | None = None
        self._dataset()  # fail early on a bad path or options

    def _dataset(self) -> Dataset:
        if self._ds is None:
            self._ds = Dataset(
                self.path,
                fields=self.fields,
                decode=self.decode,
                verify_on_read=self.verify_on_read,
                backing=self.backing,
            )
        return self._ds

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_ds"] = None
        # torch.distributed is initialised in the trainer, not in spawned
        # DataLoader workers: carry the rank over.
        detected = _dist_rank_world()
        if detected is not None:
            state["_detected"] = detected
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next iteration reads (shuffled plans reorder per epoch).

        Also clears ``start``: a resumed epoch is resumed once.
        """
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, not {epoch}")
        self.epoch = epoch
        self.start = 0

    def rank_world(self) -> tuple[int, int]:
        """(rank, world_size) this process reads as, in the documented order."""
        if self.rank is not None and self.world_size is not None:
            return self.rank, self.world_size
        found = _dist_rank_world() or self._detected
        if found is not None:
            return found
        r, w = _env_int("RANK"), _env_int("WORLD_SIZE")
        if r is not None and w is not None:
            return r, w
        if (r is None) != (w is None):
            raise ValueError("RANK and WORLD_SIZE must be set together")
        return 0, 1

    def worker_split(self) -> tuple[int, int]:
        """(worker, num_workers) this iterator reads as."""
        if self.worker is not None and self.num_workers is not None:
            return self.worker, self.num_workers
        return _torch_worker() or (0, 1)

    def _start_for(self, worker: int) -> int:
        if isinstance(self.start, int):
            return self.start
        if worker >= len(self.start):
            raise ValueError(f"start has {len(self.start)} entries, no offset for worker {worker}")
        return self.start[worker]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        rank, world = self.rank_world()
        worker, workers = self.worker_split()
        return self._dataset().epoch(
            self.plan,
            seed=self.seed,
            epoch=self.epoch,
            buffer=self.buffer,
            rank=rank,
            world_size=world,
            worker=worker,
            num_workers=workers,
            even=self.even,
            start=self._start_for(worker),
            prefetch=self.prefetch,
        )

    def __len__(self) -> int:
        """Samples this rank yields per epoch (all its workers together)."""
        rank, world = self.rank_world()
        return self._dataset().partition_len(rank=rank, world_size=world, even=self.even)

    def __repr__(self) -> str:
        return f"bale.IterableDataset({self.path!r}, plan={self.plan!r}, seed={self.seed}, epoch={self.epoch})"
