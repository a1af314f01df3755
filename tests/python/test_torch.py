"""A real torch DataLoader with worker processes over both dataset classes (needs torch)."""

from __future__ import annotations

import subprocess
import sys

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


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_dataloader_default_collate_of_tuples(tar_ds: Packed, ctx: str) -> None:
    # The WebDataset-style pair: (payload, label) per sample, collated by torch.
    ds = bale.Dataset(tar_ds.path, fields=["txt", "cls", "__index__"], as_tuple=True)
    loader = DataLoader(ds, batch_size=8, shuffle=True, num_workers=2, multiprocessing_context=ctx)
    seen = []
    for texts, labels, index in loader:
        assert isinstance(labels, torch.Tensor) and isinstance(index, torch.Tensor)
        for t, label, i in zip(texts, labels.tolist(), index.tolist()):
            key = ds.key(i)
            assert t == tar_ds.expected[key]["txt"] and label == tar_ds.labels[key]
            seen.append(i)
    assert sorted(seen) == list(range(N))
    # One field alone: a batch is the list of its values.
    it = bale.IterableDataset(tar_ds.path, fields="cls")
    labels = torch.cat(list(DataLoader(it, batch_size=16, num_workers=2, multiprocessing_context=ctx)))
    assert sorted(labels.tolist()) == sorted(tar_ds.labels.values())


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


def run_fresh_python(script: str) -> None:
    """Runs `script` in a new interpreter (torch is already imported in this one); it prints "ok"."""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_import_bale_leaves_torch_unimported_until_an_iterable_dataset_is_made(zst_ds: Packed) -> None:
    script = f"""
import sys
import bale
assert "torch" not in sys.modules, "import bale imported torch"
ds = bale.Dataset({str(zst_ds.path)!r})
assert len(ds) == {N} and "torch" not in sys.modules
import torch
from torch.utils.data import DataLoader
it = bale.IterableDataset({str(zst_ds.path)!r})
assert isinstance(it, torch.utils.data.IterableDataset)
# DataLoader takes it as iterable: no sampler, every sample once.
seen = [s["__index__"] for b in DataLoader(it, batch_size=4, num_workers=1, collate_fn=list) for s in b]
assert sorted(seen) == list(range({N})), seen
print("ok")
"""
    run_fresh_python(script)


def test_bale_imported_after_torch_is_registered_before_any_instance() -> None:
    script = """
import torch
import bale
assert issubclass(bale.IterableDataset, torch.utils.data.IterableDataset)
print("ok")
"""
    run_fresh_python(script)


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
