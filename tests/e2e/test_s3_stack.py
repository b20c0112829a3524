"""FuseForge on an S3 store (a real SeaweedFS) with no shared disk: the API and the worker each
have their own empty data dir, `fuseforge migrate` makes the bucket, a job's model goes in and its
engine comes out through the store, downloads redirect to presigned URLs the client follows
without its API key, and the store going down is a defined end at upload and at a job's store
stage, never a half-written artifact."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from fuseforge_client import FuseForgeClient
from optimizer.testing.block_stack import block_stack
from optimizer.testing.external_data_models import DATA_FILE, saved_with_external_data
from optimizer.testing.models import model_bytes, small_cnn
from tests.e2e.stacks import Stack, running_stack
from tests.support.broker import TEST_REDIS_URL
from tests.support.databases import drop_postgres_database, migrated_postgres_database
from tests.support.object_store import SeaweedS3, seaweed_s3
from tests.support.processes import REPO_ROOT
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

BUCKET = "fuseforge-e2e"
SECRET = "s3-stack-secret-" + "0123456789abcdef" * 2
FAST = {"backend": "onnxruntime", "precision": "fp32", "input_shapes": {"input": [2, 3, 32, 32]},
        "benchmark": {"warmup": 1, "iterations": 5, "measure_memory": False},
        "validation": {"samples": 2}}


class RecordingTransport(httpx.HTTPTransport):
    """A real transport that keeps each request it sends, to see what went where."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        return super().handle_request(request)


@pytest.fixture(scope="module")
def seaweed() -> Iterator[SeaweedS3]:
    with seaweed_s3() as server:
        yield server


@pytest.fixture(scope="module")
def stack(seaweed: SeaweedS3, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("s3-stack")
    database_url = migrated_postgres_database(f"fuseforge_e2e_s3_{uuid.uuid4().hex[:8]}")
    try:
        # `fuseforge migrate` (run by the stack on a given database) makes the missing bucket.
        with running_stack(tmp, name="s3", redis_url=TEST_REDIS_URL, queues="cpu",
                           database_url=database_url, janitor=True,
                           worker_env={"FUSEFORGE_DATA_DIR": str(tmp / "worker-data")},
                           FUSEFORGE_AUTH__ENABLED="true", FUSEFORGE_AUTH__SECRET=SECRET,
                           FUSEFORGE_JANITOR__INTERVAL_S="1",
                           FUSEFORGE_HTTP__HEALTH_CACHE_S="0",
                           **seaweed.environment(BUCKET)) as running:
            yield running
    finally:
        drop_postgres_database(database_url)


@pytest.fixture(scope="module")
def api_key(stack: Stack) -> str:
    done = subprocess.run([sys.executable, "-m", "fuseforge_cli.main", "apikey", "create",
                           "--project", "s3", "--name", "e2e"], capture_output=True, text=True,
                          env=stack.environment, cwd=REPO_ROOT, timeout=120, check=True)
    return done.stdout.strip()


def _files(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()] if folder.is_dir() else []


def test_migrate_made_the_bucket_and_healthz_reports_the_store(stack: Stack) -> None:
    assert f"artifact store created: bucket '{BUCKET}'" in (stack.tmp / "migrate.log").read_text()
    health = httpx.get(f"{stack.base_url}/healthz", timeout=30).json()
    assert health["storage"]["ok"] is True
    assert health["storage"]["store"].startswith(f"bucket '{BUCKET}' at http://127.0.0.1:")


def test_a_job_runs_through_the_store_and_downloads_bypass_the_api(
        stack: Stack, seaweed: SeaweedS3, api_key: str, tmp_path: Path) -> None:
    source = tmp_path / "cnn.onnx"
    source.write_bytes(model_bytes(small_cnn(seed=uuid.uuid4().int % 1000)))
    transport = RecordingTransport()
    with FuseForgeClient(stack.base_url, api_key=api_key, transport=transport) as client:
        model = client.upload_model(source)
        done = client.wait(client.submit_job(model.id, FAST).id, timeout_s=180)
        assert done.status == "succeeded", done.data
        paths = client.download_artifacts(done, tmp_path / "out")

    keys = seaweed.keys(BUCKET)
    assert _stored_model_keys(seaweed, source.read_bytes()) != []
    assert {f"jobs/{done.id}/1/{a.name}" for a in done.artifacts} <= keys  # its first claim
    assert {p.name for p in paths} == {a.name for a in done.artifacts} >= {"engine.onnx"}
    # Nothing the job made lies on the API's disk or is kept by the worker but as a cache.
    assert _files(stack.data_dir / "artifacts") == []
    assert _files(stack.tmp / "worker-data" / "artifacts") == []
    # The bytes came from the store, and the API key never went there.
    from_store = [r for r in transport.sent if r.url.port == seaweed.port]
    assert len(from_store) == len(done.artifacts)
    assert all("authorization" not in r.headers and "cookie" not in r.headers for r in from_store)
    assert all(r.headers["authorization"] == f"Bearer {api_key}"
               for r in transport.sent if r.url.port != seaweed.port)


def test_a_large_model_streams_into_the_store_and_a_refused_one_leaves_nothing(
        stack: Stack, seaweed: SeaweedS3, api_key: str) -> None:
    auth = {"Authorization": f"Bearer {api_key}"}
    models = f"{stack.base_url}/v1/models"
    data = _large_model_bytes(5 * 1024 * 1024)  # 20 MiB of weights: three multipart parts
    garbage = np.random.default_rng(0).bytes(20 * 1024 * 1024)
    before = seaweed.keys(BUCKET)

    kept = httpx.post(models, timeout=120, content=data, params={"name": "large.onnx"},
                      headers={**auth, "Content-Type": "application/octet-stream"})
    refused = httpx.post(models, timeout=120, content=garbage,
                         headers={**auth, "Content-Type": "application/octet-stream"})

    assert kept.status_code == 201, kept.text
    assert kept.json()["size_bytes"] == len(data)
    assert refused.status_code == 422 and refused.json()["error"] == "InvalidModelFile"
    assert len(_stored_model_keys(seaweed, data)) == 1
    assert seaweed.keys(BUCKET) - before == set(_stored_model_keys(seaweed, data))
    # The refused upload's parts were dropped, and neither went through the API's disk.
    wait_until(lambda: not seaweed.client().list_multipart_uploads(
        Bucket=BUCKET).get("Uploads"), 30, what="the refused upload's parts to be dropped")
    assert _files(stack.data_dir / "uploads") == [] and _files(stack.data_dir / "artifacts") == []


def _large_model_bytes(weights: int) -> bytes:
    """A one-MatMul model with `weights` random fp32 weights (a square matrix)."""
    side = int(weights ** 0.5)
    matrix = np.random.default_rng(1).standard_normal((side, side), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "w"], ["output"])], "large",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, side])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, side])],
        initializer=[numpy_helper.from_array(matrix, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _stored_model_keys(seaweed: SeaweedS3, data: bytes) -> list[str]:
    """The keys under models/ whose object holds exactly `data`."""
    client = seaweed.client()
    return [key for key in sorted(seaweed.keys(BUCKET)) if key.startswith("models/")
            and client.head_object(Bucket=BUCKET, Key=key)["ContentLength"] == len(data)
            and client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == data]


def test_a_download_is_a_short_lived_redirect_that_no_cache_keeps(
        stack: Stack, seaweed: SeaweedS3, api_key: str) -> None:
    auth = {"Authorization": f"Bearer {api_key}"}
    # A job of its own: the module's tests may run on different test workers.
    job_id = _submit(stack, auth, _upload(f"{stack.base_url}/v1/models", auth)["id"], FAST)
    detail = wait_until(lambda: _finished(stack, auth, job_id), 180, what="the job")
    assert detail["status"] == "succeeded", detail
    engine = next(a for a in detail["artifacts"] if a["name"] == "engine.onnx")

    answer = httpx.get(f"{stack.base_url}/v1/jobs/{job_id}/artifacts/engine.onnx",
                       headers=auth, timeout=30)

    assert answer.status_code == 307
    assert answer.headers["cache-control"] == "no-store"
    assert answer.headers["x-content-sha256"] == engine["sha256"]
    location = answer.headers["location"]
    assert location.startswith(f"{seaweed.endpoint_url}/{BUCKET}/jobs/{job_id}/1/engine.onnx?")
    assert "X-Amz-Expires=300" in location
    fetched = httpx.get(location, timeout=30)
    assert fetched.status_code == 200
    assert fetched.headers["content-disposition"] == 'attachment; filename="engine.onnx"'


def test_the_store_down_is_a_503_at_upload_then_a_failed_job_and_back_up_a_success(
        stack: Stack, seaweed: SeaweedS3, api_key: str) -> None:
    auth = {"Authorization": f"Bearer {api_key}"}
    models = f"{stack.base_url}/v1/models"
    before = httpx.get(models, headers=auth, timeout=30).json()["total"]
    stored_before = seaweed.keys(BUCKET)
    seaweed.stop()
    try:
        refused = httpx.post(models, headers=auth, timeout=120, files={
            "file": ("cnn.onnx", model_bytes(small_cnn(seed=uuid.uuid4().int % 1000)))})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"] == "ArtifactStoreDown"
        assert f"bucket '{BUCKET}' at {seaweed.endpoint_url}" in refused.json()["detail"]
        assert "nothing was stored" in refused.json()["detail"]
        assert refused.headers["retry-after"] == "5"
        health = httpx.get(f"{stack.base_url}/healthz", timeout=60)
        assert health.status_code == 503 and health.json()["storage"]["ok"] is False
    finally:
        seaweed.start()
    assert httpx.get(models, headers=auth, timeout=30).json()["total"] == before
    assert seaweed.keys(BUCKET) == stored_before  # no object from the refused upload

    # A job whose store goes down while it runs fails with the reason, and leaves no row.
    model = _upload(models, auth)
    # Long enough a benchmark that the store is surely down before the job reaches its store.
    slow = {**FAST, "benchmark": {"warmup": 1, "iterations": 10000, "measure_memory": False}}
    job_id = _submit(stack, auth, model["id"], slow)
    wait_until(lambda: _job(stack, auth, job_id)["stage"] in ("benchmark", "profile"), 120,
               what="the job to reach its benchmark")
    seaweed.stop()
    try:
        failed = wait_until(lambda: _finished(stack, auth, job_id), 180,
                            what="the job to end while the store is down")
    finally:
        seaweed.start()
    assert failed["status"] == "failed", failed
    assert failed["error"]["code"] == "ArtifactStoreUnavailable", failed["error"]
    assert f"bucket '{BUCKET}'" in failed["error"]["message"]
    assert failed["artifacts"] == []
    # Its objects stored before the store went (if any) are the janitor's to remove.
    wait_until(lambda: not any(k.startswith(f"jobs/{job_id}/") for k in seaweed.keys(BUCKET)),
               60, what="the failed job's objects to be removed")

    job_id = _submit(stack, auth, model["id"], FAST)
    done = wait_until(lambda: _finished(stack, auth, job_id), 180, what="the next job")
    assert done["status"] == "succeeded", done
    assert {f"jobs/{job_id}/1/{a['name']}" for a in done["artifacts"]} <= seaweed.keys(BUCKET)


def _upload(models: str, auth: dict[str, str]) -> dict:  # type: ignore[type-arg]
    answer = httpx.post(models, headers=auth, timeout=120, files={
        "file": ("cnn.onnx", model_bytes(small_cnn(seed=uuid.uuid4().int % 1000)))})
    assert answer.status_code == 201, answer.text
    return answer.json()  # type: ignore[no-any-return]


def _submit(stack: Stack, auth: dict[str, str], model_id: str, config: dict) -> str:  # type: ignore[type-arg]
    answer = httpx.post(f"{stack.base_url}/v1/jobs", headers=auth, timeout=30,
                        json={"model_id": model_id, **config})
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


def _job(stack: Stack, auth: dict[str, str], job_id: str) -> dict:  # type: ignore[type-arg]
    return httpx.get(f"{stack.base_url}/v1/jobs/{job_id}", headers=auth,  # type: ignore[no-any-return]
                     timeout=30).json()


def _finished(stack: Stack, auth: dict[str, str], job_id: str) -> dict | None:  # type: ignore[type-arg]
    job = _job(stack, auth, job_id)
    return job if job["status"] in ("succeeded", "failed", "cancelled") else None


def test_a_model_with_its_data_files_goes_up_resumable_into_the_bucket_and_its_job_succeeds(
        stack: Stack, seaweed: SeaweedS3, api_key: str, tmp_path: Path) -> None:
    model = saved_with_external_data(
        tmp_path / "blocks", block_stack(2, hidden=32, seed=uuid.uuid4().int % 1000))
    shapes = {"input": [1, 8, 32]}
    with FuseForgeClient(stack.base_url, api_key=api_key) as client:
        # Pieces over tus into the bucket, then the tar they make is checked and kept.
        uploaded = client.upload_model(model, data_files=[DATA_FILE], resumable=True)
        assert uploaded.data["external_data"]["files"][0]["location"] == DATA_FILE
        assert not [k for k in seaweed.keys(BUCKET) if k.startswith("uploads/")]
        done = client.wait(client.submit_job(uploaded.id, {**FAST, "input_shapes": shapes}).id,
                           timeout_s=180)
        assert done.status == "succeeded", done.data
        paths = client.download_artifacts(done, tmp_path / "out")

    assert {"engine.onnx", "engine.onnx.data"} <= {p.name for p in paths}
    assert _files(stack.tmp / "worker-data" / "artifacts") == []  # streamed, not kept
