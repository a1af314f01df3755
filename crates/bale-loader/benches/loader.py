"""Loader benchmark: bale.Loader against torchvision, DALI and FFCV, per workload.

Run by `cargo xtask bench loader` (which builds the package in release, makes
the corpora, packs them, installs FFCV when it is missing and passes the paths);
by hand:

    .venv/bin/python crates/bale-loader/benches/loader.py \
        --tree TREE --dataset as-is=DATASET [--dataset short256=DATASET2] \
        [--seg-tree SEG_TREE --seg-dataset SEG_DATASET] \
        [--det-tree DET_TREE --det-dataset DET_DATASET] \
        [--only plain,seg,det,augment] [--batches N] [--rounds 3]

The workloads (each module of workloads/ says exactly what its rows do):
- plain (workloads/plain.py): RandomResizedCrop 224 + flip, batches of 64, on
  each --dataset: torchvision ImageFolder + DataLoader, bale.Dataset +
  DataLoader, DALI's CPU pipeline, FFCV 1.0.2, bale.Loader;
- seg (workloads/segmentation.py): the Cityscapes recipe (scale 0.5-2.0, pad,
  crop 512x1024, flip, on image and mask), batches of 8: torchvision v2 +
  DataLoader, DALI's CPU pipeline, bale.Loader;
- det (workloads/detection.py): large-scale jitter (ScaleJitter to 1024,
  FixedSizeCrop 1024, flip, SanitizeBoundingBoxes), batches of 8: torchvision
  v2 + DataLoader, bale.Loader;
- augment (workloads/augment.py): RandomResizedCrop 224 + flip +
  TrivialAugmentWide + RandomErasing, batches of 64, on the first --dataset:
  torchvision v2 + DataLoader, DALI's CPU pipeline, bale.Loader; and
  ColorJitter's and TrivialAugmentWide's cost over bale's crop + flip;
- per core (workloads/per_core.py): decode and per-sample rates of one thread.

Each round runs every row of a workload once, in turn (so drift hits them
alike): the first warmup batches (worker start-up, page cache) are not timed,
then the timed ones are. The median images/s and CPU ms per image (of the
process and its workers: workloads/common.py) over --rounds rounds count, with
their ranges and the load average; bale.Loader's ratio to each peer of the
same run is printed for both. Results go to stdout and, as JSON, to --json (default
target/bench/loader/results.json).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workloads import MODULES, common, per_core, plain


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    keys = [m.KEY for m in MODULES]
    ap.add_argument(
        "--only",
        default=",".join(keys),
        help=f"the workloads to run, comma-separated, of {', '.join(keys)} (default: all given)",
    )
    ap.add_argument("--batches", type=int, help="timed batches per row and round (default: each workload's)")
    ap.add_argument("--warmup", type=int, help="untimed batches first (default: each workload's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cores", type=int, default=common.cores(), help="threads or workers per row")
    ap.add_argument("--decode-images", type=int, default=512, help="JPEGs of the per-core rates (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-dali", action="store_true", help="leave DALI's rows out")
    ap.add_argument("--json", type=Path, default=Path("target/bench/loader/results.json"))
    for m in MODULES:
        m.add_arguments(ap)
    args = ap.parse_args()
    only = set(args.only.split(","))
    unknown = only - set(keys)
    if unknown:
        ap.error(f"--only: unknown workload {', '.join(sorted(unknown))} (expected {', '.join(keys)})")

    workloads = [w for m in MODULES if m.KEY in only for w in m.workloads(args)]
    if not workloads:
        ap.error("nothing to run: give --dataset, --seg-dataset or --det-dataset (with their trees)")
    print(
        f"loader benchmark: {len(workloads)} workloads, {args.cores} cores, "
        f"median of {args.rounds} rounds; load average at start: {common.load():.2f}",
        flush=True,
    )
    results: dict = {"cores": args.cores, "rounds": args.rounds, "workloads": {}}
    for w in workloads:
        results["workloads"][w.key] = common.run(w, args.rounds, args.warmup, args.batches)

    if "plain" in only and args.dataset and args.decode_images > 0:
        results["per_core"] = per_core.report(
            args.tree, plain.datasets(args)[0][1], args.decode_images, args.rounds
        )
    results["load_end"] = common.load()
    print(f"\nload average at end: {results['load_end']:.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
