"""`make run` on embedded defaults (SQLite, local artifacts, SQLite broker): the whole flow works,
a worker that dies is started again, and Ctrl-C/SIGTERM stops the API, the worker and the
janitor cleanly."""

import json
import os
import shutil
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.flows import assert_optimize_flow_succeeds
from tests.support.processes import TEST_STATE_HOME, Service, free_port, fuseforge_env, wait_healthy

pytestmark = pytest.mark.e2e


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_run_serves_the_whole_flow_without_external_services(tmp_path: Path) -> None:
    port = free_port()
    data_dir = tmp_path / "data"
    env = fuseforge_env(FUSEFORGE_DATA_DIR=str(data_dir), FUSEFORGE_PORT=str(port))
    service = Service(["make", "--no-print-directory", "run"], env, tmp_path / "make-run.log")
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base_url, service, timeout=300)
        assert f"http://127.0.0.1:{port}" in service.output()
        # fuseforge_env turns API keys off, which `make run` must say on every start.
        assert "WARNING: API keys are OFF (FUSEFORGE_AUTH__ENABLED=false)" in service.output()
        assert_optimize_flow_succeeds(base_url)
        dashboard = httpx.get(f"{base_url}/ui/jobs", timeout=10)  # served by the API process
        assert dashboard.status_code == 200 and 'id="jobs"' in dashboard.text, dashboard.text[:500]
        assert (data_dir / "fuseforge.sqlite").is_file()
        assert (data_dir / "broker.sqlite").is_file()
        # Recorded where `fuseforge apikey` in another shell finds its database.
        assert _recorded_data_dirs() == [str(data_dir.resolve())]
        assert service.group_pids("-m worker.janitor"), "no janitor runs"

        workers = service.group_pids("-m worker --queues")  # the main process and its pool
        [main] = [pid for pid in workers if _parent(pid) not in workers]
        os.kill(main, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while "the worker exited with code -9" not in service.output():
            assert time.monotonic() < deadline, service.output()[-3000:]
            time.sleep(0.2)
        assert_optimize_flow_succeeds(base_url)  # on the worker started again
    finally:
        service.stop(signal.SIGTERM, timeout=60)

    assert "FuseForge stopped." in service.output(), service.output()[-3000:]
    assert service.group_is_gone(), "the API or the worker outlived make run"
    assert _recorded_data_dirs() == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{base_url}/healthz", timeout=2)


def _recorded_data_dirs() -> list[str]:
    folder = TEST_STATE_HOME / "fuseforge" / "services"
    return [json.loads(path.read_text())["data_dir"] for path in folder.glob("*.json")]


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
