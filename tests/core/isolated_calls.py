"""Module-level functions for the isolation tests: a spawned child imports them by name."""

import os
import subprocess
import tempfile
import time
from pathlib import Path

from optimizer.errors import EngineBuildError

__all__ = [
    "abort",
    "add",
    "allocate_at_once",
    "environment",
    "exit_with",
    "grow_forever",
    "raise_build_error",
    "raise_unpicklable",
    "sleep_forever",
    "sleep_forever_with_grandchild",
]


def add(a: int, b: int, *, scale: int = 1) -> dict[str, int]:
    return {"sum": (a + b) * scale, "pid": os.getpid()}


def raise_build_error(node: str) -> None:
    raise EngineBuildError(f"node '{node}' uses op 'Mystery' and no plugin is registered for it")


class _Unpicklable(Exception):
    def __init__(self, message: str, handle: object) -> None:
        super().__init__(message)
        self.handle = handle


def raise_unpicklable() -> None:
    raise _Unpicklable("the parser lost its mind", handle=lambda: None)


def sleep_forever(pid_file: Path) -> None:
    pid_file.write_text(str(os.getpid()))
    while True:
        time.sleep(3600)


def sleep_forever_with_grandchild(pid_file: Path) -> None:
    grandchild = subprocess.Popen(["sleep", "3600"])
    pid_file.write_text(str(grandchild.pid))
    while True:
        time.sleep(3600)


def grow_forever(chunk_mib: int) -> None:
    """Touch memory chunk after chunk (resident, not only reserved), never giving any back."""
    chunks = []
    while True:
        chunks.append(bytearray(os.urandom(1024)) * (chunk_mib * 1024))
        time.sleep(0.01)


def allocate_at_once(gib: int) -> int:
    return len(bytearray(gib * 2**30))


def abort() -> None:
    os.abort()


def exit_with(code: int) -> None:
    os._exit(code)


def environment(name: str) -> dict[str, object]:
    """What a child sees of its start: a variable, its folders, its session and open fds."""
    import numpy as np

    return {"value": os.environ.get(name), "cwd": os.getcwd(), "tmp": tempfile.gettempdir(),
            "sid": os.getsid(0), "pid": os.getpid(), "fds": sorted(os.listdir("/proc/self/fd")),
            "random": float(np.random.random())}
