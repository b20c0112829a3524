"""A throughput search's concurrent requests: one per core at a candidate's thread count, run
at once by one call."""

import threading
import time

import pytest

from optimizer.search.streams import concurrent_calls, requests_per_host


def test_a_host_serves_a_request_per_core_at_one_thread_and_one_at_the_default() -> None:
    assert requests_per_host(8, 1) == 8
    assert requests_per_host(8, 3) == 2
    assert requests_per_host(2, 4) == 1  # more threads than cores: still one
    assert requests_per_host(8, None) == 1  # ONNX Runtime's default: a thread per core


def test_the_requests_run_at_once_and_an_error_in_one_comes_through() -> None:
    running, most = 0, 0
    lock = threading.Lock()

    def request() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.05)
        with lock:
            running -= 1

    with concurrent_calls(request, 3) as call:
        started = time.perf_counter()
        call()
        took = time.perf_counter() - started
    assert most == 3 and took < 0.14  # at once, not one after another (0.15 s)

    def failing() -> None:
        raise RuntimeError("kernel failed")

    with concurrent_calls(failing, 2) as call, pytest.raises(RuntimeError, match="kernel failed"):
        call()
    with concurrent_calls(request, 1) as call:
        assert call is request
