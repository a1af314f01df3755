"""HDF5 pack benchmark: `bale pack --format h5` against h5py writing the same
layout, and against `bale pack` (tar), in the same run, warm page cache.

    .venv/bin/python tests/python/bench_h5.py target/release/bale [N_FILES]

Generates N_FILES (default 4000) incompressible "JPEGs" of 60-160 KB in 40
class directories under target/bench-h5/tree (once), then times, median of 3:
h5py (the files concatenated into one uint8 dataset per extension with
offsets and keys, as bale's layout, one file), bale pack as tar, bale pack as
h5, and bale convert tar -> h5. Prints the ratio h5py / bale (above 1: bale
is faster). Not a test (pytest collects test_*.py only).
"""

import os
import shutil
import statistics
import subprocess
import sys
import time

import h5py
import numpy as np


def make_tree(root, n):
    if os.path.exists(os.path.join(root, ".done")):
        return
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(1)
    for i in range(n):
        d = os.path.join(root, "class_%02d" % (i % 40))
        os.makedirs(d, exist_ok=True)
        size = int(rng.integers(60_000, 160_000))
        with open(os.path.join(d, "%06d.jpg" % i), "wb") as f:
            f.write(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    open(os.path.join(root, ".done"), "w").close()


def files(root):
    out = []
    for d in sorted(os.listdir(root)):
        p = os.path.join(root, d)
        if os.path.isdir(p):
            out += [os.path.join(p, f) for f in sorted(os.listdir(p))]
    return out


def h5py_pack(root, out):
    paths = files(root)
    sizes = [os.path.getsize(p) for p in paths]
    offsets = np.zeros(len(paths) + 1, np.uint64)
    offsets[1:] = np.cumsum(sizes)
    with h5py.File(out, "w") as f:
        data = f.create_dataset("fields/jpg/data", (int(offsets[-1]),), np.uint8)
        for i, p in enumerate(paths):
            with open(p, "rb") as fh:
                data[int(offsets[i]):int(offsets[i + 1])] = np.frombuffer(fh.read(), np.uint8)
        f["fields/jpg/offsets"] = offsets
        keys = [os.path.relpath(p, root)[:-4] for p in paths]
        f.create_dataset("keys", data=keys, dtype=h5py.string_dtype())
        f.flush()
        os.fsync(f.id.get_vfd_handle())


def timed(fn):
    runs = []
    for _ in range(3):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def main():
    bale = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
    base = os.path.join("target", "bench-h5")
    tree = os.path.join(base, "tree")
    make_tree(tree, n)
    total = sum(os.path.getsize(p) for p in files(tree))
    for p in files(tree):  # warm the cache
        with open(p, "rb") as f:
            f.read()

    def run(*args):
        subprocess.run([bale, *args, "-q", "--force"], check=True)

    h5 = os.path.join(base, "h5py.h5")
    results = [
        ("h5py, one file", timed(lambda: h5py_pack(tree, h5))),
        ("bale pack (tar)", timed(lambda: run("pack", tree, "-o", os.path.join(base, "tar")))),
        ("bale pack --format h5", timed(lambda: run("pack", tree, "-o", os.path.join(base, "h5"), "--format", "h5"))),
        ("bale convert tar -> h5", timed(lambda: run("convert", os.path.join(base, "tar"), "-o", os.path.join(base, "conv"), "--format", "h5"))),
    ]
    baseline = results[0][1]
    print("%d files, %.1f MB, warm cache, median of 3" % (n, total / 1e6))
    print("| writer | time | MB/s | ratio h5py / this |")
    print("| --- | --- | --- | --- |")
    for name, t in results:
        print("| %s | %.2f s | %.0f | %.2fx |" % (name, t, total / 1e6 / t, baseline / t))


if __name__ == "__main__":
    main()
