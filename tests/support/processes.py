"""Start real FuseForge processes for end-to-end tests, wait for them, stop them."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from tests.support.waiting import POLL_S

__all__ = ["REPO_ROOT", "TEST_STATE_HOME", "Service", "fuseforge_env", "free_port", "wait_for_job",
           "wait_healthy"]

REPO_ROOT = Path(__file__).resolve().parents[2]
FUSEFORGE = [sys.executable, "-m", "fuseforge_cli.main"]
# Where the services these tests start record themselves (fuseforge_cli/service_records.py):
# this test process's own folder, never the user's, so a `fuseforge run` of the suite is
# not taken for the user's server by their `fuseforge apikey`, nor theirs by the suite's.
TEST_STATE_HOME = Path(tempfile.gettempdir()) / f"fuseforge-test-state-{os.getpid()}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fuseforge_env(**overrides: str) -> dict[str, str]:
    """This environment without any FUSEFORGE_* variable, with API keys off (these processes
    serve tests of other things, on 127.0.0.1; tests/e2e/test_api_keys.py runs them with keys
    on), services recorded in TEST_STATE_HOME, plus `overrides`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEFORGE_")}
    env["FUSEFORGE_AUTH__ENABLED"] = "false"
    env["XDG_STATE_HOME"] = str(TEST_STATE_HOME)
    env.update(overrides)
    return env


class Service:
    """A process in its own process group, its output captured in a log file."""

    def __init__(self, argv: list[str], env: Mapping[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            argv, cwd=REPO_ROOT, env=dict(env), stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal the whole group (as Ctrl-C would) and wait; kill it if it will not stop."""
        try:
            os.killpg(self.process.pid, sig)
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            raise
        except ProcessLookupError:
            return self.process.wait()
        finally:
            self._log.close()

    def group_pids(self, command_part: str) -> list[int]:
        """Processes of this service's group whose command line contains `command_part`."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                if os.getpgid(int(entry.name)) == self.process.pid and command_part in command:
                    pids.append(int(entry.name))
            except (OSError, ProcessLookupError):
                continue  # gone meanwhile
        return pids

    def descendant_pids(self, command_part: str) -> list[int]:
        """Processes started (directly or not) by this service, even in sessions of their own,
        whose command line contains `command_part`."""
        parents: dict[int, int] = {}
        commands: dict[int, str] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
                commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(
                    b"\0", b" ").decode()
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile

        def descends(pid: int) -> bool:
            while pid > 1:
                if pid == self.process.pid:
                    return True
                pid = parents.get(pid, 0)
            return False

        return [pid for pid, command in commands.items()
                if command_part in command and pid != self.process.pid and descends(pid)]

    def group_is_gone(self) -> bool:
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return True
        return False


def wait_healthy(base_url: str, service: Service, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.process.poll() is not None:
            raise AssertionError(f"service exited early:\n{service.output()[-4000:]}")
        try:
            if httpx.get(f"{base_url}/healthz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(POLL_S)
    raise AssertionError(f"{base_url} not healthy after {timeout} s:\n{service.output()[-4000:]}")


def wait_for_job(base_url: str, job_id: str, timeout: float = 180.0) -> dict:  # type: ignore[type-arg]
    """Poll the job until it is final; return its body."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = httpx.get(f"{base_url}/v1/jobs/{job_id}", timeout=10).json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job  # type: ignore[no-any-return]
        time.sleep(POLL_S)
    raise AssertionError(f"job {job_id} not finished after {timeout} s: {job}")
