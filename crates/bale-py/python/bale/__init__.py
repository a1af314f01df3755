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
path; no file handle crosses processes) and release the GIL while a read may
wait or work (a warm ``ds[i]`` of a mapped, uncompressed dataset keeps it:
docs/python.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import operator
import os
import sys
from typing import Any, Callable, Iterator, Mapping, Sequence

from bale import _native, _state
from bale._native import BaleError, Dataset, FormatError, SampleBuffer, SampleIterator
from bale._native import __version__
from bale._timed import timed

__all__ = [
    "BaleError",
    "Dataset",
    "FormatError",
    "IterableDataset",
    "Loader",
    "Mix",
    "merge_states",
    "SampleBuffer",
    "decode_image",
    "timed",
    "SampleIterator",
    "worker_offsets",
    "__version__",
]

# DataLoader tells iterable datasets from map-style ones with isinstance(ds,
# torch.utils.data.IterableDataset), so IterableDataset is registered as a
# virtual subclass of it when torch is installed. Registration waits until torch
# is already imported or an IterableDataset is made: importing torch takes
# seconds, and `import bale` alone (Dataset, Loader, plain loops, JAX) does not
# import it.
_torch_registered = False


def _register_with_torch() -> None:
    """Registers IterableDataset with torch.utils.data.IterableDataset, once."""
    global _torch_registered
    if _torch_registered:
        return
    # The flag is set once the attempt is over, so that a second thread making an
    # IterableDataset meanwhile registers too (registering twice is harmless)
    # rather than hand DataLoader a dataset not yet registered.
    try:
        if os.environ.get("BALE_NO_TORCH") == "1":
            return
        if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
            return
        from torch.utils.data import IterableDataset as base

        base.register(IterableDataset)
        base.register(Mix)
    except Exception:  # a broken torch install must not break bale
        pass
    finally:
        _torch_registered = True


_PLANS = ("sequential", "shuffled", "shard_shuffled")
#: The most read-ahead threads an epoch starts (``prefetch=``).
_MAX_PREFETCH_THREADS: int = _native.MAX_PREFETCH_THREADS


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


def worker_offsets(
    batches: int, batch_size: int, num_workers: int, lengths: Sequence[int] | None = None
) -> list[int]:
    """Samples each DataLoader worker has yielded after the loader returned ``batches``.

    A DataLoader over an IterableDataset with ``num_workers`` workers takes
    whole batches from the workers in turn (worker 0, 1, ..., 0, 1, ...),
    passing over a worker once it has run out. Pass the result as ``start=``
    to resume each worker where it stopped (with the same ``num_workers``).

    ``lengths``, the samples each worker yields per epoch
    (:meth:`IterableDataset.worker_offsets` gives them), counts each worker's
    last batch, which is short, and the workers that ran out: without them
    every batch counts full, which holds until the last ``num_workers``
    batches of the epoch. Assumes the DataLoader's ``drop_last=False``.
    """
    if batches < 0 or batch_size < 1 or num_workers < 1:
        raise ValueError("need batches >= 0, batch_size >= 1 and num_workers >= 1")
    if lengths is None:
        q, r = divmod(batches, num_workers)
        return [(q + (1 if w < r else 0)) * batch_size for w in range(num_workers)]
    left = [operator.index(n) for n in lengths]
    if len(left) != num_workers or min(left, default=0) < 0:
        raise ValueError(f"lengths must hold {num_workers} counts >= 0, not {list(lengths)!r}")
    done = [0] * num_workers
    taken = 0
    while taken < batches:
        if not any(left):
            total = sum(-(-(d) // batch_size) for d in done)
            raise ValueError(f"{batches} batches is past the epoch's end: its workers yield {total} batches of {batch_size}")
        for w in range(num_workers):
            if taken == batches:
                break
            if left[w]:
                n = min(batch_size, left[w])
                left[w] -= n
                done[w] += n
                taken += 1
    return done


def _start_arg(start: Any) -> int | list[int]:
    """``start`` as an offset or a list of them, each an integer >= 0."""
    if isinstance(start, (str, bytes)):
        raise TypeError(f"start must be an int or a sequence of ints, not {start!r}")
    try:
        one = operator.index(start)
    except TypeError:
        many = [operator.index(k) for k in start]
    else:
        if not 0 <= one < 2**64:
            raise ValueError(f"start must be from 0 to 2**64 - 1, not {one}")
        return one
    if any(not 0 <= k < 2**64 for k in many):
        raise ValueError(f"start offsets must be from 0 to 2**64 - 1, not {many!r}")
    return many


class IterableDataset:
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
        fields, as_tuple, decode, verify_on_read, backing, read_around: as
            :class:`Dataset` (a single ``fields`` string yields that field's
            value alone; ``as_tuple`` yields tuples in the order of ``fields``).
        prefetch: background read-ahead threads per iterator (0: none; at
            most 64). For
            a dataset in object storage, requests in flight do the reading
            ahead (at most 64 MiB per iterator), threads or not.
        storage_options, cache_dir, cache_limit: as :class:`Dataset`, for a
            dataset in object storage (``s3://``, ``gs://``, ``az://``,
            ``https://``).

    The partitions of one epoch are disjoint and cover every sample exactly
    once (``even`` aside). Pickling keeps only the arguments (and the rank
    and world size detected in the pickling process), so each DataLoader
    worker reopens the dataset itself.

    Checkpoints: :meth:`state_dict` and :meth:`load_state_dict` (what
    ``torchdata``'s ``StatefulDataLoader`` and Lightning call) save and
    restore the place in the epoch, also at another world size or worker
    count (docs/python.md, "Checkpointing" and "Elastic resume").
    """

    _kind = "IterableDataset"

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
        fields: str | Sequence[str] | None = None,
        as_tuple: bool = False,
        decode: None | str | Callable[[str, Any], Any] = None,
        verify_on_read: bool = False,
        backing: str = "mmap",
        read_around: str = "auto",
        prefetch: int = 1,
        storage_options: Mapping[str, str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
    ) -> None:
        _register_with_torch()
        if plan is None:
            plan = "shuffled" if _flag(shuffle, "shuffle") else "sequential"
        if plan not in _PLANS:
            raise ValueError(f"plan must be one of {_PLANS}, not {plan!r}")
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if (worker is None) != (num_workers is None):
            raise ValueError("give both worker and num_workers, or neither")
        seed, epoch = _whole(seed, "seed"), _whole(epoch, "epoch")
        buffer = _whole(buffer, "buffer")
        # Threads: more do not read faster (the native side caps them too).
        prefetch = _whole(prefetch, "prefetch", 0, _MAX_PREFETCH_THREADS)
        if world_size is not None:
            world_size = _whole(world_size, "world_size", 1)
            rank = _whole(rank, "rank", 0, world_size - 1)
        if num_workers is not None:
            num_workers = _whole(num_workers, "num_workers", 1)
            worker = _whole(worker, "worker", 0, num_workers - 1)
        self.path = os.fspath(path)
        self.plan = plan
        self.seed = seed
        self.epoch = epoch
        self.buffer = buffer
        self.rank = rank
        self.world_size = world_size
        self.worker = worker
        self.num_workers = num_workers
        self.even = _flag(even, "even")
        self.start = _start_arg(start)
        self.fields = fields if fields is None or isinstance(fields, str) else list(fields)
        self.as_tuple = as_tuple
        self.decode = decode
        self.verify_on_read = verify_on_read
        self.backing = backing
        self.read_around = read_around
        self.prefetch = prefetch
        self.storage_options = None if storage_options is None else dict(storage_options)
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self.cache_limit = cache_limit
        self._detected: tuple[int, int] | None = None
        self._ds: Dataset | None = None
        self._dataset()  # fail early on a bad path or options
        self._fingerprint: str = _native.fingerprint(self._dataset())
        self._samples: int = len(self._dataset())
        self._pending: list[dict[str, Any]] | None = None
        self._live: tuple[Any, list[dict[str, Any]], tuple[int, int, bool, int, int]] | None = None

    def _dataset(self) -> Dataset:
        if self._ds is None:
            self._ds = Dataset(
                self.path,
                fields=self.fields,
                as_tuple=self.as_tuple,
                decode=self.decode,
                verify_on_read=self.verify_on_read,
                backing=self.backing,
                read_around=self.read_around,
                storage_options=self.storage_options,
                cache_dir=self.cache_dir,
                cache_limit=self.cache_limit,
            )
        return self._ds

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_ds"] = None
        state["_live"] = None
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

        Also clears ``start`` and a loaded state: a resumed epoch is resumed once.
        """
        self.epoch = _whole(epoch, "epoch")
        self.start = 0
        self._pending = None
        self._live = None

    def _ident(self) -> dict[str, Any]:
        """What a state must match: the dataset and its order."""
        return {
            "dataset": self._fingerprint,
            "samples": self._samples,
            "plan": self.plan,
            "seed": self.seed,
            "buffer": self.buffer,
        }

    def state_dict(self) -> dict[str, Any]:
        """The place of this iterator in its epoch, as a small JSON-serialisable dict.

        Taken in a DataLoader worker (as ``StatefulDataLoader`` does), it
        holds that worker's count; in the process that iterates (no
        workers), the whole rank's. Its size does not grow with the
        dataset. Pass it to :meth:`load_state_dict` to resume: the same
        samples follow, in the same order, as in an uninterrupted run
        (with the same world size and workers), or, at another world size
        or worker count, every sample the epoch had left, once.
        """
        stages = [dict(s) for s in (self._pending or [])]
        if self._live is not None:
            it, stages, (world, workers, even, rank, worker) = self._live
            stages = [dict(s) for s in stages]
            consumed: list[int | None] = [None] * workers
            consumed[worker] = it.position
            now = _state.stage(world, workers, even, rank, consumed)
            if stages and _same_cut(stages[-1], now):
                stages[-1] = now
            else:
                stages.append(now)
        return _state.make(self._kind, self._ident(), self.epoch, stages)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes the epoch a :meth:`state_dict` was taken in, at the next iteration.

        Also takes a ``StatefulDataLoader``'s own ``state_dict()`` (its
        workers' states merged), which is what a resume at another world
        size or worker count needs: load it here, before the DataLoader is
        made, rather than into the new DataLoader.

        Raises ValueError for a state of another dataset, plan, seed or
        format version, naming what differs.
        """
        epoch, stages = _state.check(state, self._kind, self._ident(), repr(self))
        self.epoch = epoch
        self.start = 0
        self._pending = stages
        self._live = None

    def _open(self, rank: int, world: int, worker: int, workers: int, stages: list[dict[str, Any]]) -> Any:
        ds = self._dataset()
        if stages:
            return _native.resumed_epoch(
                ds, self.plan, self.seed, self.epoch, self.buffer,
                rank, world, worker, workers, self.even, _stage_args(stages), self.prefetch,
            )
        return ds.epoch(
            self.plan,
            seed=self.seed,
            epoch=self.epoch,
            buffer=self.buffer,
            rank=rank,
            world_size=world,
            worker=worker,
            num_workers=workers,
            even=self.even,
            start=self._start_for(worker, workers),
            prefetch=self.prefetch,
        )

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

    def _start_for(self, worker: int, workers: int) -> int:
        if isinstance(self.start, int):
            return self.start
        if len(self.start) != workers:
            # Offsets of another split of the partition would skip samples
            # of one worker and repeat those of another.
            raise ValueError(
                f"start holds {len(self.start)} offsets, one per worker of the run that saved them, "
                f"and this iterator is worker {worker} of {workers}: resume with the same num_workers"
            )
        return self.start[worker]

    def worker_offsets(self, batches: int, batch_size: int, num_workers: int) -> list[int]:
        """:func:`worker_offsets` with this rank's workers' lengths per epoch:
        exact to the epoch's last batch. ``batches`` counts the batches since
        this iterator's ``start`` (since the epoch began when it is 0): a
        resumed DataLoader starts its turns at worker 0 again, over what each
        worker has left. Pass the result as ``start=``."""
        rank, world = self.rank_world()
        ds = self._dataset()
        lengths = [
            ds.partition_len(rank=rank, world_size=world, worker=w, num_workers=num_workers, even=self.even)
            for w in range(num_workers)
        ]
        start = [self.start] * num_workers if isinstance(self.start, int) else list(self.start)
        if len(start) != num_workers:
            raise ValueError(f"start holds {len(start)} offsets, not one per worker of {num_workers}")
        left = [max(n - k, 0) for n, k in zip(lengths, start)]
        more = worker_offsets(batches, batch_size, num_workers, left)
        return [k + m for k, m in zip(start, more)]

    def __iter__(self) -> Iterator[Any]:
        rank, world = self.rank_world()
        worker, workers = self.worker_split()
        # A loaded state resumes the next iteration only.
        stages, self._pending = (self._pending or []), None
        it = self._open(rank, world, worker, workers, stages)
        self._live = (it, stages, (world, workers, self.even, rank, worker))
        return it

    def __len__(self) -> int:
        """Samples this rank yields per epoch (all its workers together)."""
        rank, world = self.rank_world()
        return self._dataset().partition_len(rank=rank, world_size=world, even=self.even)

    def __repr__(self) -> str:
        return f"bale.IterableDataset({self.path!r}, plan={self.plan!r}, seed={self.seed}, epoch={self.epoch})"


class Mix(IterableDataset):
    """Several datasets read as one epoch, each a set proportion of it.

    Example::

        mix = bale.Mix([("/data/web", 0.7), ("/data/books", 0.3)], shuffle=True, seed=1)
        loader = torch.utils.data.DataLoader(mix, batch_size=64, num_workers=4, collate_fn=list)
        for epoch in range(10):
            mix.set_epoch(epoch)
            for batch in loader:   # each sample's "__source__" is 0 or 1
                ...

    An epoch holds ``samples`` samples (default: the sources' total, as
    MosaicML Streaming's epoch when its streams have proportions); source
    ``i`` gives ``floor(samples * p_i)`` of them, ``p_i`` its weight over
    the weights' sum, the few left over going to the largest fractions
    (:attr:`counts` says how many). Without ``replacement``, a source gives
    its samples in passes (a random subset each epoch when it gives fewer
    than it has; every sample ``floor`` or ``ceil`` of ``count / size``
    times when more, as MDS's ``repeat``); with ``replacement`` (shuffled
    only) each draw is an independent uniform sample of the source.

    The order is a list of ``(source, index)`` made from ``seed`` and
    ``epoch`` alone, cut by rank and DataLoader worker as
    :class:`IterableDataset` cuts a dataset's epoch, so every rank's share
    holds each source in proportion; it resumes through
    :meth:`state_dict`, at another world size too. ``plan`` is
    ``"sequential"`` (sources in turns, each in order) or ``"shuffled"``.

    Each sample is a dict (as :class:`Dataset` gives it) with
    ``"__source__"``, the index of its source in ``sources``, and its
    ``__index__`` in that source. ``classes``: ``"per_source"`` (default)
    keeps each source's ``cls``; ``"merged"`` maps them onto one list,
    the sources' class names in order of first appearance
    (:attr:`classes`); a list of names maps onto that list (every source's
    names must be in it). Mapped, a sample's label that is not one of its
    source's class names is a ValueError naming the source and the label.

    Other arguments as :class:`IterableDataset`, for every source.
    """

    _kind = "Mix"

    def __init__(
        self,
        sources: Sequence[tuple[str | os.PathLike[str], float]],
        *,
        samples: int | None = None,
        replacement: bool = False,
        shuffle: bool = False,
        seed: int = 0,
        epoch: int = 0,
        plan: str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        worker: int | None = None,
        num_workers: int | None = None,
        even: bool = False,
        classes: str | Sequence[str] = "per_source",
        fields: Sequence[str] | None = None,
        decode: None | str | Callable[[str, Any], Any] = None,
        verify_on_read: bool = False,
        backing: str = "mmap",
        read_around: str = "auto",
        prefetch: int = 1,
        storage_options: Mapping[str, str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
    ) -> None:
        _register_with_torch()
        if isinstance(sources, (str, bytes)) or not sources:
            raise ValueError("sources must be a non-empty list of (path, weight) pairs")
        pairs = []
        for item in sources:
            if isinstance(item, (str, bytes, os.PathLike)) or len(item) != 2:
                raise ValueError(f"each source is a (path, weight) pair, not {item!r}")
            path, weight = item
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) and type(weight).__module__ != "numpy":
                raise TypeError(f"the weight of {path!r} must be a number, not {weight!r}")
            pairs.append((os.fspath(path), float(weight)))
        if plan is None:
            plan = "shuffled" if _flag(shuffle, "shuffle") else "sequential"
        if plan not in ("sequential", "shuffled"):
            raise ValueError(f"a Mix's plan is 'sequential' or 'shuffled', not {plan!r}")
        if fields is not None and isinstance(fields, str):
            raise ValueError("a Mix yields dicts: give fields as a list of names")
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if (worker is None) != (num_workers is None):
            raise ValueError("give both worker and num_workers, or neither")
        if world_size is not None:
            world_size = _whole(world_size, "world_size", 1)
            rank = _whole(rank, "rank", 0, world_size - 1)
        if num_workers is not None:
            num_workers = _whole(num_workers, "num_workers", 1)
            worker = _whole(worker, "worker", 0, num_workers - 1)
        self.sources = [p for p, _ in pairs]
        self.weights = [w for _, w in pairs]
        self.samples = None if samples is None else _whole(samples, "samples")
        self.replacement = _flag(replacement, "replacement")
        if self.replacement and plan != "shuffled":
            raise ValueError("replacement=True draws at random: give shuffle=True")
        self.path = self.sources[0]
        self.plan = plan
        self.seed, self.epoch = _whole(seed, "seed"), _whole(epoch, "epoch")
        self.buffer = 0
        self.rank, self.world_size = rank, world_size
        self.worker, self.num_workers = worker, num_workers
        self.even = _flag(even, "even")
        self.start = 0
        self.fields = None if fields is None else list(fields)
        self.as_tuple = False
        self.decode = decode
        self.verify_on_read = verify_on_read
        self.backing = backing
        self.read_around = read_around
        self.prefetch = _whole(prefetch, "prefetch", 0, _MAX_PREFETCH_THREADS)
        self.storage_options = None if storage_options is None else dict(storage_options)
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self.cache_limit = cache_limit
        self.class_mode = classes
        self._detected = None
        self._ds = None
        self._mix: Any = None
        self._pending = None
        self._live = None
        mix = self._dataset()  # fail early on bad paths, options or weights
        for name in self.fields or ():
            # A name no source has is a typo (one some sources lack is not).
            if name not in ("__key__", "__index__") and not any(
                name in d.extensions or (name == "cls" and d.classes is not None) for d in self._opened
            ):
                raise ValueError(f"no field {name!r} in any source of the Mix: {self.sources}")
        self._fingerprint = [_native.fingerprint(d) for d in self._opened]
        self._samples = len(mix)
        self._labels, self.classes = _class_maps(self.sources, [d.classes for d in self._opened], classes)

    def _dataset(self) -> Any:  # type: ignore[override]
        if self._mix is None:
            self._opened = [
                Dataset(
                    p,
                    fields=self.fields,
                    decode=self.decode,
                    verify_on_read=self.verify_on_read,
                    backing=self.backing,
                    read_around=self.read_around,
                    storage_options=self.storage_options,
                    cache_dir=self.cache_dir,
                    cache_limit=self.cache_limit,
                    _any_fields=True,
                )
                for p in self.sources
            ]
            self._mix = _native.MixCounts(self._opened, self.weights, self.samples, self.replacement)
        return self._mix

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_mix"] = None
        state["_opened"] = None
        return state

    @property
    def counts(self) -> list[int]:
        """Samples each source gives per epoch."""
        return list(self._dataset().counts)

    def pairs(self, epoch: int | None = None) -> list[tuple[int, int]]:
        """The epoch's list of ``(source, index)``, in order, before it is cut
        by rank and worker (a list of the epoch's size: for inspection)."""
        e = self.epoch if epoch is None else _whole(epoch, "epoch")
        return self._dataset().pairs(self.plan, self.seed, e)

    def _ident(self) -> dict[str, Any]:
        return {
            "datasets": self._fingerprint,
            "weights": self.weights,
            "samples": self._samples,
            "replacement": self.replacement,
            "plan": self.plan,
            "seed": self.seed,
        }

    def _open(self, rank: int, world: int, worker: int, workers: int, stages: list[dict[str, Any]]) -> Any:
        return self._dataset().epoch(
            self.plan, self.seed, self.epoch, rank, world, worker, workers, self.even,
            _stage_args(stages), self.prefetch, self._labels,
        )

    def _share(self, rank: int, world: int, worker: int, workers: int) -> int:
        return _native.place(self._samples, "sequential", 0, 0, 1, rank, world, worker, workers, self.even, [])[2]

    def worker_offsets(self, batches: int, batch_size: int, num_workers: int) -> list[int]:
        """As :meth:`IterableDataset.worker_offsets`."""
        rank, world = self.rank_world()
        lengths = [self._share(rank, world, w, num_workers) for w in range(num_workers)]
        return worker_offsets(batches, batch_size, num_workers, lengths)

    def __len__(self) -> int:
        """Samples this rank yields per epoch (all its workers together)."""
        rank, world = self.rank_world()
        return self._share(rank, world, 0, 1)

    def __repr__(self) -> str:
        return f"bale.Mix({list(zip(self.sources, self.weights))!r}, plan={self.plan!r}, seed={self.seed}, epoch={self.epoch})"


def _mix_pairs(sources: Any) -> list[tuple[Any, float]]:
    """``(path or Dataset, weight)`` pairs, checked."""
    if not sources:
        raise ValueError("a mix needs at least one (path, weight) pair")
    pairs = []
    for item in sources:
        if isinstance(item, (str, bytes, os.PathLike, Dataset)) or len(item) != 2:
            raise ValueError(f"each source is a (path, weight) pair, not {item!r}")
        path, weight = item
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) and type(weight).__module__ != "numpy":
            raise TypeError(f"the weight of {path!r} must be a number, not {weight!r}")
        pairs.append((path if isinstance(path, Dataset) else os.fspath(path), float(weight)))
    return pairs


def _class_maps(
    sources: Sequence[str], names: Sequence[list[str] | None], mode: str | Sequence[str]
) -> tuple[list[list[int]] | None, list[str] | None]:
    """Per source, each class index's index in the one list ``mode`` asks
    for (None: labels stay per source), and that list."""
    if isinstance(mode, str):
        if mode == "per_source":
            return None, None
        if mode != "merged":
            raise ValueError(f"classes must be 'per_source', 'merged' or a list of class names, not {mode!r}")
        merged: list[str] = []
        for ns in names:
            for n in ns or []:
                if n not in merged:
                    merged.append(n)
        target = merged
    else:
        target = list(mode)
        if len(set(target)) != len(target):
            raise ValueError("classes lists a name twice")
    where = {n: i for i, n in enumerate(target)}
    maps = []
    for src, ns in zip(sources, names):
        missing = [n for n in ns or [] if n not in where]
        if missing:
            raise ValueError(f"the classes of {src!r} are not all in the class list: {missing[:5]!r} missing")
        maps.append([where[n] for n in ns or []])
    return maps, target


def merge_states(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One state from the :meth:`IterableDataset.state_dict` of each
    DataLoader worker of a rank (each holds its own count): what a resume
    at another world size or worker count needs. (A ``StatefulDataLoader``'s
    ``state_dict()`` can be given to :meth:`IterableDataset.load_state_dict`
    as it is: its workers' states are merged there.)"""
    return _state.merge(states)


def _same_cut(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(a[k] == b[k] for k in ("world_size", "num_workers", "even"))


def _stage_args(stages: Sequence[Mapping[str, Any]]) -> list[tuple[int, int, bool, int, list[int | None]]]:
    return [(s["world_size"], s["num_workers"], s["even"], s["rank"], list(s["consumed"])) for s in stages]


#: Options of the native loader a checkpoint need not match: the cut (a
#: resume may change it; each stage of a state records its own), how the
#: data is read, and what the state names itself.
_LOADER_RUNTIME = frozenset({
    "rank", "world_size", "even", "threads", "prefetch", "on_error", "storage_options", "cache_dir",
    "cache_limit", "verify_on_read", "backing", "read_around", "order", "seed", "buffer", "batch_size",
})

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _whole(v: object, name: str, lo: int = 0, hi: int = 2**64 - 1) -> int:
    """``v`` as an int from ``lo`` to ``hi``: ``-1`` is a ValueError naming
    the option (not an OverflowError from the native side), and ``True``
    or ``2.0`` a TypeError; NumPy integers are taken."""
    if isinstance(v, bool):
        raise TypeError(f"{name} must be an int, not {v!r}")
    try:
        n = operator.index(v)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(v).__name__} {v!r}") from None
    if not lo <= n <= hi:
        raise ValueError(f"{name} must be from {lo} to {hi}, not {n}")
    return n


def _flag(v: object, name: str) -> bool:
    """``v`` as a bool: ``True``/``False`` or a NumPy bool; ``1`` or
    ``"yes"`` is a TypeError naming the option."""
    if isinstance(v, bool) or (type(v).__module__ == "numpy" and type(v).__name__ in ("bool", "bool_")):
        return bool(v)
    raise TypeError(f"{name} must be True or False, not {type(v).__name__} {v!r}")


def _reals(v: object, name: str, n: int, what: str) -> tuple[float, ...]:
    """``v`` as ``n`` numbers (``what`` says what they are): a string, a
    mapping, another length or a value that is not a number is refused
    naming the option."""
    bad = f"{name} must be {n} numbers ({what}), not {v!r}"
    if isinstance(v, (str, bytes, Mapping)):
        raise TypeError(bad)
    try:
        items = tuple(v)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(bad) from None
    if len(items) != n:
        raise ValueError(bad)
    out = []
    for x in items:
        if isinstance(x, (bool, str, bytes)):
            raise TypeError(bad)
        try:
            out.append(float(x))
        except (TypeError, ValueError):
            raise TypeError(bad) from None
    return tuple(out)


def _names(v: object, name: str) -> list[str]:
    """A member name or a sequence of them, as a list: one string is one
    name, not its letters."""
    if isinstance(v, str):
        return [v]
    if isinstance(v, (bytes, Mapping)):
        raise TypeError(f"{name} must be a member's name or a list of them, not {v!r}")
    try:
        items = list(v)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{name} must be a member's name or a list of them, not {v!r}") from None
    if not all(isinstance(x, str) for x in items):
        raise TypeError(f"{name} must be a member's name or a list of them, not {v!r}")
    return items


def _pair(v: int | Sequence[int], name: str, lo: int = 1) -> tuple[int, int]:
    """``(height, width)`` of whole pixels, ``lo`` to 2**32 - 1 each: ``5.9``
    is refused, not truncated to 5; NumPy integers are taken, ``True`` is not."""
    bad = ValueError(f"{name} must be a positive int or (height, width) of positive ints, not {v!r}")

    def side(x: object) -> int:
        if isinstance(x, bool):
            raise bad
        try:
            n = operator.index(x)  # type: ignore[arg-type]
        except TypeError:
            raise bad from None
        if not lo <= n <= 2**32 - 1:
            raise bad
        return n

    if isinstance(v, (list, tuple)):
        if len(v) != 2:
            raise bad
        return side(v[0]), side(v[1])
    n = side(v)
    return n, n


#: Pillow's decompression-bomb limit: larger images are refused from their header.
MAX_PIXELS = 178_956_970


def decode_image(
    data: bytes | bytearray | memoryview, ext: str = "jpg", max_pixels: int = MAX_PIXELS
) -> Any:
    """Decodes one image whole, at full scale, to a NumPy ``uint8`` array
    ``(H, W, 3)`` (RGB), with the GIL released: the decoder of :class:`Loader`
    (libjpeg-turbo for JPEG; PNG, WebP; a uint8 ``.npy`` of ``(H, W)``,
    ``(H, W, 1)`` or ``(H, W, 3)`` passes through, grey made RGB). The array
    is writable and owns its memory. ``ext`` names the format, as a
    member's extension does. Raises :class:`FormatError` for damaged or
    truncated bytes, for an image over ``max_pixels`` (refused from its
    header, before its pixels are allocated) and for one the decoder policy
    refuses (a JPEG of more than 100 scans), as the Loader, ``bale verify
    --decode`` and the pack's image stage refuse it; ``ValueError`` for a
    ``max_pixels`` below 0 or of 2**64 or more. Example:
    ``bale.decode_image(ds[0]["jpg"])``.
    """
    import numpy

    raw = data if isinstance(data, bytes) else bytes(data)
    height, width, pixels = _native.decode_image(raw, ext, _whole(max_pixels, "max_pixels"))
    return numpy.frombuffer(pixels, dtype=numpy.uint8).reshape(height, width, 3)


def _augment_args(
    color_jitter: Any,
    auto_augment: str | None,
    random_grayscale: float,
    random_erasing: float,
    erasing_scale: Sequence[float],
    erasing_ratio: Sequence[float],
    erasing_value: float | Sequence[float] | str,
) -> Any:
    """The native loader's ``augment`` argument (None when nothing is asked for)."""
    jitter = None
    if color_jitter is not None:
        if isinstance(color_jitter, (str, bytes)) or not isinstance(color_jitter, Sequence):
            raise ValueError(
                f"color_jitter takes (brightness, contrast, saturation, hue), not {color_jitter!r}"
            )
        jitter = list(color_jitter)
    grey = _reals([random_grayscale], "random_grayscale", 1, "a probability")[0]
    p = _reals([random_erasing], "random_erasing", 1, "a probability")[0]
    erasing = None
    if p > 0:
        if isinstance(erasing_value, str):
            if erasing_value != "random":
                raise ValueError(f'erasing_value takes a number, one per channel or "random", not {erasing_value!r}')
            value = None
        elif isinstance(erasing_value, (int, float)) and not isinstance(erasing_value, bool):
            value = [float(erasing_value)] * 3
        else:
            value = _reals(erasing_value, "erasing_value", 3, "one per channel, or one number")
        erasing = (
            p,
            tuple(_reals(erasing_scale, "erasing_scale", 2, "the least and most share of the area")),
            tuple(_reals(erasing_ratio, "erasing_ratio", 2, "the least and most aspect ratio")),
            value,
        )
    if jitter is None and auto_augment is None and grey == 0 and erasing is None:
        return None
    return (jitter, auto_augment, grey, erasing)


def _mix_args(mixup_alpha: float, cutmix_alpha: float, num_classes: int | None) -> Any:
    """The native loader's ``mix`` argument (None when nothing is asked for);
    checked by the native options."""
    mixup = _reals([mixup_alpha], "mixup_alpha", 1, "the Beta distribution's alpha")[0]
    cutmix = _reals([cutmix_alpha], "cutmix_alpha", 1, "the Beta distribution's alpha")[0]
    if mixup == 0 and cutmix == 0 and num_classes is None:
        return None
    return (mixup, cutmix, 0 if num_classes is None else _whole(num_classes, "num_classes"))


class Loader:
    """Decoded, augmented batches straight from a bale dataset: images, and
    the targets that move with them (masks, boxes, labels).

    Images are decoded, scaled, cropped, padded, flipped and converted in
    native threads (the GIL is released), and batches come out as NumPy
    arrays that ``torch.from_numpy`` takes without a copy: no DataLoader
    workers, no pickling. Every geometric decision is torchvision v2's and
    applies to every target. Example::

        loader = bale.Loader("/data/train", batch_size=64, crop="random_resized",
                             size=224, flip=True, shuffle=True, seed=0)
        for epoch in range(90):
            loader.set_epoch(epoch)
            for images, labels in loader:       # uint8 (64, 224, 224, 3), int64 (64,)
                x = torch.from_numpy(images).cuda(non_blocking=True)
                y = torch.from_numpy(labels).cuda(non_blocking=True)
                ...

    With ``masks``, ``boxes`` or another ``label`` source, each batch is a
    dict: ``{"images", "labels", "masks": {member: (B, H, W)}, "boxes":
    (B, max_boxes, 4) float32, "box_labels": (B, max_boxes) int64 (-1 past
    the count), "box_counts": (B,), "indices": (B,) uint64}`` (keys only for
    what was asked; ``"fields"`` with ``fields=``).

    A list of ``(dataset, weight)`` pairs as ``dataset`` reads a weighted
    mix of them, the epoch :class:`Mix`'s (see "Mixing" in docs/python.md)::

        loader = bale.Loader([("/data/a", 0.7), ("/data/b", 0.3)], batch_size=64,
                             shuffle=True, seed=0, classes="merged")
        for batch in loader:   # a dict: "images", "labels", "sources", "indices"
            ...

    Args:
        dataset: a dataset path (or URL), or a :class:`Dataset`; or a list
            of ``(path or Dataset, weight)`` pairs: a mix, whose batches are
            dicts with ``"sources"`` (B,) int64 (each sample's index in the
            list) and ``"indices"`` in that source. Every dataset of a mix
            must have the image members (and the members named by
            ``masks``, ``boxes``, ``label``) the first one has.
        samples, replacement, classes: of a mix, as :class:`Mix`'s: the
            epoch's length (default: the sources' total), draws with
            replacement (shuffled only), and ``"per_source"`` labels,
            ``"merged"`` or a list of class names to map them onto
            (:attr:`classes`; a label outside its source's class names is
            then an error naming the source).
        batch_size: samples per batch.
        resize: the scale stage, before the crop: ``N`` (torchvision's
            ``Resize(N)``: the shorter side to ``N``), ``(MIN, MAX)``
            (torchvision v2's ``RandomResize(MIN, MAX)``: the shorter side to
            a size drawn from ``MIN`` to ``MAX - 1``) or ``0`` for none; by
            default none, except ``size * 256 / 224`` for ``crop="center"``
            without ``scale_jitter``.
        scale_jitter: ``(target_size, (lo, hi))``: torchvision v2's
            ``ScaleJitter(target_size, scale_range)`` as the scale stage
            (``target_size`` in torchvision's order: its first value bounds
            the width).
        crop: ``"random_resized"`` (torchvision's ``RandomResizedCrop(size,
            scale, ratio)``), ``"center"`` (``CenterCrop(size)``, padded
            where the image is smaller), ``"resize"`` (the whole image to
            ``size``), ``"random"`` (the segmentation recipe: padded on the
            right and bottom to ``size`` where smaller, then
            ``RandomCrop(size)``) or ``"fixed_size"`` (the detection recipe's
            ``FixedSizeCrop(size)``).
        size: output size, an int or ``(height, width)``.
        scale, ratio: of ``"random_resized"``, as torchvision's.
        flip, vflip: flip each sample left-right, upside down, with
            probability 1/2.
        fill: the padding's colour (an int or 3); ``mask_fill`` the masks'
            (default 255, the ignore index).
        shuffle: a random order per epoch (``order="shuffled"``); default:
            shard by shard (``"sequential"``). ``order`` may also be
            ``"shard_shuffled"`` (shards in random order, samples mixed in
            ``buffer`` samples; not for a mix).
        seed: seeds the order and every decision: each sample's depend on
            ``(seed, epoch, sample index)`` only.
        rank, world_size: this process's share of a distributed run (default:
            from ``torch.distributed``, else ``RANK``/``WORLD_SIZE``, else all).
        even: every rank gets the same number of samples (a few repeat).
        drop_last: leave out a short last batch.
        channels_first: images ``(B, 3, H, W)`` instead of ``(B, H, W, 3)``.
        dtype: ``"uint8"`` (default), ``"float32"`` or ``"float16"``;
            floats are ``(x / 255 - mean) / std``.
        mean, std: per channel, for float outputs (ImageNet's by default).
        threads: decoding threads (0: one per core).
        prefetch: batches decoded ahead of the one you hold.
        on_error: ``"fail"`` (a damaged sample raises, naming it) or
            ``"skip"`` (the sample is left out of its batch, counted in
            :attr:`skipped` and reported with ``warnings.warn``). A target
            that does not fit its image (a mask of another size, a box
            outside it or not a number, a label that does not parse) is a
            damaged sample.
        image: the member holding the image, or a list: each sample's image
            is the first of them it has, matched regardless of case
            (default: ``jpg``, ``jpeg``, ``png``, ``webp``, ``npy``).
        masks: a member, or a list, holding masks of the image's size:
            one-channel PNGs (8- or 16-bit grey; a palette PNG's indices) or
            ``.npy`` ``uint8``/``uint16`` ``(H, W)``; resized nearest, as
            torchvision resizes a ``tv_tensors.Mask``.
        mask_dtype: ``"uint8"`` (default) or ``"int64"``.
        boxes: the member holding boxes (``x1, y1, x2, y2`` in the image's
            pixels): JSON ``{"boxes": [...], "labels": [...]}`` or a bare
            list, or ``.npy`` ``(N, 4)``; moved, clipped, and dropped with
            their labels as ``SanitizeBoundingBoxes(min_box_size,
            min_box_area)`` drops them.
        box_labels: the member with the boxes' classes when the boxes' own
            has none (JSON list or ``.npy`` ``(N,)``).
        max_boxes: boxes per sample in the padded arrays (a sample keeping
            more is a damaged sample).
        label: ``"cls"`` (the ``.cls`` member), ``"json:MEMBER"``,
            ``"json:MEMBER:KEY"``, ``"npy:MEMBER"`` (multi-label vectors,
            ``(B, C)`` float32) or None.
        fields: other members to pass through: the loop then gets
            ``(images, labels, fields)`` with ``fields[name]`` a list of
            ``bytes`` (``None`` where a sample lacks it).
        storage_options, cache_dir, cache_limit: for a dataset in object
            storage, as :class:`Dataset`; by default those of a ``Dataset``
            given as ``dataset``.
        verify_on_read, backing: as :class:`Dataset` (checksums on every
            read; ``"pread"`` for errors instead of ``SIGBUS`` when another
            program may truncate the files); by default those of a
            ``Dataset`` given as ``dataset``, else off and ``"mmap"``.
        dct_scaling: decode a JPEG at 1/2, 1/4 or 1/8 scale when its crop is
            at least that many times the output.
        max_pixels: an image larger than this (a decompression bomb) is
            refused from its header, as a damaged image (``on_error``
            applies); Pillow's limit by default.
        color_jitter: ``ColorJitter(brightness, contrast, saturation,
            hue)``: four values, each a number or a ``(min, max)`` pair.
        auto_augment: ``"trivial_wide"`` (``TrivialAugmentWide()``),
            ``"rand"`` (``RandAugment()``) or ``"imagenet"``
            (``AutoAugment(IMAGENET)``); refused with masks or boxes.
        random_grayscale: ``RandomGrayscale(p)``'s probability.
        random_erasing, erasing_scale, erasing_ratio, erasing_value:
            ``RandomErasing(p, scale, ratio, value)`` on the output (in its
            units: normalised for float outputs); ``erasing_value="random"``
            is normal noise per element (for ``uint8`` outputs the pixels
            that ``mean`` and ``std`` normalise into it).
            The pixel stages run in that order after the geometry; see
            docs/loader.md's Augmentations.
        mixup_alpha, cutmix_alpha, num_classes: ``MixUp(alpha,
            num_classes)`` and ``CutMix(alpha, num_classes)`` per batch, the
            last stage (0 leaves one out; with both, one is chosen per batch
            with probability 1/2, as ``RandomChoice``): each sample is mixed
            with the one before it in the batch, and the labels become soft
            labels ``(B, num_classes)`` float32 (``.npy`` label vectors
            are mixed as they are). Refused with masks or boxes;
            :meth:`batch_params` says what each batch got.

    The options are checked when the loader is made (``ValueError`` naming
    the option), the batches in flight included: ``prefetch + 1`` batches
    of images, masks and boxes must fit 8 GiB.

    Memory: ``prefetch + 1`` batches in flight, reused once the arrays you
    received are freed, and per thread one decoded crop and one mask row.

    Checkpoints: :meth:`state_dict` and :meth:`load_state_dict` (what
    Lightning's ``Trainer`` calls) save and restore the place in the epoch
    after the batches yielded, also at another world size
    (docs/python.md, "Checkpointing" and "Elastic resume").
    """

    def __init__(
        self,
        dataset: str | os.PathLike[str] | Dataset | Sequence[tuple[str | os.PathLike[str] | Dataset, float]],
        batch_size: int = 64,
        *,
        samples: int | None = None,
        replacement: bool = False,
        classes: str | Sequence[str] = "per_source",
        crop: str = "random_resized",
        size: int | Sequence[int] = 224,
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
        resize: int | Sequence[int] | None = None,
        scale_jitter: tuple[Sequence[int], Sequence[float]] | None = None,
        flip: bool = False,
        vflip: bool = False,
        fill: int | Sequence[int] = 0,
        mask_fill: int = 255,
        shuffle: bool = False,
        order: str | None = None,
        buffer: int = 1024,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        even: bool = False,
        drop_last: bool = False,
        channels_first: bool = False,
        dtype: str = "uint8",
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        threads: int = 0,
        prefetch: int = 2,
        on_error: str = "fail",
        image: str | Sequence[str] | None = None,
        masks: str | Sequence[str] = (),
        mask_dtype: str = "uint8",
        boxes: str | None = None,
        box_labels: str | None = None,
        max_boxes: int = 100,
        min_box_size: float = 1.0,
        min_box_area: float = 1.0,
        label: str | None = "cls",
        fields: str | Sequence[str] = (),
        dct_scaling: bool = True,
        max_pixels: int = MAX_PIXELS,
        storage_options: Mapping[str, str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        verify_on_read: bool | None = None,
        backing: str | None = None,
        color_jitter: Sequence[float | Sequence[float]] | None = None,
        auto_augment: str | None = None,
        random_grayscale: float = 0.0,
        random_erasing: float = 0.0,
        erasing_scale: Sequence[float] = (0.02, 0.33),
        erasing_ratio: Sequence[float] = (0.3, 3.3),
        erasing_value: float | Sequence[float] | str = 0.0,
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        num_classes: int | None = None,
    ) -> None:
        import numpy  # noqa: F401  (the batches are NumPy arrays)

        read_around = "auto"
        pairs = None
        if isinstance(dataset, (list, tuple)):
            pairs = _mix_pairs(dataset)
            # The first source's path names the loader; each is opened below.
            dataset = pairs[0][0]
        elif samples is not None or replacement or classes != "per_source":
            raise ValueError("samples, replacement and classes are a mix's: give dataset as a list of (path, weight) pairs")
        if isinstance(dataset, Dataset):
            path = dataset.path
            # The dataset brings how it reads along: checksums, backing, and
            # in object storage its options and cache.
            _, opened_with = dataset.__getnewargs_ex__()
            if storage_options is None:
                storage_options = opened_with.get("storage_options")
            if cache_dir is None and cache_limit is None:
                cache_dir, cache_limit = opened_with.get("cache_dir"), opened_with.get("cache_limit")
            if verify_on_read is None:
                verify_on_read = opened_with.get("verify_on_read", False)
            if backing is None:
                backing = opened_with.get("backing", "mmap")
            read_around = opened_with.get("read_around", "auto")
        else:
            path = os.fspath(dataset)
        if (rank is None) != (world_size is None):
            raise ValueError("give both rank and world_size, or neither")
        if rank is None:
            rank, world_size = _dist_rank_world() or (None, None)  # type: ignore[assignment]
        if rank is None:
            r, w = _env_int("RANK"), _env_int("WORLD_SIZE")
            if (r is None) != (w is None):
                raise ValueError("RANK and WORLD_SIZE must be set together")
            rank, world_size = (r, w) if r is not None and w is not None else (0, 1)
        if order is None:
            order = "shuffled" if _flag(shuffle, "shuffle") else "sequential"
        # Only conversions to what the native types hold happen here (a
        # negative count is a ValueError naming it, not an OverflowError;
        # 2.0 or True a TypeError): every option is checked, once, by the
        # native loader's options.
        height, width = _pair(size, "size", 0)
        if resize is None:
            resize = round(min(height, width) * 256 / 224) if crop == "center" and scale_jitter is None else 0
        u32 = 2**32 - 1
        if isinstance(resize, (list, tuple)):
            if len(resize) != 2:
                raise ValueError(f"resize must be a side or (min, max), not {resize!r}")
            resize_arg = [_whole(resize[0], "resize", 0, u32), _whole(resize[1], "resize", 0, u32)]
        else:
            resize_arg = [_whole(resize, "resize", 0, u32)]
        jitter = None
        if scale_jitter is not None:
            try:
                target, bounds = scale_jitter  # type: ignore[misc]
            except (TypeError, ValueError):
                raise TypeError(f"scale_jitter must be (target_size, (lo, hi)), not {scale_jitter!r}") from None
            jitter = (_pair(target, "scale_jitter", 0), _reals(bounds, "scale_jitter", 2, "the scale range"))
        if isinstance(fill, (list, tuple)):
            if len(fill) != 3:
                raise ValueError(f"fill must be an int or 3 ints (R, G, B), not {fill!r}")
            fill_rgb = [_whole(v, "fill", 0, 255) for v in fill]
        else:
            fill_rgb = [_whole(fill, "fill", 0, 255)] * 3
        self.path = path
        self.batch_size = _whole(batch_size, "batch_size")
        self.epoch = 0
        self.start = 0
        self.skipped = 0
        #: Samples of the epoch read so far, skipped ones included, counted
        #: from its start: what :meth:`resume` takes to go on after the batch
        #: last yielded.
        self.position = 0
        self._even = _flag(even, "even")
        # One name is one member, not its letters.
        self._fields = _names(fields, "fields")
        masks_list = _names(masks, "masks")
        self._targets = bool(masks_list) or boxes is not None
        self._dict = self._targets or label != "cls"
        options = dict(
            batch_size=self.batch_size,
            size=(height, width),
            crop=crop,
            scale=_reals(scale, "scale", 2, "the least and most of the area to crop"),
            ratio=_reals(ratio, "ratio", 2, "the least and most aspect ratio of the crop"),
            resize=resize_arg,
            scale_jitter=jitter,
            flip=_flag(flip, "flip"),
            vflip=_flag(vflip, "vflip"),
            fill=fill_rgb,
            mask_fill=_whole(mask_fill, "mask_fill", -(2**63), 2**63 - 1),
            channels_first=_flag(channels_first, "channels_first"),
            dtype=dtype,
            mean=_reals(mean, "mean", 3, "one per channel"),
            std=_reals(std, "std", 3, "one per channel"),
            order=order,
            buffer=_whole(buffer, "buffer"),
            seed=_whole(seed, "seed"),
            rank=_whole(rank, "rank"),
            world_size=_whole(world_size, "world_size"),
            even=self._even,
            threads=(threads := _whole(threads, "threads")),
            prefetch=_whole(prefetch, "prefetch"),
            on_error=on_error,
            image=[] if image is None else _names(image, "image"),
            masks=masks_list,
            mask_dtype=mask_dtype,
            boxes=boxes,
            box_labels=box_labels,
            max_boxes=_whole(max_boxes, "max_boxes"),
            min_box_size=_reals([min_box_size], "min_box_size", 1, "a number of pixels")[0],
            min_box_area=_reals([min_box_area], "min_box_area", 1, "a number of pixels")[0],
            label=label,
            fields=self._fields,
            drop_last=_flag(drop_last, "drop_last"),
            dct_scaling=_flag(dct_scaling, "dct_scaling"),
            max_pixels=_whole(max_pixels, "max_pixels"),
            storage_options=None if storage_options is None else dict(storage_options),
            cache_dir=None if cache_dir is None else os.fspath(cache_dir),
            cache_limit=None if cache_limit is None else _whole(cache_limit, "cache_limit"),
            verify_on_read=bool(verify_on_read),
            backing=backing or "mmap",
            read_around=read_around,
            augment=_augment_args(
                color_jitter, auto_augment, random_grayscale, random_erasing,
                erasing_scale, erasing_ratio, erasing_value,
            ),
            mix=_mix_args(mixup_alpha, cutmix_alpha, num_classes),
        )
        #: A mix's datasets, weights and class list (None: one dataset, or
        #: labels per source).
        self.sources: list[str] | None = None
        self.weights: list[float] | None = None
        self.classes: list[str] | None = None
        settings = {k: v for k, v in options.items() if k not in _LOADER_RUNTIME}
        if pairs is not None:
            opened = [
                d if isinstance(d, Dataset) else Dataset(
                    d, verify_on_read=options["verify_on_read"], backing=options["backing"],
                    read_around=read_around, storage_options=options["storage_options"],
                    cache_dir=options["cache_dir"], cache_limit=options["cache_limit"], _any_fields=True,
                )
                for d, _ in pairs
            ]
            self.sources = [d.path for d in opened]
            self.weights = [w for _, w in pairs]
            if classes != "per_source" and label != "cls":
                raise ValueError(f"classes maps the sources' cls labels onto one list: it needs label='cls', not {label!r}")
            maps, self.classes = _class_maps(self.sources, [d.classes for d in opened], classes)
            replacement = _flag(replacement, "replacement")
            mix_samples = None if samples is None else _whole(samples, "samples")
            self._native = _native.Loader(
                path, **options, sources=(opened, self.weights, mix_samples, replacement, maps),
            )
            settings["classes"] = self.classes
            # What a checkpoint of a mix must match: its datasets, weights,
            # epoch length and draws, as a bale.Mix's state.
            ident: dict[str, Any] = {
                "datasets": [_native.fingerprint(d) for d in opened],
                "weights": self.weights,
                "samples": self._native.dataset_len,
                "replacement": replacement,
            }
            self._dict = True
        else:
            self._native = _native.Loader(path, **options)
            ident = {"dataset": self._native.fingerprint, "samples": self._native.dataset_len}
        self.rank, self.world_size = rank, world_size
        # What a checkpoint must match: the dataset, the order, the batch
        # size, and every option that changes what a batch holds (not the
        # world size, which a resume may change, nor how it is read).
        self._ident_: dict[str, Any] = {
            **ident,
            "plan": order,
            "seed": options["seed"],
            "buffer": options["buffer"],
            "batch_size": self.batch_size,
            "augment": hashlib.sha256(json.dumps(settings, sort_keys=True, default=repr).encode()).hexdigest()[:16],
        }
        # A loaded state, for the next iteration; the stages the current
        # iteration resumed (None: no iteration since set_epoch or a load).
        self._pending: list[dict[str, Any]] | None = None
        self._live: list[dict[str, Any]] | None = None
        #: Decoding threads (``threads=0`` resolved to the cores this process may use).
        self.threads = threads if threads > 0 else len(os.sched_getaffinity(0))

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next iteration reads (and clears ``start`` and
        a loaded state: a resumed epoch is resumed once)."""
        self.epoch = _whole(epoch, "epoch")
        self.start = 0
        self._pending = None
        self._live = None

    def resume(self, epoch: int, start: int) -> None:
        """The next iteration reads ``epoch`` from its ``start``-th sample on
        (:attr:`position` when the checkpoint was taken; batches seen so far
        times the batch size when no image was skipped)."""
        epoch, start = _whole(epoch, "epoch"), _whole(start, "start")
        self.epoch, self.start = epoch, start
        self._pending = None
        self._live = None

    def state_dict(self) -> dict[str, Any]:
        """The place of this loader in its epoch, as a small JSON-serialisable dict.

        It counts the samples of the batches yielded to you (the batches
        decoded ahead are not counted): taken after the ``k``-th batch of
        the epoch, a resume yields batch ``k + 1`` on. Its size does not
        grow with the dataset (about 300 bytes of JSON). Pass it to
        :meth:`load_state_dict` to resume: the same batches follow as in
        an uninterrupted run (the same samples and pixels), or, at another
        world size, every sample the epoch had left, once, across the
        ranks (the state of rank 0 serves every rank: ranks step in
        lockstep). The format is :class:`IterableDataset`'s, with
        ``num_workers`` 1 (docs/python.md, "Checkpointing").
        """
        stages = [dict(s) for s in (self._pending or [])]
        if self._live is not None:
            stages = [dict(s) for s in self._live]
            now = _state.stage(self.world_size, 1, self._even, self.rank, [self.position])
            if stages and _same_cut(stages[-1], now):
                stages[-1] = now
            else:
                stages.append(now)
        elif self._pending is None and self.start:
            stages = [_state.stage(self.world_size, 1, self._even, self.rank, [self.start])]
        return _state.make("Loader", self._ident_, self.epoch, stages)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resumes the epoch a :meth:`state_dict` was taken in, at the next
        iteration (what Lightning's ``Trainer`` calls on a resume).

        Raises ValueError for a state of another dataset, order, seed,
        batch size, augmentation settings or format version, naming what
        differs.
        """
        epoch, stages = _state.check(state, "Loader", self._ident_, repr(self))
        self.epoch = epoch
        self.start = 0
        self._pending = stages
        self._live = None

    def __len__(self) -> int:
        """Batches per epoch."""
        return len(self._native)

    @property
    def image_member(self) -> str:
        """The member images are taken from: the first of :attr:`image_members`
        the dataset has (regardless of case)."""
        fields = self._native.dataset_fields
        for want in self._native.image_members:
            for f in fields:
                if f.lower() == want.lower():
                    return f
        return self._native.image_members[0]

    @property
    def image_members(self) -> list[str]:
        """The members an image may be in, in order of preference."""
        return self._native.image_members

    @property
    def counts(self) -> list[int] | None:
        """Samples each source of a mix gives per epoch (None: one dataset)."""
        return self._native.mix_counts

    def sample_params(self, index: int, epoch: int | None = None, source: int = 0) -> dict[str, Any]:
        """Every decision for sample ``index`` (of epoch ``epoch``, by default
        the current one), as torchvision's functional transforms take them:
        ``top``, ``left``, ``height``, ``width`` (the crop in the source
        image's pixels, for ``resized_crop``), ``image_size`` and
        ``scaled_size`` (height, width before and after the scale stage),
        ``crop`` (top, left, height, width in the scaled image's pixels,
        past its edges where padded), ``padding`` (left, top, right, bottom
        pixels of fill), ``size`` (the output's), ``flip`` and ``vflip``;
        then the pixel stages: ``color_jitter`` (None, or ``order``, the
        components' order as ``ColorJitter``'s ``fn_idx``, 0 brightness to 3
        hue, and each factor or None), ``augment`` (the auto-augment ops
        applied, ``(name, magnitude)`` as torchvision's
        ``_apply_image_or_video_transform`` takes them), ``grayscale`` and
        ``erase`` (None, or the erased box's top, left, height, width).
        An index outside the dataset (a negative one too) is an IndexError.
        For a mix, ``index`` is of source ``source`` (a batch's
        ``"indices"`` and ``"sources"``): its decisions are those a loader
        over that dataset alone, with the same options, makes for it."""
        if isinstance(index, bool) or not isinstance(index, int) and not hasattr(index, "__index__"):
            raise TypeError(f"index must be an int, not {type(index).__name__} {index!r}")
        i = operator.index(index)
        if i < 0 or i >= 2**64:
            raise IndexError(f"sample index {i} is not in the dataset (indices start at 0)")
        e = self.epoch if epoch is None else _whole(epoch, "epoch")
        return self._native.sample_params(e, i, _whole(source, "source"))

    def batch_params(self, batch: int, epoch: int | None = None) -> dict[str, Any] | None:
        """The mixing decisions of batch ``batch`` (of epoch ``epoch``, by
        default the current one; counted from the epoch's start, so a run
        resumed at sample ``start`` begins with batch ``start //
        batch_size``), or None without ``mixup_alpha``/``cutmix_alpha``:
        ``mix`` (``"MixUp"`` or ``"CutMix"``), ``lam`` (drawn from
        ``Beta(alpha, alpha)``), ``label_lam`` (the labels' and MixUp's
        pixels' lambda: CutMix's corrected by its box, torchvision's
        ``lam_adjusted``), CutMix's ``center`` (x, y) and ``box`` (x1, y1,
        x2, y2; None for MixUp), and ``partners``: sample ``k``'s partner is
        ``partners[k]``, the one before it (the batch rolled by one) in the
        batch as it comes out. They depend on ``(seed, epoch, batch)`` only.
        A batch outside the epoch is an IndexError."""
        b = _whole(batch, "batch")
        if b >= len(self):
            raise IndexError(f"batch {b} is not in the epoch ({len(self)} batches)")
        e = self.epoch if epoch is None else _whole(epoch, "epoch")
        p = self._native.batch_params(e, b)
        if p is not None:
            n = min(self.batch_size, self._native.samples_per_epoch() - b * self.batch_size)
            p["partners"] = [(k - 1) % n for k in range(n)]
        return p

    def __iter__(self) -> Iterator[Any]:
        import numpy
        import warnings

        def array(a: Any) -> Any:
            buf, shape, dtype = a
            return numpy.frombuffer(buf, dtype=dtype).reshape(shape)

        # A loaded state resumes this iteration only.
        stages, self._pending = (self._pending or []), None
        if stages:
            batches, _, start, _ = self._native.epoch_resumed(self.epoch, _stage_args(stages))
        else:
            batches, start = self._native.epoch(self.epoch, self.start), self.start
        self._live = stages
        self.position = start
        for images, labels, indices, masks, boxes, extra, skipped, sources in batches:
            for index, key, error, source in skipped:
                self.skipped += 1
                where = f"sample {index}" if sources is None else f"sample {index} of source {source}"
                warnings.warn(f"bale.Loader skipped {where} ({key!r}): {error}", stacklevel=2)
            idx = numpy.frombuffer(indices, dtype=numpy.uint64)
            self.position += len(idx) + len(skipped)
            if len(idx) == 0 and not self._even:
                # Every sample of the batch skipped: an empty batch would
                # make a mean loss NaN; the next batch follows. With
                # `even`, every rank takes as many steps: it is yielded.
                continue
            self.last_indices = idx
            if not self._dict:
                if self._fields:
                    yield array(images), array(labels), extra
                else:
                    yield array(images), array(labels)
                continue
            out: dict[str, Any] = {"images": array(images)}
            if labels is not None:
                out["labels"] = array(labels)
            if masks:
                out["masks"] = {name: array(m) for name, m in masks}
            if boxes is not None:
                out["boxes"], out["box_labels"], out["box_counts"] = (array(b) for b in boxes)
            out["indices"] = idx
            if sources is not None:
                out["sources"] = numpy.frombuffer(sources, dtype=numpy.int64)
            if self._fields:
                out["fields"] = extra
            yield out

    def into(self, images: Any, labels: Any, *, wait: Callable[[int], Any] | None = None) -> Iterator[Any]:
        """Iterates the epoch writing each batch into arrays you give (e.g.
        views of pinned host memory reused across steps). Costs one copy of
        each batch into your buffer. ``images`` must have the shape and dtype
        of a full batch, ``labels`` those of its labels: shape
        ``(batch_size,)`` and dtype int64 (``(batch_size, C)`` float32 for
        ``.npy`` labels); another dtype is refused, not cast (an int32 buffer
        would truncate labels of 2**31 and more).

        Given one array each, it yields the number of images written (the
        last batch may be short). Given lists of arrays (a ring of buffers,
        ``images[i]`` with ``labels[i]``), batch ``k`` goes into buffer
        ``i = k % len(images)`` and it yields ``(i, n)``.

        A copy you start from a buffer without waiting for it (``.cuda(
        non_blocking=True)``) still reads the buffer after the loop has
        asked for the next batch: ``wait(i)`` is called before buffer ``i``
        is written again, and must return only once what you started from
        it is done (e.g. ``events[i].synchronize()`` of a CUDA event
        recorded after the copy). With a ring of two, the next batch is
        written while the last one is copied::

            images = [torch.empty((64, 224, 224, 3), dtype=torch.uint8).pin_memory() for _ in range(2)]
            labels = [torch.empty(64, dtype=torch.int64).pin_memory() for _ in range(2)]
            copied = [torch.cuda.Event() for _ in range(2)]
            ring = loader.into([t.numpy() for t in images], [t.numpy() for t in labels],
                               wait=lambda i: copied[i].synchronize())
            for i, n in ring:
                x = images[i][:n].cuda(non_blocking=True)
                y = labels[i][:n].cuda(non_blocking=True)
                copied[i].record()

        A loader with masks or boxes yields dicts: ``into`` refuses it.
        """
        import numpy

        if self._targets:
            raise ValueError("into() copies images and labels; this loader's batches also hold masks or boxes")
        ring = isinstance(images, (list, tuple))
        if ring != isinstance(labels, (list, tuple)):
            raise ValueError("into() takes one array each for images and labels, or a list of each")
        image_bufs = list(images) if ring else [images]
        label_bufs = list(labels) if ring else [labels]
        if not image_bufs or len(image_bufs) != len(label_bufs):
            raise ValueError(
                f"into() needs as many label buffers as image buffers, and at least one"
                f" (got {len(image_bufs)} and {len(label_bufs)})"
            )
        if wait is not None and not callable(wait):
            raise TypeError(f"wait must be callable with a buffer's index, not {type(wait).__name__}")
        written = [False] * len(image_bufs)
        for step, batch in enumerate(self):
            i = step % len(image_bufs)
            out, out_labels = image_bufs[i], label_bufs[i]
            if isinstance(batch, dict):
                got, got_labels = batch["images"], batch.get("labels")
            else:
                got, got_labels = batch[0], batch[1]
            n = len(got)
            if out.shape[1:] != got.shape[1:] or out.dtype != got.dtype or len(out) < n:
                raise ValueError(
                    f"images must be {got.dtype} of shape ({self.batch_size}, {', '.join(map(str, got.shape[1:]))}),"
                    f" not {out.dtype} {tuple(out.shape)}"
                )
            if got_labels is not None and (
                out_labels.shape[1:] != got_labels.shape[1:] or out_labels.dtype != got_labels.dtype or len(out_labels) < n
            ):
                want = ", ".join(map(str, (self.batch_size,) + got_labels.shape[1:]))
                raise ValueError(
                    f"labels must be {got_labels.dtype} of shape ({want}), not {out_labels.dtype} {tuple(out_labels.shape)}"
                )
            # What the caller started from this buffer (a copy in flight)
            # is over before the buffer is written again.
            if written[i] and wait is not None:
                wait(i)
            if got_labels is not None:
                numpy.copyto(out_labels[:n], got_labels)
            numpy.copyto(out[:n], got)
            written[i] = True
            yield (i, n) if ring else n

    def __repr__(self) -> str:
        what = self.path if self.sources is None else list(zip(self.sources, self.weights or []))
        return f"bale.Loader({what!r}, batch_size={self.batch_size}, epoch={self.epoch})"


# torch imported before bale costs nothing more to register with.
if "torch" in sys.modules:
    _register_with_torch()
