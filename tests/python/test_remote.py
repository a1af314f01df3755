"""Datasets in object storage from Python, against a real S3 server (SeaweedFS on
127.0.0.1): map-style and iterable reads, a torch DataLoader with 2 workers under fork
and under spawn, and the errors a user meets (wrong credentials, a missing dataset).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import bale
from conftest import Packed, assert_refused_after_fork, run_bale

sys.path.insert(0, str(Path(__file__).parent))
import _seaweed  # noqa: E402
import _workers  # noqa: E402


@pytest.fixture(scope="session")
def seaweed():
    s = _seaweed.Seaweed()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def remote(seaweed, tar_ds: Packed, zst_ds: Packed) -> dict[str, tuple[Packed, str]]:
    """The tar and tar.zst datasets, uploaded: name -> (local dataset, URL)."""
    bucket = seaweed.bucket("bale-py-remote")
    return {
        "tar": (tar_ds, seaweed.upload_dir(tar_ds.path, bucket, "tar")),
        "zst": (zst_ds, seaweed.upload_dir(zst_ds.path, bucket, "zst")),
    }


def digests(ds) -> dict[int, tuple[str, str]]:
    return {i: _workers.digest(ds[i]) for i in range(len(ds))}


@pytest.mark.parametrize("kind", ["tar", "zst"])
def test_map_style_reads_equal_the_local_dataset(seaweed, remote, kind: str) -> None:
    packed, url = remote[kind]
    local = bale.Dataset(packed.path)
    ds = bale.Dataset(url, storage_options=seaweed.options(), verify_on_read=True)
    assert len(ds) == len(local) and ds.path == url
    assert digests(ds) == digests(local)
    batch = [len(ds) - 1, 0, 1, 2, 7, 3, 0]
    assert [_workers.digest(s) for s in ds.__getitems__(batch)] == [_workers.digest(local[i]) for i in batch]
    key = local.key(5)
    assert _workers.digest(ds.get_by_key(key)) == _workers.digest(local[5])


@pytest.mark.parametrize("plan", ["sequential", "shuffled", "shard_shuffled"])
def test_iterable_reads_equal_the_local_dataset(seaweed, remote, plan: str) -> None:
    packed, url = remote["zst"]
    want = [
        (s["__index__"], *_workers.digest(s))
        for s in bale.IterableDataset(packed.path, plan=plan, seed=4, rank=0, world_size=1)
    ]
    it = bale.IterableDataset(url, plan=plan, seed=4, rank=0, world_size=1, storage_options=seaweed.options())
    assert [(s["__index__"], *_workers.digest(s)) for s in it] == want


def test_an_iterator_continued_in_a_forked_child_raises_instead_of_hanging(seaweed, remote) -> None:
    # Its requests in flight run on the parent's I/O runtime, which the
    # child does not run: their answers would never come.
    _, url = remote["zst"]
    ds = bale.Dataset(url, storage_options=seaweed.options())
    it = ds.epoch("shuffled", seed=3)
    first = next(it)
    holder = [it]
    del it
    assert_refused_after_fork(holder)
    rest = [s["__index__"] for s in holder[0]]
    assert sorted(rest + [first["__index__"]]) == list(range(len(ds)))


def keep(batch):
    return [(s["__index__"], *_workers.digest(s)) for s in batch]


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_dataloader_with_two_workers_reads_every_sample(seaweed, remote, ctx: str) -> None:
    packed, url = remote["tar"]
    want = {i: d for i, d in digests(bale.Dataset(packed.path)).items()}
    # Map-style: the dataset was opened (and read) in this process before the
    # workers start, so that a forked worker inherits a used I/O runtime.
    ds = bale.Dataset(url, storage_options=seaweed.options())
    assert _workers.digest(ds[0]) == want[0]
    loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, collate_fn=keep, multiprocessing_context=ctx)
    got = {i: (k, h) for batch in loader for i, k, h in batch}
    assert got == want
    # Iterable: the workers split the epoch between them.
    it = bale.IterableDataset(url, shuffle=True, seed=1, storage_options=seaweed.options())
    next(iter(it))
    loader = DataLoader(it, batch_size=4, num_workers=2, collate_fn=keep, multiprocessing_context=ctx)
    seen = [(i, k, h) for batch in loader for i, k, h in batch]
    assert sorted(i for i, _, _ in seen) == sorted(want)
    assert all(want[i] == (k, h) for i, k, h in seen)


def test_errors_name_the_problem(seaweed, remote) -> None:
    _, url = remote["tar"]
    with pytest.raises(PermissionError, match="refused the credentials"):
        bale.Dataset(url, storage_options=seaweed.options(aws_secret_access_key="wrong"))
    bucket = url.split("/")[2]
    with pytest.raises(bale.FormatError, match="not a complete bale dataset"):
        bale.Dataset(f"s3://{bucket}/no-dataset-here", storage_options=seaweed.options())
    with pytest.raises(FileNotFoundError, match="does not exist"):
        bale.Dataset("s3://bale-no-such-bucket-py/ds", storage_options=seaweed.options())
    with pytest.raises(ValueError, match="storage option"):
        bale.Dataset(url, storage_options={"not_an_option": "x"})
    with pytest.raises(ValueError, match="cache_limit"):
        bale.Dataset(url, storage_options=seaweed.options(), cache_dir="/tmp/x")


def test_the_cache_serves_a_dataloader(seaweed, remote, tmp_path) -> None:
    packed, url = remote["zst"]
    want = digests(bale.Dataset(packed.path))
    cache = tmp_path / "cache"
    ds = bale.Dataset(url, storage_options=seaweed.options(), cache_dir=cache, cache_limit=1 << 30)
    loader = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=keep, multiprocessing_context="fork")
    assert {i: (k, h) for batch in loader for i, k, h in batch} == want
    assert any(p.name.startswith("bc-") for p in cache.iterdir())
    assert torch.utils.data.get_worker_info() is None


def test_loader_reads_a_url_as_it_reads_the_local_dataset(seaweed, tmp_path) -> None:
    """bale.Loader over s3:// (given as a URL or as a bale.Dataset opened on it):
    the same decoded, augmented batches as over the local copy."""
    import numpy as np
    from PIL import Image

    root = tmp_path / "jpg"
    rng = np.random.default_rng(3)
    for i in range(20):
        (root / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 255, (60 + i, 80, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / f"c{i % 2}" / f"{i:03d}.jpg", quality=90)
    local = tmp_path / "ds"
    run_bale("pack", root, "-o", local, "--shard-samples", "6")
    url = seaweed.upload_dir(local, seaweed.bucket("bale-py-loader"), "ds")

    kw = dict(batch_size=4, size=32, flip=True, shuffle=True, seed=5, threads=2)

    def epoch(loader) -> list[tuple[np.ndarray, np.ndarray, list[int]]]:
        loader.set_epoch(2)
        return [(im.copy(), lb.copy(), list(loader.last_indices)) for im, lb in loader]

    want = epoch(bale.Loader(local, **kw))
    assert len(want) == 5
    by_url = epoch(bale.Loader(url, storage_options=seaweed.options(), **kw))
    by_ds = epoch(bale.Loader(bale.Dataset(url, storage_options=seaweed.options()), **kw))
    for got in (by_url, by_ds):
        assert len(got) == len(want)
        for (ia, la, xa), (ib, lb, xb) in zip(want, got):
            np.testing.assert_array_equal(ia, ib)
            np.testing.assert_array_equal(la, lb)
            assert xa == xb
    with pytest.raises(PermissionError, match="refused the credentials"):
        bale.Loader(url, storage_options=seaweed.options(aws_secret_access_key="wrong"), **kw)


def test_a_dataset_packed_into_a_bucket_reads_as_the_local_pack(seaweed, trees, zst_ds: Packed) -> None:
    """`bale pack -o s3://...` (shards uploaded while packing, bale.json last):
    map-style and iterable reads from Python give the local pack's samples."""
    src, _ = trees["labelled"]
    bucket = seaweed.bucket("bale-py-written")
    url = f"s3://{bucket}/zst"
    flags = [a for k, v in seaweed.options().items() for a in ("--storage-option", f"{k}={v}")]
    run_bale("pack", src, "-o", url, "--shard-samples", "9", "--compress", "zstd", "--shuffle", "--seed", "3", "-q", *flags)
    local = bale.Dataset(zst_ds.path)
    ds = bale.Dataset(url, storage_options=seaweed.options(), verify_on_read=True)
    assert len(ds) == len(local)
    assert digests(ds) == digests(local)
    it = bale.IterableDataset(url, rank=0, world_size=1, storage_options=seaweed.options())
    assert [(s["__index__"], *_workers.digest(s)) for s in it] == [
        (s["__index__"], *_workers.digest(s)) for s in bale.IterableDataset(zst_ds.path, rank=0, world_size=1)
    ]
