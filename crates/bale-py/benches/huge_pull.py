"""Pulling cold shards into the page cache in 2 MiB pages, against ``pread``,
and what the first touch of the pulled pages then costs.

Each pass runs in a fresh process, in the order given (the cost of a pull in
2 MiB pages depends on what the process before it freed): every shard is
evicted (``POSIX_FADV_DONTNEED``), then its 8 MiB regions are pulled in a
seeded random order, either by ``pread`` into one 256 KiB buffer (as
``bale.Dataset``'s read-around does) or by a map of the region of its own
advised ``MADV_RANDOM`` and ``MADV_HUGEPAGE`` and populated
(``MADV_POPULATE_READ``), then dropped. Then every 4 KiB page of the shards
is read once through a map of each whole shard, in a seeded random order,
twice ("touch" and "again"), and the share of the shards mapped in 2 MiB
pages (``FilePmdMapped``) is printed.

    target/bench/python/venv/bin/python crates/bale-py/benches/huge_pull.py \\
        target/bench/python/peers/imagenet-like/bale/data pread,huge,huge,pread,huge,huge

``--set pread|huge FILE...`` only evicts the files and pulls them the one way
or the other, to leave them cached in small or in 2 MiB pages for a benchmark
that follows.
"""

from __future__ import annotations

import glob
import mmap
import os
import random
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

REGION = 8 << 20
PAGE = 4096
MADV_POPULATE_READ = 22


def pull(files: list[str], mode: str) -> float:
    """Evicts ``files``, then pulls their 8 MiB regions in a seeded random order; the seconds the pull took."""
    for p in files:
        # Not a FIFO (opening one waits for a writer) nor a device: regular files only.
        if not stat.S_ISREG(os.stat(p).st_mode):
            raise SystemExit(f"{p}: not a regular file")
    regions = [(p, o, min(REGION, os.path.getsize(p) - o)) for p in files for o in range(0, os.path.getsize(p), REGION)]
    random.Random(3).shuffle(regions)
    peers.evict(files)
    buf = memoryview(bytearray(256 << 10))
    t = time.perf_counter()
    for p, off, n in regions:
        fd = os.open(p, os.O_RDONLY)
        if mode == "pread":
            at = off
            while at < off + n:
                at += os.preadv(fd, [buf[: min(len(buf), off + n - at)]], at)
        else:
            with mmap.mmap(fd, n, prot=mmap.PROT_READ, offset=off) as m:
                m.madvise(mmap.MADV_RANDOM)
                m.madvise(mmap.MADV_HUGEPAGE)
                m.madvise(MADV_POPULATE_READ)
        os.close(fd)
    return time.perf_counter() - t


def one(data: str, mode: str) -> str:
    shards = sorted(glob.glob(os.path.join(data, "*.tar")))
    took = pull(shards, mode)
    maps = []
    for p in shards:
        fd = os.open(p, os.O_RDONLY)
        m = mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)
        m.madvise(mmap.MADV_RANDOM)
        os.close(fd)
        maps.append(m)
    pages = [(m, o) for m in maps for o in range(0, len(m), PAGE)]
    random.Random(4).shuffle(pages)
    touches = []
    for _ in range(2):
        t = time.perf_counter()
        acc = 0
        for m, o in pages:
            acc ^= m[o]
        touches.append(time.perf_counter() - t)
    huge, total = peers.huge_pages(shards) or (0, 0)
    return f"{mode:<6} pull {took:.2f} s   touch {touches[0]:.2f} s   again {touches[1]:.2f} s   2 MiB pages {huge * 100 // max(total, 1)}%"


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        print(one(sys.argv[2], sys.argv[3]))
        return
    if len(sys.argv) >= 4 and sys.argv[1] == "--set" and sys.argv[2] in ("pread", "huge"):
        pull(sys.argv[3:], sys.argv[2])
        return
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    data, order = sys.argv[1], sys.argv[2].split(",")
    if not glob.glob(os.path.join(data, "*.tar")):
        raise SystemExit(f"no .tar shards in {data}")
    for mode in order:
        if mode not in ("pread", "huge"):
            raise SystemExit(f"a pass is pread or huge, not {mode!r}")
        subprocess.run([sys.executable, __file__, "--one", data, mode], check=True)


if __name__ == "__main__":
    main()
