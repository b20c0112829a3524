"""A request body that stalls or trickles is answered 408 and closed, against a real uvicorn
(the test client hands the app its whole body at once, so only a real server can show this)."""

from __future__ import annotations

import json
import os
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from optimizer.testing.models import model_bytes, small_cnn
from tests.support.api_server import ApiServer, raw_request, running_api

IDLE_TIMEOUT_S = 1.0
MIN_RATE_BYTES_S = 100

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with running_api(tmp_path_factory.mktemp("body_deadline"),
                     broker_url=os.environ["FUSEFORGE_BROKER_URL"],
                     FUSEFORGE_HTTP__BODY_IDLE_TIMEOUT_S=str(IDLE_TIMEOUT_S),
                     FUSEFORGE_HTTP__BODY_MIN_RATE_BYTES_S=str(MIN_RATE_BYTES_S)) as running:
        yield running


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Read until the server closes the connection; the status, headers and body."""
    sock.settimeout(30)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def _trickle_until_answered(sock: socket.socket, interval_s: float, limit_s: float) -> None:
    """Send one byte every `interval_s` until the server has something to say."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if select.select([sock], [], [], interval_s)[0]:
            return  # writing on would race the server's close and could lose its answer
        sock.sendall(b"x")
    raise AssertionError(f"no answer after trickling for {limit_s} s")


def _head(path: str, content_type: str, length: int) -> str:
    return (f"POST {path} HTTP/1.1\nHost: test\nContent-Type: {content_type}\n"
            f"Content-Length: {length}")


def _assert_timed_out(status: int, headers: dict[str, str], body: bytes, reason: str) -> None:
    assert status == 408, body
    assert headers["connection"] == "close"
    error = json.loads(body)
    assert error["error"] == "RequestBodyTimeout"
    assert reason in error["detail"]


def _uploads_left(server: ApiServer) -> list[Path]:
    return list((server.data_dir / "uploads").glob("*"))


def test_a_body_that_stalls_is_408_and_closed(server: ApiServer) -> None:
    sock = raw_request(server, _head("/v1/models", "application/octet-stream", 1000))
    sock.sendall(b"\x08\x0a" * 5)
    started = time.monotonic()

    status, headers, body = _read_response(sock)  # returns once the server closes

    _assert_timed_out(status, headers, body, "FUSEFORGE_HTTP__BODY_IDLE_TIMEOUT_S")
    assert time.monotonic() - started < IDLE_TIMEOUT_S + 5
    assert _uploads_left(server) == []


def test_a_body_trickling_a_byte_at_a_time_is_408_though_never_idle(server: ApiServer) -> None:
    # A byte every half second is never idle for the 1 s timeout: only the rate floor stops it.
    sock = raw_request(server, _head("/v1/models", "application/octet-stream", 1000))
    started = time.monotonic()

    _trickle_until_answered(sock, interval_s=IDLE_TIMEOUT_S / 2, limit_s=20)
    status, headers, body = _read_response(sock)

    _assert_timed_out(status, headers, body, "FUSEFORGE_HTTP__BODY_MIN_RATE_BYTES_S")
    assert time.monotonic() - started < 10
    assert _uploads_left(server) == []


def test_a_json_body_that_stalls_is_408_too(server: ApiServer) -> None:
    sock = raw_request(server, _head("/v1/jobs", "application/json", 100))
    sock.sendall(b'{"model_id": ')

    status, headers, body = _read_response(sock)

    _assert_timed_out(status, headers, body, "FUSEFORGE_HTTP__BODY_IDLE_TIMEOUT_S")


def test_a_body_sent_at_once_is_unaffected(server: ApiServer) -> None:
    response = httpx.post(f"{server.base_url}/v1/models",
                          files={"file": ("cnn.onnx", model_bytes(small_cnn()))}, timeout=30)
    assert response.status_code == 201, response.text
