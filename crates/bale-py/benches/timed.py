"""bale.timed's cost per step: a loop over range(N) through bale.timed against the bare loop.

Run by `cargo xtask bench python` after the read benchmark; by hand:

    .venv/bin/python crates/bale-py/benches/timed.py [--steps 2000000] [--rounds 5]

Prints nanoseconds per step of each loop (median of --rounds) and their
difference: what the wrapper adds to every training step (the target is under
1 microsecond).
"""

from __future__ import annotations

import argparse
import statistics
import time

import bale


def bare(n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        pass
    return time.perf_counter() - t0


def wrapped(n: int) -> float:
    t0 = time.perf_counter()
    for _ in bale.timed(range(n), every=n, report=lambda d: None, gpu=False):
        pass
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    b, w = [], []
    for _ in range(args.rounds):
        b.append(bare(args.steps))
        w.append(wrapped(args.steps))
    nb = statistics.median(b) / args.steps * 1e9
    nw = statistics.median(w) / args.steps * 1e9
    print(
        f"bale.timed: {nw:.0f} ns per step wrapped, {nb:.0f} ns bare: "
        f"{nw - nb:.0f} ns added per step (target: under 1,000 ns)"
    )


if __name__ == "__main__":
    main()
