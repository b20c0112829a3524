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
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10, [op.label for op in operations]
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=_EXAMPLES_PER_OPERATION, deadline=None, derandomize=True,
                  database=None, suppress_health_check=list(HealthCheck))
        def check(case: schemathesis.Case) -> None:
            # Schema-valid is not valid: random bytes are no ONNX model, a random id names no
            # job. What must hold is that the answer is declared and is no 5xx.
            case.call_and_validate(excluded_checks=[positive_data_acceptance])

        check()
