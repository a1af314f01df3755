"""NVIDIA DALI reads bale's tar shards with the index files `bale export-index --dali` writes.

DALI's CPU operators run without a GPU (`device_id=None`). Every sample DALI
returns is compared with what bale reads (bale.Dataset, and `bale get` for one),
long member names (pax headers, which DALI's own tar scan gets wrong) included.
"""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import bale
from conftest import bale_bin, run_bale


from nvidia.dali import fn, pipeline_def

N = 23
LONG = "long" * 25 + "-"  # keys over 100 bytes: pax extended headers


def _tree(root: Path) -> dict[str, tuple[bytes, int]]:
    """JPEGs in two class directories; some keys are long. key -> (jpeg bytes, label)."""
    out = {}
    for i in range(N):
        cls = ("cat", "dog")[i % 2]
        sub = root / cls
        sub.mkdir(parents=True, exist_ok=True)
        name = f"{LONG if i % 5 == 0 else ''}{i:04d}"
        buf = io.BytesIO()
        rng = np.random.default_rng(i)
        Image.fromarray(rng.integers(0, 255, (8 + i, 12, 3), dtype=np.uint8)).save(buf, "JPEG")
        (sub / f"{name}.jpg").write_bytes(buf.getvalue())
        key = f"{cls}/{name}"
        out[key] = (buf.getvalue(), i % 2)
    return out


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    base = tmp_path_factory.mktemp("dali")
    expected = _tree(base / "tree")
    ds = base / "ds"
    idx = base / "dali-idx"
    run_bale("pack", base / "tree", "-o", ds, "--shard-samples", "6", "--dali-index", idx)
    return ds, idx, expected


def _run(shards, indexes, *, shard_id=0, num_shards=1, batch=5):
    @pipeline_def(batch_size=batch, num_threads=1, device_id=None)
    def pipe():
        kw = {"index_paths": indexes} if indexes is not None else {}
        jpg, cls = fn.readers.webdataset(
            paths=shards,
            ext=["jpg", "cls"],
            missing_component_behavior="error",
            shard_id=shard_id,
            num_shards=num_shards,
            pad_last_batch=True,
            name="r",
            **kw,
        )
        # docs/dali.md's label recipe: the decimal text padded to 8 bytes.
        return jpg, cls, fn.decoders.image(jpg, device="cpu"), fn.pad(cls, fill_value=0, shape=[8])

    p = pipe()
    p.build()
    n = p.reader_meta("r")["epoch_size_padded"] // num_shards
    n = p.reader_meta("r")["epoch_size"] if num_shards == 1 else n
    got = []
    while len(got) < n:
        jpg, cls, img, padded = p.run()
        for i in range(len(jpg)):
            cls_bytes = np.array(cls[i]).tobytes()
            assert int(np.array(padded[i]).tobytes().rstrip(b"\0")) == int(cls_bytes)
            got.append((np.array(jpg[i]).tobytes(), cls_bytes, np.array(img[i]).shape))
    return got[:n]


def _check(got, ds_path: Path, expected) -> list[str]:
    ds = bale.Dataset(str(ds_path))
    keys = []
    for i, (jpg, cls, shape) in enumerate(got):
        s = ds[i]
        keys.append(s["__key__"])
        assert jpg == s["jpg"] == expected[s["__key__"]][0], s["__key__"]
        assert int(cls) == s["cls"] == expected[s["__key__"]][1]
        assert shape == np.asarray(Image.open(io.BytesIO(jpg))).shape
    return keys


def test_dali_reads_every_sample_with_bales_index(packed, capfd):
    ds, idx, expected = packed
    shards = sorted(str(p) for p in ds.glob("shard-*.tar"))
    indexes = sorted(str(p) for p in idx.glob("*.dali.idx"))
    assert [Path(i).name for i in indexes] == [Path(s).stem + ".dali.idx" for s in shards]
    capfd.readouterr()
    got = _run(shards, indexes)
    err = capfd.readouterr().err
    assert "Index file not provided" not in err, err
    assert len(got) == N
    keys = _check(got, ds, expected)
    assert sum(len(k) > 100 for k in keys) == 5  # the pax members were read right
    # One sample through the CLI as well.
    key = keys[0]
    out = subprocess.run([str(bale_bin()), "get", str(ds), key, "--ext", "jpg"], capture_output=True, check=True)
    assert out.stdout == got[0][0]


def test_dali_shards_by_rank(packed):
    ds, idx, expected = packed
    shards = sorted(str(p) for p in ds.glob("shard-*.tar"))
    indexes = sorted(str(p) for p in idx.glob("*.dali.idx"))
    seen = []
    for rank in range(2):
        got = _run(shards, indexes, shard_id=rank, num_shards=2, batch=4)
        seen += [g[0] for g in got]
    assert {j for j, _ in expected.values()} <= set(seen)


def test_without_the_index_dali_scans_and_says_so(tmp_path, capfd):
    """The control of the warning check above: DALI warns when it must scan."""
    buf = io.BytesIO()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(buf, "JPEG")
    for i in range(3):
        (tmp_path / "tree" / "ab"[i % 2]).mkdir(parents=True, exist_ok=True)
        (tmp_path / "tree" / "ab"[i % 2] / f"{i}.jpg").write_bytes(buf.getvalue())
    run_bale("pack", tmp_path / "tree", "-o", tmp_path / "ds")
    shards = [str(tmp_path / "ds" / "shard-000000.tar")]
    capfd.readouterr()
    got = _run(shards, None, batch=3)
    assert len(got) == 3
    assert "Index file not provided" in capfd.readouterr().err


def test_export_index_refuses_what_dali_cannot_read(tmp_path):
    (tmp_path / "tree" / "a").mkdir(parents=True)
    (tmp_path / "tree" / "a" / "x y.txt").write_bytes(b"space in the key")
    run_bale("pack", tmp_path / "tree", "-o", tmp_path / "ds")
    r = subprocess.run(
        [str(bale_bin()), "export-index", "--dali", str(tmp_path / "ds"), "-o", str(tmp_path / "idx")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert "a/x y" in r.stderr and "whitespace" in r.stderr, r.stderr
    assert not (tmp_path / "idx").exists(), "nothing is left behind"
    run_bale("pack", tmp_path / "tree", "-o", tmp_path / "zst", "--compress", "zstd")
    r = subprocess.run(
        [str(bale_bin()), "export-index", "--dali", str(tmp_path / "zst"), "-o", str(tmp_path / "idx")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "plain tar" in r.stderr, r.stderr
