"""`fuseforge run` (what `make run` calls): migrate, create the broker's queues, then keep the
API, a worker and the janitor running until Ctrl-C or SIGTERM.

A child that exits is started again, after a pause that doubles while it keeps dying (1 s up to
30 s, back to 1 s once it has run a minute), so one crash never takes the whole service down.
The queues are created once before any child starts: the API and the worker creating the same
queue at the same moment makes kombu's SQL transport fail one of them.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from types import FrameType

from core.dispatch import dispatcher_for
from core.queues import backend_queues
from core.settings import get_settings
from fuseforge_cli.auth_notice import auth_notice
from fuseforge_cli.server_target import local_url
from fuseforge_cli.service_records import recorded_service

__all__ = ["run_service"]

logger = logging.getLogger("fuseforge")

_STOP_TIMEOUT_S = 20
_FIRST_PAUSE_S = 1.0
_LONGEST_PAUSE_S = 30.0
_HEALTHY_AFTER_S = 60.0
_ME = [sys.executable, "-m", "fuseforge_cli.main"]


@dataclass
class _Child:
    name: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    pause_s: float = _FIRST_PAUSE_S

    def start(self) -> None:
        self.process = subprocess.Popen(self.argv)
        self.started_at = time.monotonic()
        self.restart_at = None

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()


def run_service() -> int:
    """Run until asked to stop; the exit code is 0 after Ctrl-C/SIGTERM."""
    settings = get_settings()
    dispatcher_for(settings.resolved_broker_url).declare_queues()
    children = [
        _Child("API", [*_ME, "serve"]),
        # every backend's queue ("cpu,gpu"): a worker that cannot run a GPU backend drops its
        # queues, saying why
        _Child("worker", [*_ME, "worker", "--queues", ",".join(backend_queues())]),
        _Child("janitor", [*_ME, "janitor"]),
    ]
    for child in children:
        child.start()
    stopping = False

    def _request_stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _request_stop)
    signal.signal(signal.SIGTERM, _request_stop)
    logger.info("FuseForge is up: http://%s:%s (data in %s). Ctrl-C stops it.", settings.host,
                settings.port, settings.data_dir.resolve())
    logger.info("%s", auth_notice(settings))
    with recorded_service(settings, local_url(settings)) as record:
        if record is not None:  # what `fuseforge apikey` in another shell reads
            logger.info("recorded in %s: `fuseforge apikey` and `fuseforge project` in another "
                        "shell use this database when FUSEFORGE_DATA_DIR is unset there", record)
        while not stopping:
            now = time.monotonic()
            for child in children:
                _keep_alive(child, now)
            time.sleep(0.2)
    _stop(children)
    logger.info("FuseForge stopped.")
    return 0


def _keep_alive(child: _Child, now: float) -> None:
    if child.restart_at is not None:
        if now >= child.restart_at:
            child.start()
        return
    code = child.exited()
    if code is None:
        return
    ran_s = now - child.started_at
    child.pause_s = _FIRST_PAUSE_S if ran_s >= _HEALTHY_AFTER_S else min(
        child.pause_s * 2, _LONGEST_PAUSE_S)
    child.restart_at = now + child.pause_s
    logger.warning("the %s exited with code %s after %.0f s; starting it again in %g s",
                   child.name, code, ran_s, child.pause_s)


def _stop(children: list[_Child]) -> None:
    running = [c for c in children if c.process is not None and c.process.poll() is None]
    for child in running:
        assert child.process is not None
        child.process.send_signal(signal.SIGTERM)  # uvicorn and celery shut down warmly on TERM
    deadline = time.monotonic() + _STOP_TIMEOUT_S
    for child in running:
        assert child.process is not None
        try:
            child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            logger.warning("the %s did not stop in %s s; killing it", child.name,
                           _STOP_TIMEOUT_S)
            child.process.kill()
            child.process.wait()
