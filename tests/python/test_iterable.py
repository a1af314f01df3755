"""bale.IterableDataset: plans, splitting by rank and worker, epochs, resume."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest

import bale
from conftest import N, Packed, assert_sample

PLANS = ["sequential", "shuffled", "shard_shuffled"]


def indices(it) -> list[int]:
    return [s["__index__"] for s in it]


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("world,workers", [(1, 1), (2, 1), (3, 2), (4, 3), (2, 4)])
def test_split_covers_every_sample_exactly_once(tar_ds: Packed, plan: str, world: int, workers: int) -> None:
    seen: Counter[int] = Counter()
    for rank in range(world):
        per_rank = 0
        for worker in range(workers):
            it = bale.IterableDataset(
                tar_ds.path,
                plan=plan,
                seed=7,
                epoch=1,
                buffer=5,
                rank=rank,
                world_size=world,
                worker=worker,
                num_workers=workers,
            )
            got = list(it)
            for s in got:
                assert_sample(s, s["__key__"], tar_ds)
            seen.update(s["__index__"] for s in got)
            per_rank += len(got)
        assert per_rank == len(bale.IterableDataset(tar_ds.path, rank=rank, world_size=world))
    assert seen == Counter(range(N))


def test_even_gives_every_rank_the_same_count(zst_ds: Packed) -> None:
    world = 3  # 40 samples: ranks of 14, the first 2 samples of the epoch list repeat
    counts, seen = [], Counter()
    for rank in range(world):
        got = indices(bale.IterableDataset(zst_ds.path, shuffle=True, seed=1, rank=rank, world_size=world, even=True))
        counts.append(len(got))
        seen.update(got)
    assert counts == [14, 14, 14]
    assert set(seen) == set(range(N)) and sum(seen.values()) == 42


def test_plans_order(tar_ds: Packed) -> None:
    ds = bale.Dataset(tar_ds.path)
    assert indices(bale.IterableDataset(tar_ds.path)) == list(range(N))
    shuffled = indices(bale.IterableDataset(tar_ds.path, shuffle=True, seed=5))
    assert sorted(shuffled) == list(range(N)) and shuffled != list(range(N))
    assert shuffled == ds.order("shuffled", seed=5)
    # The same seed and epoch: the same order; another epoch: another order.
    assert shuffled == indices(bale.IterableDataset(tar_ds.path, plan="shuffled", seed=5))
    it = bale.IterableDataset(tar_ds.path, shuffle=True, seed=5)
    it.set_epoch(1)
    assert indices(it) != shuffled and sorted(indices(it)) == list(range(N))
    seq = bale.IterableDataset(tar_ds.path)
    seq.set_epoch(3)
    assert indices(seq) == list(range(N))
    with pytest.raises(ValueError, match="plan"):
        bale.IterableDataset(tar_ds.path, plan="random")


def test_rank_from_environment(tar_ds: Packed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    union = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        it = bale.IterableDataset(tar_ds.path, shuffle=True, seed=2)
        assert it.rank_world() == (rank, 2)
        got = indices(it)
        assert got == indices(bale.IterableDataset(tar_ds.path, shuffle=True, seed=2, rank=rank, world_size=2))
        union += got
    assert sorted(union) == list(range(N))
    # Explicit arguments win over the environment.
    monkeypatch.setenv("RANK", "1")
    assert bale.IterableDataset(tar_ds.path, rank=0, world_size=1).rank_world() == (0, 1)
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK"):
        bale.IterableDataset(tar_ds.path).rank_world()
    monkeypatch.delenv("RANK")
    with pytest.raises(ValueError, match="together"):
        bale.IterableDataset(tar_ds.path).rank_world()
    monkeypatch.delenv("WORLD_SIZE")
    assert bale.IterableDataset(tar_ds.path).rank_world() == (0, 1)


def test_pickled_iterable_rereads_the_same_partition(tar_ds: Packed, monkeypatch: pytest.MonkeyPatch) -> None:
    it = bale.IterableDataset(tar_ds.path, plan="shard_shuffled", seed=4, buffer=8, rank=1, world_size=2, worker=1, num_workers=2)
    want = indices(it)
    back = pickle.loads(pickle.dumps(it))
    assert back._ds is None  # reopened lazily, from the path
    assert indices(back) == want
    # The environment of the unpickling process decides the rank when none is given.
    it = bale.IterableDataset(tar_ds.path)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert indices(pickle.loads(pickle.dumps(it))) == bale.Dataset(tar_ds.path).order(rank=1, world_size=4)


@pytest.mark.parametrize("plan", PLANS)
def test_resume_from_a_sample_offset(zst_ds: Packed, plan: str) -> None:
    kw = dict(plan=plan, seed=9, epoch=2, buffer=6, rank=1, world_size=2, worker=0, num_workers=2)
    full = indices(bale.IterableDataset(zst_ds.path, **kw))
    for k in (0, 1, 4, len(full)):
        assert indices(bale.IterableDataset(zst_ds.path, start=k, **kw)) == full[k:]
    with pytest.raises(ValueError, match="cannot start"):
        list(bale.IterableDataset(zst_ds.path, start=len(full) + 1, **kw))
    # The native iterator reports its position for a checkpoint.
    ds = bale.Dataset(zst_ds.path)
    it = ds.epoch(plan, seed=9, epoch=2, buffer=6, rank=1, world_size=2, num_workers=2)
    for _ in range(3):
        next(it)
    assert it.position == 3
    assert indices(ds.epoch(plan, seed=9, epoch=2, buffer=6, rank=1, world_size=2, num_workers=2, start=it.position)) == full[3:]


def test_per_worker_offsets(tar_ds: Packed) -> None:
    workers, batch = 3, 2
    full = [indices(bale.IterableDataset(tar_ds.path, worker=w, num_workers=workers)) for w in range(workers)]
    # After 4 batches, DataLoader took batches from workers 0, 1, 2, 0.
    offsets = bale.worker_offsets(4, batch, workers)
    assert offsets == [4, 2, 2]
    for w in range(workers):
        it = bale.IterableDataset(tar_ds.path, worker=w, num_workers=workers, start=offsets)
        assert indices(it) == full[w][offsets[w]:]
    # set_epoch clears the resume offset.
    it = bale.IterableDataset(tar_ds.path, start=5)
    it.set_epoch(1)
    assert len(indices(it)) == N
    with pytest.raises(ValueError):
        bale.worker_offsets(1, 0, 2)


@pytest.mark.parametrize("batch", [3, 7, 40])
def test_worker_offsets_resume_a_dataloader_at_every_batch_to_the_epochs_end(tar_ds: Packed, batch: int) -> None:
    torch = pytest.importorskip("torch")

    def run(start=0) -> list[list[int]]:
        it = bale.IterableDataset(tar_ds.path, shuffle=True, seed=5, start=start)
        loader = torch.utils.data.DataLoader(
            it, batch_size=batch, num_workers=3, collate_fn=lambda b: [s["__index__"] for s in b],
            multiprocessing_context="fork",
        )
        return list(loader)

    def samples(batches: list[list[int]]) -> list[int]:
        return sorted(i for b in batches for i in b)

    full = run()
    assert samples(full) == list(range(N))
    it = bale.IterableDataset(tar_ds.path, shuffle=True, seed=5)
    for b in range(len(full) + 1):
        offsets = it.worker_offsets(b, batch, 3)
        # The resumed loader starts its turns at worker 0 again, so its
        # batches come in another order; every sample not yet seen comes once.
        assert samples(run(offsets)) == samples(full[b:]), (b, offsets)
    with pytest.raises(ValueError, match="past the epoch"):
        it.worker_offsets(len(full) + 1, batch, 3)
    # A checkpoint in a resumed epoch counts its batches from that start.
    first = it.worker_offsets(1, batch, 3)
    resumed = run(first)
    again = bale.IterableDataset(tar_ds.path, shuffle=True, seed=5, start=first)
    for b in range(len(resumed) + 1):
        offsets = again.worker_offsets(b, batch, 3)
        assert samples(run(offsets)) == samples(resumed[b:]), (b, first, offsets)


def test_start_is_checked(tar_ds: Packed) -> None:
    np = pytest.importorskip("numpy")
    assert bale.IterableDataset(tar_ds.path, start=np.int64(3)).start == 3
    for bad, err in (("12", TypeError), (-1, ValueError), ([1, -2], ValueError), (1.5, TypeError)):
        with pytest.raises(err):
            bale.IterableDataset(tar_ds.path, start=bad)
    # Offsets saved by 4 workers do not resume 2.
    it = bale.IterableDataset(tar_ds.path, worker=0, num_workers=2, start=[2, 2, 2, 2])
    with pytest.raises(ValueError, match="same num_workers"):
        iter(it)


def test_bad_arguments(tar_ds: Packed) -> None:
    with pytest.raises(ValueError, match="rank"):
        list(bale.IterableDataset(tar_ds.path, rank=2, world_size=2))
    with pytest.raises(ValueError, match="both"):
        bale.IterableDataset(tar_ds.path, rank=1)
    for kw in (dict(seed=-1), dict(epoch=-1), dict(buffer=-1), dict(prefetch=-1), dict(rank=-1, world_size=2),
               dict(worker=2, num_workers=2), dict(seed=2**64), dict(prefetch=65), dict(prefetch=2**40)):
        name = next(iter(kw))
        with pytest.raises(ValueError, match=f"^{name} must be from"):
            bale.IterableDataset(tar_ds.path, **kw)
    with pytest.raises(TypeError, match="^seed must be an int"):
        bale.IterableDataset(tar_ds.path, seed=1.5)
    # Read-ahead threads are capped: 2**40 is an error, not an abort on a
    # failed allocation, in the native epoch too.
    with pytest.raises(ValueError, match="^prefetch must be from 0 to 64"):
        bale.Dataset(tar_ds.path).epoch(prefetch=2**40)
    assert len(list(bale.Dataset(tar_ds.path).epoch(prefetch=64))) == N
    with pytest.raises(ValueError, match="^start must be from 0"):
        bale.IterableDataset(tar_ds.path, start=2**64)
    with pytest.raises(ValueError, match="num_workers"):
        list(bale.IterableDataset(tar_ds.path, worker=0, num_workers=0))
    with pytest.raises(ValueError, match="epoch"):
        bale.IterableDataset(tar_ds.path).set_epoch(-1)
    with pytest.raises(TypeError, match="^epoch must be an int"):
        bale.IterableDataset(tar_ds.path).set_epoch(1.5)
    with pytest.raises(FileNotFoundError):
        bale.IterableDataset(tar_ds.path / "nope")
    # The native Dataset's arguments name themselves too: a ValueError for
    # -1 or 2**64 (not pyo3's OverflowError), a TypeError for a float, a
    # bool where a count goes, or an int where a switch goes.
    ds = bale.Dataset(tar_ds.path)
    for kw in (dict(seed=-1), dict(epoch=2**64), dict(buffer=-1), dict(rank=-1), dict(world_size=-1),
               dict(worker=-1), dict(num_workers=2**64), dict(start=-1), dict(prefetch=65)):
        name = next(iter(kw))
        with pytest.raises(ValueError, match=f"^{name} must be from 0 to"):
            ds.epoch("shuffled", **kw)
        if name not in ("start", "prefetch"):
            with pytest.raises(ValueError, match=f"^{name} must be from 0 to"):
                ds.order("shuffled", **kw)
    for kw in (dict(seed=1.5), dict(rank=True), dict(buffer="8")):
        with pytest.raises(TypeError, match=f"^{next(iter(kw))} must be an int"):
            ds.epoch("shuffled", **kw)
    with pytest.raises(ValueError, match="^rank must be from 0 to"):
        ds.partition_len(rank=-1, world_size=2)
    for f in (lambda: ds.epoch(even=1), lambda: ds.partition_len(even="yes"),
              lambda: bale.IterableDataset(tar_ds.path, even=1), lambda: bale.IterableDataset(tar_ds.path, shuffle=2)):
        with pytest.raises(TypeError, match="must be True or False"):
            f()
    for kw in (dict(as_tuple=1, fields=["cls"]), dict(verify_on_read="yes")):
        with pytest.raises(TypeError, match=f"^{next(iter(kw))} must be True or False"):
            bale.Dataset(tar_ds.path, **kw)
    for limit in (-1, 2**64):
        with pytest.raises(ValueError, match="^cache_limit must be from 0 to"):
            bale.Dataset(tar_ds.path, cache_limit=limit)
    assert ds.partition_len(rank=np.uint8(1), world_size=np.int64(2), even=np.bool_(True)) == (N + 1) // 2
    assert len(list(ds.epoch("shuffled", seed=np.uint64(2**64 - 1), prefetch=np.int8(2)))) == N
    with pytest.raises(ValueError, match="start holds 1 offsets"):
        list(bale.IterableDataset(tar_ds.path, worker=1, num_workers=2, start=[0]))


@pytest.mark.parametrize("prefetch", [0, 1, 2])
def test_a_bad_sample_raises_in_its_place_and_the_epoch_goes_on(tmp_path, tar_ds: Packed, prefetch: int) -> None:
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(tar_ds.path, bad)
    # Flip a byte of the first member's data of the last shard (after its 512-byte header).
    shard = sorted(bad.glob("*.tar"))[-1]
    data = bytearray(shard.read_bytes())
    data[520] ^= 0xFF
    shard.write_bytes(bytes(data))
    ds = bale.Dataset(bad, verify_on_read=True)
    at = sum(ds.shard_sizes[:-1])
    it = ds.epoch("sequential", prefetch=prefetch)
    got = []
    errors = []
    while True:
        try:
            s = next(it)
        except StopIteration:
            break
        except bale.FormatError as e:
            errors.append((len(got), it.position, str(e)))
            continue
        got.append(s["__index__"])
        assert it.position == len(got) + len(errors)
    assert [(g, p) for g, p, _ in errors] == [(at, at + 1)], errors
    assert shard.name in errors[0][2]
    assert got == [i for i in range(len(ds)) if i != at]
