"""bale.Dataset: values, labels, NumPy fields, options and errors."""

from __future__ import annotations

import gc
import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import bale
from conftest import N, Packed, assert_sample, run_bale


def test_every_sample_equals_what_was_packed(any_ds: Packed) -> None:
    ds = bale.Dataset(any_ds.path)
    assert len(ds) == N
    seen = set()
    for i in range(len(ds)):
        s = ds[i]
        assert s["__index__"] == i
        assert ds.key(i) == s["__key__"]
        assert_sample(s, s["__key__"], any_ds)
        seen.add(s["__key__"])
    assert seen == set(any_ds.expected)


def test_sequential_iteration_matches_random_access(any_ds: Packed) -> None:
    ds = bale.Dataset(any_ds.path)
    it = iter(ds)
    assert len(it) == N
    keys = [s["__key__"] for s in it]
    assert keys == [ds.key(i) for i in range(N)]
    assert it.position == N


@pytest.mark.parametrize("backing", ["mmap", "pread"])
def test_backings_agree(tar_ds: Packed, zst_ds: Packed, backing: str) -> None:
    for packed in (tar_ds, zst_ds):
        ds = bale.Dataset(packed.path, backing=backing, verify_on_read=True)
        for i in (0, 13, N - 1):
            s = ds[i]
            assert_sample(s, s["__key__"], packed)


@pytest.mark.parametrize("read_around", ["auto", "always", "never"])
def test_read_around_reads_the_same_bytes_and_survives_pickling(tar_ds: Packed, read_around: str) -> None:
    import pickle

    for backing in ("mmap", "pread"):
        ds = bale.Dataset(tar_ds.path, backing=backing, read_around=read_around, decode="bytes")
        ref = bale.Dataset(tar_ds.path, backing=backing, decode="bytes")
        order = list(range(N - 1, -1, -3))
        assert ds.__getitems__(order) == [ref[i] for i in order]
        again = pickle.loads(pickle.dumps(ds))
        assert again.__getnewargs_ex__()[1]["read_around"] == read_around
        assert again[5] == ref[5]
    it = bale.IterableDataset(tar_ds.path, read_around=read_around, decode="bytes")
    assert [s["__key__"] for s in it] == [ref.key(i) for i in range(N)]
    with pytest.raises(ValueError, match="read_around"):
        bale.Dataset(tar_ds.path, read_around="sometimes")


def test_labels_and_classes(tar_ds: Packed, plain_ds: Packed) -> None:
    ds = bale.Dataset(tar_ds.path)
    assert ds.classes == ["cat", "dog", "eel"]
    assert "cls" in ds.extensions and "npy" in ds.extensions
    for i in range(N):
        s = ds[i]
        assert ds.classes[s["cls"]] == s["__key__"].split("/")[0]
        assert isinstance(s["cls"], int)
    assert bale.Dataset(plain_ds.path).classes is None


def test_get_by_key_find_and_negative_indices(zst_ds: Packed) -> None:
    ds = bale.Dataset(zst_ds.path)
    for key in list(zst_ds.expected)[::7]:
        s = ds.get_by_key(key)
        assert_sample(s, key, zst_ds)
        assert ds.find(key) == s["__index__"]
        assert ds[s["__index__"]]["__key__"] == key
    assert ds.find("no/such") is None
    assert ds[-1]["__index__"] == N - 1
    assert ds[-N]["__index__"] == 0
    assert sum(ds.shard_sizes) == N and len(ds.shard_sizes) == 5


def test_getitems_reads_a_batch(tar_ds: Packed) -> None:
    ds = bale.Dataset(tar_ds.path)
    idx = [5, 0, 39, 5, -2]
    got = ds.__getitems__(idx)
    assert [s["__index__"] for s in got] == [5, 0, 39, 5, 38]
    for s, i in zip(got, idx):
        one = ds[i]
        assert s.keys() == one.keys()
        for k, v in one.items():
            if isinstance(v, np.ndarray):
                assert np.array_equal(s[k], v) and s[k].dtype == v.dtype
            else:
                assert s[k] == v
    assert ds.__getitems__([]) == []
    # Any iterable of integers: a NumPy array, a torch tensor (a sampler's), a range.
    import torch

    for seq in (np.array(idx), np.array(idx[:4], dtype=np.uint16), torch.tensor(idx), range(5, 8)):
        want = [ds[int(i)]["__index__"] for i in seq]
        assert [s["__index__"] for s in ds.__getitems__(seq)] == want, seq
    with pytest.raises(IndexError, match=str(N)):
        ds.__getitems__(torch.tensor([0, N]))
    with pytest.raises(TypeError):
        ds.__getitems__(torch.tensor([0.5]))
    with pytest.raises(TypeError):
        ds.__getitems__(3)
    for bad in ([0, N], [-N - 1, 3]):
        with pytest.raises(IndexError, match=str(bad[0])):
            ds.__getitems__(bad)


def test_npy_zero_copy_on_mapped_tar(tar_ds: Packed) -> None:
    ds = bale.Dataset(tar_ds.path)
    arr = ds[3]["npy"]
    base = arr
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base, bale.SampleBuffer)
    assert base.mapped
    assert not arr.flags.writeable
    with pytest.raises(ValueError):
        arr[0, 0] = 1.0
    mv = memoryview(base)
    assert mv.readonly and len(mv) == len(base)
    with pytest.raises(TypeError):
        mv[0] = 0


def test_npy_views_heap_buffer_for_pread_and_zstd(tar_ds: Packed, zst_ds: Packed) -> None:
    for packed, backing in ((tar_ds, "pread"), (zst_ds, "mmap")):
        arr = bale.Dataset(packed.path, backing=backing)[3]["npy"]
        base = arr
        while isinstance(base, np.ndarray):
            base = base.base
        assert isinstance(base, bale.SampleBuffer) and not base.mapped


def test_arrays_outlive_the_dataset(tar_ds: Packed) -> None:
    ds = bale.Dataset(tar_ds.path)
    arrays = [(ds[i]["__key__"], ds[i]["npy"], ds[i]["fort.npy"]) for i in range(N)]
    del ds
    gc.collect()
    for key, a, f in arrays:
        np.testing.assert_array_equal(a, tar_ds.expected[key]["npy"])
        np.testing.assert_array_equal(f, tar_ds.expected[key]["fort.npy"])
        assert f.flags.f_contiguous


def test_fields_filter(tar_ds: Packed) -> None:
    ds = bale.Dataset(tar_ds.path, fields=["txt", "cls"])
    s = ds[2]
    assert set(s) == {"__key__", "__index__", "txt", "cls"}
    s = bale.Dataset(tar_ds.path, fields=["npy"])[2]
    assert set(s) == {"__key__", "__index__", "npy"}


def test_one_field_string_gives_its_value_alone(tar_ds: Packed, zst_ds: Packed) -> None:
    import pickle

    for packed in (tar_ds, zst_ds):
        ref = bale.Dataset(packed.path)
        txt = bale.Dataset(packed.path, fields="txt")
        for i in (0, 5, N - 1):
            assert txt[i] == packed.expected[ref.key(i)]["txt"]
        assert txt.get_by_key(ref.key(3)) == packed.expected[ref.key(3)]["txt"]
        assert txt.__getitems__([7, 2]) == [ref[7]["txt"], ref[2]["txt"]]
        assert list(txt) == [ref[i]["txt"] for i in range(N)]
        cls = bale.Dataset(packed.path, fields="cls")
        assert [cls[i] for i in range(N)] == [packed.labels[ref.key(i)] for i in range(N)]
        arr = bale.Dataset(packed.path, fields="npy")[6]
        np.testing.assert_array_equal(arr, packed.expected[ref.key(6)]["npy"])
        again = pickle.loads(pickle.dumps(txt))
        assert again.__getnewargs_ex__()[1]["fields"] == "txt"
        assert again[9] == txt[9]
    it = bale.IterableDataset(tar_ds.path, fields="__key__", shuffle=True, seed=4)
    keys = list(pickle.loads(pickle.dumps(it)))
    assert sorted(keys) == sorted(tar_ds.expected) and keys != sorted(keys)


def test_as_tuple_gives_the_fields_in_order(tar_ds: Packed) -> None:
    import pickle

    ref = bale.Dataset(tar_ds.path)
    ds = bale.Dataset(tar_ds.path, fields=["cls", "txt", "__key__", "__index__"], as_tuple=True, decode="bytes")
    for i in (0, 11, N - 1):
        key = ref.key(i)
        assert ds[i] == (tar_ds.labels[key], tar_ds.expected[key]["txt"], key, i)
    assert ds.__getitems__([3, 1]) == [ds[3], ds[1]]
    assert [t[2] for t in ds] == [ref.key(i) for i in range(N)]
    again = pickle.loads(pickle.dumps(ds))
    assert again.__getnewargs_ex__()[1]["as_tuple"] is True
    assert again[8] == ds[8]
    one = bale.Dataset(tar_ds.path, fields=["txt"], as_tuple=True)
    assert one[4] == (ref[4]["txt"],)
    it = bale.IterableDataset(tar_ds.path, fields=("bin", "cls"), as_tuple=True)
    got = list(pickle.loads(pickle.dumps(it)))
    assert got == [(ref[i]["bin"], ref[i]["cls"]) for i in range(N)]


def test_as_tuple_gives_none_for_a_field_a_sample_lacks(tmp_path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(b"A")
    (src / "a.txt").write_bytes(b"text of a")
    (src / "b.bin").write_bytes(b"B")
    run_bale("pack", src, "-o", tmp_path / "ds", "--labels", "none")
    ds = bale.Dataset(tmp_path / "ds", fields=["__key__", "bin", "txt"], as_tuple=True)
    assert sorted(ds[i] for i in range(len(ds))) == [("a", b"A", b"text of a"), ("b", b"B", None)]
    txt = bale.Dataset(tmp_path / "ds", fields="txt")
    assert sorted(txt, key=lambda v: v is None) == [b"text of a", None]


def test_tuple_and_one_field_refuse_names_no_sample_has(tar_ds: Packed, plain_ds: Packed) -> None:
    said = r'no field "jpeg" in the dataset .*: its samples have __key__, __index__, cls, bin, empty.npy, '
    with pytest.raises(ValueError, match=said):
        bale.Dataset(tar_ds.path, fields=["cls", "jpeg"], as_tuple=True)
    with pytest.raises(ValueError, match='no field "jpg"'):
        bale.Dataset(tar_ds.path, fields="jpg")
    # cls is a field only of labelled datasets.
    with pytest.raises(ValueError, match='no field "cls"'):
        bale.Dataset(plain_ds.path, fields="cls")
    with pytest.raises(ValueError, match="as_tuple=True needs fields"):
        bale.Dataset(tar_ds.path, as_tuple=True)
    with pytest.raises(ValueError, match="as_tuple=True needs fields"):
        bale.Dataset(tar_ds.path, fields=[], as_tuple=True)
    with pytest.raises(ValueError, match="fields must be a string or a sequence of strings"):
        bale.Dataset(tar_ds.path, fields=3)  # type: ignore[arg-type]
    # A dict keeps the old meaning: a list of one name filters, a dict comes back.
    assert set(bale.Dataset(tar_ds.path, fields=["txt"])[0]) == {"__key__", "__index__", "txt"}


def test_decode_bytes_and_callable(tar_ds: Packed) -> None:
    s = bale.Dataset(tar_ds.path, decode="bytes")[4]
    assert isinstance(s["npy"], bytes)
    np.testing.assert_array_equal(
        np.load(__import__("io").BytesIO(s["npy"])), tar_ds.expected[s["__key__"]]["npy"]
    )
    seen = []

    def dec(ext, value):
        seen.append((ext, type(value).__name__))
        return value.decode() if ext == "txt" else value

    s = bale.Dataset(tar_ds.path, decode=dec)[4]
    assert s["txt"] == f"sample {s['__key__'].split('/')[1].lstrip('0') or 0}"
    assert ("npy", "ndarray") in seen and ("bin", "bytes") in seen
    assert bale.Dataset(tar_ds.path, decode="numpy")[4]["npy"].dtype == np.float32


def test_threads_read_the_same_values(tar_ds: Packed) -> None:
    ds = bale.Dataset(tar_ds.path)

    def read(i: int) -> tuple[str, bytes]:
        s = ds[i]
        return s["__key__"], s["bin"]

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(read, list(range(N)) * 4))
    for key, b in got:
        assert b == tar_ds.expected[key]["bin"]
    # Once reads are warm, ds[i] keeps the GIL for the read (quick reads):
    # threads still read the same values.
    for _ in range(2 * 256 // N + 2):
        for i in range(N):
            read(i)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(read, list(range(N)) * 4))
    for key, b in got:
        assert b == tar_ds.expected[key]["bin"]


def test_index_errors(tar_ds: Packed) -> None:
    ds = bale.Dataset(tar_ds.path)
    # Past i64 too, as a list says: IndexError, not OverflowError.
    for bad in (N, N + 5, -N - 1, 2**62, 2**63, -(2**63) - 1, 10**30):
        with pytest.raises(IndexError, match="out of range"):
            ds[bad]
    assert ds[np.int64(3)]["__index__"] == 3
    for bad in (np.uint64(2**63), 2**63):
        with pytest.raises(IndexError, match="out of range"):
            ds[bad]
        with pytest.raises(IndexError, match="out of range"):
            ds.key(bad)
    with pytest.raises(IndexError, match="out of range"):
        ds.__getitems__([0, 2**63])
    with pytest.raises(TypeError):
        ds.__getitems__([0, 1.5])
    with pytest.raises(TypeError):
        ds[1.0]  # type: ignore[index]
    with pytest.raises(IndexError):
        ds.key(N)
    with pytest.raises(TypeError):
        ds["cat/00000"]  # type: ignore[index]
    with pytest.raises(KeyError, match="no/such"):
        ds.get_by_key("no/such")


def test_open_errors(tmp_path, tar_ds: Packed) -> None:
    with pytest.raises(FileNotFoundError):
        bale.Dataset(tmp_path / "missing")
    with pytest.raises(bale.FormatError, match="bale.json"):
        bale.Dataset(tmp_path)
    assert issubclass(bale.FormatError, bale.BaleError)
    with pytest.raises(ValueError, match="backing"):
        bale.Dataset(tar_ds.path, backing="tape")
    with pytest.raises(ValueError, match="decode"):
        bale.Dataset(tar_ds.path, decode="pickle")
    # A corrupt manifest and a truncated index are format errors naming the file.
    bad = tmp_path / "bad"
    shutil.copytree(tar_ds.path, bad)
    (bad / "bale.json").write_text("{not json")
    with pytest.raises(bale.FormatError, match="bale.json"):
        bale.Dataset(bad)
    shutil.rmtree(bad)
    shutil.copytree(tar_ds.path, bad)
    idx = sorted(bad.glob("*.idx"))[1]
    idx.write_bytes(idx.read_bytes()[:-9])
    with pytest.raises(bale.FormatError, match=idx.name):
        bale.Dataset(bad)


def test_corrupt_member_is_a_checksum_error(tmp_path, tar_ds: Packed) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(tar_ds.path, bad)
    shard = sorted(bad.glob("*.tar"))[0]
    data = bytearray(shard.read_bytes())
    # Flip a byte of the first member's data (after its 512-byte header).
    data[520] ^= 0xFF
    shard.write_bytes(bytes(data))
    ds = bale.Dataset(bad, verify_on_read=True)
    with pytest.raises(bale.FormatError, match=shard.name):
        ds[0]
    ds[len(ds) - 1]  # other samples still read


def test_bad_npy_member_is_a_format_error(tmp_path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.npy").write_bytes(b"\x93NUMPY\x01\x00\x40\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1000,), }")
    (src / "b.npy").write_bytes(b"PK\x03\x04 a zip, not an array")
    out = tmp_path / "ds"
    from conftest import run_bale

    run_bale("pack", src, "-o", out)
    ds = bale.Dataset(out)
    with pytest.raises(bale.FormatError, match=r"sample \"a\".*field npy"):
        ds.get_by_key("a")
    with pytest.raises(bale.FormatError, match="magic"):
        ds.get_by_key("b")
    assert bale.Dataset(out, decode="bytes").get_by_key("b")["npy"].startswith(b"PK")


def test_repr_len_and_path(tar_ds: Packed) -> None:
    ds = bale.Dataset(tar_ds.path)
    assert len(ds) == N
    assert ds.path == os.fspath(tar_ds.path)
    assert "samples=40" in repr(ds)


def test_decode_memoryview_is_zero_copy(tar_ds: Packed, zst_ds: Packed) -> None:
    for packed in (tar_ds, zst_ds):
        ds = bale.Dataset(packed.path, decode="memoryview")
        s = ds[6]
        del ds
        gc.collect()
        mv = s["bin"]
        assert isinstance(mv, memoryview) and mv.readonly
        assert bytes(mv) == packed.expected[s["__key__"]]["bin"]
        assert isinstance(mv.obj, bale.SampleBuffer)
        assert mv.obj.mapped == (packed is tar_ds)
        np.testing.assert_array_equal(np.load(__import__("io").BytesIO(s["npy"])), packed.expected[s["__key__"]]["npy"])
