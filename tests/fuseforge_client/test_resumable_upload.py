"""A resumable upload survives the API being killed mid-upload: the client waits for it to come
back, asks where the upload got, sends on from there (not from the start), and the finished
upload becomes the model, byte for byte."""

from __future__ import annotations

import hashlib
import signal
import sqlite3
import threading
from pathlib import Path

import onnx
import pytest

from fuseforge_client import FuseForgeClient
from fuseforge_client.resumable import PIECE_BYTES
from optimizer.testing.models import large_model
from tests.support.broker import TEST_REDIS_URL
from tests.support.databases import migrated_sqlite_file
from tests.support.processes import FUSEFORGE, Service, free_port, fuseforge_env, wait_healthy

pytestmark = pytest.mark.e2e


def test_an_upload_resumes_after_the_api_was_killed_and_started_again(tmp_path: Path) -> None:
    model = tmp_path / "big.onnx"
    onnx.save(large_model(3 * PIECE_BYTES // 2**20 - 4, seed=3), model)  # three pieces
    port = free_port()
    env = fuseforge_env(FUSEFORGE_ENV="test", FUSEFORGE_DATA_DIR=str(tmp_path / "data"),
                        FUSEFORGE_BROKER_URL=TEST_REDIS_URL, FUSEFORGE_PORT=str(port))
    database = tmp_path / "data" / "fuseforge.sqlite"
    migrated_sqlite_file(database)
    base_url = f"http://127.0.0.1:{port}"
    services = [Service([*FUSEFORGE, "serve"], env, tmp_path / "api-1.log")]
    wait_healthy(base_url, services[0])
    killed = threading.Event()

    def start_again() -> None:
        services.append(Service([*FUSEFORGE, "serve"], env, tmp_path / "api-2.log"))

    def kill_after_the_first_piece(sent: int, total: int) -> None:
        # Called as the second piece is read: the first one is stored, the second never lands.
        if sent > PIECE_BYTES and not killed.is_set():
            killed.set()
            services[0].stop(signal.SIGKILL)
            threading.Timer(1.0, start_again).start()

    try:
        with FuseForgeClient(base_url, api_key="", timeout_s=30) as client:
            uploaded = client.upload_model(model, resumable=True,
                                           on_progress=kill_after_the_first_piece)
        assert killed.is_set()
        assert uploaded.sha256 == hashlib.sha256(model.read_bytes()).hexdigest()
        assert uploaded.size_bytes == model.stat().st_size
        with sqlite3.connect(database) as db:
            (pieces,) = db.execute("SELECT pieces FROM resumable_uploads").fetchone()
        assert pieces == 3  # resumed at the first piece's end: none was stored twice
        assert not list((tmp_path / "data" / "artifacts" / "uploads").rglob("0*"))
    finally:
        for service in services:
            service.stop()
