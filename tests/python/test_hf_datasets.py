"""Hugging Face `datasets` reads bale's tar shards with its "webdataset" builder, offline."""

from __future__ import annotations

import io
import json
import os

import numpy as np
from PIL import Image

from conftest import run_bale

# No hub access: the builder ships with the package.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

import datasets  # noqa: E402


def test_load_dataset_webdataset_yields_every_sample(tmp_path):
    tree = tmp_path / "tree"
    expected = {}
    for i in range(17):
        cls = ("cat", "dog", "eel")[i % 3]
        d = tree / cls
        d.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        Image.fromarray(np.full((5, 7, 3), i, np.uint8)).save(buf, "PNG")
        (d / f"{i:03d}.png").write_bytes(buf.getvalue())
        (d / f"{i:03d}.json").write_text(json.dumps({"i": i, "caption": f"sample {i}"}))
        (d / f"{i:03d}.txt").write_text(f"text {i}")
        expected[f"{cls}/{i:03d}"] = (buf.getvalue(), i % 3, i)
    ds_dir = tmp_path / "ds"
    run_bale("pack", tree, "-o", ds_dir, "--shard-samples", "5")
    shards = sorted(str(p) for p in ds_dir.glob("shard-*.tar"))
    assert len(shards) == 4

    ds = datasets.load_dataset(
        "webdataset",
        data_files={"train": shards},
        split="train",
        cache_dir=str(tmp_path / "hf-cache"),
    )
    assert len(ds) == len(expected)
    assert {"__key__", "png", "json", "txt", "cls"} <= set(ds.column_names), ds.column_names
    raw = ds.cast_column("png", datasets.Image(decode=False))
    seen = set()
    for row, raw_row in zip(ds, raw):
        key = row["__key__"]
        png, label, i = expected[key]
        seen.add(key)
        assert raw_row["png"]["bytes"] == png, key
        assert np.array_equal(np.asarray(row["png"]), np.full((5, 7, 3), i, np.uint8))
        assert row["cls"] == label
        assert row["json"] == {"i": i, "caption": f"sample {i}"}
        assert row["txt"] == f"text {i}"
    assert seen == set(expected)

    # Streaming mode reads the same shards lazily.
    it = datasets.load_dataset("webdataset", data_files={"train": shards}, split="train", streaming=True)
    assert sorted(r["__key__"] for r in it) == sorted(expected)
