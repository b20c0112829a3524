"""A bounded property-based fuzz run of the whole API against its own OpenAPI document
(schemathesis): whatever a client sends, no answer is a 5xx, and every answer has a status
code, content type and body that the document declares."""

from __future__ import annotations

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance

from core.settings import Settings
from optimizer.testing.models import model_bytes, small_cnn

_EXAMPLES_PER_OPERATION = 25


@pytest.fixture(autouse=True)
def short_event_streams(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stream that is let in (GET /v1/jobs/stream) would otherwise stay open half an hour.
    monkeypatch.setattr(settings.http, "events_max_s", 0.2)
    monkeypatch.setattr(settings.http, "events_poll_s", 0.05)


def test_no_request_gets_a_5xx_or_an_answer_the_schema_does_not_declare(
        client: TestClient) -> None:
    # The app of the `client` fixture: its database session (rolled back after the test),
    # settings and broker. (schemathesis's own pytest plugin does not run on this pytest.)
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)
    # The project's key on every call, so the fuzz reaches past authentication (a call
    # without one is a 401 before any of its inputs is read).
    auth = {"Authorization": client.headers["Authorization"]}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10, [op.label for op in operations]
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=_EXAMPLES_PER_OPERATION, deadline=None, derandomize=True,
                  database=None, suppress_health_check=list(HealthCheck))
        def check(case: schemathesis.Case) -> None:
            # Schema-valid is not valid: random bytes are no ONNX model, a random id names no
            # job. What must hold is that the answer is declared and is no 5xx.
            case.call_and_validate(headers=auth, excluded_checks=[positive_data_acceptance])

        check()


def test_both_event_streams_send_only_the_events_their_schema_declares(
        client: TestClient) -> None:
    # schemathesis parses a text/event-stream answer into events and checks each against the
    # declared schema; a job gives both streams events to send.
    model = client.post("/v1/models", files={"file": ("cnn.onnx", model_bytes(small_cnn()))})
    assert model.status_code == 201, model.text
    job = client.post("/v1/jobs", json={"model_id": model.json()["id"]})
    assert job.status_code == 202, job.text
    schema = schemathesis.openapi.from_asgi("/openapi.json", client.app)

    listed = schema["/v1/jobs/stream"]["GET"].Case(query={"since": "2000-01-01T00:00:00Z"})
    auth = {"Authorization": client.headers["Authorization"]}
    answer = listed.call_and_validate(headers=auth, excluded_checks=[positive_data_acceptance])
    assert b"event: job" in answer.content and b"event: timeout" in answer.content
    events = schema["/v1/jobs/{job_id}/events"]["GET"].Case(
        path_parameters={"job_id": job.json()["id"]})
    answer = events.call_and_validate(headers=auth, excluded_checks=[positive_data_acceptance])
    assert b"event: status" in answer.content
