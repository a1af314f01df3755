"""bale.Loader.into: batches written into the caller's buffers, and a ring of them
whose copies (as `.cuda(non_blocking=True)` makes them) are never overwritten in
flight. The copies here are fakes on the CPU that read their buffer as late as a
copy in flight may: only when the caller synchronizes with them."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import bale
from conftest import run_bale

KW = dict(batch_size=4, size=16, seed=3, shuffle=True)


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    """18 JPEGs of two classes: batches of 4, 4, 4, 4, 2."""
    root = tmp_path_factory.mktemp("into") / "tree"
    rng = np.random.default_rng(7)
    for i in range(18):
        d = root / ("a", "b")[i % 2]
        d.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (20 + i, 24, 3), dtype=np.uint8)).save(buf, "JPEG")
        (d / f"{i:02d}.jpg").write_bytes(buf.getvalue())
    out = root.parent / "ds"
    run_bale("pack", root, "-o", out)
    return out


def expected(path: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(im.copy(), lb.copy()) for im, lb in bale.Loader(path, **KW)]


class FakeStream:
    """Copies started from host buffers that complete only when synchronized
    (or at `finish`), reading the buffer then, as a DMA still queued on a CUDA
    stream would. Each copy also keeps what the buffer held when it started:
    a copy whose buffer changed before it completed was raced."""

    def __init__(self) -> None:
        self.pending: dict[int, tuple[int, np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]] = {}
        self.done: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.raced: list[int] = []
        self.waits: list[int] = []

    def copy(self, batch: int, slot: int, images: np.ndarray, labels: np.ndarray, n: int) -> None:
        # A buffer still in flight is not started from again without a wait.
        assert slot not in self.pending, f"buffer {slot} started from again while its copy is in flight"
        self.pending[slot] = (batch, images, labels, n, images[:n].copy(), labels[:n].copy())

    def complete(self, slot: int) -> None:
        batch, images, labels, n, at_start_images, at_start_labels = self.pending.pop(slot)
        got = (images[:n].copy(), labels[:n].copy())
        if not (np.array_equal(got[0], at_start_images) and np.array_equal(got[1], at_start_labels)):
            self.raced.append(batch)
        self.done[batch] = got

    def synchronize(self, slot: int) -> None:
        self.waits.append(slot)
        if slot in self.pending:
            self.complete(slot)

    def finish(self) -> None:
        for slot in list(self.pending):
            self.complete(slot)


def ring(slots: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    return (
        [np.zeros((4, 16, 16, 3), np.uint8) for _ in range(slots)],
        [np.zeros(4, np.int64) for _ in range(slots)],
    )


def test_a_ring_with_wait_never_writes_a_buffer_while_its_copy_is_in_flight(packed) -> None:
    want = expected(packed)
    images, labels = ring(2)
    stream = FakeStream()
    seen = []
    for k, (i, n) in enumerate(bale.Loader(packed, **KW).into(images, labels, wait=stream.synchronize)):
        assert i == k % 2
        seen.append(n)
        stream.copy(k, i, images[i], labels[i], n)
    stream.finish()
    assert seen == [4, 4, 4, 4, 2]
    # Buffer i is waited for before batches 2, 3 and 4 overwrite it, not before
    # its first batch.
    assert stream.waits == [0, 1, 0]
    assert stream.raced == []
    for k, (im, lb) in enumerate(want):
        np.testing.assert_array_equal(stream.done[k][0], im)
        np.testing.assert_array_equal(stream.done[k][1], lb)


def test_one_buffer_with_wait_is_safe_too(packed) -> None:
    want = expected(packed)
    images, labels = ring(1)
    stream = FakeStream()
    sizes = []
    for k, n in enumerate(bale.Loader(packed, **KW).into(images[0], labels[0], wait=lambda i: stream.synchronize(i))):
        sizes.append(n)
        stream.copy(k, 0, images[0], labels[0], n)
    stream.finish()
    assert sizes == [4, 4, 4, 4, 2]
    assert stream.waits == [0, 0, 0, 0]
    assert stream.raced == []
    assert all(np.array_equal(stream.done[k][0], im) for k, (im, _) in enumerate(want))


def test_reusing_a_buffer_without_waiting_races_its_copy(packed) -> None:
    """The harness sees the race the old example had: one buffer, copies not
    waited for, and each copy reads the next batch's pixels."""
    want = expected(packed)
    images, labels = ring(1)
    pending = []
    for k, n in enumerate(bale.Loader(packed, **KW).into(images[0], labels[0])):
        pending.append((k, n, images[0][:n].copy()))
    # Every copy completes after the loop: they all read the last batch.
    late = images[0]
    raced = [k for k, n, at_start in pending if not np.array_equal(late[:n], at_start)]
    assert raced == [0, 1, 2, 3]
    assert not np.array_equal(late, want[0][0])


def test_into_refuses_rings_that_do_not_match(packed) -> None:
    loader = bale.Loader(packed, **KW)
    images, labels = ring(2)
    with pytest.raises(ValueError, match="as many label buffers"):
        next(loader.into(images, labels[:1]))
    with pytest.raises(ValueError, match="as many label buffers"):
        next(loader.into([], []))
    with pytest.raises(ValueError, match="or a list of each"):
        next(loader.into(images, labels[0]))
    with pytest.raises(TypeError, match="wait must be callable"):
        next(loader.into(images, labels, wait=3))
    bad = [images[0], np.zeros((4, 8, 8, 3), np.uint8)]
    got = loader.into(bad, labels)
    assert next(got) == (0, 4)
    with pytest.raises(ValueError, match="images must be uint8 of shape"):
        next(got)
