"""bale against lmdb in one process, passes alternating: warm reads of a kept
bench dataset, bale as a dict (the default) and as the payload alone
(``fields="<ext>"``), each pass timed beside an lmdb pass of the same kind.

The bench's rows run one after another, so a machine whose speed drifts moves
the ratios between runs; pairs of passes in one process see the same machine.

    target/bench/python/venv/bin/python crates/bale-py/benches/alternate.py \\
        target/bench/python/peers/png-100k png

Needs the datasets ``read.py --keep`` leaves (``<root>/bale/data``,
``<root>/lmdb/data``). Prints the median ratio (and range) of each kind.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import lmdb

import bale


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="a tree's directory of kept peers (target/bench/python/peers/<tree>)")
    ap.add_argument("ext", help="the payload field (png, jpg)")
    ap.add_argument("--pairs", type=int, default=6, help="timed pairs of passes per kind (default 6)")
    args = ap.parse_args()
    ext, data = args.ext, f"{args.root}/bale/data"

    it = bale.IterableDataset(data, decode="bytes")
    it_one = bale.IterableDataset(data, fields=ext, decode="bytes")
    ds = bale.Dataset(data, decode="bytes")
    ds_one = bale.Dataset(data, fields=ext, decode="bytes")
    env = lmdb.open(f"{args.root}/lmdb/data", readonly=True, lock=False, readahead=True)
    txn = env.begin(buffers=False)
    n = len(ds)
    order = list(range(n))
    random.Random(0).shuffle(order)
    keys = [f"{ds.key(i)}.{ext}".encode() for i in order]

    # The bench's touch loops (peers.py).
    def seq_dict() -> int:
        got = 0
        for s in it:
            v = s.get(ext)
            if v is not None:
                got += len(v)
        return got

    def seq_one() -> int:
        got = 0
        for v in it_one:
            got += len(v)
        return got

    def seq_lmdb() -> int:
        got = 0
        with env.begin(buffers=False) as t:
            for _, v in t.cursor():
                got += len(v)
        return got

    def random_dict() -> int:
        got = 0
        for i in order:
            v = ds[i].get(ext)
            if v is not None:
                got += len(v)
        return got

    def random_one() -> int:
        got = 0
        for i in order:
            got += len(ds_one[i])
        return got

    def random_lmdb() -> int:
        got = 0
        get = txn.get
        for k in keys:
            got += len(get(k))
        return got

    def rate(f) -> float:
        t = time.perf_counter()
        got = f()
        secs = time.perf_counter() - t
        if got == 0:
            raise SystemExit(f"{f.__name__} read no bytes")
        return n / secs

    kinds = {
        "sequential, dict": (seq_dict, seq_lmdb),
        f'sequential, fields="{ext}"': (seq_one, seq_lmdb),
        "random ds[i], dict": (random_dict, random_lmdb),
        f'random ds[i], fields="{ext}"': (random_one, random_lmdb),
    }
    for f, peer in kinds.values():  # warm both sides up
        f(), peer()
    ratios: dict[str, list[float]] = {k: [] for k in kinds}
    for p in range(args.pairs):
        for k, (f, peer) in kinds.items():
            # ABBA across pairs: neither side always goes first.
            if p % 2:
                b, l = rate(f), rate(peer)
            else:
                l, b = rate(peer), rate(f)
            ratios[k].append(b / l)
    print(f"{n:,} samples, {args.pairs} pairs; bale / lmdb:")
    for k, r in ratios.items():
        print(f"  {k:<28} {statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f})")


if __name__ == "__main__":
    main()
