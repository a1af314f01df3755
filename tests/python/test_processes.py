"""Pickling, and reading in spawned processes (what DataLoader workers do)."""

from __future__ import annotations

import multiprocessing as mp
import pickle
import sys
from pathlib import Path

import pytest

import bale
from conftest import N, Packed, assert_refused_after_fork, run_bale

sys.path.insert(0, str(Path(__file__).parent))
import _workers  # noqa: E402


def test_dataset_pickles_as_its_arguments(zst_ds: Packed) -> None:
    ds = bale.Dataset(zst_ds.path, fields=["txt", "cls"], decode="bytes", verify_on_read=True, backing="pread")
    blob = pickle.dumps(ds)
    assert len(blob) < 1000  # arguments, not data
    back = pickle.loads(blob)
    assert len(back) == N and back.path == ds.path
    for i in (0, 17, N - 1):
        assert back[i] == ds[i]
    assert set(back[0]) == {"__key__", "__index__", "txt", "cls"}


def expected_digests(packed: Packed) -> dict[int, tuple[str, str]]:
    ds = bale.Dataset(packed.path)
    return {i: _workers.digest(ds[i]) for i in range(len(ds))}


@pytest.mark.parametrize("procs", [2, 4])
def test_spawned_processes_read_every_sample(tar_ds: Packed, zst_ds: Packed, procs: int) -> None:
    ctx = mp.get_context("spawn")
    for packed in (tar_ds, zst_ds):
        ds = bale.Dataset(packed.path)
        want = expected_digests(packed)
        with ctx.Pool(procs) as pool:
            parts = pool.map(_workers.read_slice, [(ds, p, procs) for p in range(procs)])
        got = {i: (k, h) for part in parts for i, k, h in part}
        assert got == want


def test_spawned_processes_split_an_iterable(zst_ds: Packed) -> None:
    ctx = mp.get_context("spawn")
    want = expected_digests(zst_ds)
    its = [
        bale.IterableDataset(zst_ds.path, shuffle=True, seed=3, rank=r, world_size=2, worker=w, num_workers=2)
        for r in range(2)
        for w in range(2)
    ]
    with ctx.Pool(3) as pool:
        parts = pool.map(_workers.iterate, its)
    seen = [i for part in parts for i, _, _ in part]
    assert sorted(seen) == list(range(N))
    for part in parts:
        for i, k, h in part:
            assert want[i] == (k, h)


@pytest.fixture(scope="module")
def many_ds(tmp_path_factory) -> Path:
    """3,000 tiny samples: far more than an iterator reads ahead."""
    root = tmp_path_factory.mktemp("many")
    src = root / "src"
    src.mkdir()
    for i in range(3000):
        (src / f"{i:05d}.txt").write_text(str(i))
    run_bale("pack", src, "-o", root / "ds", "--shard-samples", "500")
    return root / "ds"


@pytest.mark.parametrize("kind", ["dataset", "iterable"])
def test_an_iterator_continued_in_a_forked_child_raises_instead_of_hanging(many_ds: Path, kind: str) -> None:
    # Its read-ahead threads exist only in the process that started it; a
    # child waiting for them would wait forever (and so would dropping it).
    if kind == "dataset":
        it = iter(bale.Dataset(many_ds))
    else:
        it = iter(bale.IterableDataset(many_ds, prefetch=1))
    assert next(it)["__key__"] == "00000"
    holder = [it]
    del it
    assert_refused_after_fork(holder)
    # The parent's iterator goes on, every sample once.
    keys = [s["__key__"] for s in holder[0]]
    assert keys == [f"{i:05d}" for i in range(1, 3000)]
