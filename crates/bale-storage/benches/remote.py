"""Reading a dataset from object storage: bale against raw GETs and its peers.

Run by `cargo xtask bench remote` (which builds bale in release, makes the bench venv
and packs the benchmark tree); by hand:

    python crates/bale-storage/benches/remote.py --dataset DIR [--json OUT]
        [--budget SECS] [--parallel N] [--skip wds,mds,litdata]

One SeaweedFS server on 127.0.0.1 (tests/python/_seaweed.py) serves every subject in
the same run. Every subject touches every byte it counts (payloads are copied into
Python objects). Printed: samples/s (and MB/s) of each subject, and the ratios the
issue sets as targets:

- sequential epoch: bale / raw parallel GET of the same shard objects (>= 0.8), bale /
  best of WebDataset over HTTP, MosaicML Streaming and LitData (>= 2);
- random access, batches of 64: bale / LitData's random reads (>= 5), bale / a loop
  of one GET per sample (>= 10);
- staging the dataset: `bale stage` / a parallel boto3 download of the same objects (>= 1).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests/python"))
import _seaweed  # noqa: E402

import bale  # noqa: E402


def touch(sample: dict) -> int:
    """Bytes of a sample's payloads (every one read)."""
    n = 0
    for k, v in sample.items():
        if k.startswith("__"):
            continue
        if isinstance(v, (bytes, bytearray, memoryview)):
            n += len(bytes(v))
        elif hasattr(v, "tobytes"):
            n += len(v.tobytes())
        elif isinstance(v, str):
            n += len(v.encode())
    return n


_OPEN: dict[str, bale.Dataset] = {}


def peer_record(path: str, fields: tuple[str, ...], i: int) -> dict:
    """Sample i as the peers' writers take it (top-level: LitData's workers pickle it)."""
    ds = _OPEN.get(path) or _OPEN.setdefault(path, bale.Dataset(path, decode="bytes"))
    s = ds[i]
    out = {"key": s["__key__"], "cls": int(s.get("cls", -1))}
    out.update({f: bytes(s[f]) if f in s else b"" for f in fields if f != "cls"})
    return out


class Timed:
    def __init__(self, name: str, kind: str) -> None:
        self.name, self.kind = name, kind
        self.samples = 0
        self.bytes = 0
        self.secs = 0.0

    def rate(self) -> float:
        return self.samples / self.secs if self.secs else 0.0

    def row(self) -> str:
        mb = self.bytes / self.secs / 1e6 if self.secs else 0.0
        return f"  {self.kind:<10} {self.name:<34} {self.rate():>12,.0f} samples/s {mb:>9,.1f} MB/s ({self.samples} in {self.secs:.2f} s)"


def run_for(t: Timed, budget: float, step) -> Timed:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    while time.perf_counter() - start < budget:
        n, b = step()
        if n == 0:
            break
        t.samples += n
        t.bytes += b
    t.secs = time.perf_counter() - start
    return t


class _Done(Exception):
    """Ends the measurements early (--pack-only)."""


def pack_row(args, bale_bin: Path, server, s3, bucket: str, work: Path) -> tuple[Timed, Timed]:  # type: ignore[no-untyped-def]
    """`bale pack TREE -o s3://...` against the same pack to a local directory
    followed by a parallel boto3 upload of its files (bale.json last). Both
    packs are durable (bale fsyncs its shards). The tree is read once first,
    untimed, so both find it in the page cache."""
    opts = server.options()
    flags = ["--shard-size", "64MiB", "-q"]
    storage = [a for k, v in opts.items() for a in ("--storage-option", f"{k}={v}")]
    warm = work / "pack-warm"
    subprocess.run([str(bale_bin), "pack", str(args.tree), "-o", str(warm), *flags], check=True)
    files = sorted(p for p in warm.iterdir() if p.is_file())
    total = sum(p.stat().st_size for p in files)
    samples = json.loads((warm / "bale.json").read_text())["samples"]
    shutil.rmtree(warm)
    base = Timed("bale pack to disk, then parallel boto3 upload", "pack")
    pack = Timed("bale pack -o s3:// (packing and uploading overlap)", "pack")
    for run in range(args.pack_runs):
        local = work / f"pack-local-{run}"
        start = time.perf_counter()
        subprocess.run([str(bale_bin), "pack", str(args.tree), "-o", str(local), *flags], check=True)
        names = sorted(p.name for p in local.iterdir() if p.name != "bale.json")
        with ThreadPoolExecutor(args.parallel) as pool:
            list(pool.map(lambda f: s3.upload_file(str(local / f), bucket, f"up{run}/{f}"), names))
        s3.upload_file(str(local / "bale.json"), bucket, f"up{run}/bale.json")
        secs = time.perf_counter() - start
        shutil.rmtree(local)
        if base.secs == 0 or secs < base.secs:
            base.secs, base.samples, base.bytes = secs, samples, total
        start = time.perf_counter()
        subprocess.run(
            [str(bale_bin), "pack", str(args.tree), "-o", f"s3://{bucket}/packed{run}", *flags, *storage], check=True
        )
        secs = time.perf_counter() - start
        if pack.secs == 0 or secs < pack.secs:
            pack.secs, pack.samples, pack.bytes = secs, samples, total
    return pack, base


def clear_row(args, bale_bin: Path, server, s3, bucket: str, work: Path) -> tuple[Timed, Timed]:  # type: ignore[no-untyped-def]
    """`bale pack --force` of a 10-file tree over a dataset of `--clear`
    objects (1 KB shards of one sample each, and their indexes), against a
    boto3 clear of the same prefix (a listing, then `delete_objects` of
    1,000 keys a request: the fewest requests S3 takes) followed by the same
    pack. Each side gets a dataset of its own, packed untimed before."""
    storage = [a for k, v in server.options().items() for a in ("--storage-option", f"{k}={v}")]
    rng = random.Random(7)
    big, small = work / "clear-tree", work / "clear-small"
    for root, count in ((big, max(1, args.clear // 2)), (small, 10)):
        root.mkdir()
        for i in range(count):
            (root / f"{i:06}.bin").write_bytes(rng.randbytes(1024))
    base = Timed("boto3 delete_objects, then bale pack", "clear")
    bale_t = Timed("bale pack --force over the dataset", "clear")
    for run in range(args.pack_runs):
        prefixes = (f"clear-bale{run}", f"clear-boto{run}")
        for prefix in prefixes:
            subprocess.run(
                [str(bale_bin), "pack", "-q", "--shard-samples", "1", str(big), "-o", f"s3://{bucket}/{prefix}", *storage],
                check=True,
            )
        start = time.perf_counter()
        keys = [
            o["Key"]
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefixes[1]}/")
            for o in page.get("Contents", [])
        ]
        for at in range(0, len(keys), 1000):
            s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[at : at + 1000]]})
        subprocess.run(
            [str(bale_bin), "pack", "-q", str(small), "-o", f"s3://{bucket}/{prefixes[1]}", *storage], check=True
        )
        secs = time.perf_counter() - start
        if base.secs == 0 or secs < base.secs:
            base.secs, base.samples = secs, len(keys)
        start = time.perf_counter()
        subprocess.run(
            [str(bale_bin), "pack", "-q", "--force", str(small), "-o", f"s3://{bucket}/{prefixes[0]}", *storage],
            check=True,
        )
        secs = time.perf_counter() - start
        if bale_t.secs == 0 or secs < bale_t.secs:
            bale_t.secs, bale_t.samples = secs, len(keys)
    return bale_t, base


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", required=True, type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--budget", type=float, default=10.0, help="seconds per random-access subject")
    ap.add_argument("--parallel", type=int, default=16, help="requests in flight for the raw and boto3 baselines")
    ap.add_argument("--skip", default="", help="comma-separated: wds, mds, litdata")
    ap.add_argument("--bale", type=Path, default=None, help="the bale binary (default: target/release/bale)")
    ap.add_argument("--tree", type=Path, default=None, help="the tree of files for the pack row (no pack row without it)")
    ap.add_argument("--pack-only", action="store_true", help="measure the pack row only")
    ap.add_argument("--pack-runs", type=int, default=1, help="runs of each pack subject (the best is kept)")
    ap.add_argument(
        "--clear",
        type=int,
        default=2000,
        help="objects of the dataset `bale pack --force` replaces in the clear row (0: no clear row)",
    )
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    bale_bin = args.bale or Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release/bale"
    local = bale.Dataset(args.dataset, decode="bytes")
    n = len(local)
    results: list[Timed] = []
    failed: list[str] = []
    clear = clear_base = None
    server = _seaweed.Seaweed()
    work = Path(tempfile.mkdtemp(prefix="bale-bench-remote-"))
    try:
        s3 = server.client()
        bucket = server.bucket("bench")
        for k, v in {
            "AWS_ACCESS_KEY_ID": _seaweed.KEY,
            "AWS_SECRET_ACCESS_KEY": _seaweed.SECRET,
            "AWS_DEFAULT_REGION": "us-east-1",
            "S3_ENDPOINT_URL": server.endpoint,
        }.items():
            os.environ[k] = v
        pack = base = None
        if args.tree is not None:
            pack, base = pack_row(args, bale_bin, server, s3, bucket, work)
            results += [base, pack]
        if args.clear > 0:
            clear, clear_base = clear_row(args, bale_bin, server, s3, bucket, work)
            results += [clear_base, clear]
        if args.pack_only:
            raise _Done()
        print(f"bench remote: uploading {args.dataset} ({n} samples) to s3://{bucket}/bale", file=sys.stderr)
        url = server.upload_dir(args.dataset, bucket, "bale")
        opts = server.options()
        manifest = json.loads((args.dataset / "bale.json").read_text())
        shard_keys = [f"bale/{s['file']}" for s in manifest["shards"]]
        total_bytes = sum(s["bytes"] for s in manifest["shards"])

        # Sequential epoch: raw parallel GET of the shard objects.
        t = Timed("raw parallel GET of the shards", "sequential")
        start = time.perf_counter()
        with ThreadPoolExecutor(args.parallel) as pool:
            got = sum(pool.map(lambda k: len(s3.get_object(Bucket=bucket, Key=k)["Body"].read()), shard_keys))
        t.secs = time.perf_counter() - start
        t.samples, t.bytes = n, got
        results.append(t)
        raw = t

        # bale: an epoch in order.
        t = Timed("bale.IterableDataset", "sequential")
        it = bale.IterableDataset(url, rank=0, world_size=1, decode="bytes", storage_options=opts)
        start = time.perf_counter()
        for s in it:
            t.samples += 1
            t.bytes += touch(s)
        t.secs = time.perf_counter() - start
        results.append(t)
        bale_seq = t

        peers: list[Timed] = []
        if "wds" not in skip:
            import webdataset as wds

            urls = [
                "pipe:curl -s -f "
                + repr(s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": k}, ExpiresIn=3600))
                for k in shard_keys
            ]
            t = Timed("WebDataset over HTTP", "sequential")
            start = time.perf_counter()
            for s in wds.WebDataset(urls, shardshuffle=False, empty_check=False):
                t.samples += 1
                t.bytes += touch(s)
            t.secs = time.perf_counter() - start
            results.append(t)
            peers.append(t)

        fields = [f for f in manifest["fields"]]
        record = functools.partial(peer_record, str(args.dataset), tuple(fields))

        if "mds" not in skip:
            from streaming import MDSWriter, StreamingDataset

            out = work / "mds"
            cols = {"key": "str", "cls": "int", **{f: "bytes" for f in fields if f != "cls"}}
            with MDSWriter(out=str(out), columns=cols, compression=None, size_limit="64mb") as w:
                for i in range(n):
                    w.write(record(i))
            server.upload_dir(out, bucket, "mds")
            t = Timed("MosaicML Streaming", "sequential")
            ds = StreamingDataset(remote=f"s3://{bucket}/mds", local=str(work / "mds-cache"), shuffle=False, batch_size=64)
            start = time.perf_counter()
            for s in ds:
                t.samples += 1
                t.bytes += touch(s)
            t.secs = time.perf_counter() - start
            results.append(t)
            peers.append(t)

        lit = None
        if "litdata" not in skip:
            import litdata
            import litdata.streaming.downloader as lit_downloader

            # LitData builds its obstore client with fixed options, which refuse
            # a plain-HTTP endpoint (the local server): allow it there.
            lit_downloader._OBSTORE_CLIENT_OPTIONS = {**lit_downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": "true"}

            out = work / "lit"
            litdata.optimize(fn=record, inputs=list(range(n)), output_dir=str(out), chunk_bytes="64MB", num_workers=1)
            server.upload_dir(out, bucket, "lit")
            lit_opts = {
                "endpoint_url": server.endpoint,
                "aws_access_key_id": _seaweed.KEY,
                "aws_secret_access_key": _seaweed.SECRET,
            }
            t = Timed("LitData", "sequential")
            ds = litdata.StreamingDataset(f"s3://{bucket}/lit", storage_options=lit_opts, cache_dir=str(work / "lit-cache"))
            start = time.perf_counter()
            for s in ds:
                t.samples += 1
                t.bytes += touch(s)
            t.secs = time.perf_counter() - start
            results.append(t)
            peers.append(t)
            lit = litdata.StreamingDataset(f"s3://{bucket}/lit", storage_options=lit_opts, cache_dir=str(work / "lit-cache-random"))

        # Random access from Python, batches of 64.
        rng = random.Random(0)
        ds = bale.Dataset(url, decode="bytes", storage_options=opts)

        def bale_batch():  # type: ignore[no-untyped-def]
            batch = ds.__getitems__([rng.randrange(n) for _ in range(64)])
            return len(batch), sum(touch(s) for s in batch)

        bale_rand = run_for(Timed("bale.Dataset, batches of 64", "random"), args.budget, bale_batch)
        results.append(bale_rand)
        lit_rand = None
        if lit is not None:

            def lit_batch():  # type: ignore[no-untyped-def]
                batch = [lit[rng.randrange(n)] for _ in range(64)]
                return len(batch), sum(touch(s) for s in batch)

            try:
                lit_rand = run_for(Timed("LitData random reads", "random"), args.budget, lit_batch)
                results.append(lit_rand)
            except Exception as e:  # noqa: BLE001 (a peer's failure is reported, the run goes on)
                print(f"bench remote: LitData random reads failed: {type(e).__name__}: {e}", file=sys.stderr)
                failed.append(f"LitData random reads: {type(e).__name__}: {e}")
        # One GET per sample: each member a loose object (a subset uploaded).
        loose = min(n, 2000)
        with ThreadPoolExecutor(args.parallel) as pool:
            list(
                pool.map(
                    lambda i: [
                        s3.put_object(Bucket=bucket, Key=f"files/{i}.{f}", Body=bytes(v))
                        for f, v in local[i].items()
                        if not f.startswith("__") and f != "cls"
                    ],
                    range(loose),
                )
            )
        exts = [f for f in fields if f != "cls"]

        def one_get():  # type: ignore[no-untyped-def]
            got = 0
            for _ in range(64):
                i = rng.randrange(loose)
                for f in exts:
                    got += len(s3.get_object(Bucket=bucket, Key=f"files/{i}.{f}")["Body"].read())
            return 64, got

        per_get = run_for(Timed("one GET per sample, in a loop", "random"), args.budget, one_get)
        results.append(per_get)

        # Staging: bale stage against a parallel boto3 download.
        t = Timed("bale stage", "stage")
        to = work / "staged"
        start = time.perf_counter()
        cmd = [str(bale_bin), "stage", url, "--to", str(to), "-q"]
        for k, v in opts.items():
            cmd += ["--storage-option", f"{k}={v}"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        t.secs = time.perf_counter() - start
        t.samples, t.bytes = n, total_bytes
        results.append(t)
        stage = t
        t = Timed("parallel boto3 download", "stage")
        dl = work / "boto3"
        dl.mkdir()
        keys = [k for k in shard_keys] + [f"bale/{s['index']}" for s in manifest["shards"]] + ["bale/bale.json"]
        start = time.perf_counter()
        with ThreadPoolExecutor(args.parallel) as pool:
            list(pool.map(lambda k: s3.download_file(bucket, k, str(dl / Path(k).name)), keys))
        t.secs = time.perf_counter() - start
        t.samples, t.bytes = n, total_bytes
        results.append(t)
        boto = t
    except _Done:
        pass
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    if args.pack_only:
        total_bytes = next((r.bytes for r in results if r.kind == "pack"), 0)
    print(f"\nbench remote: {n} samples, {total_bytes / 1e6:.1f} MB, one SeaweedFS server on 127.0.0.1")
    for r in results:
        print(r.row())
    ratios = {}
    if pack is not None and base is not None:
        ratios["pack: bale pack -o s3:// / pack then parallel boto3 upload (target >= 1.3)"] = base.secs / pack.secs
    if clear is not None and clear_base is not None:
        ratios["clear: bale pack --force / boto3 delete_objects then pack (target >= 1)"] = (
            clear_base.secs / clear.secs
        )
    if not args.pack_only:
        ratios["sequential: bale / raw parallel GET (target >= 0.8)"] = bale_seq.rate() / raw.rate()
        ratios["random: bale / one GET per sample (target >= 10)"] = bale_rand.rate() / per_get.rate()
        ratios["stage: bale stage / parallel boto3 download (target >= 1)"] = boto.secs / stage.secs
    if not args.pack_only and peers:
        best = max(peers, key=Timed.rate)
        ratios[f"sequential: bale / best peer, {best.name} (target >= 2)"] = bale_seq.rate() / best.rate()
    if not args.pack_only and lit_rand is not None:
        ratios["random: bale / LitData random reads (target >= 5)"] = bale_rand.rate() / lit_rand.rate()
    print("ratios:")
    for k, v in ratios.items():
        print(f"  {k:<62} {v:6.2f}x")
    for f in failed:
        print(f"failed (no ratio): {f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "samples": n,
                    "bytes": total_bytes,
                    "subjects": [
                        {"kind": r.kind, "name": r.name, "samples": r.samples, "bytes": r.bytes, "secs": r.secs}
                        for r in results
                    ],
                    "ratios": ratios,
                    "failed": failed,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
