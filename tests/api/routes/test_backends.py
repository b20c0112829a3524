"""/v1/backends lists the optimizer's backend registry: what a job can name and where it runs."""

from fastapi.testclient import TestClient

from optimizer.registries.backends import BACKENDS


def test_backends_are_listed_from_the_registry(client: TestClient) -> None:
    response = client.get("/v1/backends")
    assert response.status_code == 200, response.text
    listed = {b["name"]: b for b in response.json()}
    assert list(listed) == [str(name) for name in BACKENDS]
    assert listed["onnxruntime"] == {
        "name": "onnxruntime", "label": "ONNX Runtime", "precisions": ["fp32", "fp16", "int8"],
        "queue": "cpu", "needs_gpu": False,
        "options": ["intra_op_threads", "ort_flush_denormals", "ort_intra_op_threads",
                    "ort_optimization_level"]}
    assert listed["tensorrt"]["precisions"] == ["fp32", "fp16", "bf16", "int8", "fp8"]
    assert listed["tensorrt"]["queue"] == "gpu" and listed["tensorrt"]["needs_gpu"] is True


def test_backends_are_in_the_openapi_document(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    operation = document["paths"]["/v1/backends"]["get"]
    assert operation["tags"] == ["backends"]
    example = document["components"]["schemas"]["BackendRead"]["examples"][0]
    assert example["name"] == "onnxruntime"


def test_backends_need_an_api_key(anonymous_client: TestClient) -> None:
    assert anonymous_client.get("/v1/backends").status_code == 401
