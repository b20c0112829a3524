"""One holder at a time across processes: an exclusive file lock, so builds and timings that share
a GPU (workers on one host with the same data folder) run one after another."""

import fcntl
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["one_at_a_time"]

logger = logging.getLogger(__name__)


@contextmanager
def one_at_a_time(lock_path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path` (created if missing) for the duration of the block.

    Blocks while another process holds it, after calling `on_wait` (e.g. to tell the job why it
    waits). The kernel drops the lock when the holder dies, so a crashed worker never leaves
    the GPU locked.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        if _try_lock(handle.fileno()):
            yield
            return
        logger.info("waiting for %s: another build holds it", lock_path)
        if on_wait is not None:
            on_wait()
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
