"""The client retries what is safe to send again, honours Retry-After, keeps one Idempotency-Key
per logical POST, and maps what is left to its error tree; against a scripted local server."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest

from fuseforge_client import (
    AuthenticationError,
    ConflictError,
    ConnectionFailedError,
    DownloadError,
    FuseForgeClient,
    IdempotencyConflictError,
    InvalidRequestError,
    NotFoundError,
    RateLimitedError,
    ServiceUnavailableError,
)
from fuseforge_client.retry import RetryPolicy, retry_after_seconds, should_retry
from tests.support.processes import free_port
from tests.support.scripted_http import Answer, scripted_server

JOB = {"id": "7d0c7c52-2a35-4c0e-9d8e-5f1f4f0b6a11", "model_id": "m1", "status": "queued",
       "stage": None, "progress": 0.0, "error": None, "artifacts": [], "benchmarks": []}
MODEL = {"id": "m1", "name": "cnn.onnx", "sha256": "ab" * 32, "size_bytes": 5}
BUSY = Answer(503, {"error": "DatabaseUnavailable", "detail": "retry in 1 s"},
              {"Retry-After": "1"})


def _client(base_url: str, sleeps: list[float], **options: object) -> FuseForgeClient:
    return FuseForgeClient(base_url, api_key="sekrit", sleep=sleeps.append,  # type: ignore[arg-type]
                           **options)


def test_post_turned_away_with_retry_after_is_sent_again_with_the_same_idempotency_key() -> None:
    sleeps: list[float] = []
    with scripted_server([BUSY, Answer(202, JOB)]) as server, _client(server.base_url, sleeps) as c:
        job = c.submit_job("m1", {"precision": "fp16"})

    assert job.id == JOB["id"] and job.status == "queued"
    first, second = server.received
    assert first.method == second.method == "POST" and first.path == "/v1/jobs"
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]
    assert sleeps == [1.0]  # the server's Retry-After, not the client's own backoff


def test_each_logical_post_gets_its_own_idempotency_key() -> None:
    with scripted_server([Answer(202, JOB)]) as server, _client(server.base_url, []) as c:
        c.submit_job("m1")
        c.submit_job("m1")
    keys = [r.headers["idempotency-key"] for r in server.received]
    assert len(set(keys)) == 2


def test_upload_retried_after_retry_after_sends_the_whole_file_again(tmp_path: Path) -> None:
    model = tmp_path / "cnn.onnx"
    model.write_bytes(b"x" * 300_000)
    progress: list[tuple[int, int]] = []
    with scripted_server([BUSY, Answer(201, MODEL)]) as server, _client(server.base_url, []) as c:
        uploaded = c.upload_model(model, on_progress=lambda sent, total: progress.append(
            (sent, total)))

    assert uploaded.id == "m1"
    first, second = server.received
    assert first.body_bytes == second.body_bytes > 300_000  # the multipart body, both times
    assert first.headers["idempotency-key"] == second.headers["idempotency-key"]
    assert progress[-1] == (300_000, 300_000)


def test_without_idempotent_posts_a_post_503_without_retry_after_is_not_sent_twice() -> None:
    # Without Retry-After a 503 may come from a proxy after the API did the work, and a server
    # older than Idempotency-Key would do it again.
    sleeps: list[float] = []
    unavailable = Answer(503, {"error": "BrokerUnavailable", "detail": "the broker is down"})
    with scripted_server([unavailable]) as server, _client(
            server.base_url, sleeps, idempotent_posts=False) as c:
        with pytest.raises(ServiceUnavailableError) as caught:
            c.submit_job("m1")
    assert len(server.received) == 1 and sleeps == []
    assert caught.value.status_code == 503 and caught.value.error == "BrokerUnavailable"
    assert caught.value.detail == "the broker is down"


def test_by_default_a_keyed_post_is_retried_after_a_bare_503_like_a_get() -> None:
    sleeps: list[float] = []
    bare = Answer(503, {"error": "BrokerUnavailable", "detail": "down"})
    with scripted_server([bare, Answer(202, JOB)]) as server, _client(server.base_url, sleeps) as c:
        c.submit_job("m1")
    assert len(server.received) == 2 and sleeps == [0.5]
    assert len({r.headers["idempotency-key"] for r in server.received}) == 1


def test_a_cancel_carries_no_key_and_is_not_retried_after_a_bare_503() -> None:
    bare = Answer(503, {"error": "BrokerUnavailable", "detail": "down"})
    with scripted_server([bare]) as server, _client(server.base_url, []) as c:
        with pytest.raises(ServiceUnavailableError):
            c.cancel(JOB["id"])
    assert len(server.received) == 1 and "idempotency-key" not in server.received[0].headers


IN_PROGRESS = Answer(409, {"error": "IdempotencyKeyInProgress",
                           "detail": "a request with this Idempotency-Key is still being "
                                     "processed; retry later"}, {"Retry-After": "2"})


def test_a_post_whose_first_try_is_still_in_progress_waits_and_gets_the_replay() -> None:
    sleeps: list[float] = []
    replay = Answer(202, JOB, {"Idempotent-Replayed": "true"})
    with scripted_server([IN_PROGRESS, replay]) as server, _client(server.base_url, sleeps) as c:
        job = c.submit_job("m1")
    assert job.id == JOB["id"] and sleeps == [2.0]
    assert len({r.headers["idempotency-key"] for r in server.received}) == 1


def test_a_try_still_in_progress_after_the_retries_is_a_clear_conflict_naming_the_key() -> None:
    sleeps: list[float] = []
    with scripted_server([IN_PROGRESS]) as server, _client(
            server.base_url, sleeps, retry=RetryPolicy(attempts=2)) as c:
        with pytest.raises(IdempotencyConflictError) as caught:
            c.submit_job("m1")
    assert len(server.received) == 2 and sleeps == [2.0]
    conflict = caught.value
    assert isinstance(conflict, ConflictError) and conflict.status_code == 409
    assert conflict.error == "IdempotencyKeyInProgress"
    assert conflict.idempotency_key == server.received[0].headers["idempotency-key"]
    assert "still being processed" in conflict.detail  # the server's words, and the advice:
    assert "look for its result (e.g. GET /v1/jobs) before sending it again" in conflict.detail
    assert conflict.idempotency_key in str(conflict)


def test_a_request_that_changed_between_tries_is_a_conflict_and_not_retried(
        tmp_path: Path) -> None:
    reused = Answer(409, {"error": "IdempotencyKeyReused",
                          "detail": "Idempotency-Key 'x' was first sent with another body"})
    model = tmp_path / "cnn.onnx"
    model.write_bytes(b"x" * 10)
    with scripted_server([reused]) as server, _client(server.base_url, []) as c:
        with pytest.raises(IdempotencyConflictError, match="the request changed between tries"):
            c.upload_model(model)
    assert len(server.received) == 1


def test_another_409_stays_a_plain_conflict() -> None:
    finished = Answer(409, {"error": "JobNotCancellable", "detail": "job has finished"})
    with scripted_server([finished]) as server, _client(server.base_url, []) as c:
        with pytest.raises(ConflictError) as caught:
            c.cancel(JOB["id"])
    assert type(caught.value) is ConflictError


def test_get_is_retried_on_502_and_504_with_growing_backoff() -> None:
    sleeps: list[float] = []
    answers = [Answer(502, b"<html>bad gateway</html>"), Answer(504, b""), Answer(200, JOB)]
    with scripted_server(answers) as server, _client(server.base_url, sleeps) as c:
        job = c.get_job(JOB["id"])
    assert job.status == "queued" and len(server.received) == 3
    assert sleeps == [0.5, 1.0]


def test_get_still_unavailable_after_the_retries_raises_with_the_last_answer() -> None:
    sleeps: list[float] = []
    with scripted_server([BUSY]) as server, _client(
            server.base_url, sleeps, retry=RetryPolicy(attempts=3)) as c:
        with pytest.raises(ServiceUnavailableError, match="DatabaseUnavailable"):
            c.get_job(JOB["id"])
    assert len(server.received) == 3 and sleeps == [1.0, 1.0]


def test_retry_after_longer_than_the_policy_allows_is_raised_at_once() -> None:
    sleeps: list[float] = []
    later = Answer(429, {"error": "TooManyRequests", "detail": "slow down"},
                   {"Retry-After": "3600"})
    with scripted_server([later]) as server, _client(server.base_url, sleeps) as c:
        with pytest.raises(RateLimitedError, match="slow down"):
            c.get_job(JOB["id"])
    assert len(server.received) == 1 and sleeps == []


def test_connection_refused_raises_connection_failed_after_the_retries() -> None:
    sleeps: list[float] = []
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with _client(url, sleeps) as client:
        with pytest.raises(ConnectionFailedError) as caught:
            client.submit_job("m1")  # a POST: nothing was sent, so it is retried too
    assert sleeps == [0.5, 1.0, 2.0]  # 4 tries
    assert caught.value.status_code is None
    assert url in str(caught.value) and "FUSEFORGE_URL" in str(caught.value)


def test_the_api_key_is_sent_as_a_bearer_token_and_a_401_is_an_authentication_error() -> None:
    refused = Answer(401, {"error": "InvalidApiKey", "detail": "the API key is not valid"})
    with scripted_server([refused]) as server, _client(server.base_url, []) as c:
        with pytest.raises(AuthenticationError) as caught:
            c.get_job(JOB["id"])
    assert server.received[0].headers["authorization"] == "Bearer sekrit"
    assert len(server.received) == 1  # a wrong key stays wrong: no retry
    assert (caught.value.status_code, caught.value.error, caught.value.detail) == (
        401, "InvalidApiKey", "the API key is not valid")


def test_error_statuses_map_to_the_tree_and_keep_the_server_text() -> None:
    answers = [Answer(404, {"error": "JobNotFound", "detail": "job x does not exist"}),
               Answer(422, {"error": "ValidationError", "detail": "precision: bad"}),
               Answer(400, b"plain text from a proxy")]
    with scripted_server(answers) as server, _client(server.base_url, []) as c:
        with pytest.raises(NotFoundError, match="job x does not exist"):
            c.get_job("x")
        with pytest.raises(InvalidRequestError) as invalid:
            c.submit_job("m1", precision="fp4")
        with pytest.raises(InvalidRequestError) as plain:
            c.get_job("y")
    assert invalid.value.error == "ValidationError" and invalid.value.detail == "precision: bad"
    assert plain.value.error == "HTTP400" and plain.value.detail == "plain text from a proxy"


def test_no_key_sends_no_authorization_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FUSEFORGE_API_KEY", raising=False)
    with scripted_server([Answer(200, JOB)]) as server, FuseForgeClient(server.base_url) as c:
        c.get_job(JOB["id"])
    assert "authorization" not in server.received[0].headers


@pytest.mark.parametrize(("idempotent", "status", "error", "retry_after", "expected"), [
    (True, 502, None, None, True),
    (True, 500, None, None, False),
    (True, None, httpx.ReadTimeout("slow"), None, True),
    (False, None, httpx.ReadTimeout("slow"), None, False),  # it may have been processed
    (False, None, httpx.ConnectError("refused"), None, True),  # nothing was sent
    (False, 503, None, 2.0, True),
    (False, 429, None, 2.0, True),
    (False, 503, None, None, False),
    (False, 502, None, 2.0, False),  # a gateway's answer says nothing about the API's work
    (True, 409, None, 2.0, True),  # an earlier try of this keyed POST is still running
    (True, 409, None, None, False),  # a conflict of another kind
    (False, 409, None, 2.0, False),
])
def test_should_retry_only_what_cannot_double_a_post(
    idempotent: bool, status: int | None, error: httpx.TransportError | None,
    retry_after: float | None, expected: bool,
) -> None:
    assert should_retry(idempotent=idempotent, status_code=status, error=error,
                        retry_after_s=retry_after) is expected


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after_seconds("5") == 5.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412500.0) == 10.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


def test_a_url_without_scheme_is_refused_naming_the_fix() -> None:
    with pytest.raises(ValueError, match="http://fuseforge:8000"):
        FuseForgeClient("fuseforge:8000")


def test_download_cut_off_mid_body_starts_again_and_lands_whole(tmp_path: Path) -> None:
    engine = bytes(range(256)) * 4096  # 1 MiB
    artifact = {"name": "engine.onnx", "kind": "engine", "size_bytes": len(engine),
                "sha256": hashlib.sha256(engine).hexdigest(),
                "url": f"/v1/jobs/{JOB['id']}/artifacts/engine.onnx"}
    finished = {**JOB, "status": "succeeded", "artifacts": [artifact]}
    sleeps: list[float] = []
    answers = [Answer(200, finished), Answer(200, engine, cut_after=100_000), Answer(200, engine)]
    with scripted_server(answers) as server, _client(server.base_url, sleeps) as c:
        [path] = c.download_artifacts(JOB["id"], tmp_path / "out")

    assert path.read_bytes() == engine and sleeps == [0.5]
    assert [r.path for r in server.received][1:] == [artifact["url"]] * 2
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["engine.onnx"]


def test_download_whose_bytes_do_not_match_the_sha256_is_refused_and_not_kept(
    tmp_path: Path,
) -> None:
    artifact = {"name": "engine.onnx", "kind": "engine", "size_bytes": 3, "sha256": "0" * 64,
                "url": "/v1/jobs/x/artifacts/engine.onnx"}
    finished = {**JOB, "status": "succeeded", "artifacts": [artifact]}
    with scripted_server([Answer(200, finished), Answer(200, b"abc")]) as server, _client(
            server.base_url, []) as c:
        with pytest.raises(DownloadError, match="sha256"):
            c.download_artifacts(JOB["id"], tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_wait_rides_out_a_short_outage_and_returns_the_finished_job() -> None:
    sleeps: list[float] = []
    running = {**JOB, "status": "running", "stage": "optimize", "progress": 0.2}
    done = {**JOB, "status": "succeeded", "stage": "done", "progress": 1.0}
    bare_503 = Answer(503, {"error": "DatabaseUnavailable", "detail": "restarting"})
    answers = [Answer(200, running), *[bare_503] * 4, Answer(200, done)]
    seen: list[str] = []
    with scripted_server(answers) as server, _client(server.base_url, sleeps) as c:
        job = c.wait(JOB["id"], timeout_s=60, on_progress=lambda j: seen.append(j.status))
    assert job.status == "succeeded" and seen == ["running", "succeeded"]
    assert len(server.received) == 6


def test_wait_gives_up_on_an_outage_longer_than_it_allows() -> None:
    bare_503 = Answer(503, {"error": "DatabaseUnavailable", "detail": "down"})
    with scripted_server([bare_503]) as server, _client(server.base_url, []) as c:
        with pytest.raises(ServiceUnavailableError, match="down"):
            c.wait(JOB["id"], outage_s=0)
    assert len(server.received) == 4  # one request and its retries
