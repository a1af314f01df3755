"""on_error="skip" never hides an error of object storage: a shard object
replaced under a `bale.Loader` reading a bucket (another ETag, the same
size) or deleted raises, naming the shard, and skips nothing; against a
real S3 server (SeaweedFS on 127.0.0.1)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import bale
from conftest import run_bale

sys.path.insert(0, str(Path(__file__).parent))
import _seaweed  # noqa: E402


@pytest.fixture(scope="module")
def seaweed():
    s = _seaweed.Seaweed()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("skip-remote") / "tree"
    for i in range(60):
        d = root / ("a" if i % 2 else "b")
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((12, 14, 3), i * 4, np.uint8)).save(d / f"{i:04d}.png")
    ds = root.parent / "ds"
    run_bale("pack", root, "-o", ds, "--shard-samples", "10")
    assert len(list(ds.glob("shard-*.tar"))) == 6
    return ds


def loader(url: str, seaweed) -> bale.Loader:
    return bale.Loader(url, storage_options=seaweed.options(), batch_size=20, size=8, crop="resize",
                       shuffle=True, seed=1, on_error="skip", threads=1, prefetch=0)


@pytest.mark.parametrize("change", ["replaced", "deleted"])
def test_skip_raises_when_a_shard_object_changes_under_the_loader(seaweed, packed, change) -> None:
    bucket = seaweed.bucket("bale-skip-remote")
    url = seaweed.upload_dir(packed, bucket, change)
    ld = loader(url, seaweed)
    it = iter(ld)
    next(it)
    # Every shard has been read from (10 samples each, in key order).
    assert {i // 10 for i in ld.last_indices} == set(range(6)), ld.last_indices
    c = seaweed.client()
    for shard in sorted(packed.glob("shard-*.tar")):
        key = f"{change}/{shard.name}"
        if change == "deleted":
            c.delete_object(Bucket=bucket, Key=key)
        else:
            # The same size, one byte of image data changed: only the
            # object's version (ETag) tells, and it must.
            data = bytearray(shard.read_bytes())
            data[len(data) // 2] ^= 0xFF
            c.put_object(Bucket=bucket, Key=key, Body=bytes(data))
    with pytest.raises((bale.FormatError, OSError), match=r"shard-00000\d\.tar"):
        for _ in it:
            pass
    assert ld.skipped == 0
