"""A real API server with API keys on, and keys made and revoked with `fuseforge apikey`: the
key works over HTTP, a request without one or with a revoked one gets 401, and the server's log
never shows a key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from optimizer.testing.models import model_bytes, small_cnn
from tests.support.api_server import running_api
from tests.support.processes import REPO_ROOT, fuseforge_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

KEY_CACHE_S = 1.0  # FUSEFORGE_AUTH__KEY_CACHE_S's default


def _refused(response: httpx.Response) -> httpx.Response | None:
    return response if response.status_code == 401 else None


def test_a_key_from_the_cli_opens_the_api_until_it_is_revoked(tmp_path: Path) -> None:
    env = fuseforge_env(FUSEFORGE_ENV="test", FUSEFORGE_DATA_DIR=str(tmp_path / "data"),
                        FUSEFORGE_AUTH__ENABLED="true")

    def apikey(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "fuseforge_cli.main", "apikey", *args],
                              capture_output=True, text=True, env=env, cwd=REPO_ROOT,
                              timeout=120, check=True)
        return done.stdout

    with running_api(tmp_path, broker_url=os.environ["FUSEFORGE_BROKER_URL"],
                     FUSEFORGE_AUTH__ENABLED="true") as server:
        key = apikey("create", "--project", "ci", "--name", "e2e").strip()
        headers = {"Authorization": f"Bearer {key}"}
        models = f"{server.base_url}/v1/models"

        assert httpx.get(models, timeout=10).status_code == 401
        uploaded = httpx.post(models, files={"file": ("cnn.onnx", model_bytes(small_cnn()))},
                              headers=headers, timeout=60)
        assert uploaded.status_code == 201, uploaded.text
        assert httpx.get(models, headers=headers, timeout=10).json()["total"] == 1

        [row] = apikey("list", "--project", "ci").splitlines()[1:]
        apikey("revoke", row.split()[0])
        # The API trusts a key it checked this long: refused within it, once it has passed.
        refused = wait_until(lambda: _refused(httpx.get(models, headers=headers, timeout=10)),
                             KEY_CACHE_S + 0.2, interval_s=0.05,
                             what="the revoked key to be refused")
        assert refused.status_code == 401
        assert refused.json() == httpx.get(models, timeout=10).json()  # one message for all
        log = server.service.output()

    assert "API keys are on" in log
    assert key not in log and key[11:] not in log
