"""Pulling cold shards into the page cache: ``pread`` of each 8 MiB region into
one buffer, against ``POSIX_FADV_WILLNEED`` then a touch of a byte a page through
a map (whole shard, or region by region). Every shard is evicted
(``POSIX_FADV_DONTNEED``) before each pass; orders alternate between rounds.

    target/bench/python/venv/bin/python crates/bale-py/benches/pull.py \\
        target/bench/python/peers/imagenet-like/bale/data
"""

from __future__ import annotations

import glob
import mmap
import os
import statistics
import sys
import time

REGION = 8 << 20
PAGE = 4096


def evict(shards: list[str]) -> None:
    for p in shards:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def pread_pull(shards: list[str]) -> None:
    buf = bytearray(REGION)
    for p in shards:
        fd = os.open(p, os.O_RDONLY)
        size = os.fstat(fd).st_size
        for off in range(0, size, REGION):
            os.preadv(fd, [buf], off)
        os.close(fd)


def _touch(m: mmap.mmap, start: int, end: int) -> int:
    acc = 0
    for i in range(start, end, PAGE):
        acc ^= m[i]
    return acc


def willneed_then_touch(shards: list[str]) -> None:
    for p in shards:
        fd = os.open(p, os.O_RDONLY)
        size = os.fstat(fd).st_size
        for off in range(0, size, REGION):
            os.posix_fadvise(fd, off, min(REGION, size - off), os.POSIX_FADV_WILLNEED)
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as m:
            _touch(m, 0, size)
        os.close(fd)


def willneed_touch_per_region(shards: list[str]) -> None:
    for p in shards:
        fd = os.open(p, os.O_RDONLY)
        size = os.fstat(fd).st_size
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as m:
            for off in range(0, size, REGION):
                os.posix_fadvise(fd, off, min(REGION, size - off), os.POSIX_FADV_WILLNEED)
                _touch(m, off, min(size, off + REGION))
        os.close(fd)


def main() -> None:
    shards = sorted(glob.glob(os.path.join(sys.argv[1], "*.tar")))
    if not shards:
        raise SystemExit(f"no .tar shards in {sys.argv[1]}")
    pulls = [pread_pull, willneed_then_touch, willneed_touch_per_region]
    times: dict[str, list[float]] = {f.__name__: [] for f in pulls}
    for k in range(3):
        for f in pulls if k % 2 == 0 else pulls[::-1]:
            evict(shards)
            t = time.perf_counter()
            f(shards)
            times[f.__name__].append(time.perf_counter() - t)
    total = sum(os.path.getsize(p) for p in shards)
    for name, v in times.items():
        med = statistics.median(v)
        passes = ", ".join(f"{x:.2f}" for x in v)
        print(f"{name:<26} {passes} s; median {med:.2f} s, {total / med / 1e6:,.0f} MB/s")


if __name__ == "__main__":
    main()
