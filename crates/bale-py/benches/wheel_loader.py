"""One round of bale.Loader's plain workload, for `cargo xtask bench wheel`.

Run by each interpreter under test (the venv with the cargo-built release
module, and a venv with only the release wheel and numpy installed): the same
dataset, RandomResizedCrop(224) + flip, batches of 64, uint8, 2 threads. It
prints one line: the images per second over the timed batches (after
`--warm` untimed ones), the version and the path of the `bale` module that ran.
"""

import argparse
import sys
import time

import bale


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dataset", required=True, help="a packed dataset of JPEGs")
    p.add_argument("--batches", type=int, default=40, help="timed batches (default 40)")
    p.add_argument("--warm", type=int, default=4, help="untimed batches first (default 4)")
    p.add_argument("--epoch", type=int, default=0, help="the epoch to read (rounds differ)")
    a = p.parse_args()
    loader = bale.Loader(
        a.dataset,
        batch_size=64,
        crop="random_resized",
        size=224,
        flip=True,
        threads=2,
        seed=1,
    )
    need = a.warm + a.batches
    if len(loader) < need:
        sys.exit(f"{a.dataset} has {len(loader)} batches of 64; {need} are needed")
    loader.set_epoch(a.epoch)
    batches = iter(loader)
    for _ in range(a.warm):
        next(batches)
    images = 0
    start = time.perf_counter()
    for _ in range(a.batches):
        batch = next(batches)
        images += len(batch[0])
    elapsed = time.perf_counter() - start
    # One line, read by xtask/src/bench_wheel.rs.
    print(f"images_per_s={images / elapsed:.1f} version={bale.__version__} module={bale._native.__file__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
