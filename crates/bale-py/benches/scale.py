"""`cargo xtask bench scale`: time and memory of bale's commands and reader
as the number of samples grows.

For each tree of tiny files (`--tree N=PATH`, made by xtask), it packs the
tree with the release `bale` (`--bale`), then runs `bale stat`, `bale verify`
and `bale ls` on the dataset, each a child process measured by `os.wait4`
(wall time and peak RSS). Then a child Python process opens the dataset with
`bale.Dataset`, looks one key up and reads 1,000 random samples, reporting
its resident memory after each step, anonymous and file-backed apart. Last,
it appends 1% new samples (`bale pack NEW -o DS --append`) and times that
against a pack of the same new samples alone: an append costs time in
proportion to the new samples, so the ratio stays near 1 whatever N. It
prints one table row per N: time per sample and peak RSS of each command,
the reader's resident bytes per sample, and the append's ratio.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

READER = r"""
import json, random, sys, time
def rss():
    # Anonymous memory (the reader's own) and file-backed (mapped index and
    # shard pages: the page cache, which the kernel may take back).
    got = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "RssFile:")):
                name, kb, _ = line.split()
                got[name[3:-1].lower()] = int(kb) * 1024
    return got
base = rss()
import bale
after_import = rss()
t = time.perf_counter()
ds = bale.Dataset(sys.argv[1])
open_s = time.perf_counter() - t
after_open = rss()
key = ds.key(len(ds) // 2)
t = time.perf_counter()
got = ds.get_by_key(key)
key_s = time.perf_counter() - t
assert got["__key__"] == key
after_key = rss()
rng = random.Random(1)
t = time.perf_counter()
for _ in range(1000):
    ds[rng.randrange(len(ds))]
reads_s = time.perf_counter() - t
after_reads = rss()
print(json.dumps({"n": len(ds), "open_s": open_s, "reads_s": reads_s, "key_s": key_s,
                  "import": after_import, "open": after_open, "reads": after_reads, "key": after_key}))
"""


def measured(cmd: list[str]) -> tuple[float, int]:
    """Runs `cmd` (its output discarded); its wall time and peak RSS in bytes."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    elapsed = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {err.decode(errors='replace')[-2000:]}")
    return elapsed, usage.ru_maxrss * 1024


def new_files(tree: str, n: int) -> None:
    """`n` tiny files under the class directories of a scale tree, with keys of
    their own (`cCCC/addIIIIIIIII`), once."""
    if os.path.exists(os.path.join(tree, ".done")):
        return
    rng = random.Random(n)
    for i in range(n):
        d = os.path.join(tree, f"c{i % 1000:03}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"add{i:09}.bin"), "wb") as f:
            f.write(rng.randbytes(256))
    open(os.path.join(tree, ".done"), "w").close()


def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bale", required=True, help="the release bale binary")
    ap.add_argument("--tree", action="append", required=True, metavar="N=PATH", help="a tree of N tiny files")
    ap.add_argument("--out", required=True, help="a directory for the datasets (each replaced)")
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args()
    rows = []
    for spec in a.tree:
        n, path = spec.split("=", 1)
        n = int(n)
        ds = os.path.join(a.out, f"ds-{n}")
        print(f"bench scale: N={n:,}: pack", file=sys.stderr, flush=True)
        pack = measured([a.bale, "pack", path, "-o", ds, "--force", "--quiet"])
        on_disk = sum(os.path.getsize(os.path.join(ds, f)) for f in os.listdir(ds))
        row = {"n": n, "pack": pack, "bytes_on_disk": on_disk}
        for cmd in ["stat", "verify", "ls"]:
            print(f"bench scale: N={n:,}: {cmd}", file=sys.stderr, flush=True)
            row[cmd] = measured([a.bale, cmd, ds])
        print(f"bench scale: N={n:,}: Python Dataset", file=sys.stderr, flush=True)
        out = subprocess.run([sys.executable, "-c", READER, ds], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"the reader failed on {ds}: {out.stderr[-2000:]}")
        row["reader"] = json.loads(out.stdout.strip().splitlines()[-1])
        added = max(n // 100, 1)
        new = os.path.join(a.out, f"new-{n}")
        new_files(new, added)
        alone = os.path.join(a.out, f"new-alone-{n}")
        shutil.rmtree(alone, ignore_errors=True)
        print(f"bench scale: N={n:,}: {added:,} new samples packed alone, then appended", file=sys.stderr, flush=True)
        row["added"] = added
        row["pack_new"] = measured([a.bale, "pack", new, "-o", alone, "--quiet"])
        row["append"] = measured([a.bale, "pack", new, "-o", ds, "--append", "--quiet"])
        shutil.rmtree(alone, ignore_errors=True)
        rows.append(row)
    print("\n| N | pack µs/sample | pack peak RSS | on disk B/sample | stat RSS | verify µs/sample | verify RSS | ls RSS |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        n = r["n"]
        print(
            f"| {n:,} | {r['pack'][0] / n * 1e6:.1f} | {mb(r['pack'][1])} | {r['bytes_on_disk'] / n:,.0f} "
            f"| {mb(r['stat'][1])} | {r['verify'][0] / n * 1e6:.2f} | {mb(r['verify'][1])} | {mb(r['ls'][1])} |"
        )
    print("\nResident bytes per sample beyond `import bale`, anonymous / file-backed (mapped pages):")
    print("| N | open s | after open | then a key lookup | then 1,000 random reads | key lookup s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        d, n = r["reader"], r["n"]
        per = lambda k: " / ".join(f"{(d[k][m] - d['import'][m]) / n:.1f}" for m in ("anon", "file"))  # noqa: E731
        print(f"| {n:,} | {d['open_s']:.3f} | {per('open')} | {per('key')} | {per('reads')} | {d['key_s'] * 1e3:.2f} ms |")
    print("\nAppending 1% new samples to the dataset, against packing them alone:")
    print("| N | new samples | pack them alone | append them | append / alone | append peak RSS |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        p, ap = r["pack_new"], r["append"]
        print(f"| {r['n']:,} | {r['added']:,} | {p[0]:.2f} s | {ap[0]:.2f} s | {ap[0] / p[0]:.2f}x | {mb(ap[1])} |")
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        growth = (last["pack"][0] / last["n"]) / (first["pack"][0] / first["n"])
        print(f"\npack's time per sample at N={last['n']:,} is {growth:.2f}x that at N={first['n']:,} (target: at most 1.2x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
