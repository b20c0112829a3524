"""Request ids: every line logged while a request is handled carries one, and the response
says it in X-Request-ID; with FUSEFORGE_LOG_FORMAT=json the API's log is JSON lines only."""

import io
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from fastapi import Depends
from fastapi.testclient import TestClient

from api.main import create_app
from tests.support.api_server import running_api
from tests.support.broker import TEST_REDIS_URL
from tests.support.json_logs import captured_json_log

probe_log = logging.getLogger("fuseforge.test.probe")


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    with captured_json_log("api") as stream:
        yield stream


@pytest.fixture
def probe_client() -> Iterator[TestClient]:
    """The app plus a route that logs in the event loop and in a sync dependency (which
    FastAPI runs on a worker thread) and then fails with a 500."""
    app = create_app()

    def sync_dependency() -> None:
        probe_log.info("in a worker thread")

    @app.get("/probe", dependencies=[Depends(sync_dependency)])
    async def probe(fail: bool = False) -> dict[str, str]:
        probe_log.info("in the event loop")
        if fail:
            raise RuntimeError("the probe failed")
        return {}

    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def _entries(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_sane_incoming_request_id_is_kept_on_every_line_and_echoed(
        probe_client: TestClient, json_log: io.StringIO) -> None:
    response = probe_client.get("/probe", headers={"X-Request-ID": "lb-7f3a.2:9"})

    assert response.headers["X-Request-ID"] == "lb-7f3a.2:9"
    probes = [e for e in _entries(json_log) if e["logger"] == probe_log.name]
    assert [e["message"] for e in probes] == ["in a worker thread", "in the event loop"]
    assert all(e["request_id"] == "lb-7f3a.2:9" for e in probes)


@pytest.mark.parametrize("incoming", ["has space", "x" * 129, "new\nline", "ü"])
def test_an_insane_incoming_request_id_is_replaced(probe_client: TestClient, incoming: str
                                                   ) -> None:
    response = probe_client.get("/probe", headers={"X-Request-ID": incoming.encode("utf-8")})

    assert response.headers["X-Request-ID"] != incoming
    assert len(response.headers["X-Request-ID"]) == 32


def test_each_request_without_one_gets_its_own_id(probe_client: TestClient) -> None:
    first = probe_client.get("/probe").headers["X-Request-ID"]
    second = probe_client.get("/probe").headers["X-Request-ID"]

    assert first != second
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in (first, second))


def test_internal_error_is_logged_with_the_request_id_and_answers_it(
        probe_client: TestClient, json_log: io.StringIO) -> None:
    response = probe_client.get("/probe", params={"fail": "true"},
                                headers={"X-Request-ID": "req-500"})

    assert response.status_code == 500 and response.headers["X-Request-ID"] == "req-500"
    [error] = [e for e in _entries(json_log) if e["level"] == "ERROR"]
    assert error["request_id"] == "req-500"
    assert "RuntimeError: the probe failed" in str(error["exc_info"])


def test_served_api_logs_only_json_lines_with_request_ids_in_json_format(
        tmp_path: Path) -> None:
    redis.Redis.from_url(TEST_REDIS_URL).flushdb()
    with running_api(tmp_path, broker_url=TEST_REDIS_URL, FUSEFORGE_LOG_FORMAT="json") as api:
        response = httpx.get(f"{api.base_url}/v1/jobs/{uuid.uuid4()}",
                             headers={"X-Request-ID": "served-1"})
        assert response.status_code == 404
        assert response.headers["X-Request-ID"] == "served-1"
        api.service.stop()
        output = api.service.output()

    entries = [json.loads(line) for line in output.splitlines() if line.strip()]
    assert all({"ts", "level", "logger", "message"} <= entry.keys() for entry in entries)
    [access] = [e for e in entries if e["logger"] == "uvicorn.access"
                and "/v1/jobs/" in str(e["message"])]
    assert access["request_id"] == "served-1" and access["process"] == "api"
    assert any("FuseForge on http" in str(e["message"]) for e in entries)
