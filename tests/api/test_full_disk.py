"""A full disk while an upload is written answers 507 InsufficientStorage and leaves nothing.

Both faults are real and need no root, against a real server (`fuseforge serve`) in a child
process:
- RLIMIT_FSIZE: the server runs with a file-size limit (and SIGXFSZ ignored), so writing the
  upload past it fails with EFBIG, the error a filesystem's own file-size limit gives. Works
  wherever setrlimit does.
- A tiny tmpfs: the server runs in its own user and mount namespace (`unshare --user
  --map-root-user --mount`, open to unprivileged users where the kernel allows user
  namespaces) with a 256 KiB tmpfs mounted on its upload and artifact folders (a model streams
  into the artifact store, a dataset into the upload folder), so the write fails with ENOSPC
  exactly as on a full disk. Skipped, saying why, where user namespaces are off.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from optimizer.testing.models import model_bytes, small_cnn
from tests.support.api_server import ApiServer, running_api
from tests.support.processes import FUSEFORGE

pytestmark = pytest.mark.e2e

FILE_SIZE_LIMIT = 4 * 1024 * 1024
TMPFS_SIZE = "256k"
UPLOAD = os.urandom(8 * 1024 * 1024)  # larger than either room

_SERVE_UNDER_RLIMIT = """
import resource, signal, sys
from fuseforge_cli.main import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the writer
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
sys.exit(main(["serve"]))
"""


def _unshare_argv(script: str) -> list[str]:
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script]


def _user_namespaces_work(tmp_path: Path) -> str | None:
    """None if this user can mount a tmpfs in a user namespace, else why not."""
    try:
        probe = subprocess.run(
            _unshare_argv(f"mount -t tmpfs -o size=64k tmpfs '{tmp_path}'"),
            capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return "the unshare command is not installed"
    return None if probe.returncode == 0 else f"unshare cannot mount a tmpfs: {probe.stderr}"


@pytest.fixture(scope="module")
def rlimited_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """One server for both routes: a refused upload leaves nothing (each test checks), so the
    second route meets the same empty server as the first."""
    argv = [sys.executable, "-c", _SERVE_UNDER_RLIMIT, str(FILE_SIZE_LIMIT)]
    with running_api(tmp_path_factory.mktemp("rlimited"),
                     broker_url=os.environ["FUSEFORGE_BROKER_URL"],
                     serve_argv=argv) as server:
        yield server


@pytest.fixture
def tmpfs_server(tmp_path: Path) -> Iterator[ApiServer]:
    reason = _user_namespaces_work(tmp_path)
    if reason:
        pytest.skip(reason)
    folders = [tmp_path / "data" / name for name in ("uploads", "artifacts")]
    mounts = ""
    for folder in folders:
        folder.mkdir(parents=True)
        mounts += f"mount -t tmpfs -o size={TMPFS_SIZE} tmpfs '{folder}' && "
    serve = " ".join(FUSEFORGE + ["serve"])
    argv = _unshare_argv(f"{mounts}exec {serve}")
    with running_api(tmp_path, broker_url=os.environ["FUSEFORGE_BROKER_URL"],
                     serve_argv=argv) as server:
        yield server


def _assert_507_and_nothing_stored(server: ApiServer, route: str, reason: str) -> None:
    response = httpx.post(f"{server.base_url}{route}", content=UPLOAD, timeout=60,
                          headers={"Content-Type": "application/octet-stream"})
    assert response.status_code == 507, response.text
    body = response.json()
    assert body["error"] == "InsufficientStorage"
    assert reason in body["detail"] and "FUSEFORGE_DATA_DIR" in body["detail"]
    stored = [p for p in (server.data_dir / "uploads").rglob("*") if p.is_file()]
    stored += [p for p in (server.data_dir / "artifacts").rglob("*") if p.is_file()]
    assert stored == []
    assert httpx.get(f"{server.base_url}{route}").json()["total"] == 0


@pytest.mark.parametrize("route", ["/v1/models", "/v1/datasets"])
def test_upload_past_a_file_size_limit_is_507(rlimited_server: ApiServer, route: str) -> None:
    _assert_507_and_nothing_stored(rlimited_server, route, "EFBIG")


@pytest.mark.parametrize("route", ["/v1/models", "/v1/datasets"])
def test_upload_onto_a_full_disk_is_507_and_a_small_model_still_fits(
    tmpfs_server: ApiServer, route: str,
) -> None:
    _assert_507_and_nothing_stored(tmpfs_server, route, "ENOSPC")
    response = httpx.post(f"{tmpfs_server.base_url}/v1/models", timeout=60,
                          files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    assert response.status_code == 201, response.text
