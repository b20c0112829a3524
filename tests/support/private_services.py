"""Private PostgreSQL and Redis servers on free ports, for tests that stop and start them.

The shared test services (scripts/test-services.sh) must stay up for everyone else; a fault
test gets its own instances in a temporary folder and can take them down and bring them back:

    with private_postgres() as pg, private_redis(tmp_path) as broker:
        pg.stop(); ...; pg.start()

PostgreSQL runs as the `postgres` user when the tests run as root (initdb refuses root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from tests.support.processes import free_port

__all__ = ["PrivatePostgres", "PrivateRedis", "private_postgres", "private_redis"]

_START_TIMEOUT_S = 60


def _postgres_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if not candidates:
        pytest.skip(f"PostgreSQL's {name} is not installed here; the fault tests skip")
    return str(candidates[-1])


class PrivatePostgres:
    def __init__(self) -> None:
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0
        # A folder of its own under /tmp: pytest's are readable by their owner only.
        self.folder = Path(tempfile.mkdtemp(prefix="fuseforge-postgres-"))
        self.data = self.folder / "pgdata"
        if self._as_postgres:
            shutil.chown(self.folder, "postgres")
        self._run(_postgres_bin("initdb"), "-D", str(self.data), "-U", "postgres",
                  "--auth=trust", "--no-sync")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        self._run(_postgres_bin("pg_ctl"), "-D", str(self.data), "-w", "-t",
                  str(_START_TIMEOUT_S), "-l", str(self.data / "server.log"), "-o",
                  f"-p {self.port} -h 127.0.0.1 -k {self.data} -c fsync=off", "start")

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server; "immediate" is as abrupt as a crash (no shutdown checkpoint)."""
        self._run(_postgres_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def _run(self, *argv: str) -> None:
        command = ["runuser", "-u", "postgres", "--", *argv] if self._as_postgres else list(argv)
        subprocess.run(command, check=True, capture_output=True, timeout=_START_TIMEOUT_S)


class PrivateRedis:
    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self._folder = folder
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server (nothing happens if it runs)."""
        if self._process is not None and self._process.poll() is None:
            return
        self._folder.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self._folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "the private Redis did not start"
                time.sleep(0.05)

    def stop(self) -> None:
        """Kill the server (it keeps nothing on disk: its queues are gone, as after a crash)."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        server.start()
        yield server
    finally:
        try:
            server.stop("fast")
        except subprocess.CalledProcessError:
            pass  # already stopped by the test
        shutil.rmtree(server.folder, ignore_errors=True)


@contextmanager
def private_redis(folder: Path) -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed here; the fault tests skip")
    server = PrivateRedis(folder / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()
