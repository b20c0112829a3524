"""/v1/backends lists the optimizer's backend registry: what a job can name and where it runs."""

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.queues import cpu_queues, worker_queues
from optimizer.capabilities import HostCapabilities
from optimizer.registries.backends import BACKENDS
from tests.support.stand_in import registered
from tests.support.worker_heartbeats import CPU_ONLY, beat

WITH_OPENVINO = HostCapabilities(openvino_version="2026.4.1", nncf_version="3.4.0",
                                 cpu_flags=frozenset({"avx512_bf16"}))


def test_backends_are_listed_from_the_registry(client: TestClient) -> None:
    response = client.get("/v1/backends")
    assert response.status_code == 200, response.text
    listed = {b["name"]: b for b in response.json()}
    assert list(listed) == [str(name) for name in BACKENDS]
    unavailable = listed["onnxruntime"].pop("unavailable")
    assert listed["onnxruntime"] == {
        "name": "onnxruntime", "label": "ONNX Runtime", "precisions": ["fp32", "fp16", "int8"],
        "queue": "cpu", "queue_name": "cpu", "needs_gpu": False, "host_needs": None,
        "options": ["intra_op_threads", "ort_flush_denormals", "ort_intra_op_threads",
                    "ort_optimization_level"]}
    assert unavailable is None or "no online worker consumes queue 'cpu'" in unavailable
    assert listed["openvino"]["precisions"] == ["fp32", "bf16", "int8"]
    assert listed["openvino"]["queue"] == "cpu" and listed["openvino"]["queue_name"] == "openvino"
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


def test_a_backend_registered_by_a_plug_in_is_listed_from_its_spec(client: TestClient) -> None:
    declared = [str(name) for name in BACKENDS]
    with registered():
        response = client.get("/v1/backends")

    assert response.status_code == 200, response.text
    listed = {b["name"]: b for b in response.json()}
    assert list(listed) == [*declared, "stand-in"]
    assert listed["stand-in"] == {
        "name": "stand-in", "label": "Stand-in", "precisions": ["fp32", "half", "int8"],
        "queue": "cpu", "queue_name": "cpu", "needs_gpu": False, "host_needs": None,
        # no worker runs in this test: the stand-in's queue, the CPU workers', is unserved
        "unavailable": "no online worker consumes queue 'cpu'. Its jobs stay queued until one "
                       "starts (`fuseforge worker --queues cpu`).",
        "options": ["intra_op_threads", "ort_flush_denormals", "ort_intra_op_threads",
                    "ort_optimization_level"]}


def _started(session: Session, name: str, capabilities: HostCapabilities) -> None:
    """A worker started without --queues on a host with `capabilities`, as it fits them."""
    requested = cpu_queues()
    _, drop = worker_queues(requested, capabilities)
    beat(session, name, capabilities, [q for q in requested if q not in drop])


def test_a_cpu_worker_without_openvino_leaves_its_jobs_and_backends_says_why(
        client: TestClient, db_session: Session) -> None:
    _started(db_session, "celery@cpu-only", CPU_ONLY)

    listed = {b["name"]: b for b in client.get("/v1/backends").json()}

    assert listed["onnxruntime"]["unavailable"] is None
    why = listed["openvino"]["unavailable"]
    assert why is not None and "no online worker consumes queue 'openvino'" in why
    assert "the openvino and nncf Python packages (pip install 'fuseforge[openvino]')" in why


def test_a_worker_with_openvino_takes_its_jobs(client: TestClient, db_session: Session) -> None:
    _started(db_session, "celery@openvino", WITH_OPENVINO)

    listed = {b["name"]: b for b in client.get("/v1/backends").json()}

    assert listed["openvino"]["unavailable"] is None and listed["onnxruntime"]["unavailable"] is None
