"""What /healthz reports: the database, the broker and the artifact store reachable, room left on
the data disk."""

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from sqlalchemy import text
from sqlalchemy.orm import Session

from core.artifact_refs import ArtifactStoreUnavailable
from core.dispatch import JobDispatcher
from core.storage import ArtifactStore

__all__ = ["DiskSpace", "HealthCache", "check_broker", "check_database", "check_disk",
           "check_store"]

T = TypeVar("T")


@dataclass(frozen=True)
class DiskSpace:
    path: Path  # the data dir, or its nearest existing parent before it is created
    free_bytes: int | None  # None when it could not be measured
    min_free_bytes: int
    error: str | None  # None when there is room


def check_database(*, session: Session) -> str | None:
    """None when reachable, else the error."""
    try:
        session.execute(text("SELECT 1"))
    except Exception as err:  # any driver error means "unreachable" to a health check
        return f"{type(err).__name__}: {err}"
    return None


def check_broker(*, dispatcher: JobDispatcher) -> str | None:
    """None when the broker the API sends jobs to answers, else the error."""
    return dispatcher.broker_error()


def check_store(*, store: ArtifactStore) -> str | None:
    """None when the artifact store can be used, else why not (its message names the store)."""
    try:
        store.check()
    except ArtifactStoreUnavailable as err:
        return str(err)
    return None


def check_disk(*, data_dir: Path, min_free_bytes: int) -> DiskSpace:
    """Free space on the filesystem holding `data_dir` (uploads, artifacts, scratch space)
    against `min_free_bytes` (FUSEFORGE_MIN_FREE_DISK_BYTES)."""
    path = data_dir.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        free = shutil.disk_usage(path).free
    except OSError as err:
        return DiskSpace(path, None, min_free_bytes, f"cannot measure free space: {err}")
    error = None
    if free < min_free_bytes:
        error = (f"{free} bytes free under {path}, below the minimum of {min_free_bytes} "
                 "(FUSEFORGE_MIN_FREE_DISK_BYTES); uploads and jobs may fail: free space")
    return DiskSpace(path, free, min_free_bytes, error)


class HealthCache(Generic[T]):
    """The last health report, reused for `fresh_s` seconds: a load balancer or a dashboard
    polling /healthz hundreds of times a second must not open a broker connection each time,
    and the probe must never be what falls over first."""

    def __init__(self, fresh_s: float) -> None:
        self._fresh_s = fresh_s
        self._report: tuple[float, T] | None = None
        self._lock = threading.Lock()

    def get(self) -> T | None:
        report = self._report
        if report is None or time.monotonic() - report[0] > self._fresh_s:
            return None
        return report[1]

    def refresh(self, probe: Callable[[], T]) -> T:
        """`probe()`'s report, unless another request refreshed it meanwhile (one probe at a
        time; the others wait for its result)."""
        with self._lock:
            fresh = self.get()
            if fresh is not None:
                return fresh
            report = probe()
            self._report = (time.monotonic(), report)
            return report
