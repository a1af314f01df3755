"""Python read benchmark: bale against its peers, warm and cold, on each tree.

Run by `cargo xtask bench python` (which builds bale and the Python package in
release into the bench venv, installs the pinned peers of
crates/bale-py/benches/requirements.txt there, and passes the trees); by hand,
from the repository root, with that venv:

    target/bench/python/venv/bin/python crates/bale-py/benches/read.py \\
        --tree png-100k=target/bench/png-100k --runs 3

Each peer's dataset is written from the tree (peers.py says how) under
--out/<tree>/<peer> just before its rows run, and deleted after them unless
--keep (bale's is kept); a kept one is reused unless incomplete or made from
another tree (--rebuild forces it). Every row runs in a fresh
Python process (so no mapping or cache of another row survives into it) and
reads every byte of every sample into a Python object, in bale's sample order,
the random rows in the same seeded permutation (--seed); a pass that does not
touch the whole payload fails its row.

- warm: every file of the row's dataset evicted and read once in order (so its
  pages are cached in the sizes a sequential read gives, whatever read it
  before: the size moves warm rates by about 1.1x), one untimed pass, then
  --reps timed passes (median); the share of the files in 2 MiB pages is
  printed;
- cold: before each of --cold-reps timed passes (median), every file of the row's dataset
  read once (so a VM host's cache below the page cache holds it for every row
  alike), then posix_fadvise(DONTNEED) over those files (best effort: the kernel
  keeps pages that are mapped or dirty), the share of their pages still resident
  measured with mincore, and the dataset opened afresh in a Python process
  of its own (each pass is one: nothing an earlier pass still maps serves it).
- first (only when --states names it): before each of --reps timed passes,
  every file of the row's dataset evicted and read once in order, as for warm,
  and the dataset opened afresh in a process of its own: the
  first pass of a fresh open on a warm page cache, as a DataLoader worker
  started anew each epoch (persistent_workers=False) reads; its maps are new,
  so every page is a page fault even though the cache holds it.

Groups: random (one sample at a time over the permutation; bale also in
batches of 64), sequential (every sample in stored order), shuffled (an epoch in
a random order; the best peer is taken over the shuffled and the random rows,
since a random permutation read sample by sample is a shuffled epoch too),
pack (each writer timed afresh into a scratch directory from a warm tree,
durable: fsync/sync before the clock stops; `dd conv=fdatasync` of the payload
size for the disk's durable write speed; --pack-passes rounds of every writer,
in alternating order, each writer's time the median of its passes and the
ratio the median of the rounds' ratios, so that the disk's drift over a run
falls on both sides) and size (each cached dataset against the payload).

Which groups run where (--all-cells: every group in every state on every tree):
random warm and cold, sequential warm, and on tiny trees (mean sample under
16 KB) shuffled cold, pack and size. A peer whose package is missing or whose
dataset cannot be written is reported by name: each of its rows fails with the
error, and the other rows run. Per tree and cache state, a table gives bale's
rate, the best peer's in the same run and their ratio; with --runs N the whole set runs N
times and the summary gives medians and min-max ranges. Load averages are
printed at the start and end of each run. Results go to --json.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

GROUPS = ("random", "sequential", "shuffled", "pack", "size")
# A cold pass that finds more than this share of its dataset's pages resident was not cold.
COLD_RESIDENT = 0.05
# Mean sample bytes under which a tree is tiny (its shuffled, pack and size groups run).
TINY = 16_000
STATES = ("warm", "cold")
# States --states may also name; not run unless named.
MORE_STATES = ("first",)
PACK = ("bale", "bale-zstd", "h5", "lmdb", "tar", "litdata", "mds", "dd")
SIZE = ("bale", "bale-zstd", "mds", "litdata", "h5", "lmdb", "tar")
# The writers bale's pack is compared with (durable peers doing the same job).
PACK_PEERS = ("h5", "lmdb", "tar", "litdata", "mds")
DISTRIBUTIONS = ("bale", "lmdb", "h5py", "numpy", "litdata", "mosaicml-streaming", "webdataset", "torch")


# ---------------------------------------------------------------- options


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="[NAME=]PATH",
        help="a tree to read (repeatable); NAME defaults to the directory name",
    )
    ap.add_argument("--bale", default="target/release/bale", help="the bale binary that packs (default: %(default)s)")
    ap.add_argument("--out", default="target/bench/python/peers", help="cache of the datasets (default: %(default)s)")
    ap.add_argument("--json", default="target/bench/python/results.json", help="results (default: %(default)s)")
    ap.add_argument(
        "--rows",
        default="*",
        help="comma-separated patterns over row names (see --list), e.g. 'bale.*,lmdb.*', '*.random', 'pack.*'",
    )
    ap.add_argument(
        "--peers",
        default=None,
        help="comma-separated peers to keep: bale, lmdb, h5, tar, litdata, mds, wds, loose, dd "
        "(bale-zstd comes with bale; default: all)",
    )
    ap.add_argument("--groups", default=",".join(GROUPS), help="comma-separated, of: " + ", ".join(GROUPS))
    ap.add_argument(
        "--states",
        default=",".join(STATES),
        help="comma-separated, of: warm, cold, first (the first pass of a fresh open on a warm cache; "
        "default: warm,cold)",
    )
    ap.add_argument("--runs", type=int, default=1, help="run the whole set this many times (default: 1)")
    ap.add_argument("--reps", type=int, default=3, help="timed passes per warm row and run (median; default: 3)")
    ap.add_argument(
        "--cold-reps",
        type=int,
        default=3,
        help="timed passes per cold row and run, each after evicting the files (median; default: 3)",
    )
    ap.add_argument(
        "--pack-passes",
        type=int,
        default=3,
        help="rounds of every pack writer per run, in alternating order (median; default: 3)",
    )
    ap.add_argument("--seed", type=int, default=0, help="the random permutation and shuffles (default: 0)")
    ap.add_argument(
        "--timeout",
        type=float,
        default=3600,
        help="seconds before a warm row, or one pass of a cold or first row (each in a process of its own), "
        "is given up (default: 3600)",
    )
    ap.add_argument("--rebuild", action="store_true", help="write every peer dataset again")
    ap.add_argument(
        "--keep",
        action="store_true",
        help="keep each peer's dataset under --out for the next run (default: delete it once its rows ran; "
        "bale's is kept)",
    )
    ap.add_argument(
        "--budget",
        type=float,
        default=60,
        help="seconds of timed passes per row after which no further pass starts (at least one runs; default: 60)",
    )
    ap.add_argument(
        "--all-cells",
        action="store_true",
        help="every group in every state on every tree (default: random warm and cold, sequential warm; "
        "on tiny trees also shuffled cold, pack and size)",
    )
    ap.add_argument("--list", action="store_true", help="list the rows and exit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.groups = _split(args.groups, GROUPS, "--groups")
    args.states = _split(args.states, STATES + MORE_STATES, "--states")
    args.rows = [p.strip() for p in args.rows.split(",") if p.strip()]
    if args.peers is not None:
        args.peers = _split(
            args.peers, ("bale", "bale-zstd", "lmdb", "h5", "tar", "litdata", "mds", "wds", "loose", "dd"), "--peers"
        )
        if "bale" in args.peers:
            args.peers.append("bale-zstd")
    if min(args.runs, args.reps, args.cold_reps, args.pack_passes) < 1:
        ap.error("--runs, --reps, --cold-reps and --pack-passes must be at least 1")
    return args


def _split(value: str, allowed: tuple[str, ...], name: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad:
        raise SystemExit(f"{name}: unknown {', '.join(bad)} (expected some of: {', '.join(allowed)})")
    return items


def _wanted(name: str, args: argparse.Namespace) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in args.rows)


def selected_rows(args: argparse.Namespace) -> list[peers.Row]:
    return [
        r
        for r in peers.ROWS
        if r.group in args.groups
        and _wanted(r.name, args)
        and (args.peers is None or r.peer in args.peers)
    ]


def selected_writers(args: argparse.Namespace, group: str, names: tuple[str, ...]) -> list[str]:
    if group not in args.groups:
        return []
    return [w for w in names if _wanted(f"{group}.{w}", args) and (args.peers is None or w in args.peers)]


def runs_in(group: str, state: str, mean: float, args: argparse.Namespace) -> bool:
    """Whether ``group`` runs in ``state`` on a tree of samples of ``mean`` bytes
    (pack and size are state-less: their ``state`` is "warm")."""
    if group not in args.groups:
        return False
    if args.all_cells:
        return True
    tiny = mean < TINY
    plan = {
        "random": ("warm", "cold", "first"),
        "sequential": ("warm", "first"),
        "shuffled": ("cold", "first") if tiny else (),
        "pack": ("warm",) if tiny else (),
        "size": ("warm",) if tiny else (),
    }
    return state in plan[group]


def list_rows() -> None:
    for r in peers.ROWS:
        print(f"{r.name:<18} {r.group:<10} {r.about}{'  (for information)' if r.info else ''}")
    for w in PACK:
        about = "dd if=/dev/zero conv=fdatasync (the disk)" if w == "dd" else peers.WRITERS[w][0]
        print(f"{'pack.' + w:<18} {'pack':<10} {about}")
    for w in SIZE:
        print(f"{'size.' + w:<18} {'size':<10} on-disk bytes of {peers.WRITERS[w][0].split(' (')[0]} against the payload")


# ---------------------------------------------------------------- children


def child(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    try:
        if "pack" in spec:
            if spec["pack"] == "dd":
                secs = peers.pack_dd(spec["bytes"], spec["dest"])
            else:
                secs = peers.WRITERS[spec["pack"]][2](spec["tree"], spec["dest"], spec["bale"])
            out: dict = {"secs": secs}
        else:
            ctx = peers.Context.load(spec["catalog"], spec["seed"], spec["datasets"], spec["tree"])
            row = next(r for r in peers.ROWS if r.name == spec["row"])
            out = peers.run_row(row, ctx, spec["state"], spec["reps"], spec["budget"])
    except Exception as e:  # reported by the parent, which goes on with the other rows
        import traceback

        traceback.print_exc()
        out = {"error": f"{type(e).__name__}: {e}"}
    with open(spec["result"], "w") as f:
        json.dump(out, f)
    return 0


def in_child(spec: dict, scratch: str, timeout: float) -> dict:
    """Runs ``spec`` in a fresh interpreter with its own TMPDIR (MosaicML's file locks go there)."""
    tmp = tempfile.mkdtemp(prefix="child-", dir=scratch)
    spec = dict(spec, result=os.path.join(tmp, "result.json"))
    spec_path = os.path.join(tmp, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    env = dict(os.environ, TMPDIR=tmp)
    try:
        p = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--child", spec_path],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
        try:
            with open(spec["result"]) as f:
                out = json.load(f)
        except (OSError, ValueError):
            out = {"error": f"exited with status {p.returncode} and no result"}
        if "error" in out:
            tail = p.stdout.decode(errors="replace").strip().splitlines()[-15:]
            out["log"] = tail
    except subprocess.TimeoutExpired:
        out = {"error": f"no result after {timeout:.0f} s (killed)"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def timed_row(spec: dict, scratch: str, timeout: float) -> dict:
    """Times a row. Warm: its passes in one interpreter. Cold and first: each pass in an
    interpreter of its own, so nothing a pass left behind serves the next: LitData
    0.2.76 keeps its chunk files mapped after its dataset is deleted, the kernel does
    not evict mapped pages, and its second and third "cold" passes in one interpreter
    found every page resident and ran warm."""
    if spec["state"] == "warm" or spec["reps"] <= 1:
        return in_child(spec, scratch, timeout)
    passes: list[dict] = []
    for _ in range(spec["reps"]):
        if passes and sum(p["secs"][0] for p in passes) >= spec["budget"]:
            break
        out = in_child(dict(spec, reps=1, budget=float("inf")), scratch, timeout)
        if "error" in out:
            return out
        passes.append(out)
    secs = [p["secs"][0] for p in passes]
    med = sorted(secs)[len(secs) // 2]
    first = passes[0]
    # rate * secs is the sample count, mb_s * secs the payload, the same in every pass.
    res = [p["resident"] for p in passes if p.get("resident") is not None]
    return {
        "rate": first["rate"] * first["secs"][0] / med,
        "mb_s": first["mb_s"] * first["secs"][0] / med,
        "secs": secs,
        "resident": sum(res) / len(res) if res else None,
        "resident_each": [p.get("resident") for p in passes],
        "huge": None,
    }


# ---------------------------------------------------------------- formatting


def rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}/s"


def ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def spread(values: list[float], fmt) -> str:
    """The median, with the min-max range when there are several values."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt(med)
    return f"{fmt(med)} ({fmt(min(values))}-{fmt(max(values))})"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def headline(state_rows: dict[str, dict], group: str) -> dict | None:
    """bale's figure in ``group``, the best peer's in the same run, and their ratio."""
    if not any((row := _row(name)) is not None and row.group == group for name in state_rows):
        return None  # the group did not run in this state
    bale = state_rows.get(peers.BALE_ROW[group], {}).get("rate")
    pool = [
        (name, r["rate"])
        for name, r in state_rows.items()
        if "rate" in r
        and (row := _row(name)) is not None
        and row.group in peers.POOL[group]
        and row.peer != "bale"
        and not row.info
    ]
    if bale is None and not pool:
        return None
    best = max(pool, key=lambda p: p[1]) if pool else (None, None)
    out = {"bale": bale, "peer": best[0], "peer_rate": best[1]}
    out["ratio"] = bale / best[1] if bale and best[1] else None
    if group == "shuffled":
        # The best shuffled iteration alone (the comparison), when a random row won.
        own = [p for p in pool if _row(p[0]).group == "shuffled"]
        if own and (alt := max(own, key=lambda p: p[1]))[0] != best[0]:
            out["iter_peer"], out["iter_rate"] = alt
            out["iter_ratio"] = bale / alt[1] if bale else None
    if group == "random":
        batched = state_rows.get("bale.batched", {}).get("rate")
        out["batched"] = batched
        out["batched_ratio"] = batched / best[1] if batched and best[1] else None
    # The payload alone (`fields="<ext>"`), as the key-value peers give it.
    values = state_rows.get(VALUES_ROW.get(group, ""), {}).get("rate")
    if values:
        out["values"] = values
        out["values_ratio"] = values / best[1] if best[1] else None
    return out


# bale's rows that give each sample's payload alone (no dict), shown beside the headline.
VALUES_ROW = {"random": "bale.values", "sequential": "bale.seq.values"}


def _row(name: str) -> peers.Row | None:
    return next((r for r in peers.ROWS if r.name == name), None)


def pack_headline(pack: dict[str, dict]) -> dict | None:
    bale = pack.get("bale", {}).get("secs")
    pool = [(w, pack[w]["secs"]) for w in PACK_PEERS if "secs" in pack.get(w, {})]
    if bale is None and not pool:
        return None
    best = min(pool, key=lambda p: p[1]) if pool else (None, None)
    ratio = best[1] / bale if bale and best[1] else None
    # Round by round (the same stretch of the disk's weather), where both have every pass.
    peer_passes, bale_passes = pack.get(best[0], {}).get("passes", []), pack.get("bale", {}).get("passes", [])
    if ratio and len(peer_passes) == len(bale_passes) > 1:
        ratio = statistics.median(p / b for p, b in zip(peer_passes, bale_passes))
    return {
        "bale": bale,
        "peer": best[0],
        "peer_secs": best[1],
        "ratio": ratio,
        "zstd": pack.get("bale-zstd", {}).get("secs"),
        "dd": pack.get("dd", {}).get("secs"),
    }


GROUP_TITLE = {
    "random": "random `ds[i]`",
    "sequential": "sequential iteration",
    "shuffled": "shuffled epoch",
}


def table(tree: str, info: dict, runs: list[dict], state: str, with_pack: bool) -> list[str]:
    """The issue's layout: row | bale | best peer in the same run | ratio, over ``runs``."""
    lines = [
        f"{tree}, {state}: {info['samples']:,} samples of {info['payload'] / info['samples'] / 1e3:.1f} KB "
        f"({info['payload'] / 1e6:,.1f} MB), {len(runs)} run(s), load average "
        + ", ".join(f"{r['load_start'][0]:.1f}-{r['load_end'][0]:.1f}" for r in runs),
        "",
        "| row | bale | best peer in the same run | ratio |",
        "| --- | --- | --- | --- |",
    ]
    for group in ("random", "sequential", "shuffled"):
        heads = [headline(r["trees"].get(tree, {}).get(state, {}), group) for r in runs]
        heads = [h for h in heads if h]
        if not heads:
            continue
        names = sorted({h["peer"] for h in heads if h["peer"]})
        bale = spread([h["bale"] for h in heads], rate)
        peer = f"{' / '.join(names) or '-'} {spread([h['peer_rate'] for h in heads], rate)}"
        r = spread([h["ratio"] for h in heads], ratio)
        if group == "random" and any(h.get("batched") for h in heads):
            bale += f" (batched {spread([h['batched'] for h in heads], rate)})"
            r += f"; batched {spread([h['batched_ratio'] for h in heads], ratio)}"
        if any(h.get("values") for h in heads):
            bale += f" (payload alone {spread([h['values'] for h in heads if h.get('values')], rate)})"
            r += f"; payload alone {spread([h['values_ratio'] for h in heads if h.get('values_ratio')], ratio)}"
        alts = [h for h in heads if h.get("iter_peer")]
        if alts:
            names = " / ".join(sorted({h["iter_peer"] for h in alts}))
            peer += f"; best shuffled iteration {names} {spread([h['iter_rate'] for h in alts], rate)}"
            r += f"; {spread([h['iter_ratio'] for h in alts], ratio)} against it"
        lines.append(f"| {GROUP_TITLE[group]}, {state} | {bale} | {peer} | {r} |")
    if with_pack:
        packs = [pack_headline(r["trees"].get(tree, {}).get("pack", {})) for r in runs]
        packs = [p for p in packs if p]
        if packs:
            secs = lambda x: f"{x:.2f} s"  # noqa: E731
            bale = spread([p["bale"] for p in packs], secs)
            if any(p["zstd"] for p in packs):
                bale += f"; `--compress zstd` {spread([p['zstd'] for p in packs], secs)}"
            names = sorted({p["peer"] for p in packs if p["peer"]})
            peer = f"{' / '.join(names) or '-'} {spread([p['peer_secs'] for p in packs], secs)}"
            dd = [p["dd"] for p in packs if p["dd"]]
            if dd:
                peer += f"; `dd conv=fdatasync` {spread(dd, secs)} ({info['payload'] / 1e6 / statistics.median(dd):,.0f} MB/s)"
            lines.append(
                f"| pack {info['samples']:,} files, warm, durable | {bale} | {peer} | "
                f"{spread([p['ratio'] for p in packs], ratio)} |"
            )
        sizes = info.get("sizes", {})
        if sizes:
            pct = lambda w: f"{sizes[w] / info['payload'] - 1:+.1%}"  # noqa: E731
            bale = ", ".join(f"{pct(w)} ({'tar' if w == 'bale' else '`--compress zstd`'})" for w in ("bale", "bale-zstd") if w in sizes)
            others = ", ".join(f"{w} {pct(w)}" for w in SIZE[2:] if w in sizes)
            lines.append(f"| size of the packed tree vs payload | {bale or '-'} | {others or '-'} | |")
    if len(lines) > 4:
        failed: dict[str, str] = {}
        for r in runs:
            for row, res in r["trees"].get(tree, {}).get(state, {}).items():
                if "error" in res:
                    failed.setdefault(row, res["error"])
            if with_pack:
                for w, res in r["trees"].get(tree, {}).get("pack", {}).items():
                    if "error" in res:
                        failed.setdefault(f"pack.{w}", res["error"])
        for w, err in info.get("broken", {}).items():
            if with_pack and w in SIZE:
                failed.setdefault(f"size.{w}", err)
        if failed:
            lines.append("")
            lines += [f"FAILED (not in the table): {row}: {err}" for row, err in failed.items()]
        if state == "cold":
            warm = {}
            for r in runs:
                for row, res in r["trees"].get(tree, {}).get(state, {}).items():
                    if (most := most_resident(res)) > COLD_RESIDENT:
                        warm[row] = max(warm.get(row, 0.0), most)
            if warm:
                lines.append("")
                lines += [
                    f"NOT COLD (its figure flatters it): {row}: up to {share:.0%} of its pages were resident "
                    "before a timed pass"
                    for row, share in warm.items()
                ]
    return lines


def most_resident(r: dict) -> float:
    """The largest share of a row's pages resident before one of its timed passes."""
    each = [x for x in r.get("resident_each") or [r.get("resident")] if x is not None]
    return max(each, default=0.0)


def detail(state: str, rows: dict[str, dict]) -> list[str]:
    out = []
    for name, r in rows.items():
        row = _row(name)
        if "error" in r:
            out.append(f"  {state:<5} {name:<17} FAILED: {r['error']}")
            continue
        res = "" if r.get("resident") is None else f"resident {r['resident']:6.1%}"
        if r.get("huge") is not None:
            res += f"  2 MiB pages {r['huge']:6.1%}"
        warn = "  (eviction incomplete)" if state == "cold" and most_resident(r) > COLD_RESIDENT else ""
        out.append(
            f"  {state:<5} {name:<17} {rate(r['rate']):>14} {r['mb_s']:>9,.1f} MB/s  {len(r['secs'])} pass(es)  "
            f"{res}{warn}  {row.about if row else ''}"
        )
    return out


# ---------------------------------------------------------------- main


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.child:
        return child(args.child)
    if args.list:
        list_rows()
        return 0
    if not args.tree:
        raise SystemExit("give at least one --tree [NAME=]PATH (see --help)")
    trees = []
    for t in args.tree:
        name, sep, path = t.partition("=")
        if not sep:
            name, path = Path(t).name, t
        if not os.path.isdir(path):
            raise SystemExit(
                f"--tree {t}: {path} is not a directory (cargo xtask bench python generates "
                "target/bench/imagenet-like and target/bench/png-100k when it is given them; "
                "cargo xtask gen-tree makes a tree of your own)"
            )
        trees.append((name, os.path.abspath(path)))
    rows = selected_rows(args)
    pack_writers = selected_writers(args, "pack", PACK)
    size_writers = selected_writers(args, "size", SIZE)
    if not rows and not pack_writers and not size_writers:
        raise SystemExit("no row selected (see --list)")
    out_root = os.path.abspath(args.out)
    bale_bin = os.path.abspath(args.bale)
    scratch = os.path.join(out_root, ".scratch")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)

    versions = {}
    for d in DISTRIBUTIONS:
        try:
            versions[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            versions[d] = None
    results: dict = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "packages": versions,
        "args": {k: v for k, v in vars(args).items() if k != "child"},
        "trees": {},
        "runs": [],
    }
    print(f"python {platform.python_version()}; " + ", ".join(f"{k} {v}" for k, v in versions.items() if v), flush=True)

    # bale's dataset (every row reads its sample order) and the catalog of each tree;
    # the peers' datasets are written (or reused) when their rows come.
    contexts = {}
    for name, tree in trees:
        samples = peers.walk(tree)
        fp = peers.fingerprint(samples)
        if not fp["samples"]:
            raise SystemExit(f"{tree}: no samples")
        mean = fp["bytes"] / fp["samples"]
        tree_rows = [r for r in rows if any(runs_in(r.group, st, mean, args) for st in args.states)]
        tree_sizes = size_writers if runs_in("size", "warm", mean, args) else []
        # Each dataset's rows run together (warm, then cold), then the dataset is
        # dropped unless --keep: the disk holds bale's and one peer's at a time.
        order = list(dict.fromkeys(["bale"] + [r.dataset for r in tree_rows] + list(tree_sizes)))
        info = {
            "path": tree,
            "samples": fp["samples"],
            "files": fp["files"],
            "payload": fp["bytes"],
            "datasets": {},
            "broken": {},
            "sizes": {},
        }
        results["trees"][name] = info
        datasets = {d: os.path.join(out_root, name, d, peers.WRITERS[d][1]) for d in order if d in peers.WRITERS}
        ensure(name, "bale", tree, out_root, bale_bin, fp, args, info)
        if any(r.name == "tarpread.random" for r in tree_rows):
            peers.index_bale_tars(datasets["bale"])
        catalog = os.path.join(out_root, name, "catalog.json")
        info["payload"] = write_catalog(catalog, samples, datasets["bale"])
        del samples
        contexts[name] = (tree, catalog, datasets, mean, order, tree_rows, tree_sizes)

    print(
        "\ncold: before each timed pass, every file of the row's dataset read once, then "
        "posix_fadvise(POSIX_FADV_DONTNEED) over them, best effort (the kernel keeps mapped and dirty pages); 'resident' is the share of those "
        "pages in the page cache just before the timed pass (mincore on a fresh mapping). "
        "warm: every file of the row's dataset evicted and read once in order before the untimed pass; "
        "'2 MiB pages' is the share of its bytes the page cache then held in 2 MiB pages.",
        flush=True,
    )
    for run_no in range(1, args.runs + 1):
        run: dict = {"load_start": load(), "trees": {}}
        print(f"\n=== run {run_no}/{args.runs}, load average {' '.join(map(str, run['load_start']))}", flush=True)
        for name, (tree, catalog, datasets, mean, order, tree_rows, tree_sizes) in contexts.items():
            info = results["trees"][name]
            fp = {"samples": info["samples"], "files": info["files"], "bytes": info["payload"]}
            per_tree: dict = {state: {} for state in args.states}
            run["trees"][name] = per_tree
            print(f"\n--- {name}: {info['samples']:,} samples, {info['payload'] / 1e6:,.1f} MB ({tree})", flush=True)
            if pack_writers and runs_in("pack", "warm", mean, args):
                # First, while the disk holds only bale's dataset of this tree.
                per_tree["pack"] = pack(name, tree, info, pack_writers, scratch, bale_bin, args.timeout, args.pack_passes)
            for d in order:
                if d != "loose":
                    ensure(name, d, tree, out_root, bale_bin, fp, args, info)
                for state in args.states:
                    per_state = per_tree[state]
                    reps = args.cold_reps if state == "cold" else args.reps
                    for row in tree_rows:
                        if row.dataset != d or not runs_in(row.group, state, mean, args):
                            continue
                        if d in info["broken"]:
                            per_state[row.name] = {"error": info["broken"][d]}
                            print("\n".join(detail(state, {row.name: per_state[row.name]})), flush=True)
                            continue
                        spec = {
                            "row": row.name,
                            "state": state,
                            "reps": reps,
                            "budget": args.budget,
                            "catalog": catalog,
                            "seed": args.seed,
                            "datasets": datasets,
                            "tree": tree,
                        }
                        per_state[row.name] = timed_row(spec, scratch, args.timeout)
                        print("\n".join(detail(state, {row.name: per_state[row.name]})), flush=True)
                        for line in per_state[row.name].get("log", []):
                            print(f"      | {line}")
                if d not in ("bale", "loose") and not args.keep:
                    shutil.rmtree(os.path.join(out_root, name, d), ignore_errors=True)
            for w in tree_sizes:
                if w in info["datasets"]:
                    info["sizes"][w] = info["datasets"][w]["bytes"]
        run["load_end"] = load()
        results["runs"].append(run)
        print(f"\n=== run {run_no}/{args.runs} done, load average {' '.join(map(str, run['load_end']))}", flush=True)
        write_json(args.json, results)

    print(f"\n=== summary: {args.runs} run(s); ratios are bale / best peer of the same run (above 1: bale is faster)")
    for name in contexts:
        for i, state in enumerate(args.states if rows else ["warm"]):
            lines = table(name, results["trees"][name], results["runs"], state, with_pack=i == 0)
            if len(lines) > 4:
                print()
                print("\n".join(lines))
    results["summary"] = {
        name: {
            **{
                state: {g: [headline(r["trees"][name].get(state, {}), g) for r in results["runs"]] for g in GROUP_TITLE}
                for state in args.states
            },
            "pack": [pack_headline(r["trees"][name].get("pack", {})) for r in results["runs"]],
        }
        for name in contexts
    }
    write_json(args.json, results)
    print(f"\nresults: {args.json}")
    if any(r.peer == "mds" for r in rows):
        # MosaicML's shared memory of a row that was killed (each row cleans its own).
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


def ensure(name: str, d: str, tree: str, out_root: str, bale_bin: str, fp: dict, args, info: dict) -> None:
    """Writes (or reuses) dataset ``d`` of tree ``name``; a peer's failure is recorded
    in ``info["broken"]`` (its rows then fail with it), bale's stops the run."""
    if d in info["broken"]:
        return
    root = os.path.join(out_root, name, d)
    try:
        meta, fresh = peers.build(d, tree, root, bale_bin, fp, force=args.rebuild and d not in info["datasets"])
    except Exception as e:
        if d == "bale":
            raise  # every row reads bale's sample order
        info["broken"][d] = f"its dataset could not be written: {type(e).__name__}: {e}"
        print(f"{name}: {d:<9} FAILED: {info['broken'][d]}", flush=True)
        shutil.rmtree(root, ignore_errors=True)
        return
    info["datasets"][d] = meta
    print(
        f"{name}: {d:<9} {'written' if fresh else 'cached '} {meta['bytes'] / 1e6:10,.1f} MB"
        f"  (pack {meta['pack_s']:.2f} s when written, {meta['built']})",
        flush=True,
    )


def write_catalog(path: str, samples: list, bale_dataset: str) -> int:
    """bale's sample order with each sample's extensions and loose files; returns the payload bytes."""
    import bale

    ds = bale.Dataset(bale_dataset)
    keys = [ds.key(i) for i in range(len(ds))]
    by_key = {k: fs for k, fs in samples}
    if set(keys) != set(by_key):
        missing = sorted(set(by_key) - set(keys))[:3]
        extra = sorted(set(keys) - set(by_key))[:3]
        raise SystemExit(f"{bale_dataset}: bale's samples differ from the tree's (missing {missing}, extra {extra})")
    exts = [[e for e, _, _ in by_key[k]] for k in keys]
    paths = [[p for _, p, _ in by_key[k]] for k in keys]
    payload = sum(s for _, fs in samples for _, _, s in fs)
    with open(path, "w") as f:
        json.dump({"keys": keys, "exts": exts, "paths": paths, "payload": payload}, f)
    return payload


def pack(
    name: str, tree: str, info: dict, writers: list[str], scratch: str, bale_bin: str, timeout: float, passes: int
) -> dict:
    """Times each writer afresh into a scratch directory, from a warm tree:
    ``passes`` rounds, every other one in reverse order; a writer's ``secs``
    is the median of its ``passes``, and a writer that fails is not run again."""
    for _, fs in peers.walk(tree):  # warm the tree
        for _, p, _ in fs:
            with open(p, "rb") as f:
                while f.read(1 << 20):
                    pass
    out: dict = {}
    for round_no in range(passes):
        for w in writers if round_no % 2 == 0 else writers[::-1]:
            if "error" in out.get(w, {}):
                continue
            dest_root = os.path.join(scratch, f"pack-{w}")
            shutil.rmtree(dest_root, ignore_errors=True)
            os.makedirs(dest_root)
            rel = "dd.bin" if w == "dd" else peers.WRITERS[w][1]
            spec = {"pack": w, "tree": tree, "dest": os.path.join(dest_root, rel), "bale": bale_bin, "bytes": info["payload"]}
            r = in_child(spec, scratch, timeout)
            shutil.rmtree(dest_root, ignore_errors=True)
            about = "dd if=/dev/zero bs=1M conv=fdatasync" if w == "dd" else peers.WRITERS[w][0]
            tag = f"{w} {round_no + 1}/{passes}" if passes > 1 else w
            if "error" in r:
                out[w] = r
                print(f"  pack  {tag:<17} FAILED: {r['error']}", flush=True)
                for line in r.get("log", []):
                    print(f"      | {line}")
                continue
            done = out.setdefault(w, {"passes": []})
            done["passes"].append(r["secs"])
            done["secs"] = statistics.median(done["passes"])
            print(f"  pack  {tag:<17} {r['secs']:>12.2f} s {info['payload'] / r['secs'] / 1e6:>9,.1f} MB/s  {about}", flush=True)
    return out


def write_json(path: str, results: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
