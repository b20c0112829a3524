"""TensorRT optimization profiles in the job config: checked against the model's inputs (422
naming `profiles.<input>`), stored exactly as resolved, and the job run at the profile's `opt`
shape where nothing else sets the input's shape."""

import uuid
from typing import Any

import numpy as np
import onnx
import pytest
import redis
from fastapi.testclient import TestClient
from onnx import TensorProto, helper, numpy_helper
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.db.models import Job
from optimizer.testing.models import IR_VERSION, model_bytes, small_cnn
from tests.support.npz_files import npz_bytes

# small_cnn: "input" [N, 3, 32, 32]
CNN_PROFILE = {"min": [1, 3, 32, 32], "opt": [4, 3, 32, 32], "max": [16, 3, 32, 32]}


def _upload(client: TestClient, model: onnx.ModelProto) -> str:
    response = client.post("/v1/models", files={"file": ("model.onnx", model_bytes(model))})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _token_model() -> onnx.ModelProto:
    """ids int64 [batch, seq] and mask float32 [batch, seq] -> embedding(ids) * mask."""
    table = np.random.default_rng(5).standard_normal((16, 4)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["embedded"]),
            helper.make_node("Unsqueeze", ["mask", "last"], ["mask3"]),
            helper.make_node("Mul", ["embedded", "mask3"], ["out"]),
        ],
        "tokens",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "seq", 4])],
        initializer=[
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(np.array([-1], np.int64), "last"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def _two_rows_model() -> onnx.ModelProto:
    """rows "a" [N, 4] and "b" [M, 4] (dims not shared) -> Concat on axis 0, [N + M, 4]."""
    graph = helper.make_graph(
        [helper.make_node("Concat", ["a", "b"], ["rows"], axis=0)],
        "two_rows",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["M", 4])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [None, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


@pytest.fixture
def cnn_id(client: TestClient) -> str:
    return _upload(client, small_cnn())


def _create(client: TestClient, model_id: str, **config: Any) -> Any:
    return client.post("/v1/jobs", json={"model_id": model_id, "backend": "tensorrt", **config})


def _assert_no_job(db_session: Session, broker: redis.Redis) -> None:
    assert db_session.scalar(select(func.count()).select_from(Job)) == 0
    assert broker.llen("gpu") == 0 and broker.llen("cpu") == 0


def _dataset(client: TestClient, **arrays: np.ndarray) -> str:
    response = client.post("/v1/datasets", files={"file": ("data.npz", npz_bytes(**arrays))})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_profiled_input_without_a_shape_runs_at_opt_and_the_profile_is_stored(
    client: TestClient, cnn_id: str
) -> None:
    response = _create(client, cnn_id, profiles={"input": CNN_PROFILE})

    assert response.status_code == 202, response.text
    config = response.json()["config"]
    assert config["input_shapes"] == {"input": [4, 3, 32, 32]}
    assert config["profiles"] == {"input": CNN_PROFILE}
    read = client.get(f"/v1/jobs/{response.json()['id']}").json()["config"]
    assert read["profiles"] == {"input": CNN_PROFILE}
    assert read["input_shapes"] == {"input": [4, 3, 32, 32]}


def test_given_input_shape_within_the_profile_is_kept(client: TestClient, cnn_id: str) -> None:
    response = _create(client, cnn_id, profiles={"input": CNN_PROFILE},
                       input_shapes={"input": [16, 3, 32, 32]})

    assert response.status_code == 202, response.text
    assert response.json()["config"]["input_shapes"] == {"input": [16, 3, 32, 32]}


def test_inputs_left_out_of_profiles_stay_out_and_keep_their_shapes(client: TestClient) -> None:
    model_id = _upload(client, _two_rows_model())
    profile = {"min": [1, 4], "opt": [6, 4], "max": [8, 4]}

    response = _create(client, model_id, profiles={"a": profile},
                       input_shapes={"b": [3, 4]})

    assert response.status_code == 202, response.text
    config = response.json()["config"]
    assert config["profiles"] == {"a": profile}
    assert config["input_shapes"] == {"a": [6, 4], "b": [3, 4]}


def test_shared_dims_with_one_range_in_every_input_are_accepted(client: TestClient) -> None:
    model_id = _upload(client, _token_model())
    profile = {"min": [1, 8], "opt": [2, 64], "max": [8, 128]}

    response = _create(client, model_id, profiles={"mask": profile, "ids": profile})

    assert response.status_code == 202, response.text
    config = response.json()["config"]
    assert list(config["profiles"]) == ["ids", "mask"]  # the model's input order
    assert config["input_shapes"] == {"ids": [2, 64], "mask": [2, 64]}


def test_empty_profiles_are_stored_as_none(client: TestClient, cnn_id: str) -> None:
    response = _create(client, cnn_id, profiles={})

    assert response.status_code == 202, response.text
    assert response.json()["config"]["profiles"] is None
    assert response.json()["config"]["input_shapes"] == {"input": [1, 3, 32, 32]}


def test_dataset_within_the_profile_sets_the_shape_instead_of_opt(
    client: TestClient, cnn_id: str
) -> None:
    samples = np.random.default_rng(1).standard_normal((3, 8, 3, 32, 32)).astype(np.float32)
    dataset_id = _dataset(client, input=samples)

    response = _create(client, cnn_id, profiles={"input": CNN_PROFILE}, dataset_id=dataset_id)

    assert response.status_code == 202, response.text
    assert response.json()["config"]["input_shapes"] == {"input": [8, 3, 32, 32]}


@pytest.mark.parametrize(
    ("profiles", "change", "start", "expected"),
    [
        ({"image": CNN_PROFILE}, {}, "profiles.image:",
         "no input of that name; its inputs are: 'input'"),
        ({"input": {**CNN_PROFILE, "min": [8, 3, 32, 32]}}, {}, "profiles.input:",
         "axis 0: the profile has min 8, opt 4, max 16; give min <= opt <= max"),
        ({"input": {**CNN_PROFILE, "max": [16, 3, 32]}}, {}, "profiles.input:",
         "Optimization profile max: Input 'input' has rank 4"),
        ({"input": {**CNN_PROFILE, "max": [16, 3, 64, 32]}}, {}, "profiles.input:",
         "axis 2 is fixed at 32 in the model"),
        ({"input": CNN_PROFILE}, {"input_shapes": {"input": [32, 3, 32, 32]}}, "profiles.input:",
         "input_shapes sets input 'input' to [32, 3, 32, 32], outside its optimization profile "
         "(min [1, 3, 32, 32], max [16, 3, 32, 32])"),
        ({"input": CNN_PROFILE}, {"backend": "onnxruntime"}, "profiles:",
         "applies to backend 'tensorrt' only; ONNX Runtime accepts any shape the graph allows"),
        ({"input": {"min": [1, 3, 32, 32], "opt": [4, 3, 32, 32]}}, {}, "profiles.input.max:",
         "Field required"),
        ({"input": {**CNN_PROFILE, "best": [4, 3, 32, 32]}}, {}, "profiles.input.best:",
         "Extra inputs are not permitted"),
        ({"input": {**CNN_PROFILE, "min": [0, 3, 32, 32]}}, {}, "profiles.input.min.0:",
         "greater than or equal to 1"),
        ({"input": {**CNN_PROFILE, "min": [True, 3, 32, 32]}}, {}, "profiles.input.min.0:",
         "valid integer"),
    ],
    ids=["unknown-input", "min-above-opt", "rank", "fixed-dim-changed", "shape-outside",
         "onnxruntime-backend", "missing-key", "extra-key", "zero-dim", "bool-dim"],
)
def test_invalid_profiles_are_422_naming_the_input_and_nothing_is_stored(
    client: TestClient, db_session: Session, broker: redis.Redis, cnn_id: str,
    profiles: dict[str, Any], change: dict[str, Any], start: str, expected: str,
) -> None:
    response = _create(client, cnn_id, profiles=profiles, **change)

    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail.startswith(start), detail
    assert expected in detail, detail
    _assert_no_job(db_session, broker)


def test_dataset_outside_the_profile_is_422(
    client: TestClient, db_session: Session, broker: redis.Redis, cnn_id: str
) -> None:
    samples = np.random.default_rng(2).standard_normal((2, 32, 3, 32, 32)).astype(np.float32)
    dataset_id = _dataset(client, input=samples)

    response = _create(client, cnn_id, profiles={"input": CNN_PROFILE}, dataset_id=dataset_id)

    assert response.status_code == 422, response.text
    assert response.json()["error"] == "InvalidJobConfig"
    detail = response.json()["detail"]
    assert detail.startswith(f"profiles.input: dataset {dataset_id}"), detail
    assert "holds samples of shape [32, 3, 32, 32] for input 'input', outside its optimization " \
           "profile (min [1, 3, 32, 32], max [16, 3, 32, 32])" in detail
    _assert_no_job(db_session, broker)


@pytest.mark.parametrize(
    ("profiles", "expected"),
    [
        # mask has no profile, so it is fixed at its default shape [1, 1]
        ({"ids": {"min": [1, 8], "opt": [2, 64], "max": [8, 128]}},
         "profiles.ids: dim 'batch' ranges over min 1, opt 2, max 8 in input 'ids' but is fixed "
         "at 1 (no profile, so its input shape) in input 'mask'"),
        ({"ids": {"min": [1, 8], "opt": [2, 64], "max": [8, 128]},
          "mask": {"min": [1, 8], "opt": [2, 64], "max": [8, 256]}},
         "profiles.mask: dim 'seq' ranges over min 8, opt 64, max 128 in input 'ids' but ranges "
         "over min 8, opt 64, max 256 in input 'mask'"),
    ],
    ids=["one-input-profiled", "different-max"],
)
def test_a_shared_dim_with_different_ranges_is_422(
    client: TestClient, db_session: Session, broker: redis.Redis,
    profiles: dict[str, Any], expected: str,
) -> None:
    model_id = _upload(client, _token_model())

    response = _create(client, model_id, profiles=profiles)

    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(expected), response.json()["detail"]
    _assert_no_job(db_session, broker)


def test_unknown_model_with_profiles_is_still_404(client: TestClient) -> None:
    response = _create(client, str(uuid.uuid4()), profiles={"input": CNN_PROFILE})

    assert response.status_code == 404
