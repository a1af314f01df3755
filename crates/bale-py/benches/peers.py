"""The peers of crates/bale-py/benches/read.py: how each one is written and read.

Every peer is written from the same tree by the same walk (``walk``: samples are
the files sharing a path up to the first dot of their name, sorted by that key,
hidden files skipped, as ``bale pack`` groups them), and every reader yields the
samples of bale's order (``Catalog``) so that the random rows of all peers read
the same seeded permutation.

Writers (each one durable: the clock stops after fsync/sync; each reads the
tree itself, so its walk and stats are timed as bale's are):

- ``bale``: ``bale pack TREE -o OUT`` (plain tar shards; bale fsyncs each shard);
  ``bale-zstd``: the same with ``--compress zstd``;
- ``h5``: h5py, one HDF5 file: per extension one contiguous uint8 dataset of the
  concatenated files (``fields/<ext>/data``) and their offsets
  (``fields/<ext>/offsets``, n + 1), and the keys; written in 64 MiB blocks, then
  flush and fsync;
- ``lmdb``: one write transaction, ``put(b"<key>.<ext>", bytes, append=True)`` in
  key order, a durable commit, then ``env.sync(True)``;
- ``tar``: GNU ``tar cf OUT -C TREE <entries>`` then fsync of the tar; an index of
  its members (offset and size) is written next to it, untimed;
- ``litdata``: ``litdata.streaming.writer.BinaryWriter`` (64 MiB chunks), one item
  per sample (``{"__key__": key, ext: bytes, ...}``), done, merge, fsync of every file;
- ``mds``: ``streaming.MDSWriter`` (no compression, 64 MiB shards), same items,
  fsync of every file.

Readers: see ``ROWS``. The touch rule is the same everywhere: every payload
field of every sample ends up in a Python object holding a copy of its bytes
(``bytes`` from bale, lmdb, os.pread, open().read(), MosaicML and webdataset;
LitData returns ``memoryview`` fields, which are copied with ``bytes()``; h5py
returns a new numpy array), and its length is added up; each pass must add up to
the payload of the tree, or the row fails.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import json
import os
import random
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

BLOCK = 64 << 20  # h5py write blocks; LitData chunks and MDS shards.
BATCH = 64  # the batched rows.
COMPLETE = ".bench-complete.json"  # written last into a cached peer dataset.

# ---------------------------------------------------------------- the corpus


def walk(tree: str | os.PathLike[str]) -> list[tuple[str, list[tuple[str, str, int]]]]:
    """The samples of ``tree``: ``(key, [(ext, path, size), ...])`` sorted by key, then ext."""
    tree = os.fspath(tree)
    by_key: dict[str, list[tuple[str, str, int]]] = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(tree, rel) if rel else tree) as it:
            for e in it:
                if e.name.startswith("."):
                    continue
                if e.is_dir(follow_symlinks=False):
                    stack.append(f"{rel}/{e.name}" if rel else e.name)
                    continue
                stem, _, ext = e.name.partition(".")
                key = f"{rel}/{stem}" if rel else stem
                by_key.setdefault(key, []).append((ext, e.path, e.stat().st_size))
    return [(k, sorted(by_key[k])) for k in sorted(by_key)]


def fingerprint(samples: list[tuple[str, list[tuple[str, str, int]]]]) -> dict[str, int]:
    """What a cached peer dataset must match to be reused: sample and file counts, bytes."""
    return {
        "samples": len(samples),
        "files": sum(len(fs) for _, fs in samples),
        "bytes": sum(s for _, fs in samples for _, _, s in fs),
    }


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _fsync_tree(root: str | os.PathLike[str]) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def files_of(path: str | os.PathLike[str]) -> list[str]:
    """Every regular file of a dataset (a file, or a directory walked), for eviction and sizes."""
    path = os.fspath(path)
    if os.path.isfile(path):
        return [path]
    out = []
    for dirpath, _, files in os.walk(path):
        out += [os.path.join(dirpath, f) for f in files if f != COMPLETE]
    return sorted(out)


def du(path: str | os.PathLike[str]) -> int:
    """Apparent size of a dataset (the sum of its files' sizes)."""
    return sum(os.path.getsize(p) for p in files_of(path))


# ---------------------------------------------------------------- writers


def pack_bale(tree: str, out: str, bale: str, compress: str | None = None) -> float:
    cmd = [bale, "pack", tree, "-o", out, "--force", "--quiet"]
    if compress:
        cmd += ["--compress", compress]
    t = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t


def pack_h5(tree: str, out: str) -> float:
    import h5py
    import numpy as np

    t = time.perf_counter()
    samples = walk(tree)
    n = len(samples)
    exts = sorted({e for _, fs in samples for e, _, _ in fs})
    offsets = {}
    for ext in exts:
        sizes = np.zeros(n, np.uint64)
        for i, (_, fs) in enumerate(samples):
            for e, _, s in fs:
                if e == ext:
                    sizes[i] = s
        offsets[ext] = np.zeros(n + 1, np.uint64)
        offsets[ext][1:] = np.cumsum(sizes)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with h5py.File(out, "w") as f:
        for ext in exts:
            data = f.create_dataset(f"fields/{ext}/data", (int(offsets[ext][-1]),), np.uint8)
            buf, pos = bytearray(), 0
            for _, fs in samples:
                for e, p, _ in fs:
                    if e != ext:
                        continue
                    buf += _read(p)
                    if len(buf) >= BLOCK:
                        data[pos : pos + len(buf)] = np.frombuffer(buf, np.uint8)
                        pos += len(buf)
                        buf = bytearray()
            if buf:
                data[pos : pos + len(buf)] = np.frombuffer(buf, np.uint8)
            f[f"fields/{ext}/offsets"] = offsets[ext]
        f.create_dataset("keys", data=[k for k, _ in samples], dtype=h5py.string_dtype())
        f.flush()
        os.fsync(f.id.get_vfd_handle())
    return time.perf_counter() - t


def pack_lmdb(tree: str, out: str) -> float:
    import lmdb

    t = time.perf_counter()
    samples = walk(tree)
    total = sum(s for _, fs in samples for _, _, s in fs)
    items = sorted((f"{k}.{e}".encode(), p) for k, fs in samples for e, p, _ in fs)
    os.makedirs(out, exist_ok=True)
    env = lmdb.open(out, map_size=2 * total + (1 << 30), sync=True, metasync=True, meminit=False)
    with env.begin(write=True) as txn:
        for key, p in items:
            txn.put(key, _read(p), append=True)
    env.sync(True)
    env.close()
    return time.perf_counter() - t


def pack_tar(tree: str, out: str) -> float:
    t = time.perf_counter()
    entries = sorted(e for e in os.listdir(tree) if not e.startswith("."))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    subprocess.run(["tar", "cf", out, "-C", tree, "--", *entries], check=True)
    fd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t


def tar_members(tar: str) -> list[list]:
    """``[key, ext, offset, size]`` of every file member of ``tar`` (Python's tarfile)."""
    import tarfile

    members = []
    with tarfile.open(tar) as tf:
        for m in tf:
            if not m.isfile():
                continue
            name = m.name[2:] if m.name.startswith("./") else m.name
            d, _, base = name.rpartition("/")
            stem, _, ext = base.partition(".")
            members.append([f"{d}/{stem}" if d else stem, ext, m.offset_data, m.size])
    return members


def tar_index_path(bale_dataset: str) -> str:
    return bale_dataset.rstrip("/") + ".tar-index.json"


def index_bale_tars(bale_dataset: str) -> str:
    """Writes (unless up to date) the index the ``tarpread`` rows read bale's shards
    through: ``{shard: [[key, ext, offset, size], ...]}`` from Python's tarfile, not
    from bale's own index. Returns its path."""
    out = tar_index_path(bale_dataset)
    manifest = os.path.join(bale_dataset, "bale.json")
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(manifest):
        return out
    shards = sorted(str(p) for p in Path(bale_dataset).glob("*.tar"))
    index = {os.path.basename(t): tar_members(t) for t in shards}
    with open(out + ".tmp", "w") as f:
        json.dump(index, f)
    os.replace(out + ".tmp", out)
    return out


def pack_litdata(tree: str, out: str) -> float:
    from litdata.streaming.writer import BinaryWriter

    t = time.perf_counter()
    samples = walk(tree)
    exts = sorted({e for _, fs in samples for e, _, _ in fs})
    w = BinaryWriter(out, chunk_bytes=BLOCK)
    for i, (key, fs) in enumerate(samples):
        item: dict[str, object] = {"__key__": key}
        item.update({e: b"" for e in exts})
        for e, p, _ in fs:
            item[e] = _read(p)
        w.add_item(i, item)
    w.done()
    w.merge()
    _fsync_tree(out)
    return time.perf_counter() - t


def pack_mds(tree: str, out: str) -> float:
    from streaming import MDSWriter

    t = time.perf_counter()
    samples = walk(tree)
    exts = sorted({e for _, fs in samples for e, _, _ in fs})
    columns = {"__key__": "str", **{e: "bytes" for e in exts}}
    with MDSWriter(out=out, columns=columns, compression=None, size_limit=BLOCK) as w:
        for key, fs in samples:
            item: dict[str, object] = {"__key__": key}
            item.update({e: b"" for e in exts})
            for e, p, _ in fs:
                item[e] = _read(p)
            w.write(item)
    _fsync_tree(out)
    return time.perf_counter() - t


def pack_dd(nbytes: int, out: str) -> float:
    """``dd if=/dev/zero bs=1M conv=fdatasync`` of ``nbytes`` (rounded up to 1 MiB): the disk's durable write.

    1 MiB, not more: a write of a whole aligned 2 MiB has this kernel cache the
    file in 2 MiB pages, and such writes took about twice as long as 1 MiB ones
    (up to four times) in every set that timed both (docs/benchmarks.md,
    "2 MiB writes").
    """
    count = max(1, -(-nbytes // (1 << 20)))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    t = time.perf_counter()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={out}", "bs=1M", f"count={count}", "conv=fdatasync", "status=none"], check=True
    )
    return time.perf_counter() - t


# name -> (what it is, the path of its dataset inside its cache directory, writer(tree, out, bale))
WRITERS: dict[str, tuple[str, str, Callable[[str, str, str], float]]] = {
    "bale": ("bale pack (tar)", "data", lambda tree, out, bale: pack_bale(tree, out, bale)),
    "bale-zstd": ("bale pack --compress zstd", "data", lambda tree, out, bale: pack_bale(tree, out, bale, "zstd")),
    "h5": ("h5py, one file (+ fsync)", "data.h5", lambda tree, out, bale: pack_h5(tree, out)),
    "lmdb": ("lmdb, one transaction (durable commit)", "data", lambda tree, out, bale: pack_lmdb(tree, out)),
    "tar": ("tar cf (+ fsync)", "data.tar", lambda tree, out, bale: pack_tar(tree, out)),
    "litdata": ("LitData BinaryWriter (+ fsync)", "data", lambda tree, out, bale: pack_litdata(tree, out)),
    "mds": ("MosaicML MDSWriter (+ fsync)", "data", lambda tree, out, bale: pack_mds(tree, out)),
}


def build(peer: str, tree: str, root: str, bale: str, fp: dict[str, int], force: bool = False) -> tuple[dict, bool]:
    """The cached dataset of ``peer`` under ``root`` (``root/<data>``), written when missing,
    incomplete (no completion record) or made from another tree; returns its record and
    whether it was written now."""
    _, rel, writer = WRITERS[peer]
    done = os.path.join(root, COMPLETE)
    if not force and os.path.exists(done):
        with open(done) as f:
            meta = json.load(f)
        if meta.get("tree") == fp and os.path.exists(os.path.join(root, rel)):
            return meta, False
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    out = os.path.join(root, rel)
    secs = writer(tree, out, bale)
    meta = {"peer": peer, "tree": fp, "pack_s": secs, "bytes": du(out), "built": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(done, "w") as f:
        json.dump(meta, f)
    return meta, True


# ---------------------------------------------------------------- the page cache


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
_PAGE = os.sysconf("SC_PAGE_SIZE")
_MAP_FAILED = ctypes.c_void_p(-1).value


def prime(paths: Iterable[str]) -> None:
    """Reads every file once, sequentially: whatever sits below the page cache (a VM
    host's cache, a disk's) then holds the same data for every cold row, so the order
    of the rows does not favour the later ones."""
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass


def evict(paths: Iterable[str]) -> None:
    """Best effort: ``posix_fadvise(DONTNEED)`` over every file (pages mapped by a live
    process or dirty stay; see ``resident``)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def settle(paths: Iterable[str]) -> None:
    """Evicts every file, then reads it once in order (``prime``): whatever read a
    file before, its pages are then cached the way a plain sequential read caches
    them, the same for every row. The size of those pages moves warm reads by about
    1.1x (2 MiB pages against small ones, for bale and lmdb alike), and bale's cold
    reads leave small pages where lmdb's or a sequential read leave other sizes
    (docs/benchmarks.md, "Page sizes in the warm rows")."""
    paths = list(paths)
    evict(paths)
    prime(paths)


_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_MADV_POPULATE_READ = 22
_HUGE = 2 << 20


def huge_pages(paths: Iterable[str]) -> tuple[int, int] | None:
    """(bytes in 2 MiB pages, bytes) over the files: a fresh mapping of each, its page
    tables filled (``MADV_POPULATE_READ``, which reads in any page not cached), and its
    ``FilePmdMapped`` in /proc/self/smaps. None where the kernel does not say. A
    file under 2 MiB holds no 2 MiB page and is not mapped (the loose rows' files:
    one read of smaps per file would take minutes)."""
    have = total = 0
    for p in paths:
        size = os.path.getsize(p)
        total += size
        if size < _HUGE:
            continue
        with _mapped(p, size) as addr:
            if addr is None or _libc.madvise(addr, size, _MADV_POPULATE_READ) != 0:
                return None
            pmd = _pmd_mapped(addr)
        if pmd is None:
            return None
        have += pmd
    return have, total


def _pmd_mapped(addr: int) -> int | None:
    """The ``FilePmdMapped`` bytes of the mapping that starts at ``addr``."""
    try:
        with open("/proc/self/smaps") as f:
            mine = False
            for line in f:
                head = line.split(" ", 1)[0]
                if "-" in head and not line[0].isupper():
                    mine = int(head.split("-", 1)[0], 16) == addr
                elif mine and line.startswith("FilePmdMapped:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def resident(paths: Iterable[str]) -> tuple[int, int]:
    """(resident pages, pages) over the files, by ``mincore`` on a fresh mapping (which faults nothing in)."""
    have = total = 0
    for p in paths:
        size = os.path.getsize(p)
        if size == 0:
            continue
        pages = (size + _PAGE - 1) // _PAGE
        with _mapped(p, size) as addr:
            if addr is None:
                continue
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) == 0:
                have += sum(b & 1 for b in bytes(vec))
                total += pages
    return have, total


@contextlib.contextmanager
def _mapped(path: str, size: int) -> Iterator[int | None]:
    """A fresh read-only shared mapping of the file's ``size`` bytes (its address, or
    None when ``mmap`` fails), unmapped on exit; the descriptor is closed at once."""
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
    finally:
        os.close(fd)
    if addr in (None, _MAP_FAILED):
        yield None
        return
    try:
        yield addr
    finally:
        _libc.munmap(addr, size)


# ---------------------------------------------------------------- readers


@dataclass
class Context:
    """What every reader of one tree shares: bale's sample order and where each peer's dataset is."""

    keys: list[str]  # bale's order
    exts: list[list[str]]  # each sample's payload extensions
    paths: list[list[str]]  # each sample's loose files (ext order)
    payload: int
    seed: int
    datasets: dict[str, str]  # peer -> dataset path
    tree: str

    @property
    def n(self) -> int:
        return len(self.keys)

    def order(self) -> list[int]:
        """The random permutation, as new int objects made in this order (as
        ``torch.randperm(n).tolist()`` gives a DataLoader's sampler). The ints of
        a shuffled ``list(range(n))`` lie in memory in index order, so reading
        them in the shuffled order misses the cache once per sample (8% of a
        warm ``ds[i]`` of a 2 KB sample), a cost that no peer's plan, built in
        iteration order, pays."""
        order = list(range(self.n))
        random.Random(self.seed).shuffle(order)
        return [i ^ 0 for i in order]  # a new int each (above 256)

    @functools.cached_property
    def _walk_index(self) -> list[int]:
        at = {k: j for j, k in enumerate(sorted(self.keys))}
        return [at[k] for k in self.keys]

    def walk_index(self) -> list[int]:
        """Bale index -> index in the walk's order (in which every peer wrote its samples)."""
        return self._walk_index

    @staticmethod
    def load(path: str, seed: int, datasets: dict[str, str], tree: str) -> Context:
        with open(path) as f:
            c = json.load(f)
        return Context(c["keys"], c["exts"], c["paths"], c["payload"], seed, datasets, tree)


Opened = tuple[Callable[[], int], Callable[[], None]]


@dataclass
class Row:
    name: str
    group: str  # random | sequential | shuffled
    peer: str  # bale, lmdb, h5, tar, litdata, mds, wds, loose
    about: str
    opener: Callable[[Context], Opened]
    info: bool = False  # shown, never the best peer nor bale's headline figure
    reads: str = ""  # the dataset it reads when not the peer's own (wds, tar: bale's shards)

    @property
    def dataset(self) -> str:
        """The dataset it reads: bale, lmdb, h5, litdata, mds or loose (the tree)."""
        return self.reads or self.peer

    def files(self, ctx: Context) -> list[str]:
        if self.dataset == "loose":
            return [p for ps in ctx.paths for p in ps]
        return files_of(ctx.datasets[self.dataset])


def _nothing() -> None:
    pass


def _bale_fields(ds) -> list[str]:
    return [e for e in ds.extensions if e != "cls"]


def bale_random(ctx: Context, decode: str = "bytes") -> Opened:
    import bale

    ds = bale.Dataset(ctx.datasets["bale"], decode=decode)
    exts, order = _bale_fields(ds), ctx.order()

    def run() -> int:
        got = 0
        for i in order:
            s = ds[i]
            for e in exts:
                v = s.get(e)
                if v is not None:
                    got += len(v)
        return got

    return run, _nothing


def bale_batched(ctx: Context) -> Opened:
    import bale

    ds = bale.Dataset(ctx.datasets["bale"], decode="bytes")
    exts, order = _bale_fields(ds), ctx.order()
    batches = [order[k : k + BATCH] for k in range(0, len(order), BATCH)]

    def run() -> int:
        got = 0
        for b in batches:
            for s in ds.__getitems__(b):
                for e in exts:
                    v = s.get(e)
                    if v is not None:
                        got += len(v)
        return got

    return run, _nothing


def bale_threads(ctx: Context) -> Opened:
    from concurrent.futures import ThreadPoolExecutor

    import bale

    ds = bale.Dataset(ctx.datasets["bale"], decode="bytes")
    exts, order = _bale_fields(ds), ctx.order()
    halves = [order[0::2], order[1::2]]

    def part(idx: list[int]) -> int:
        got = 0
        for i in idx:
            s = ds[i]
            for e in exts:
                v = s.get(e)
                if v is not None:
                    got += len(v)
        return got

    def run() -> int:
        with ThreadPoolExecutor(2) as pool:
            return sum(pool.map(part, halves))

    return run, _nothing


def bale_iterable(ctx: Context, shuffle: bool) -> Opened:
    import bale

    it = bale.IterableDataset(ctx.datasets["bale"], decode="bytes", shuffle=shuffle, seed=ctx.seed)
    exts = _bale_fields(bale.Dataset(ctx.datasets["bale"]))

    def run() -> int:
        got = 0
        for s in it:
            for e in exts:
                v = s.get(e)
                if v is not None:
                    got += len(v)
        return got

    return run, _nothing


def _payload(ctx: Context) -> tuple[str | list[str], bool]:
    """bale's options for the payload alone, as lmdb gives it: the one payload
    field's name (each sample its bytes), or all of them with ``as_tuple``."""
    import bale

    exts = _bale_fields(bale.Dataset(ctx.datasets["bale"]))
    return (exts[0], False) if len(exts) == 1 else (exts, True)


def bale_values_random(ctx: Context) -> Opened:
    import bale

    fields, many = _payload(ctx)
    ds = bale.Dataset(ctx.datasets["bale"], fields=fields, as_tuple=many, decode="bytes")
    order = ctx.order()

    def run() -> int:
        got = 0
        if not many:
            for i in order:
                got += len(ds[i])
            return got
        for i in order:
            for v in ds[i]:
                if v is not None:
                    got += len(v)
        return got

    return run, _nothing


def bale_values_seq(ctx: Context) -> Opened:
    import bale

    fields, many = _payload(ctx)
    it = bale.IterableDataset(ctx.datasets["bale"], fields=fields, as_tuple=many, decode="bytes")

    def run() -> int:
        got = 0
        if not many:
            for v in it:
                got += len(v)
            return got
        for t in it:
            for v in t:
                if v is not None:
                    got += len(v)
        return got

    return run, _nothing


def lmdb_random(ctx: Context) -> Opened:
    import lmdb

    # lmdb's default readahead: with readahead=False (MDB_NORDAHEAD) a cold 110 KB
    # value is ~27 single-page faults, ten times slower here.
    env = lmdb.open(ctx.datasets["lmdb"], readonly=True, lock=False)
    txn = env.begin(buffers=False)
    plan = [[f"{ctx.keys[i]}.{e}".encode() for e in ctx.exts[i]] for i in ctx.order()]

    def run() -> int:
        got = 0
        get = txn.get
        for keys in plan:
            for k in keys:
                got += len(get(k))
        return got

    def close() -> None:
        txn.abort()
        env.close()

    return run, close


def lmdb_cursor(ctx: Context) -> Opened:
    import lmdb

    env = lmdb.open(ctx.datasets["lmdb"], readonly=True, lock=False, readahead=True)

    def run() -> int:
        got = 0
        with env.begin(buffers=False) as txn:
            for _, v in txn.cursor():
                got += len(v)
        return got

    return run, env.close


def _h5_layout(ctx: Context) -> tuple[dict[str, int], dict[str, list[int]]]:
    import h5py

    with h5py.File(ctx.datasets["h5"], "r") as f:
        exts = list(f["fields"].keys())
        base = {e: f[f"fields/{e}/data"].id.get_offset() or 0 for e in exts}
        offs = {e: f[f"fields/{e}/offsets"][()].tolist() for e in exts}
    return base, offs


def h5_pread(ctx: Context, order: list[int]) -> Opened:
    base, offs = _h5_layout(ctx)
    at = ctx.walk_index()
    plan = []
    for i in order:
        j = at[i]
        plan.append([(offs[e][j + 1] - offs[e][j], base[e] + offs[e][j]) for e in ctx.exts[i]])
    fd = os.open(ctx.datasets["h5"], os.O_RDONLY)

    def run() -> int:
        got = 0
        pread = os.pread
        for fields in plan:
            for size, off in fields:
                got += len(pread(fd, size, off))
        return got

    return run, lambda: os.close(fd)


def h5py_random(ctx: Context) -> Opened:
    import h5py

    f = h5py.File(ctx.datasets["h5"], "r")
    at = ctx.walk_index()
    data = {e: f[f"fields/{e}/data"] for e in f["fields"]}
    offs = {e: f[f"fields/{e}/offsets"][()].tolist() for e in f["fields"]}
    plan = []
    for i in ctx.order():
        j = at[i]
        plan.append([(data[e], offs[e][j], offs[e][j + 1]) for e in ctx.exts[i]])

    def run() -> int:
        got = 0
        for fields in plan:
            for d, a, b in fields:
                got += d[a:b].nbytes  # a new numpy array holding a copy of the bytes
        return got

    return run, f.close


def tar_pread(ctx: Context) -> Opened:
    """bale's shards as plain tars: an index from Python's tarfile (written beforehand,
    see ``index_bale_tars``), loaded into a dict, and ``os.pread``."""
    data = ctx.datasets["bale"]
    with open(tar_index_path(data)) as f:
        shards = json.load(f)
    fds = {name: os.open(os.path.join(data, name), os.O_RDONLY) for name in shards}
    index = {(k, e): (fds[name], size, off) for name, members in shards.items() for k, e, off, size in members}
    del shards
    plan = [[index[(ctx.keys[i], e)] for e in ctx.exts[i]] for i in ctx.order()]
    del index

    def run() -> int:
        got = 0
        pread = os.pread
        for fields in plan:
            for fd, size, off in fields:
                got += len(pread(fd, size, off))
        return got

    def close() -> None:
        for fd in fds.values():
            os.close(fd)

    return run, close


def litdata_random(ctx: Context) -> Opened:
    from litdata import StreamingDataset

    # batch_decode=0: decode the requested item only. LitData 0.2.76's chunks end in an
    # Arrow footer, though, and each ds[i] still turns the record batch of 256 rows
    # around i into Python objects (its _try_arrow_footer_rows comes first).
    ds = StreamingDataset(ctx.datasets["litdata"], batch_decode=0)
    at = ctx.walk_index()
    plan = [(at[i], ctx.exts[i]) for i in ctx.order()]

    def run() -> int:
        got = 0
        for j, fields in plan:
            s = ds[j]
            for e in fields:
                v = s[e]
                got += len(v) if type(v) is bytes else len(bytes(v))
        return got

    return run, _nothing


def litdata_iter(ctx: Context, shuffle: bool) -> Opened:
    from litdata import StreamingDataset

    ds = StreamingDataset(ctx.datasets["litdata"], shuffle=shuffle, seed=ctx.seed)
    exts = sorted({e for es in ctx.exts for e in es})

    def run() -> int:
        got = 0
        for s in ds:
            for e in exts:
                v = s[e]
                got += len(v) if type(v) is bytes else len(bytes(v))
        return got

    return run, _nothing


def _mds(ctx: Context, **kw):
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    # batch_size sizes its read-ahead (predownload = 8 batches): 1 would read 8
    # samples ahead and wait on them (about 1,000 samples/s); the batch of the bale rows.
    return StreamingDataset(local=ctx.datasets["mds"], batch_size=BATCH, **kw)


def _mds_close() -> None:
    from streaming.base.util import clean_stale_shared_memory

    gc.collect()
    clean_stale_shared_memory()


def mds_random(ctx: Context) -> Opened:
    ds = _mds(ctx)
    at = ctx.walk_index()
    plan = [(at[i], ctx.exts[i]) for i in ctx.order()]

    def run() -> int:
        got = 0
        for j, fields in plan:
            s = ds[j]
            for e in fields:
                v = s[e]
                got += len(v) if type(v) is bytes else len(bytes(v))
        return got

    return run, _mds_close


def mds_iter(ctx: Context, shuffle: bool) -> Opened:
    ds = _mds(ctx, shuffle=shuffle, shuffle_seed=ctx.seed)
    exts = sorted({e for es in ctx.exts for e in es})

    def run() -> int:
        got = 0
        for s in ds:
            for e in exts:
                v = s[e]
                got += len(v) if type(v) is bytes else len(bytes(v))
        return got

    return run, _mds_close


def wds_seq(ctx: Context) -> Opened:
    import webdataset as wds

    shards = sorted(str(p) for p in Path(ctx.datasets["bale"]).glob("*.tar"))

    def run() -> int:
        got = 0
        for s in wds.WebDataset(shards, shardshuffle=False, empty_check=False):
            for k, v in s.items():
                if k[0] != "_" and k != "cls" and isinstance(v, bytes):
                    got += len(v)
        return got

    return run, _nothing


def loose_random(ctx: Context) -> Opened:
    paths = [ctx.paths[i] for i in ctx.order()]

    def run() -> int:
        got = 0
        for ps in paths:
            for p in ps:
                with open(p, "rb") as f:
                    got += len(f.read())
        return got

    return run, _nothing


def loose_batched(ctx: Context) -> Opened:
    order = ctx.order()
    batches = [[ctx.paths[i] for i in order[k : k + BATCH]] for k in range(0, len(order), BATCH)]

    def run() -> int:
        got = 0
        for b in batches:
            batch = []
            for ps in b:
                sample = []
                for p in ps:
                    with open(p, "rb") as f:
                        sample.append(f.read())
                batch.append(sample)
            for sample in batch:
                for v in sample:
                    got += len(v)
        return got

    return run, _nothing


ROWS: list[Row] = [
    # random access over the same seeded permutation
    Row("bale.random", "random", "bale", 'bale.Dataset(decode="bytes")[i]', bale_random),
    Row("bale.batched", "random", "bale", "bale.Dataset.__getitems__ of 64", bale_batched),
    Row("lmdb.random", "random", "lmdb", "lmdb txn.get", lmdb_random),
    Row("h5py.random", "random", "h5", "h5py dataset slice data[a:b]", h5py_random),
    Row("h5pread.random", "random", "h5", "os.pread on the HDF5 file via offsets", lambda c: h5_pread(c, c.order())),
    Row(
        "tarpread.random",
        "random",
        "tar",
        "bale's shards as tars: tarfile's index in a dict, os.pread",
        tar_pread,
        reads="bale",
    ),
    Row("litdata.random", "random", "litdata", "LitData StreamingDataset(batch_decode=0)[i]", litdata_random),
    Row("mds.random", "random", "mds", "MosaicML StreamingDataset(batch_size=64)[i]", mds_random),
    Row("loose.random", "random", "loose", 'open(path, "rb").read()', loose_random),
    Row("loose.batched", "random", "loose", "loose files in batches of 64", loose_batched, info=True),
    Row(
        "bale.view",
        "random",
        "bale",
        'bale.Dataset(decode="memoryview")[i], no copy',
        lambda c: bale_random(c, "memoryview"),
        info=True,
    ),
    Row("bale.threads", "random", "bale", "bale.Dataset[i] on 2 threads", bale_threads, info=True),
    Row(
        "bale.values",
        "random",
        "bale",
        'bale.Dataset(fields="<ext>")[i]: the payload alone, no dict',
        bale_values_random,
        info=True,
    ),
    # every sample in stored order
    Row("bale.seq", "sequential", "bale", "bale.IterableDataset", lambda c: bale_iterable(c, False)),
    Row(
        "bale.seq.values",
        "sequential",
        "bale",
        'bale.IterableDataset(fields="<ext>"): the payload alone, no dict',
        bale_values_seq,
        info=True,
    ),
    Row("litdata.seq", "sequential", "litdata", "LitData StreamingDataset iteration", lambda c: litdata_iter(c, False)),
    Row(
        "mds.seq",
        "sequential",
        "mds",
        "MosaicML StreamingDataset(batch_size=64) iteration",
        lambda c: mds_iter(c, False),
    ),
    Row("wds.seq", "sequential", "wds", "webdataset.WebDataset over bale's shards", wds_seq, reads="bale"),
    Row("lmdb.seq", "sequential", "lmdb", "lmdb cursor iteration (readahead=True)", lmdb_cursor),
    Row(
        "h5pread.seq",
        "sequential",
        "h5",
        "os.pread on the HDF5 file, in order",
        lambda c: h5_pread(c, list(range(c.n))),
    ),
    # an epoch in a random order
    Row(
        "bale.shuffled",
        "shuffled",
        "bale",
        "bale.IterableDataset(shuffle=True)",
        lambda c: bale_iterable(c, True),
    ),
    Row(
        "litdata.shuffled",
        "shuffled",
        "litdata",
        "LitData StreamingDataset(shuffle=True)",
        lambda c: litdata_iter(c, True),
    ),
    Row(
        "mds.shuffled",
        "shuffled",
        "mds",
        "MosaicML StreamingDataset(batch_size=64, shuffle=True)",
        lambda c: mds_iter(c, True),
    ),
]

# bale's headline row of each group (its batched row is shown beside the random one).
BALE_ROW = {"random": "bale.random", "sequential": "bale.seq", "shuffled": "bale.shuffled"}
# The rows the best peer of a group is taken from: a full random permutation read
# one sample at a time is a shuffled epoch too.
POOL = {"random": ("random",), "sequential": ("sequential",), "shuffled": ("shuffled", "random")}


def run_row(row: Row, ctx: Context, state: str, reps: int, budget: float = float("inf")) -> dict:
    """Times up to ``reps`` passes of ``row`` (median counts) and checks each touched the payload;
    no pass starts once the timed ones took ``budget`` seconds (the first always runs).

    warm: the row's files evicted and read once in order (``settle``), one open,
    one untimed pass, then the timed passes; the share of the files' bytes in
    2 MiB pages is measured after them. cold: before each timed pass the row's
    files are read once (``prime``) and evicted, their residency is measured, and
    the dataset is opened afresh (its open reads on a cold cache too, untimed).
    first: before each timed pass the files are settled as for warm and the
    dataset opened afresh, the first pass of a fresh open on a warm cache (new
    maps, every page a page fault)."""
    files = row.files(ctx)
    secs, res = [], []
    huge = None
    if state == "warm":
        settle(files)
        run, close = row.opener(ctx)
        got = run()
        _check(row, got, ctx.payload)
        res.append(resident(files))
        for _ in range(reps):
            if sum(secs) >= budget:
                break
            t = time.perf_counter()
            got = run()
            secs.append(time.perf_counter() - t)
            _check(row, got, ctx.payload)
        close()
        huge = huge_pages(files)
    else:
        for _ in range(reps):
            if sum(secs) >= budget:
                break
            gc.collect()
            if state == "cold":
                prime(files)
                evict(files)
            else:
                settle(files)
            res.append(resident(files))
            run, close = row.opener(ctx)
            t = time.perf_counter()
            got = run()
            secs.append(time.perf_counter() - t)
            _check(row, got, ctx.payload)
            close()
            del run, close
    have = sum(h for h, _ in res)
    pages = sum(p for _, p in res)
    med = sorted(secs)[len(secs) // 2]
    return {
        "rate": ctx.n / med,
        "mb_s": ctx.payload / med / 1e6,
        "secs": secs,
        "resident": have / pages if pages else None,
        "huge": huge[0] / huge[1] if huge and huge[1] else None,
    }


def _check(row: Row, got: int, want: int) -> None:
    if got != want:
        raise RuntimeError(f"{row.name}: a pass touched {got} bytes, the payload is {want}")
