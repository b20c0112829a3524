"""Keep an upload's unfinished write fresh while it is checked.

The janitor drops upload writes no byte reached for `janitor.upload_stale_s` (their API died
mid-upload, worker/janitor.py). Once every byte has arrived, the check (and its wait for a
turn) can outlast that, so the API refreshes what it is still holding until the check ends.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

__all__ = ["kept_fresh", "refresh_interval"]

_MAX_EVERY_S = 60.0


def refresh_interval(upload_stale_s: float) -> float:
    """How often to refresh a write the janitor drops after `upload_stale_s` untouched: four
    times in that span (a late refresh is never the one that counts), at least once a minute."""
    return min(upload_stale_s / 4, _MAX_EVERY_S)


@contextlib.contextmanager
def kept_fresh(refresh: Callable[[], None], every_s: float) -> Iterator[None]:
    """Call `refresh` every `every_s` from a thread of its own until the block ends. A refresh
    that fails stops the refreshing: the block's own next step reports what went wrong."""
    done = threading.Event()

    def refresh_until_done() -> None:
        while not done.wait(every_s):
            try:
                refresh()
            except Exception:  # noqa: BLE001 - the write's owner meets the error itself
                return

    refresher = threading.Thread(target=refresh_until_done, name="upload-refresher", daemon=True)
    refresher.start()
    try:
        yield
    finally:
        done.set()
        refresher.join()
