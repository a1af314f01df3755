"""The first epoch of a fresh process on a warm page cache: what each
DataLoader worker reads when workers are started anew every epoch (the
default, ``persistent_workers=False``). bale against lmdb: each timed pass
runs in a process of its own that opens the dataset and reads every sample
once, ``ds[i]`` / ``txn.get`` over the same seeded permutation, with the
bench's touch loop. The bench's warm rows (read.py) time later passes of a
process that has read the dataset once already; here the maps are fresh, so
every pass pays its page-table faults.

    target/bench/python/venv/bin/python crates/bale-py/benches/first_pass.py \\
        target/bench/python/peers/imagenet-like jpg

Needs the datasets ``read.py --keep`` leaves (``<root>/bale/data``,
``<root>/lmdb/data``). Every file of both is read once before the passes, so
the page cache holds them. Prints each pass and the median ratio (and range)
of bale to the lmdb pass beside it, for the dict and the payload alone.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time

import peers  # the bench's helpers, beside this script

KINDS = ("dict", "one", "lmdb")


def child(root: str, ext: str, kind: str) -> None:
    """One pass in this fresh process; prints samples/s."""
    import bale

    data = f"{root}/bale/data"
    ds = bale.Dataset(data, decode="bytes")
    n = len(ds)
    order = list(range(n))
    random.Random(0).shuffle(order)
    got = 0
    if kind == "lmdb":
        import lmdb

        keys = [f"{ds.key(i)}.{ext}".encode() for i in order]
        env = lmdb.open(f"{root}/lmdb/data", readonly=True, lock=False, readahead=True)
        get = env.begin(buffers=False).get
        t = time.perf_counter()
        for k in keys:
            got += len(get(k))
    elif kind == "one":
        one = bale.Dataset(data, fields=ext, decode="bytes")
        t = time.perf_counter()
        for i in order:
            got += len(one[i])
    else:
        t = time.perf_counter()
        for i in order:
            v = ds[i].get(ext)
            if v is not None:
                got += len(v)
    secs = time.perf_counter() - t
    if got == 0:
        raise SystemExit(f"{kind} read no bytes")
    print(n / secs)


def warm(root: str) -> None:
    """Every file of both datasets read once (the bench's ``prime``)."""
    peers.prime(
        os.path.join(dirpath, name)
        for peer in ("bale", "lmdb")
        for dirpath, _, files in os.walk(f"{root}/{peer}/data")
        for name in files
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="a tree's directory of kept peers (target/bench/python/peers/<tree>)")
    ap.add_argument("ext", help="the payload field (png, jpg)")
    ap.add_argument("--pairs", type=int, default=6, help="pairs of passes per kind (default 6)")
    ap.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.root, args.ext, args.child)
        return

    def rate(kind: str) -> float:
        out = subprocess.run(
            [sys.executable, __file__, args.root, args.ext, "--child", kind],
            check=True,
            capture_output=True,
            text=True,
        )
        return float(out.stdout.strip())

    warm(args.root)
    ratios: dict[str, list[float]] = {"dict": [], "one": []}
    for p in range(args.pairs):
        for kind in ratios:
            # ABBA across pairs: neither side always goes first.
            if p % 2:
                b, l = rate(kind), rate("lmdb")
            else:
                l, b = rate("lmdb"), rate(kind)
            ratios[kind].append(b / l)
            print(f"pair {p}: bale {kind} {b:,.0f}/s, lmdb {l:,.0f}/s: {b / l:.2f}x", flush=True)
    print(f"first pass of a fresh process, {args.pairs} pairs; bale / lmdb:")
    for kind, r in ratios.items():
        name = "dict" if kind == "dict" else f'fields="{args.ext}"'
        print(f"  random ds[i], {name:<14} {statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f})")


if __name__ == "__main__":
    main()
