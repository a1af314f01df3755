"""Run by `cargo xtask ci` in a fresh venv that has only the built `bale` wheel (and numpy):
no Rust toolchain on PATH, no checkout on sys.path. Packs a small tree with the `bale`
binary given as argv[1] and reads it back through the installed package.

    python check_wheel.py /path/to/bale WORKDIR
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def main() -> int:
    bale_bin, work = Path(sys.argv[1]), Path(sys.argv[2])
    for tool in ("cargo", "rustc", "maturin"):
        assert shutil.which(tool) is None, f"{tool} is on PATH: the wheel check must run without a Rust toolchain"
    import bale
    import numpy as np

    here = Path(bale.__file__).resolve()
    assert "site-packages" in here.parts, f"bale imported from {here}, not from the installed wheel"
    tree = work / "tree"
    expected = {}
    for i in range(30):
        d = tree / ("cat", "dog")[i % 2]
        d.mkdir(parents=True, exist_ok=True)
        payload = os.urandom(10 + i * 7)
        (d / f"{i:03d}.bin").write_bytes(payload)
        np.save(d / f"{i:03d}.npy", np.arange(i, dtype=np.int32))
        expected[f"{d.name}/{i:03d}"] = (payload, i % 2, np.arange(i, dtype=np.int32))
    out = work / "ds"
    subprocess.run([str(bale_bin), "pack", str(tree), "-o", str(out), "--shard-samples", "7", "-q"], check=True)

    ds = bale.Dataset(str(out))
    assert len(ds) == len(expected)
    for i in range(len(ds)):
        s = ds[i]
        payload, label, arr = expected[s["__key__"]]
        assert s["bin"] == payload, s["__key__"]
        assert s["cls"] == label
        np.testing.assert_array_equal(s["npy"], arr)
    seen = [s["__key__"] for s in bale.IterableDataset(str(out), shuffle=True, seed=1)]
    assert sorted(seen) == sorted(expected)
    print(f"wheel check: bale {getattr(bale, '__version__', '?')} from {here.parent}: {len(ds)} samples read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
