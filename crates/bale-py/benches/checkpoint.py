"""Checkpoints and mixes: state_dict() / load_state_dict() at 1.28M samples, and
reading a mix of two datasets against reading one, in one run.

Run by `cargo xtask bench python` after the read benchmark; by hand:

    .venv/bin/python crates/bale-py/benches/checkpoint.py --bale target/release/bale

Writes its datasets once under --out (tars of empty or small members written
here, indexed in place by `bale index`): 1,280,000 samples of one empty member
(a 655 MB tar) for the state, and two of 1 KB samples (100,000 and 50,000) for
the mix. Prints:

- state_dict() and load_state_dict() in microseconds (median of --rounds
  calls, mid-epoch of a shuffled epoch, rank 3 of 8), the state's JSON size,
  and the first sample of a resumed epoch against a fresh one's (the resume's
  arithmetic runs there); the target is under 1 ms each;
- samples/s of a warm epoch of 100,000 samples of one dataset (two prefetch
  threads) against a mix of the two (0.67 / 0.33, 100,000 samples; one
  prefetch thread per source), sequential and shuffled, and their ratio
  (median of --reps pairs of passes, interleaved); the target is a mix at
  0.95 of one or better;
- the same for bale.Loader: state_dict() and load_state_dict() of a Loader
  over the 1,280,000 samples (each a 76-byte PNG) and of a Loader mix of it
  with a second dataset (0.7 / 0.3), after four batches of rank 3 of 8; then
  images/s of a Loader over one dataset of 96 x 96 PNGs of noise (20,000
  samples; RandomResizedCrop to 64, flips, two threads) against a Loader mix
  of two such datasets (0.67 / 0.33, 20,000 samples), shuffled, four epochs
  a pass, and their ratio (median of --loader-reps interleaved pairs); the
  target is 0.95 or better.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import struct
import subprocess
import tarfile
import time
import zlib
from pathlib import Path

import bale


def tar_of(path: Path, n: int, size: int, payload: bytes | None = None, ext: str = "bin") -> None:
    """A tar of n samples of one member of `size` bytes each (`payload`, or random bytes)."""
    if path.exists():
        return
    tmp = path.with_suffix(".tmp")
    payload = os.urandom(size) if payload is None else payload
    size = len(payload)
    with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tf:
        info = tarfile.TarInfo()
        info.size, info.mode = size, 0o644
        for i in range(n):
            info.name = f"s/{i:07d}.{ext}"
            tf.addfile(info, None if size == 0 else _Bytes(payload))
    tmp.rename(path)


def png(width: int, height: int, seed: int) -> bytes:
    """An RGB PNG of noise (what a decoder cannot shortcut)."""
    rng = random.Random(seed)
    rows = b"".join(b"\0" + bytes(rng.getrandbits(8) for _ in range(width * 3)) for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


class _Bytes:
    def __init__(self, b: bytes) -> None:
        self.b, self.at = b, 0

    def read(self, n: int = -1) -> bytes:
        out = self.b[self.at :] if n < 0 else self.b[self.at : self.at + n]
        self.at += len(out)
        if self.at >= len(self.b):
            self.at = 0
        return out


def dataset(bale_bin: str, out: Path, name: str, n: int, size: int, payload: bytes | None = None, ext: str = "bin") -> Path:
    d = out / name
    if (d / "bale.json").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    tar_of(d / "data.tar", n, size, payload, ext)
    subprocess.run([bale_bin, "index", d / "data.tar", "-o", d, "--quiet"], check=True)
    return d


def micros(f, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def bench_state(path: Path, rounds: int) -> None:
    it = bale.IterableDataset(path, shuffle=True, seed=1, rank=3, world_size=8)
    x = iter(it)
    for _ in range(1000):
        next(x)
    st = it.state_dict()
    text = json.dumps(st)
    save = micros(it.state_dict, rounds)
    other = bale.IterableDataset(path, shuffle=True, seed=1, rank=3, world_size=8)
    load = micros(lambda: other.load_state_dict(st), rounds)
    new = bale.IterableDataset(path, shuffle=True, seed=1, rank=3, world_size=8)
    t0 = time.perf_counter()
    next(iter(new))
    fresh = time.perf_counter() - t0
    other.load_state_dict(st)
    t0 = time.perf_counter()
    next(iter(other))
    resumed = time.perf_counter() - t0
    elastic = bale.IterableDataset(path, shuffle=True, seed=1, rank=3, world_size=6)
    elastic.load_state_dict(st)
    t0 = time.perf_counter()
    next(iter(elastic))
    moved = time.perf_counter() - t0
    print(f"state at {it._samples:,} samples: {len(text)} bytes of JSON")
    print(f"  state_dict()      {save:8.1f} us (target: under 1,000)")
    print(f"  load_state_dict() {load:8.1f} us (target: under 1,000)")
    print(
        f"  first sample: fresh epoch {fresh * 1e3:.1f} ms, resumed {resumed * 1e3:.1f} ms, "
        f"resumed at world size 6 {moved * 1e3:.1f} ms"
    )


def rate(make) -> tuple[float, float]:
    """Samples per second of one warm epoch, and CPU seconds per sample (every
    thread of the process: a figure the machine's load changes less)."""
    it = make()
    t0, c0 = time.perf_counter(), time.process_time()
    n = 0
    for s in it:
        n += len(s["bin"])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return len(it) / wall, cpu / len(it)


def bench_mix(a: Path, b: Path, reps: int) -> None:
    print("mix of two datasets against one (warm; samples/s and CPU us a sample, medians of passes):")
    for plan in ("sequential", "shuffled"):
        # The mix reads each source on its own prefetch thread: one dataset gets two.
        one = lambda: bale.IterableDataset(a, plan=plan, seed=1, fields=["bin"], prefetch=2)  # noqa: E731
        mix = lambda: bale.Mix([(a, 0.67), (b, 0.33)], samples=100_000, plan=plan, seed=1, fields=["bin"])  # noqa: E731
        rate(one), rate(mix)  # warm both
        r1, rm, c1, cm, ratios, cpu_ratios = [], [], [], [], [], []
        for _ in range(reps):
            (x, cx), (y, cy) = rate(one), rate(mix)
            r1.append(x)
            rm.append(y)
            c1.append(cx)
            cm.append(cy)
            ratios.append(y / x)
            cpu_ratios.append(cx / cy)
        med = statistics.median
        print(
            f"  {plan:10} one {med(r1):10,.0f}/s {med(c1) * 1e6:5.2f} us  mix {med(rm):10,.0f}/s {med(cm) * 1e6:5.2f} us  "
            f"ratio {med(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}), "
            f"by CPU time {med(cpu_ratios):.3f} ({min(cpu_ratios):.3f}-{max(cpu_ratios):.3f}); target: 0.95 or more"
        )


def bench_loader_state(big: Path, other: Path, rounds: int) -> None:
    opts = dict(batch_size=64, crop="resize", size=8, shuffle=True, seed=1, rank=3, world_size=8, threads=2)
    for name, what in (("Loader", big), ("Loader mix", [(big, 0.7), (other, 0.3)])):
        loader = bale.Loader(what, **opts)
        batches = iter(loader)
        for _ in range(4):
            next(batches)
        st = loader.state_dict()
        text = json.dumps(st)
        save = micros(loader.state_dict, rounds)
        fresh = bale.Loader(what, **opts)
        load = micros(lambda: fresh.load_state_dict(st), rounds)
        samples = st["samples"]
        print(f"{name} state at {samples:,} samples: {len(text)} bytes of JSON")
        print(f"  state_dict()      {save:8.1f} us (target: under 1,000)")
        print(f"  load_state_dict() {load:8.1f} us (target: under 1,000)")
        del batches


def loader_rate(make, epochs: int = 4) -> tuple[float, float]:
    """Images per second of `epochs` epochs of a bale.Loader (a pass long
    enough for the machine's noise to average out), and CPU seconds per
    image (every thread of the process)."""
    loader = make()
    t0, c0 = time.perf_counter(), time.process_time()
    n = 0
    for e in range(epochs):
        loader.set_epoch(e)
        for batch in loader:
            n += len(batch["images"] if isinstance(batch, dict) else batch[0])
    return n / (time.perf_counter() - t0), (time.process_time() - c0) / n


def bench_loader_mix(a: Path, b: Path, reps: int) -> None:
    print("Loader mix of two datasets against a Loader over one (images/s, medians of interleaved passes):")
    opts = dict(batch_size=256, crop="random_resized", size=64, flip=True, shuffle=True, seed=1, threads=2, label=None)
    one = lambda: bale.Loader(a, **opts)  # noqa: E731
    mix = lambda: bale.Loader([(a, 0.67), (b, 0.33)], samples=20_000, **opts)  # noqa: E731
    loader_rate(one), loader_rate(mix)  # warm both
    r1, rm, ratios, cpu_ratios = [], [], [], []
    for _ in range(reps):
        (x, cx), (y, cy) = loader_rate(one), loader_rate(mix)
        r1.append(x)
        rm.append(y)
        ratios.append(y / x)
        cpu_ratios.append(cx / cy)
    med = statistics.median
    print(
        f"  shuffled   one {med(r1):8,.0f}/s  mix {med(rm):8,.0f}/s  "
        f"ratio {med(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}), "
        f"by CPU time {med(cpu_ratios):.3f} ({min(cpu_ratios):.3f}-{max(cpu_ratios):.3f}); target: 0.95 or more"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bale", default="target/release/bale")
    ap.add_argument("--out", default="target/bench/python/checkpoint")
    ap.add_argument("--samples", type=int, default=1_280_000)
    ap.add_argument("--rounds", type=int, default=201)
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--loader-reps", type=int, default=9)
    ap.add_argument("--only-loader", action="store_true", help="the Loader rows alone")
    args = ap.parse_args()
    out = Path(args.out)
    print(f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    if not args.only_loader:
        big = dataset(args.bale, out, f"empty-{args.samples}", args.samples, 0)
        bench_state(big, args.rounds)
        a = dataset(args.bale, out, "mix-a", 100_000, 1024)
        b = dataset(args.bale, out, "mix-b", 50_000, 1024)
        bench_mix(a, b, args.reps)
    pngs = dataset(args.bale, out, f"png-{args.samples}", args.samples, 0, png(4, 4, 0), "png")
    img_a = dataset(args.bale, out, "img-a", 20_000, 0, png(96, 96, 1), "png")
    img_b = dataset(args.bale, out, "img-b", 10_000, 0, png(96, 96, 2), "png")
    bench_loader_state(pngs, img_b, args.rounds)
    bench_loader_mix(img_a, img_b, args.loader_reps)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
