"""No data shadows a reader's own fields: a member named like one
(`k.__key__`, `k.__index__`, `k.__source__`), which today's writers refuse
but an older bale wrote, never replaces the sample's key, index or source
in the dicts of `bale.Dataset`, `bale.IterableDataset` and `bale.Mix`, and
`bale verify` reports it."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
import xxhash

import bale
from conftest import bale_bin, run_bale

# Each reserved name and a placeholder of its length that writers accept.
RESERVED = {"__key__": "zzkeyzz", "__index__": "zzindexzz", "__source__": "zzsourcezz"}


def write_tar(path: Path, exts: dict[str, str]) -> None:
    """Two samples `k0`, `k1`, each a `.txt` and one member per `exts` value."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        for k in ("k0", "k1"):
            for ext, data in [("txt", f"text of {k}"), *((e, f"data {e} of {k}") for e in exts.values())]:
                raw = data.encode()
                info = tarfile.TarInfo(f"{k}.{ext}")
                info.size = len(raw)
                info.mtime = 0
                tf.addfile(info, io.BytesIO(raw))


def older_dataset(tmp_path: Path) -> Path:
    """A dataset whose members carry reserved names, as an older `bale index`
    wrote it: indexed under placeholders of the same length, then the tar,
    the index's string table (its footer checksum) and the manifest renamed."""
    tar = tmp_path / "older.tar"
    write_tar(tar, RESERVED)
    ds = tmp_path / "ds"
    run_bale("index", "-q", "-o", ds, tar)
    # The tar again under the reserved names: the same bytes but the names.
    renamed = tmp_path / "renamed.tar"
    write_tar(renamed, {r: r for r in RESERVED})
    assert renamed.stat().st_size == tar.stat().st_size
    renamed.replace(tar)
    manifest = json.loads((ds / "bale.json").read_text())
    (entry,) = manifest["shards"]
    idx_path = ds / entry["index"]
    body = idx_path.read_bytes()[:-8]
    for reserved, placeholder in RESERVED.items():
        assert body.count(placeholder.encode()) >= 1
        body = body.replace(placeholder.encode(), reserved.encode())
    footer = xxhash.xxh3_64_intdigest(body)
    idx_path.write_bytes(body + footer.to_bytes(8, "little"))
    entry["index_xxh3"] = f"{footer:016x}"
    text = json.dumps(manifest)
    for reserved, placeholder in RESERVED.items():
        text = text.replace(f'"{placeholder}"', f'"{reserved}"')
    (ds / "bale.json").write_text(text)
    return ds


@pytest.fixture(scope="module")
def older(tmp_path_factory) -> Path:
    return older_dataset(tmp_path_factory.mktemp("reserved"))


def check(sample: dict, key: str, index: int) -> None:
    assert sample["__key__"] == key, sample
    assert sample["__index__"] == index, sample
    assert sample["txt"] == f"text of {key}".encode(), sample
    assert not any(isinstance(v, bytes) and v.startswith(b"data __") for v in sample.values()), sample


def test_the_dataset_reads_the_renamed_members_back(older) -> None:
    # The set-up holds what it claims: the index names the reserved members.
    ds = bale.Dataset(older)
    assert {"__key__", "__index__", "__source__"} <= set(ds.extensions), ds.extensions


@pytest.mark.parametrize("decode", ["bytes", "numpy"])
def test_dataset_dicts_keep_their_key_and_index(older, decode) -> None:
    ds = bale.Dataset(older, decode=decode)
    for i, key in enumerate(["k0", "k1"]):
        check(ds[i], key, i)
    check(ds.get_by_key("k1"), "k1", 1)
    # Asked for by name, a reserved member is still no field of the dict.
    picked = bale.Dataset(older, fields=["txt"])[1]
    check(picked, "k1", 1)
    assert set(picked) == {"__key__", "__index__", "txt"}, picked


def test_iterable_dataset_dicts_keep_their_key_and_index(older) -> None:
    got = sorted(list(bale.IterableDataset(older)), key=lambda s: s["__index__"])
    assert len(got) == 2
    for i, s in enumerate(got):
        check(s, f"k{i}", i)
    for s in bale.IterableDataset(older, shuffle=True, seed=3):
        check(s, s["__key__"], int(s["__key__"][1:]))


def test_mix_dicts_keep_their_source(older) -> None:
    mix = bale.Mix([(older, 1), (older, 1)], samples=8, shuffle=True, seed=0)
    sources = set()
    for s in mix:
        check(s, s["__key__"], int(s["__key__"][1:]))
        assert s["__source__"] in (0, 1), s
        sources.add(s["__source__"])
    assert sources == {0, 1}


def test_verify_reports_each_reserved_member(older) -> None:
    r = subprocess.run([str(bale_bin()), "verify", str(older)], capture_output=True, text=True)
    assert r.returncode == 1, (r.stdout, r.stderr)
    for name in RESERVED:
        assert f"member name .{name} is reserved" in r.stdout, r.stdout
