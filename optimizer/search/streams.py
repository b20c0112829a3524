"""Concurrent requests for a throughput search: how many one engine serves at once on a host,
and a call that serves them.

An ONNX Runtime session at t intra-op threads leaves the rest of a host's cores idle while it
runs one request; a server runs cores // t requests on it at once (`InferenceSession.run` is
thread-safe and releases the GIL), which is how a 1-thread engine can out-serve a 2-thread one
that has the lower latency. A candidate at ONNX Runtime's default (a thread per core) serves one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

__all__ = ["concurrent_calls", "requests_per_host"]


def requests_per_host(cores: int, intra_op_threads: int | None) -> int:
    """The requests a host of `cores` serves at once at this thread count (None: one per core)."""
    if intra_op_threads is None:
        return 1
    return max(1, cores // intra_op_threads)


@contextmanager
def concurrent_calls(call: Callable[[], object], requests: int) -> Iterator[Callable[[], object]]:
    """A call that runs `call` `requests` times at once and returns when all have (the first
    error raised, if any); `call` itself where `requests` is 1."""
    if requests <= 1:
        yield call
        return
    with ThreadPoolExecutor(max_workers=requests, thread_name_prefix="search-request") as pool:
        def all_at_once() -> None:
            for pending in [pool.submit(call) for _ in range(requests)]:
                pending.result()
        yield all_at_once
