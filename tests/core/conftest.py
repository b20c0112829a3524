"""The artifact stores the store contract tests run against: the local folder and S3 (a real
SeaweedFS on loopback, one per test module)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.object_store import S3ArtifactStore
from core.storage import ArtifactStore, LocalArtifactStore
from tests.support.object_store import SeaweedS3, seaweed_s3


@pytest.fixture(scope="module")
def seaweed() -> Iterator[SeaweedS3]:
    with seaweed_s3() as server:
        yield server


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "local":
        return LocalArtifactStore(tmp_path / "artifacts")
    seaweed: SeaweedS3 = request.getfixturevalue("seaweed")
    bucket = f"contract-{uuid.uuid4().hex[:12]}"
    seaweed.create_bucket(bucket)
    return S3ArtifactStore.from_settings(seaweed.settings(bucket, prefix="ff/"),
                                         tmp_path / "cache")
