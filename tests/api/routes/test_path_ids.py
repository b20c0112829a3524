"""Every {id} route: a malformed id is as unknown as a missing one, 404 in the API's JSON shape."""

import pytest
from fastapi.testclient import TestClient

UNKNOWN = "00000000-0000-0000-0000-000000000000"
MALFORMED = ["1;DROP", "not-a-uuid", "0" * 10_000, "%00", "'%20OR%201=1--"]

ROUTES = [
    ("GET", "/v1/models/{id}", "ModelNotFound", "model"),
    ("GET", "/v1/datasets/{id}", "DatasetNotFound", "dataset"),
    ("GET", "/v1/jobs/{id}", "JobNotFound", "job"),
    ("POST", "/v1/jobs/{id}/cancel", "JobNotFound", "job"),
    ("GET", "/v1/jobs/{id}/artifacts/engine.onnx", "JobNotFound", "job"),
]


@pytest.mark.parametrize("raw_id", [UNKNOWN, *MALFORMED])
@pytest.mark.parametrize(("method", "path", "error", "noun"), ROUTES)
def test_unknown_and_malformed_ids_are_404_not_found(
    client: TestClient, method: str, path: str, error: str, noun: str, raw_id: str
) -> None:
    response = client.request(method, path.format(id=raw_id))
    assert response.status_code == 404, response.text
    body = response.json()
    assert body["error"] == error
    assert body["detail"].startswith(f"{noun} ") and "does not exist" in body["detail"]
    assert len(body["detail"]) < 300  # a 10,000-character id is not echoed back


@pytest.mark.parametrize("name", ["a%00b", "engine.onnx%0A", "%7F"])
def test_artifact_name_with_a_control_character_is_404(client: TestClient, name: str) -> None:
    response = client.get(f"/v1/jobs/{UNKNOWN}/artifacts/{name}")
    assert response.status_code == 404, response.text
    assert response.json()["error"] == "ArtifactNotFound"


def test_openapi_still_documents_the_ids_as_path_parameters(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/v1/jobs/{job_id}"]["get"]
    assert [(p["name"], p["in"]) for p in operation["parameters"]] == [("job_id", "path")]
