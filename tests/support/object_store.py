"""A real S3-compatible server for tests: SeaweedFS's `weed mini` (bench/service/seaweed.py) on
loopback ports of its own, in a temporary folder, with credentials enforced.

    with seaweed_s3() as s3:
        store = S3ArtifactStore.from_settings(s3.settings(bucket="artifacts"), cache_dir)

Skips the test where the `weed` binary is not installed (a user's clone without the dev extras).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bench.service.seaweed import ACCESS_KEY, SECRET_KEY, SeaweedServer, WeedMissing, weed_binary

__all__ = ["ACCESS_KEY", "SECRET_KEY", "SeaweedS3", "seaweed_s3"]

SeaweedS3 = SeaweedServer


@contextmanager
def seaweed_s3() -> Iterator[SeaweedServer]:
    try:
        weed_binary()
    except WeedMissing as missing:
        pytest.skip(f"{missing}: the S3 store tests skip")
    folder = Path(tempfile.mkdtemp(prefix="fuseforge-seaweed-"))
    server = SeaweedServer(folder)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
