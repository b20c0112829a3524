"""Stage `load`: model.static.onnx at the job's shapes for every job, and model.profiled.onnx
with the profiled axes left dynamic for a job with optimization profiles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from optimizer.errors import InferenceError, InputShapeError
from optimizer.testing.models import IR_VERSION, declared_dims, small_cnn, token_embedding
from optimizer.testing.passes import run_model
from optimizer.testing.shape_models import lstm_in_a_loop, lstm_in_nested_ifs, strided_convnet
from optimizer.testing.token_models import masked_token_attention
from tests.support.embedded_worker import job_run
from worker.pipeline.steps.load import load_model


def _token_model() -> onnx.ModelProto:
    """ids int64 [batch, seq] and mask float32 [batch, seq] -> embedding(ids) * mask."""
    return token_embedding(["batch", "seq"], ["batch", "seq"], ["batch", "seq", 4], seed=11)


_dims = declared_dims


def test_a_job_without_profiles_gets_only_the_static_model(tmp_path: Path) -> None:
    run = job_run(tmp_path, small_cnn(), {"input_shapes": {"input": [4, 3, 32, 32]}})

    loaded = load_model(run)

    assert loaded.static_path == run.scratch_dir / "model.static.onnx"
    assert loaded.profiled_path is None
    assert not (run.scratch_dir / "model.profiled.onnx").exists()
    assert loaded.input_shapes == {"input": (4, 3, 32, 32)}


def test_a_profiled_batch_stays_dynamic_in_the_profiled_model_only(tmp_path: Path) -> None:
    profile = {"min": [1, 3, 32, 32], "opt": [4, 3, 32, 32], "max": [16, 3, 32, 32]}
    run = job_run(tmp_path, small_cnn(), {"input_shapes": {"input": [4, 3, 32, 32]},
                                       "profiles": {"input": profile}})

    loaded = load_model(run)

    assert loaded.profiled_path == run.scratch_dir / "model.profiled.onnx"
    static = onnx.load(loaded.static_path)
    profiled = onnx.load(loaded.profiled_path)
    assert _dims(static.graph.input[0]) == [4, 3, 32, 32]
    assert _dims(static.graph.output[0]) == [4, 10]
    assert _dims(profiled.graph.input[0]) == ["N", 3, 32, 32]
    assert _dims(profiled.graph.output[0]) == ["N", 10]
    assert loaded.input_shapes == {"input": (4, 3, 32, 32)}
    assert loaded.input_specs[0].shape == (4, 3, 32, 32)  # validation feeds stay at one shape
    assert {feed["input"].shape for feed in loaded.feeds} == {(4, 3, 32, 32)}
    onnx.checker.check_model(profiled, full_check=True)
    rng = np.random.default_rng(3)
    for batch in (1, 16):
        feed = {"input": rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)}
        assert run_model(profiled, feed)[0].shape == (batch, 10)


def test_axes_a_profile_fixes_are_fixed_and_shared_dims_keep_one_name(tmp_path: Path) -> None:
    # batch varies, seq is pinned at 64 by min == max
    profile = {"min": [1, 64], "opt": [2, 64], "max": [8, 64]}
    run = job_run(tmp_path, _token_model(), {
        "input_shapes": {"ids": [2, 64], "mask": [2, 64]},
        "profiles": {"ids": profile, "mask": profile}})

    loaded = load_model(run)

    assert loaded.profiled_path is not None
    profiled = onnx.load(loaded.profiled_path)
    assert [_dims(v) for v in profiled.graph.input] == [["batch", 64], ["batch", 64]]
    assert _dims(profiled.graph.output[0]) == ["batch", 64, 4]


def test_an_input_without_a_profile_is_fixed_at_its_input_shape(tmp_path: Path) -> None:
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Concat", ["a", "b"], ["rows"], axis=0)], "two_rows",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["M", 4])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [None, 4])]),
        opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    run = job_run(tmp_path, model, {
        "input_shapes": {"a": [6, 4], "b": [3, 4]},
        "profiles": {"a": {"min": [1, 4], "opt": [6, 4], "max": [8, 4]}}})

    loaded = load_model(run)

    assert loaded.profiled_path is not None
    profiled = onnx.load(loaded.profiled_path)
    assert [_dims(v) for v in profiled.graph.input] == [["N", 4], [3, 4]]


def test_a_profile_that_no_longer_fits_the_model_fails_the_stage(tmp_path: Path) -> None:
    # The API checks profiles; a stale config (e.g. a replaced model file) still fails clearly.
    run = job_run(tmp_path, small_cnn(), {
        "input_shapes": {"input": [4, 3, 32, 32]},
        "profiles": {"input": {"min": [1, 3, 16, 16], "opt": [4, 3, 32, 32],
                               "max": [16, 3, 32, 32]}}})

    with pytest.raises(InputShapeError, match="axis 2 is fixed at 32 in the model"):
        load_model(run)


def test_a_bert_style_job_draws_its_integer_inputs_in_the_ranges_the_graph_allows(
        tmp_path: Path) -> None:
    run = job_run(tmp_path, masked_token_attention(vocab=30),
               {"input_shapes": {name: [2, 8] for name in
                                 ("input_ids", "token_type_ids", "attention_mask")},
                "input_ranges": {"input_ids": [0, 5]}})

    loaded = load_model(run)

    ranges = {name: (spec.low, spec.high, spec.source)
              for name, spec in loaded.input_ranges.items()}
    assert ranges == {"input_ids": (0, 5, "given"), "token_type_ids": (0, 2, "inferred"),
                      "attention_mask": (0, 2, "inferred")}
    for feed in loaded.feeds:
        assert feed["input_ids"].max() < 5 and feed["token_type_ids"].max() <= 1
        assert set(np.unique(feed["attention_mask"])) <= {0, 1}
        run_model(onnx.load(loaded.static_path), feed)  # the 2-row embedding takes them


def test_a_minus_one_batch_loads_without_input_shapes(tmp_path: Path) -> None:
    run = job_run(tmp_path, strided_convnet([-1, 3, 48, 192]), {})

    loaded = load_model(run)

    assert loaded.input_shapes == {"x": (1, 3, 48, 192)}
    assert _dims(onnx.load(loaded.static_path).graph.input[0]) == [1, 3, 48, 192]


def test_image_dims_at_one_fail_the_load_stage_with_the_shapes_to_send(tmp_path: Path) -> None:
    run = job_run(tmp_path, strided_convnet(["N", 3, "H", "W"]), {})

    with pytest.raises(InputShapeError, match=r'input_shapes: \{"x": \[1, 3, 224, 224\]\}'):
        load_model(run)

    assert not (run.scratch_dir / "model.static.onnx").exists()


_VAD_SHAPES = {"input": [1, 16], "state": [2, 1, 16], "sr": []}
_VAD_RATE = {"sr": [16000, 16001]}  # the rate its main network runs at


def test_an_onnxruntime_engine_keeps_the_dynamic_inputs_of_a_model_it_cannot_load_fixed(
        tmp_path: Path) -> None:
    # Fixed at these shapes, the model's unused 8 kHz Loop body no longer type-checks at level
    # all; as uploaded it loads there, so the engine is fused and built from the upload.
    run = job_run(tmp_path, lstm_in_a_loop(), {
        "backend": "onnxruntime", "ort_optimization_level": "all", "input_shapes": _VAD_SHAPES})

    loaded = load_model(run)

    assert loaded.fusion_source == run.model_path
    assert loaded.inputs_left_dynamic is not None
    assert "level 'all'" in loaded.inputs_left_dynamic
    assert "First input tensor must have rank 3" in loaded.inputs_left_dynamic
    # The reference is still the model at the job's shapes, and it runs.
    static = onnx.load(loaded.static_path)
    assert [_dims(value) for value in static.graph.input] == [[1, 16], [2, 1, 16], []]
    feeds = {"input": np.ones((1, 16), np.float32), "state": np.zeros((2, 1, 16), np.float32),
             "sr": np.array(16000, np.int64)}
    assert run_model(static, feeds)[0].shape == (1, 16)


def test_a_model_whose_unused_if_branch_cannot_run_at_the_jobs_shapes_is_fused_at_them(
        tmp_path: Path) -> None:
    # The same network with the 8 kHz one in an If branch (as silero-vad has it): that branch
    # keeps dynamic shapes, so the model loads fixed and the engine is built at the job's shapes.
    run = job_run(tmp_path, lstm_in_nested_ifs(), {
        "backend": "onnxruntime", "ort_optimization_level": "all", "input_shapes": _VAD_SHAPES,
        "input_ranges": _VAD_RATE})

    loaded = load_model(run)

    assert loaded.inputs_left_dynamic is None
    assert loaded.fusion_source == loaded.static_path
    assert [_dims(value) for value in onnx.load(loaded.static_path).graph.input] == [
        [1, 16], [2, 1, 16], []]


def test_a_model_that_does_not_run_on_made_up_inputs_fails_naming_the_options_that_fix_it(
        tmp_path: Path) -> None:
    # Without a range, the rate input "sr" is drawn from [0, 10): never 16000, so the model
    # runs its 8 kHz network, which cannot take a rank-2 input (silero-vad fails alike). The
    # job's validation would run the original on these very inputs: the load stage says so.
    run = job_run(tmp_path, lstm_in_nested_ifs(), {"backend": "onnxruntime"})

    with pytest.raises(InferenceError) as refused:
        load_model(run)

    message = str(refused.value)
    assert message.startswith("Model 'model.onnx' does not run on the random inputs the job "
                              "made for it (input shapes input=[1, 16], state=[2, 1, 16], sr=[]): ")
    assert "its dynamic dims were set to input=[1, 16] (declared [?, 16])" in message
    assert "(fuseforge submit --input-shape input=D1,D2,...)" in message
    assert "its integer inputs were drawn at random (sr from [0, 10))" in message
    assert "(fuseforge submit --input-range sr=LOW,HIGH)" in message
    assert not (run.scratch_dir / "model.static.onnx").exists()


def test_a_model_that_loads_with_fixed_inputs_is_fused_at_the_jobs_shapes(
        tmp_path: Path) -> None:
    run = job_run(tmp_path, small_cnn(), {"backend": "onnxruntime",
                                       "input_shapes": {"input": [2, 3, 32, 32]}})

    loaded = load_model(run)

    assert loaded.inputs_left_dynamic is None
    assert loaded.fusion_source == loaded.static_path


@pytest.mark.parametrize("config", [{"backend": "tensorrt"},
                                    {"backend": "onnxruntime", "ort_optimization_level": "disabled"}])
def test_a_static_model_loads_where_the_job_runs_it_without_graph_optimizations(
        tmp_path: Path, config: dict[str, Any]) -> None:
    # ONNX Runtime only inlines If branches (and so only type-checks the unused one at the
    # fixed shapes) when it optimizes the graph.
    run = job_run(tmp_path, lstm_in_nested_ifs(), {**config, "input_shapes": _VAD_SHAPES,
                                                   "input_ranges": _VAD_RATE})

    loaded = load_model(run)

    feeds = {"input": np.ones((1, 16), np.float32), "state": np.zeros((2, 1, 16), np.float32),
             "sr": np.array(16000, np.int64)}
    assert run_model(onnx.load(loaded.static_path), feeds)[0].shape == (1, 16)
