"""Python read benchmark: bale.Dataset random access against loose files and webdataset.

Run by `cargo xtask bench python` (which builds the package in release, packs the
trees and passes the paths); by hand:

    .venv/bin/python crates/bale-py/benches/read.py --tree TREE --dataset DATASET [--reps 3]

DATASET is TREE packed by `bale pack` (plain tar shards, which webdataset reads as
they are). Every reader runs once to warm the page cache, then --reps timed runs;
the median counts. Every side reads every byte of every sample into a Python
object (bytes), in the same order for the random-access rows, and takes the
len() of each payload object (a sample dict's fields by name, a loose sample's
files by path):

- bale random: bale.Dataset(DATASET)[i] over a seeded random permutation;
- bale random, batches of 64: Dataset.__getitems__ on consecutive slices of 64
  of the same permutation (what torch's DataLoader calls for a batch);
- loose files: open(path, "rb").read() of the same samples' files, same order;
- loose files, batches of 64: the same reads, each batch's objects held together
  before their len() is taken (what DataLoader does with a map-style dataset
  over loose files: [dataset[i] for i in batch]), the baseline of the batched row;
- webdataset: iterating webdataset.WebDataset(shards) (sequential, its best case);
- for information: bale sequential (IterableDataset), bale random with
  decode="memoryview" (no copy), and bale random on 2 threads.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bale


def timed(fn, reps: int) -> tuple[float, int]:
    fn()  # warm the page cache and the code paths
    times, n = [], 0
    for _ in range(reps):
        t = time.perf_counter()
        n = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", required=True, type=Path)
    ap.add_argument("--dataset", required=True, type=Path)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    ds = bale.Dataset(args.dataset, decode="bytes")
    n = len(ds)
    order = list(range(n))
    random.Random(args.seed).shuffle(order)

    # The loose files of each sample, from the tree (keys are paths up to the first dot).
    by_key: dict[str, list[str]] = {}
    for dirpath, _, files in os.walk(args.tree):
        for f in files:
            if f.startswith("."):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), args.tree)
            stem = rel[: len(rel) - len(f)] + f.split(".", 1)[0]
            by_key.setdefault(stem, []).append(os.path.join(dirpath, f))
    paths = [by_key[ds.key(i)] for i in order]
    total_bytes = sum(os.path.getsize(p) for ps in paths for p in ps)

    # The payload fields (what the loose files hold), looked up in each sample
    # dict the way the loose side opens each of a sample's files.
    exts = [e for e in ds.extensions if e != "cls"]

    def bale_random() -> int:
        got = 0
        for i in order:
            s = ds[i]
            for e in exts:
                v = s.get(e)
                if v is not None:
                    got += len(v)
        return got

    def loose() -> int:
        got = 0
        for ps in paths:
            for p in ps:
                with open(p, "rb") as f:
                    got += len(f.read())
        return got

    batches = [order[k : k + 64] for k in range(0, n, 64)]
    path_batches = [paths[k : k + 64] for k in range(0, n, 64)]

    def loose_batched() -> int:
        got = 0
        for b in path_batches:
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

    def bale_batched() -> int:
        got = 0
        for b in batches:
            for s in ds.__getitems__(b):
                for e in exts:
                    v = s.get(e)
                    if v is not None:
                        got += len(v)
        return got

    shards = sorted(str(p) for p in args.dataset.glob("*.tar"))

    def wds_seq() -> int:
        import webdataset as wds

        got = 0
        for s in wds.WebDataset(shards, shardshuffle=False, empty_check=False):
            for k, v in s.items():
                if k[0] != "_" and k != "cls" and isinstance(v, bytes):
                    got += len(v)
        return got

    def bale_seq() -> int:
        got = 0
        for s in bale.IterableDataset(args.dataset, decode="bytes"):
            for e in exts:
                v = s.get(e)
                if v is not None:
                    got += len(v)
        return got

    view = bale.Dataset(args.dataset, decode="memoryview")

    def bale_view() -> int:
        got = 0
        for i in order:
            s = view[i]
            for e in exts:
                v = s.get(e)
                if v is not None:
                    got += len(v)
        return got

    def bale_threads() -> int:
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

        with ThreadPoolExecutor(2) as pool:
            return sum(pool.map(part, halves))

    rows = {}
    for name, fn in [
        ("bale random", bale_random),
        ("bale random, batches of 64", bale_batched),
        ("loose files, same order", loose),
        ("loose files, batches of 64", loose_batched),
        ("webdataset sequential", wds_seq),
        ("bale sequential (IterableDataset)", bale_seq),
        ('bale random, decode="memoryview"', bale_view),
        ("bale random, 2 threads", bale_threads),
    ]:
        secs, got = timed(fn, args.reps)
        if got != total_bytes:
            print(f"{name}: read {got} bytes, expected {total_bytes}", file=sys.stderr)
            return 1
        rows[name] = n / secs
        print(f"{name:<36} {n / secs:>10,.0f} samples/s  {total_bytes / secs / 1e6:>8,.0f} MB/s", flush=True)

    r_loose = rows["bale random"] / rows["loose files, same order"]
    r_batch = rows["bale random, batches of 64"] / rows["loose files, batches of 64"]
    r_wds = rows["bale random"] / rows["webdataset sequential"]
    print(f"\n{n} samples, {total_bytes / n / 1e3:.1f} KB each on average, {args.reps} reps (median), warm cache")
    print(f"bale random / loose files:           {r_loose:5.2f}x  (target >= 5x)")
    print(f"bale batches of 64 / loose batches:  {r_batch:5.2f}x  (target >= 5x)")
    print(f"bale random / webdataset sequential: {r_wds:5.2f}x  (target >= 1x)")
    print(json.dumps({"samples": n, "bytes": total_bytes, "samples_per_s": rows,
                      "ratio_loose": r_loose, "ratio_loose_batched": r_batch, "ratio_webdataset": r_wds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
