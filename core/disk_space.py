"""A full disk, told apart from other I/O errors, and said with the folder and its free space.

An upload (api/services/uploads/receive.py: 507) and a job (worker/pipeline/run.py) both hit
it; either way the user should read which folder is full and how much room is left, not
"OSError: [Errno 28] No space left on device".
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

__all__ = ["NO_ROOM_ERRNOS", "free_space_text", "no_room_error"]

# The errors of a write that found no room: the disk, a quota, a file-size limit.
NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def no_room_error(err: BaseException) -> OSError | None:
    """The no-room OSError `err` is or was caused by (through __cause__/__context__); None
    where it is none."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in NO_ROOM_ERRNOS:
            return current
        current = current.__cause__ or current.__context__
    return None


def free_space_text(folder: Path) -> str:
    """"1.2 GiB free of 50 GiB" for the filesystem holding `folder` (or its nearest existing
    parent); "free space unknown" where it cannot be read."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        usage = shutil.disk_usage(existing)
    except OSError:
        return "free space unknown"
    return f"{_size(usage.free)} free of {_size(usage.total)}"


def _size(count: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")
