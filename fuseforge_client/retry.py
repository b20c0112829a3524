"""When the client sends a request again, and how long it waits first.

A GET changes nothing, so it is retried on any connection error and on 429, 502, 503 and 504.
A POST creates something (a model, a dataset, a job), and a POST that reached the server and
was processed must not be sent twice, or a retry would start a second job. Each logical POST
carries one `Idempotency-Key` (a uuid4, the same on every retry), and the server answers a
repeat with the first result instead of running it again, so with `idempotent_posts=True` (the
default) such a POST is retried like a GET; besides, a 409 *with* Retry-After (the server is
still running an earlier try: IdempotencyKeyInProgress) is retried after that pause, and then
gets the first try's answer.

With `idempotent_posts=False` (a server older than Idempotency-Key, which would run a repeat
again), a POST is retried only when it cannot have been processed:
- the connection was never made (connect error or connect timeout: nothing was sent), or
- the answer was 429 or 503 *with* Retry-After: the server turned it away before doing it.
A POST without a key (cancel) is always treated so.
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass

import httpx

__all__ = ["RETRY_STATUSES", "RetryPolicy", "retry_after_seconds", "should_retry"]

RETRY_STATUSES = frozenset({429, 502, 503, 504})
# Answers that say "not processed, come back later" when they carry Retry-After.
_REFUSED_STATUSES = frozenset({429, 503})
# "An earlier try of this request is still running": come back after Retry-After.
_IN_PROGRESS_STATUS = 409
# The request never left: no connection was established.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout)


@dataclass(frozen=True)
class RetryPolicy:
    """`attempts` tries in all (1 = no retry); between them an exponential backoff from
    `backoff_s` doubling up to `max_backoff_s`, or the server's Retry-After when it gives one
    (capped at `max_retry_after_s`, past which the error is raised instead of waiting)."""

    attempts: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 120.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be at least 1, got {self.attempts}")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("RetryPolicy backoffs must not be negative")

    def delay_s(self, attempt: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait before try `attempt + 1` (`attempt` counts from 1)."""
        if retry_after_s is not None:
            return retry_after_s
        return min(self.backoff_s * 2.0 ** (attempt - 1), self.max_backoff_s)


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """Retry-After as seconds from now: delta-seconds ("5") or an HTTP date; None when absent or
    unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def should_retry(*, idempotent: bool, status_code: int | None = None,
                 error: httpx.TransportError | None = None,
                 retry_after_s: float | None = None) -> bool:
    """Whether a request may be sent again after `error` (no answer) or an answer with
    `status_code`. `idempotent`: sending it twice does no harm (a GET, or a POST with an
    Idempotency-Key to a server that honours it)."""
    if error is not None:
        return idempotent or isinstance(error, _NOT_SENT)
    if status_code == _IN_PROGRESS_STATUS:
        return idempotent and retry_after_s is not None
    if status_code is None or status_code not in RETRY_STATUSES:
        return False
    return idempotent or (status_code in _REFUSED_STATUSES and retry_after_s is not None)
