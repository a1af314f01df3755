"""A real torch DataLoader with worker processes over both dataset classes (needs torch)."""

from __future__ import annotations

import pytest

import torch  # noqa: E402  (cargo xtask ci installs it: these tests never skip)

from torch.utils.data import DataLoader  # noqa: E402

import bale  # noqa: E402
from conftest import N, Packed, assert_sample  # noqa: E402


def keep(batch):
    return batch


def indices(batch):
    return torch.tensor([s["__index__"] for s in batch])


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_dataloader_over_dataset(tar_ds: Packed, ctx: str) -> None:
    ds = bale.Dataset(tar_ds.path)
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, collate_fn=keep, multiprocessing_context=ctx)
    seen = []
    for batch in loader:
        for s in batch:
            assert_sample(s, s["__key__"], tar_ds, views=False)
            seen.append(s["__index__"])
    assert sorted(seen) == list(range(N))


def test_dataloader_default_collate_makes_tensors(tar_ds: Packed) -> None:
    ds = bale.Dataset(tar_ds.path, fields=["cls", "ids.npy"])
    loader = DataLoader(ds, batch_size=1, num_workers=2)
    batch = next(iter(loader))
    assert isinstance(batch["cls"], torch.Tensor)
    assert batch["ids.npy"].dtype == torch.int64


@pytest.mark.parametrize("plan", ["sequential", "shuffled", "shard_shuffled"])
def test_dataloader_over_iterable_splits_by_worker(zst_ds: Packed, plan: str) -> None:
    it = bale.IterableDataset(zst_ds.path, plan=plan, seed=1, buffer=4)
    assert isinstance(it, torch.utils.data.IterableDataset)
    loader = DataLoader(it, batch_size=3, num_workers=2, collate_fn=keep, multiprocessing_context="spawn")
    seen = []
    for epoch in range(2):
        it.set_epoch(epoch)
        for batch in loader:
            for s in batch:
                assert_sample(s, s["__key__"], zst_ds, views=False)
                seen.append(s["__index__"])
    assert sorted(seen) == sorted(list(range(N)) * 2)


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_distributed_sampler_over_dataset_covers_every_sample_once(tar_ds: Packed, ctx: str) -> None:
    from torch.utils.data.distributed import DistributedSampler

    ds = bale.Dataset(tar_ds.path)
    seen = []
    for rank in range(3):
        sampler = DistributedSampler(ds, num_replicas=3, rank=rank, shuffle=True, seed=4, drop_last=True)
        sampler.set_epoch(1)
        loader = DataLoader(ds, batch_size=4, sampler=sampler, num_workers=2, collate_fn=keep,
                            multiprocessing_context=ctx)
        for batch in loader:
            for s in batch:
                assert_sample(s, s["__key__"], tar_ds, views=False)
                seen.append(s["__index__"])
    assert len(seen) == len(set(seen)) == (N // 3) * 3


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_persistent_workers_and_pin_memory_over_epochs(zst_ds: Packed, ctx: str) -> None:
    it = bale.IterableDataset(zst_ds.path, plan="shuffled", seed=2)
    loader = DataLoader(it, batch_size=5, num_workers=2, persistent_workers=True, pin_memory=True,
                        multiprocessing_context=ctx, collate_fn=indices)
    for epoch in range(3):
        it.set_epoch(epoch)
        seen = torch.cat(list(loader)).tolist()
        assert sorted(seen) == list(range(N)), epoch
