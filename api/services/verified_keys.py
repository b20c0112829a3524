"""API keys this API process checked a moment ago, so a polling client's every request does
not read its key from the database (and hop to a worker thread to do so).

Entries are keyed by the key's HMAC (the key itself is not kept), live `fresh_s` seconds (a
revoked key keeps working that long at most) and never past the key's own expiry.
"""

import threading
import time
import uuid
from collections import OrderedDict
from datetime import datetime

from core.db.types import utc_now

__all__ = ["VerifiedKeys"]


class VerifiedKeys:
    def __init__(self, fresh_s: float, size: int = 4096) -> None:
        self._fresh_s = fresh_s
        self._size = size
        self._entries: OrderedDict[str, tuple[float, uuid.UUID, datetime | None]] = OrderedDict()
        self._lock = threading.Lock()

    def project(self, digest: str) -> uuid.UUID | None:
        """The project of the key with this HMAC, if it was checked fresh_s ago or less and
        has not expired since."""
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                return None
            checked_at, project, expires_at = entry
            if (time.monotonic() - checked_at > self._fresh_s
                    or (expires_at is not None and expires_at <= utc_now())):
                del self._entries[digest]
                return None
            return project

    def remember(self, digest: str, project: uuid.UUID, expires_at: datetime | None) -> None:
        if self._fresh_s <= 0:
            return
        with self._lock:
            self._entries[digest] = (time.monotonic(), project, expires_at)
            self._entries.move_to_end(digest)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
