"""A running FuseForge on the production parts, for end-to-end tests: a fresh PostgreSQL
database, a Redis database as broker, `fuseforge migrate`, one worker and the API server, each
a separate process."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.support.databases import create_postgres_database, drop_postgres_database
from tests.support.processes import FUSEFORGE, Service, free_port, fuseforge_env, wait_healthy

__all__ = ["Stack", "running_stack"]


@dataclass(frozen=True)
class Stack:
    base_url: str
    database_url: str
    broker_url: str
    data_dir: Path
    worker: Service


@contextmanager
def running_stack(tmp: Path, *, name: str, redis_url: str, queues: str,
                  **env: str) -> Iterator[Stack]:
    """Start the stack in `tmp` with a worker on `queues` and the extra environment `env`;
    stop everything, print the worker's log tail and drop the database afterwards."""
    database_url = create_postgres_database(f"fuseforge_e2e_{name}_{uuid.uuid4().hex[:8]}")
    broker = redis.Redis.from_url(redis_url)
    broker.flushdb()
    port = free_port()
    environment = fuseforge_env(
        FUSEFORGE_DATABASE_URL=database_url,
        FUSEFORGE_BROKER_URL=redis_url,
        FUSEFORGE_DATA_DIR=str(tmp / "data"),
        FUSEFORGE_PORT=str(port),
        **env,
    )
    migrate = Service([*FUSEFORGE, "migrate"], environment, tmp / "migrate.log")
    assert migrate.process.wait(timeout=120) == 0, migrate.output()
    worker = Service([*FUSEFORGE, "worker", "--queues", queues], environment, tmp / "worker.log")
    api = Service([*FUSEFORGE, "serve"], environment, tmp / "api.log")
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base_url, api)
        yield Stack(base_url=base_url, database_url=database_url, broker_url=redis_url,
                    data_dir=tmp / "data", worker=worker)
    finally:
        api.stop()
        if worker.process.poll() is None:
            worker.stop()
        print("--- worker log (tail) ---\n" + worker.output()[-4000:])
        drop_postgres_database(database_url)
        broker.flushdb()
