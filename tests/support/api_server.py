"""A real API server (uvicorn, `fuseforge serve`) on the embedded SQLite database, for tests of
what only a real HTTP server shows: slow bodies, closed connections, process limits."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, create_engine

from tests.support.databases import migrated_sqlite_file
from tests.support.processes import FUSEFORGE, Service, free_port, fuseforge_env, wait_healthy

__all__ = ["ApiServer", "raw_request", "running_api", "server_database"]


@dataclass(frozen=True)
class ApiServer:
    host: str
    port: int
    data_dir: Path
    service: Service

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


@contextmanager
def running_api(tmp: Path, *, broker_url: str, serve_argv: list[str] | None = None,
                **env: str) -> Iterator[ApiServer]:
    """Put a migrated SQLite database in `tmp` (a copy, see tests/support/databases.py:
    migrated_sqlite_file) and serve the API on a free port with the extra environment `env`;
    `serve_argv` replaces `fuseforge serve` (e.g. to set process limits first). Stops the
    server afterwards."""
    port = free_port()
    environment = fuseforge_env(
        FUSEFORGE_ENV="test",
        FUSEFORGE_DATA_DIR=str(tmp / "data"),
        FUSEFORGE_BROKER_URL=broker_url,
        FUSEFORGE_PORT=str(port),
        **env,
    )
    migrated_sqlite_file(tmp / "data" / "fuseforge.sqlite")  # where Settings put it by default
    api = Service(serve_argv or [*FUSEFORGE, "serve"], environment, tmp / "api.log")
    server = ApiServer("127.0.0.1", port, tmp / "data", api)
    try:
        wait_healthy(server.base_url, api)
        yield server
    finally:
        api.stop()


def raw_request(server: ApiServer, head: str) -> socket.socket:
    """A connection to `server` that has sent the request line and headers `head` (lines
    without their CRLFs) and nothing of the body yet."""
    sock = socket.create_connection((server.host, server.port), timeout=30)
    sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n\r\n")
    return sock


@contextmanager
def server_database(server: ApiServer) -> Iterator[Engine]:
    """An engine on the running server's own SQLite database, to read or plant its rows."""
    engine = create_engine(f"sqlite:///{server.data_dir / 'fuseforge.sqlite'}")
    try:
        yield engine
    finally:
        engine.dispose()
