"""/v1/passes lists what a job can select; jobs accept and check pass names."""

from fastapi.testclient import TestClient

from optimizer.passes import DEFAULT_PASSES
from optimizer.testing.models import model_bytes, small_cnn


def test_passes_are_listed_in_run_order_with_summaries(client: TestClient) -> None:
    listed = client.get("/v1/passes").json()
    assert [p["name"] for p in listed] == [p.name for p in DEFAULT_PASSES]
    fold = next(p for p in listed if p["name"] == "fold_batch_norm")
    assert fold["summary"] and fold["stage"] == "conv_bn_act"
    assert set(fold["backends"]) == {"onnxruntime", "tensorrt", "openvino"}
    # OpenVINO folds it itself: off by default there, with the measurement that said so.
    assert list(fold["off_by_default"]) == ["openvino"]
    assert "bench/openvino_passes.py" in fold["off_by_default"]["openvino"]


def test_job_accepts_named_passes_and_refuses_unknown_ones(client: TestClient) -> None:
    model_id = client.post("/v1/models", files={"file": ("m.onnx", model_bytes(small_cnn()))}).json()["id"]
    ok = client.post("/v1/jobs", json={"model_id": model_id, "passes": ["fold_batch_norm"] * 2})
    assert ok.status_code == 202, ok.text
    assert ok.json()["config"]["passes"] == ["fold_batch_norm"]
    bad = client.post("/v1/jobs", json={"model_id": model_id, "passes": ["fold_batch_norm", "magic"]})
    assert bad.status_code == 422
    assert bad.json()["detail"].startswith("passes") and "'magic'" in bad.json()["detail"]


def test_plugins_are_listed_with_their_io_contract(client: TestClient) -> None:
    listed = {p["name"]: p for p in client.get("/v1/plugins").json()}
    assert set(listed) == {"skip_layer_norm", "bias_gelu", "multi_head_attention"}
    for plugin in listed.values():
        assert plugin["domain"] == "fuseforge" and plugin["inputs"] and plugin["outputs"]
        assert plugin["summary"] and plugin["readme"]
