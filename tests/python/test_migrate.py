"""`bale convert` migrates MosaicML Streaming (MDS) and LitData datasets, written here by the
real writers, and every sample matches what those tools' own readers return."""

from __future__ import annotations

import io
import json
import subprocess

import numpy as np
import pytest
from PIL import Image

import bale
from conftest import bale_bin, run_bale


@pytest.fixture(autouse=True)
def _keep_the_start_method():
    """litdata.optimize sets multiprocessing's start method for the whole process
    (force=True): put back what the other tests' DataLoaders expect."""
    import multiprocessing as mp

    before = mp.get_start_method(allow_none=True)
    yield
    mp.set_start_method(before, force=True)


@pytest.fixture(autouse=True)
def _scratch_in_tmp_path(tmp_path, monkeypatch):
    """litdata.optimize and its reader put their scratch (`chunks`, `data`,
    cache lock files) in the temporary directory and leave it there: point
    it into the test's own folder, for this process and the workers it starts."""
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

N = 37


def _image(i: int, mode: str = "RGB") -> Image.Image:
    rng = np.random.default_rng(i)
    shape = (6 + i % 4, 9) if mode == "L" else (6 + i % 4, 9, len(mode))
    return Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8), mode)


def _decode(ext: str, data: bytes):
    """A bale member as the value it stands for."""
    if ext.endswith("npy"):
        return np.load(io.BytesIO(data))
    if ext.endswith(("jpg", "png")):
        return np.asarray(Image.open(io.BytesIO(data)))
    if ext.endswith("json"):
        return json.loads(data)
    return data


def _convert(src, dst) -> bale.Dataset:
    out = run_bale("convert", src, "-o", dst, "--shard-samples", "10", "--json")
    summary = json.loads(out)
    assert summary["samples"] == N
    run_bale("verify", dst)
    return bale.Dataset(str(dst))


MDS_COLUMNS = {
    "cls": "int",
    "txt": "str",
    "raw": "bytes",
    "jpg": "jpeg",
    "mask": "png",
    "pixels": "pil",
    "meta": "json",
    "emb": "ndarray",
    "grid": "ndarray:int16:2,3",
    "u16": "uint16",
    "i8": "int8",
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "si": "str_int",
}


def _mds_sample(i: int) -> dict:
    rng = np.random.default_rng(i)
    return {
        "cls": i % 5 - 2,
        "txt": f"caption {i} ✓",
        "raw": bytes(range(i % 7)) * i,
        "jpg": _image(i),
        "mask": _image(i, "L"),
        "pixels": _image(i, "RGBA" if i % 2 else "RGB"),
        "meta": {"i": i, "tags": ["a", "b"][: i % 3]},
        "emb": rng.standard_normal((1 + i % 3, 4)).astype(np.float32),
        "grid": np.arange(6, dtype=np.int16).reshape(2, 3) * i,
        "u16": 65535 - i,
        "i8": -i,
        "f16": np.float16(i / 7),
        "f32": np.float32(i / 3),
        "f64": i / 11,
        "si": i * 1000,
    }


@pytest.mark.parametrize("compression", [None, "zstd:7"])
def test_mds_to_bale_keeps_every_sample(tmp_path, compression):
    from streaming import MDSWriter, StreamingDataset

    src = tmp_path / "mds"
    with MDSWriter(out=str(src), columns=MDS_COLUMNS, compression=compression, size_limit=4096) as w:
        for i in range(N):
            w.write(_mds_sample(i))
    if compression:
        assert not list(src.glob("*.mds")), "only the compressed shards are there"
    ds = _convert(src, tmp_path / "bale")
    assert len(ds) == N
    ref = StreamingDataset(local=str(src), shuffle=False, batch_size=1)
    exts = {
        "cls": "cls", "txt": "txt", "raw": "raw", "jpg": "jpg", "mask": "mask.png",
        "pixels": "pixels.npy", "meta": "meta.json", "emb": "emb.npy", "grid": "grid.npy",
        "u16": "u16", "i8": "i8", "f16": "f16", "f32": "f32", "f64": "f64", "si": "si",
    }  # fmt: skip
    for i in range(N):
        got = ds[i]
        want = ref[i]
        assert got["__key__"] == f"{i:08d}"
        assert set(got) - {"__key__", "__index__"} == set(exts.values()) - {"cls"} | {"cls"}
        for col, ext in exts.items():
            if col == "cls":
                assert got["cls"] == want["cls"]
                continue
            value = got[ext] if not isinstance(got[ext], np.ndarray) else got[ext]
            w = want[col]
            if isinstance(w, Image.Image):
                w = np.asarray(w)
            if isinstance(value, (bytes, memoryview)):
                value = _decode(ext, bytes(value))
            if col in ("txt",):
                assert value.decode() == w
            elif col in ("u16", "i8", "si"):
                assert int(value) == int(w), (i, col)
            elif col in ("f16", "f32", "f64"):
                assert type(w)(float(value)) == w, (i, col, value, w)
            else:
                np.testing.assert_array_equal(np.asarray(value), np.asarray(w), err_msg=f"{i} {col}")


def test_mds_columns_bale_cannot_map_are_refused_by_name(tmp_path):
    from streaming import MDSWriter

    src = tmp_path / "mds"
    with MDSWriter(out=str(src), columns={"obj": "pkl", "txt": "str"}) as w:
        w.write({"obj": {"a": 1}, "txt": "x"})
    r = subprocess.run([str(bale_bin()), "convert", str(src), "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 2
    assert '"obj"' in r.stderr and '"pkl"' in r.stderr and "index.json" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()

    gz = tmp_path / "gz"
    with MDSWriter(out=str(gz), columns={"txt": "str"}, compression="gz") as w:
        w.write({"txt": "x"})
    r = subprocess.run([str(bale_bin()), "convert", str(gz), "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 2 and '"gz"' in r.stderr, r.stderr


def _lit_item(i: int) -> dict:
    rng = np.random.default_rng(i)
    return {
        "label": i % 4,
        "caption": f"item {i}",
        "blob": bytes([i % 256]) * (i % 9),
        "score": i / 9,
        "flag": bool(i % 2),
        "vec": rng.standard_normal(3 + i % 2).astype(np.float32),
        "mat": rng.integers(0, 9, (2, 2 + i % 3)).astype(np.int64),
        "img": _image(i),
    }


def _lit_write(i: int) -> dict:
    return _lit_item(i)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_litdata_to_bale_keeps_every_sample(tmp_path, compression):
    """Uncompressed chunks, and whole-chunk zstd (`compression_level="chunk"`)."""
    import litdata as ld

    src = tmp_path / "lit"
    ld.optimize(
        fn=_lit_write,
        inputs=list(range(N)),
        output_dir=str(src),
        chunk_bytes="4KB",
        num_workers=1,
        compression=compression,
        compression_level="chunk" if compression else None,
        mode="overwrite",
    )
    ds = _convert(src, tmp_path / "bale")
    ref = ld.StreamingDataset(input_dir=str(src))
    assert len(ref) == N == len(ds)
    # LitData's reader returns items in chunk order, which is the order bale keeps.
    for i in range(N):
        got, want = ds[i], ref[i]
        assert got["__key__"] == f"{i:08d}"
        assert int(got["label"]) == want["label"]
        assert bytes(got["caption"]).decode() == want["caption"]
        assert bytes(got["blob"]) == want["blob"]
        assert float(bytes(got["score"])) == want["score"]
        assert bytes(got["flag"]) == (b"1" if want["flag"] else b"0")
        np.testing.assert_array_equal(got["vec.npy"], np.asarray(want["vec"]))
        np.testing.assert_array_equal(got["mat.npy"], np.asarray(want["mat"]))
        np.testing.assert_array_equal(got["img.npy"], np.asarray(want["img"]))


def test_litdata_layouts_bale_cannot_read_are_refused(tmp_path):
    import litdata as ld

    src = tmp_path / "lit"
    # zstd in frames of items inside the chunk (LitData's default for zstd).
    ld.optimize(fn=_lit_write, inputs=list(range(4)), output_dir=str(src), chunk_bytes="4KB",
                num_workers=1, compression="zstd", mode="overwrite")  # fmt: skip
    r = subprocess.run([str(bale_bin()), "convert", str(src), "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 2 and "batch" in r.stderr and "index.json" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def _lit_text(i: int) -> dict:
    return {"label": i % 4, "caption": f"caption {i} " * (i % 7 + 1)}


def test_litdata_rows_kept_only_in_arrow_are_refused_by_name(tmp_path):
    """LitData keeps samples that are dicts of strings and numbers only in an
    Arrow IPC file at the chunk's end, leaving its own samples empty: bale
    says so, instead of calling the chunk corrupt or converting empty samples."""
    import litdata as ld

    src = tmp_path / "lit"
    ld.optimize(fn=_lit_text, inputs=list(range(50)), output_dir=str(src), chunk_bytes="4KB",
                num_workers=1, mode="overwrite")  # fmt: skip
    assert ld.StreamingDataset(input_dir=str(src))[3]["caption"] == _lit_text(3)["caption"]
    r = subprocess.run([str(bale_bin()), "convert", str(src), "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "Arrow IPC" in r.stderr and "chunk-0-0.bin" in r.stderr and "corrupt" not in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()
