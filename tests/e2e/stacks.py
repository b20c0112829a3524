"""A running FuseForge on the production parts, for end-to-end tests: a fresh PostgreSQL
database (migrated by `fuseforge migrate` or copied from a migrated template), a Redis database
as broker, one worker and the API server, each a separate process."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.support.databases import drop_postgres_database, migrated_postgres_database
from tests.support.processes import FUSEFORGE, Service, free_port, fuseforge_env, wait_healthy

__all__ = ["Stack", "running_stack"]


@dataclass
class Stack:
    base_url: str
    database_url: str
    broker_url: str
    data_dir: Path
    worker: Service
    api: Service
    janitor: Service | None
    environment: dict[str, str]
    tmp: Path

    def restart(self, role: str) -> Service:
        """Start `role` ("api", "worker" or "janitor") again after a test stopped or killed it."""
        argv = {"api": ["serve"], "worker": ["worker", "--queues", self._queues],
                "janitor": ["janitor"]}[role]
        service = Service([*FUSEFORGE, *argv], self.environment,
                          self.tmp / f"{role}-{uuid.uuid4().hex[:6]}.log")
        setattr(self, role, service)
        if role == "api":
            wait_healthy(self.base_url, service)
        return service

    _queues: str = "cpu"


@contextmanager
def running_stack(tmp: Path, *, name: str, redis_url: str, queues: str,
                  database_url: str | None = None, janitor: bool = False,
                  worker_env: Mapping[str, str] | None = None, **env: str) -> Iterator[Stack]:
    """Start the stack in `tmp` with a worker on `queues` (its environment plus `worker_env`),
    a janitor when asked, and the extra
    environment `env`, on `database_url` (migrated by `fuseforge migrate`), else on a new,
    migrated database on the test PostgreSQL (a copy of a template: the command's start and
    run cost seconds per stack), dropped afterwards; stop everything and print the worker's
    log tail afterwards."""
    own_database = database_url is None
    if database_url is None:
        database_url = migrated_postgres_database(f"fuseforge_e2e_{name}_{uuid.uuid4().hex[:8]}")
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
    (tmp / "data").mkdir(parents=True, exist_ok=True)  # as `fuseforge migrate` makes it
    if not own_database:
        migrate = Service([*FUSEFORGE, "migrate"], environment, tmp / "migrate.log")
        assert migrate.process.wait(timeout=120) == 0, migrate.output()
    worker = Service([*FUSEFORGE, "worker", "--queues", queues],
                     {**environment, **(worker_env or {})}, tmp / "worker.log")
    cleaner = (Service([*FUSEFORGE, "janitor"], environment, tmp / "janitor.log")
               if janitor else None)
    api = Service([*FUSEFORGE, "serve"], environment, tmp / "api.log")
    stack = Stack(base_url=f"http://127.0.0.1:{port}", database_url=database_url,
                  broker_url=redis_url, data_dir=tmp / "data", worker=worker, api=api,
                  janitor=cleaner, environment=environment, tmp=tmp, _queues=queues)
    try:
        wait_healthy(stack.base_url, api)
        yield stack
    finally:
        for service in (stack.api, stack.janitor, stack.worker):
            if service is not None and service.process.poll() is None:
                service.stop()
        print("--- worker log (tail) ---\n" + stack.worker.output()[-4000:])
        if own_database:
            drop_postgres_database(database_url)
        try:
            broker.flushdb()
        except redis.ConnectionError:
            pass  # a private Redis the test took down
