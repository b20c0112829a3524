"""`fuseforge submit --wait` against a real FuseForge (API server, worker, PostgreSQL, Redis):
its exit code says how the job ended (0 succeeded, 1 failed, 2 validation failed, 3 bad usage or
config, 4 server unreachable or key refused), progress goes to stderr, results to stdout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import onnx
import pytest
from onnx import TensorProto, helper

from optimizer.testing.block_stack import block_stack
from optimizer.testing.external_data_models import DATA_FILE, saved_with_external_data
from optimizer.testing.models import small_cnn
from optimizer.testing.shape_models import lstm_in_nested_ifs
from tests.e2e.stacks import running_stack
from tests.support.broker import TEST_REDIS_URL
from tests.support.processes import free_port
from tests.support.scripted_http import Answer, scripted_server

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FAST = {"benchmark": {"warmup": 1, "iterations": 5, "measure_memory": False},
        "validation": {"samples": 2}}
IMPOSSIBLE = {"atol": 1e-12, "rtol": 0, "samples": 2}  # fused arithmetic never meets this


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_stack(tmp_path_factory.mktemp("submit"), name="submit",
                       redis_url=TEST_REDIS_URL, queues="cpu") as stack:
        yield stack.base_url


def _submit(*args: str, url: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEFORGE_")}
    env.update(PYTHONPATH=str(REPO), FUSEFORGE_URL=url)
    if key is not None:
        env["FUSEFORGE_API_KEY"] = key
    return subprocess.run([sys.executable, "-m", "fuseforge_cli.main", "submit", *args],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)


def _config(tmp_path: Path, body: object, name: str = "job.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(body))
    return str(path)


@pytest.fixture
def cnn(tmp_path: Path) -> str:
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(seed=uuid.uuid4().int % 1000), path)
    return str(path)


def test_succeeded_job_exits_0_prints_the_verdict_and_downloads_the_artifacts(
    base_url: str, cnn: str, tmp_path: Path,
) -> None:
    out = tmp_path / "engine"
    run = _submit(cnn, "--backend", "onnxruntime", "--precision", "fp16", "--input-shape",
                  "input=2,3,32,32", "--config", _config(tmp_path, FAST), "--wait",
                  "--output", str(out), url=base_url)

    assert run.returncode == 0, run.stderr
    verdict, hot_spot = run.stdout.splitlines()
    # The server's headline, word for word (issue 45).
    [job_id] = re.findall(r"job (\S+) submitted", run.stderr)
    job = httpx.get(f"{base_url}/v1/jobs/{job_id}").raise_for_status().json()
    assert verdict == f"job {job_id} succeeded: {job['outcome']['headline']}"
    assert verdict.startswith(f"job {job_id} succeeded: Shipped the onnxruntime fp16 engine: ")
    assert verdict.endswith(", accuracy passed.") and "the original's speed" not in verdict
    # The profile's biggest hot spot, named with the original nodes it came from.
    assert hot_spot.startswith("hot spot: ") and "of the engine's node time" in hot_spot
    assert "from " in hot_spot and "original node(s)" in hot_spot
    assert "upload cnn.onnx" in run.stderr and "100%" in run.stderr
    stages = [ln.split()[1] for ln in run.stderr.splitlines() if ln.startswith("  stage ")]
    assert stages == ["load", "optimize", "build_engine", "validate", "benchmark", "profile",
                      "store"]
    assert " succeeded (100%)" in run.stderr
    assert {"engine.onnx", "manifest.json"} <= {p.name for p in out.iterdir()}
    onnx.checker.check_model(str(out / "engine.onnx"))


def test_json_prints_the_final_job_for_scripts(base_url: str, cnn: str, tmp_path: Path) -> None:
    run = _submit(cnn, "--config", _config(tmp_path, FAST), "--wait", "--json", url=base_url)
    assert run.returncode == 0, run.stderr
    job = json.loads(run.stdout)
    assert job["status"] == "succeeded" and job["validation"]["passed"] is True
    assert job["config"]["input_shapes"] == {"input": [1, 3, 32, 32]}


def test_without_wait_it_prints_the_job_id_and_exits_0(base_url: str, cnn: str) -> None:
    run = _submit(cnn, url=base_url)
    assert run.returncode == 0, run.stderr
    assert uuid.UUID(run.stdout.strip())


def test_failed_job_exits_1_with_its_error_on_one_line(base_url: str, tmp_path: Path) -> None:
    # Valid ONNX that ONNX Runtime has no CPU kernel for (Relu on int16): the job's load fails.
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.INT16, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT16, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    path = tmp_path / "mystery.onnx"
    onnx.save(model, path)

    run = _submit(str(path), "--wait", "--json", url=base_url)

    assert run.returncode == 1, run.stderr
    [line] = [ln for ln in run.stderr.splitlines() if ln.startswith("fuseforge submit:")]
    assert "UnsupportedModelError" in line and "failed" in line
    assert json.loads(run.stdout)["error"]["code"] == "UnsupportedModelError"


def test_a_model_that_needs_a_control_value_fails_by_its_name_with_the_flag_that_fixes_it(
        base_url: str, tmp_path: Path) -> None:
    # A voice-activity model (as silero-vad): dynamic dims and an int64 rate input "sr" whose
    # random values pick a branch that cannot run. The error names the file as uploaded, not
    # the store's hash of it, and the flags that give the model its shapes and rate.
    path = tmp_path / "vad.onnx"
    onnx.save(lstm_in_nested_ifs(), path)

    failed = _submit(str(path), "--wait", url=base_url)

    assert failed.returncode == 1, failed.stderr
    [line] = [ln for ln in failed.stderr.splitlines() if ln.startswith("fuseforge submit:")]
    assert "InferenceError" in line and "Model 'vad.onnx' does not run" in line
    assert "--input-shape input=D1,D2,..." in line and "--input-range sr=LOW,HIGH" in line

    fixed = _submit(str(path), "--input-range", "sr=16000,16001", "--config",
                    _config(tmp_path, FAST), "--wait", url=base_url)
    assert fixed.returncode == 0, fixed.stderr


def test_int8_asked_and_fp32_shipped_shows_as_such_in_jobs_list_and_show(
        base_url: str, tmp_path: Path) -> None:
    # Nothing to quantize (no MatMul or Conv): the int8 job ships the fp32 model.
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    path = tmp_path / "no-matmul.onnx"
    onnx.save(model, path)

    run = _submit(str(path), "--precision", "int8", "--config", _config(tmp_path, FAST),
                  "--wait", url=base_url)

    assert run.returncode == 0, run.stderr
    job_id = run.stdout.split()[1]  # "job <id> succeeded: ..."
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEFORGE_")}
    env.update(PYTHONPATH=str(REPO), FUSEFORGE_URL=base_url)
    listed, shown = (subprocess.run([sys.executable, "-m", "fuseforge_cli.main", "jobs", *args],
                                    capture_output=True, text=True, env=env, cwd=REPO,
                                    timeout=120).stdout
                     for args in (["list", "--model", "no-matmul"], ["show", job_id[:8]]))
    [row] = listed.splitlines()[1:]
    assert "onnxruntime fp32 engine" in row and "(int8 asked)" in row
    # asked names the quantization mode too ("onnxruntime int8 auto") where the server says it
    assert any(line.startswith("  asked:    onnxruntime int8") for line in shown.splitlines())
    assert "  shipped:  onnxruntime fp32 engine" in shown.splitlines()


def test_validation_failure_exits_2(base_url: str, cnn: str, tmp_path: Path) -> None:
    config = _config(tmp_path, {**FAST, "validation": IMPOSSIBLE})
    run = _submit(cnn, "--config", config, "--wait", url=base_url)
    assert run.returncode == 2, run.stderr
    assert "fuseforge submit: ValidationFailed: job " in run.stderr
    assert "atol=1e-12" in run.stderr and run.stdout == ""


def test_config_that_is_not_json_exits_3_naming_the_spot(base_url: str, cnn: str,
                                                          tmp_path: Path) -> None:
    broken = tmp_path / "job.json"
    broken.write_text('{"precision": "fp16",}')
    run = _submit(cnn, "--config", str(broken), "--wait", url=base_url)
    assert run.returncode == 3
    assert run.stderr.count("\n") == 1 and "is not valid JSON" in run.stderr
    assert "line 1 column" in run.stderr


def test_unknown_config_field_exits_3_before_the_upload(base_url: str, cnn: str,
                                                        tmp_path: Path) -> None:
    run = _submit(cnn, "--config", _config(tmp_path, {"precison": "fp16"}), "--wait",
                  url=base_url)
    assert run.returncode == 3
    assert "unknown job option(s) precison" in run.stderr and "upload" not in run.stderr


def test_config_the_server_refuses_exits_3_with_its_reason(base_url: str, cnn: str) -> None:
    run = _submit(cnn, "--backend", "onnxruntime", "--precision", "bf16", "--wait", url=base_url)
    assert run.returncode == 3
    assert "precision: bf16 needs backend 'tensorrt'" in run.stderr


def test_unreachable_server_exits_4(cnn: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    run = _submit(cnn, "--wait", url=url)
    assert run.returncode == 4
    server, failure = run.stderr.splitlines()  # which server it asked, and why it gave up
    assert server == f"FuseForge server {url} (FUSEFORGE_URL)"
    assert "could not reach FuseForge" in failure


def test_refused_api_key_exits_4_with_the_servers_reason(cnn: str) -> None:
    refused = Answer(401, {"error": "InvalidApiKey", "detail": "the API key is not valid"})
    with scripted_server([refused]) as server:
        run = _submit(cnn, "--wait", url=server.base_url, key="wrong")
    assert run.returncode == 4
    assert "InvalidApiKey" in run.stderr and "the API key is not valid" in run.stderr
    assert "FUSEFORGE_API_KEY" in run.stderr
    assert server.received[0].headers["authorization"] == "Bearer wrong"


def test_output_without_wait_is_bad_usage(cnn: str, tmp_path: Path) -> None:
    run = _submit(cnn, "--output", str(tmp_path), url="http://127.0.0.1:9")
    assert run.returncode == 3 and "--output needs --wait" in run.stderr


def test_a_model_with_its_data_files_goes_up_as_one_set_and_its_job_succeeds(
    base_url: str, tmp_path: Path,
) -> None:
    model = saved_with_external_data(
        tmp_path / "blocks", block_stack(2, hidden=32, seed=uuid.uuid4().int % 1000),
        location="weights/blocks.bin")
    run = _submit(str(model), "--backend", "onnxruntime", "--config", _config(tmp_path, FAST),
                  "--wait", "--json", url=base_url)

    assert run.returncode == 0, run.stderr
    assert "upload model.onnx and 1 data file(s)" in run.stderr and "100%" in run.stderr
    job = json.loads(run.stdout)
    assert job["status"] == "succeeded" and job["validation"]["passed"] is True
    external = httpx.get(f"{base_url}/v1/models/{job['model_id']}").json()["external_data"]
    assert [f["location"] for f in external["files"]] == ["weights/blocks.bin"]


def test_a_model_whose_data_file_is_missing_exits_3_before_the_upload(
    base_url: str, tmp_path: Path,
) -> None:
    model = saved_with_external_data(tmp_path / "blocks")
    (tmp_path / "blocks" / DATA_FILE).unlink()
    run = _submit(str(model), url=base_url)
    assert run.returncode == 3, run.stderr
    assert f"stores weights in {DATA_FILE!r}, which is not in" in run.stderr
