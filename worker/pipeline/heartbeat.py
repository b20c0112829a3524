"""A background thread that touches the job's heartbeat while a long stage runs."""

import logging
import threading
from collections.abc import Callable
from types import TracebackType

__all__ = ["JobHeartbeat"]

logger = logging.getLogger(__name__)


class JobHeartbeat:
    """Context manager calling `beat` (the recorder's heartbeat: does the job still run?) every
    `interval_s`; `still_running` turns False once the job is cancelled or swept."""

    def __init__(self, beat: Callable[[], bool], interval_s: float, *, name: str) -> None:
        self._beat_once = beat
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{name}", daemon=True)
        self.still_running = True

    def _beat(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.still_running = self._beat_once()
            except Exception:  # a database blip must not kill the job; the next beat retries
                logger.exception("heartbeat %s failed", self._thread.name)
            if not self.still_running:
                return

    def __enter__(self) -> "JobHeartbeat":
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
