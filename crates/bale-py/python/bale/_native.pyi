"""Type stubs of bale._native, the Rust extension behind the bale package."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

__version__: str
MAX_PREFETCH_THREADS: int

Sample = Any
"""By default a dict ``{"__key__": str, "__index__": int, "cls": int, "<ext>": bytes |
numpy.ndarray}``; the field's value alone when ``fields`` is one string; a tuple of the
``fields`` values with ``as_tuple=True``."""

class BaleError(Exception):
    """Base class of bale's own errors."""

class FormatError(BaleError):
    """Bad bytes on disk (manifest, index, shard, checksum, .npy header); names the file and offset."""

class Dataset:
    """Map-style random access to a bale dataset.

    ``ds[i]`` is a dict ``{"__key__": str, "__index__": int, "cls": int (labelled
    datasets), "<ext>": bytes | numpy.ndarray}``. ``.npy`` fields are read-only
    NumPy arrays viewing the sample's bytes (zero-copy from the page cache with
    ``backing="mmap"`` on tar shards; from the read or decompression buffer
    otherwise); other fields are ``bytes``.

    Example::

        import bale
        from torch.utils.data import DataLoader

        ds = bale.Dataset("/data/train", fields=["jpg", "cls"])
        loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=4,
                            collate_fn=lambda batch: batch)
        for batch in loader:
            labels = [s["cls"] for s in batch]

    Args:
        path: the dataset directory (holding ``bale.json``).
        fields: only these fields (extensions, ``"cls"`` included); default all.
            A single string (``fields="jpg"``) makes each sample that field's value
            alone, not a dict: the cheapest sample to build.
        as_tuple: each sample is a tuple of the ``fields`` values in the order given
            (``"__key__"`` and ``"__index__"`` allowed), as WebDataset's ``to_tuple``;
            a field a sample lacks is None. With a single ``fields`` string or
            ``as_tuple``, a name no sample of the dataset can have is a ValueError.
        decode: ``None`` or ``"numpy"``: ``.npy`` fields as arrays, the rest as
            bytes; ``"bytes"``: every field as bytes; ``"memoryview"``: every
            field as a read-only memoryview of the sample's bytes (no copy);
            a callable ``f(ext, value) -> object`` applied to each field after
            the default decoding.
        verify_on_read: check each member's checksum on every read.
        backing: ``"mmap"`` (default, zero-copy) or ``"pread"`` (a read per
            sample; errors instead of SIGBUS if shards are truncated in place).
        read_around: ``"auto"`` (default: when the shards fit in half of the
            memory available at open, the first cold read in each 8 MiB region
            of a shard fetches the whole region), ``"always"`` or ``"never"``
            (each read fetches exactly its sample).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        FormatError: ``path`` is not a complete, valid bale dataset.
        ValueError: a bad option.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fields: str | Sequence[str] | None = None,
        as_tuple: bool = False,
        decode: None | str | Callable[[str, bytes | np.ndarray], Any] = None,
        verify_on_read: bool = False,
        backing: str = "mmap",
        read_around: str = "auto",
        storage_options: Mapping[str, str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        _any_fields: bool = False,
    ) -> None: ...
    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> Sample:
        """Sample ``i`` (negative counts from the end). IndexError when out of range."""
    def __getitems__(self, indices: Sequence[int]) -> list[Sample]:
        """The samples ``indices`` in that order, as ``[self[i] for i in indices]``, read
        with one release of the GIL and their memory loads and I/O overlapped (torch's
        DataLoader calls this for each batch). IndexError naming the first index out
        of range, before any read."""
    def __iter__(self) -> SampleIterator:
        """Every sample in dataset order, with large sequential reads."""
    def get_by_key(self, key: str) -> Sample:
        """The sample with this key. KeyError when there is none."""
    def key(self, i: int) -> str:
        """The key of sample ``i`` without reading it."""
    def find(self, key: str) -> int | None:
        """The index of the sample with this key, or None."""
    @property
    def path(self) -> str:
        """The dataset directory, as given."""
    @property
    def classes(self) -> list[str] | None:
        """Class names (``cls`` values index them), or None when unlabelled."""
    @property
    def extensions(self) -> list[str]:
        """The field extensions the manifest lists, sorted."""
    @property
    def shard_sizes(self) -> list[int]:
        """Samples per shard."""
    def order(
        self,
        plan: str = "sequential",
        *,
        seed: int = 0,
        epoch: int = 0,
        buffer: int = 1024,
        rank: int = 0,
        world_size: int = 1,
        worker: int = 0,
        num_workers: int = 1,
        even: bool = False,
    ) -> list[int]:
        """Global indices one partition yields in one epoch of ``plan``, in order."""
    def partition_len(
        self,
        *,
        rank: int = 0,
        world_size: int = 1,
        worker: int = 0,
        num_workers: int = 1,
        even: bool = False,
    ) -> int:
        """Samples one partition yields per epoch."""
    def epoch(
        self,
        plan: str = "sequential",
        *,
        seed: int = 0,
        epoch: int = 0,
        buffer: int = 1024,
        rank: int = 0,
        world_size: int = 1,
        worker: int = 0,
        num_workers: int = 1,
        even: bool = False,
        start: int = 0,
        prefetch: int = 1,
    ) -> SampleIterator:
        """Iterates one partition's samples of one epoch, from sample ``start`` on."""

class SampleIterator(Iterator[Sample]):
    """The samples of one epoch for one partition."""

    def __iter__(self) -> SampleIterator: ...
    def __next__(self) -> Sample: ...
    def __len__(self) -> int:
        """Samples the partition yields in the whole epoch."""
    @property
    def position(self) -> int:
        """Samples yielded so far, counted from the start of the epoch."""

class SampleBuffer:
    """Read-only buffer over one field's bytes: the base of returned NumPy arrays."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    @property
    def mapped(self) -> bool:
        """Whether the bytes are the shard's memory map (zero-copy)."""

class BatchBuffer:
    """Writable buffer over one array of a batch (images, labels, masks,
    boxes) or its indices: the base of the arrays ``bale.Loader`` yields; an
    array returns to the loader's pool when freed."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

#: An array of a batch: (buffer, shape, NumPy dtype name).
_Array = tuple[BatchBuffer, tuple[int, ...], str]
#: A batch: (images, labels or None, indices, [(member, mask)], (boxes, box labels, counts) or None,
#: fields, skipped (index, key, error, source), a mix's sources (int64) or None; a mix's
#: indices are in each sample's source).
_Batch = tuple[
    _Array,
    _Array | None,
    BatchBuffer,
    list[tuple[str, _Array]],
    tuple[_Array, _Array, _Array] | None,
    dict[str, list[bytes | None]],
    list[tuple[int, str, str, int]],
    BatchBuffer | None,
]

class Batches(Iterator[_Batch]):
    """The batches of one epoch."""

    def __iter__(self) -> Batches: ...
    def __next__(self) -> _Batch: ...
    def __len__(self) -> int:
        """Batches still to come."""

class Loader:
    """The native loader behind ``bale.Loader`` (which documents the
    arguments); its options are checked by the Rust side's one validator."""

    def __init__(
        self,
        path: str,
        *,
        batch_size: int,
        size: tuple[int, int],
        crop: str,
        scale: tuple[float, ...],
        ratio: tuple[float, ...],
        resize: list[int] | None,
        scale_jitter: tuple[tuple[int, int], tuple[float, ...]] | None,
        flip: bool,
        vflip: bool,
        fill: list[int],
        mask_fill: int,
        channels_first: bool,
        dtype: str,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        order: str,
        buffer: int,
        seed: int,
        rank: int,
        world_size: int,
        even: bool,
        threads: int,
        prefetch: int,
        on_error: str,
        image: list[str],
        masks: list[str],
        mask_dtype: str,
        boxes: str | None,
        box_labels: str | None,
        max_boxes: int,
        min_box_size: float,
        min_box_area: float,
        label: str | None,
        fields: list[str],
        drop_last: bool,
        dct_scaling: bool,
        max_pixels: int,
        storage_options: Mapping[str, str] | None = None,
        cache_dir: str | None = None,
        cache_limit: int | None = None,
        verify_on_read: bool = False,
        backing: str = "mmap",
        read_around: str = "auto",
        augment: Any = None,
        mix: tuple[float, float, int] | None = None,
        sources: tuple[list[Dataset], list[float], int | None, bool, list[list[int]] | None] | None = None,
    ) -> None:
        """With ``sources`` (datasets, weights, samples, replacement, class
        maps): a weighted mix of the datasets, ``path`` naming the first."""
    def __len__(self) -> int:
        """Batches per epoch."""
    def samples_per_epoch(self) -> int: ...
    @property
    def image_members(self) -> list[str]: ...
    @property
    def dataset_fields(self) -> list[str]: ...
    @property
    def label_classes(self) -> int: ...
    @property
    def fingerprint(self) -> str:
        """The dataset's content fingerprint (as ``fingerprint``)."""
    @property
    def dataset_len(self) -> int:
        """Samples in the dataset (a mix: in its epoch)."""
    @property
    def mix_counts(self) -> list[int] | None:
        """Samples each source of a mix gives per epoch; None for one dataset."""
    def epoch(self, epoch: int, start: int) -> Batches: ...
    def epoch_resumed(self, epoch: int, stages: list[tuple[int, int, bool, int, list[int | None]]]) -> tuple[Batches, int, int, int]:
        """The batches of ``epoch`` after a state's stages; with the stage's
        number, the samples of this rank's share already read, and the share."""
    def sample_params(self, epoch: int, index: int, source: int = 0) -> dict[str, Any]:
        """Every decision for sample ``index`` of source ``source`` (see ``bale.Loader.sample_params``)."""

def cli_main(argv: list[str]) -> int:
    """Runs the ``bale`` command line ``argv`` (program name first); returns its exit code."""

def decode_image(data: bytes, ext: str, max_pixels: int) -> tuple[int, int, bytearray]:
    """(height, width, RGB bytearray) of the image decoded whole."""

def _apply_op(
    name: str, pixels: bytes, height: int, width: int, value: float, fill: list[int]
) -> bytes:
    """One pixel operation on RGB bytes, for tests (see ``bale._ops``)."""

# Checkpoints and mixes (src/resume.rs). A stage is (world_size,
# num_workers, even, rank, consumed per worker or None).
_Stage = tuple[int, int, bool, int, list[int | None]]

def fingerprint(ds: Dataset) -> str:
    """The xxh3-64 of the shards' sample counts and index checksums, 16 hex digits."""

def place(
    len: int, plan: str, seed: int, epoch: int, buffer: int, rank: int, world_size: int,
    worker: int, num_workers: int, even: bool, stages: list[_Stage],
) -> tuple[int, int, int]:
    """(stage, start, share) of a partition after ``stages``."""

def resumed_epoch(
    ds: Dataset, plan: str, seed: int, epoch: int, buffer: int, rank: int, world_size: int,
    worker: int, num_workers: int, even: bool, stages: list[_Stage], prefetch: int,
) -> SampleIterator: ...

class MixIterator:
    def __iter__(self) -> MixIterator: ...
    def __next__(self) -> dict[str, Any]: ...
    def __len__(self) -> int: ...
    @property
    def position(self) -> int: ...

class MixCounts:
    def __init__(self, datasets: list[Dataset], weights: list[float], samples: int | None, replacement: bool) -> None: ...
    def __len__(self) -> int: ...
    @property
    def counts(self) -> list[int]: ...
    def pairs(self, plan: str, seed: int, epoch: int) -> list[tuple[int, int]]: ...
    def epoch(
        self, plan: str, seed: int, epoch: int, rank: int, world_size: int, worker: int,
        num_workers: int, even: bool, stages: list[_Stage], prefetch: int,
        labels: list[list[int]] | None,
    ) -> MixIterator: ...
