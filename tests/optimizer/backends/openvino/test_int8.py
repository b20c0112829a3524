"""int8 on OpenVINO: NNCF writes the Q/DQ graph from the calibration samples, OpenVINO compiles
it into u8/i8 layers (the IR builder keeps them), the nodes kept in float stay in float, and
the accuracy-budget search judges and times its candidates in OpenVINO itself; importing the
registries and the search loads neither OpenVINO nor NNCF."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest

from optimizer.backends.openvino.build import OvBuildOptions, build_ov_engine
from optimizer.backends.openvino.nncf_quantize import computed_c_split
from optimizer.backends.openvino.node_precision import openvino_node_precisions
from optimizer.errors import QuantizationError
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.precision import run_outputs
from optimizer.quantization.qdq_opset import at_qdq_opset
from optimizer.quantization.quantize import quantize_self_calibrated
from optimizer.quantization.search import (
    QuantizationRequest,
    QuantizationResult,
    quantize_within_budget,
)
from optimizer.registries.backends import BACKENDS, Backend, load_dotted
from optimizer.registries.precisions import Precision
from optimizer.registries.quantization import FLAVOURS, QuantFlavour, QuantizationMode
from optimizer.testing.quantization_models import calibration_images, conv_stack, outlier_channel
from optimizer.validation.tolerances import Tolerances, default_tolerances

Feeds = list[dict[str, np.ndarray]]
OPENVINO = BACKENDS[Backend.OPENVINO]


def _feeds(model: onnx.ModelProto, count: int, seed: int) -> Feeds:
    return [{"input": x} for x in calibration_images(model, count, seed=seed)]


def _graph(model: onnx.ModelProto) -> onnx.ModelProto:
    fused, _ = optimize_model(model, OptimizeOptions(for_quantization=True))
    graph, _ = at_qdq_opset(fused)
    return graph


def _nncf(graph: onnx.ModelProto, feeds: Sequence[dict[str, np.ndarray]], tmp_path: Path, *,
          exclude_nodes: Sequence[str] = (), exclude_op_types: Sequence[str] = ()) -> Path:
    quantized = quantize_self_calibrated(graph, feeds, QuantFlavour.OPENVINO_NNCF,
                                         exclude_nodes=exclude_nodes,
                                         exclude_op_types=exclude_op_types)
    path = tmp_path / "int8.onnx"
    onnx.save(quantized, path)
    return path


def _search(model: onnx.ModelProto, *, tolerances: Tolerances | None = None,
            **request: object) -> QuantizationResult:
    validation, calibration = _feeds(model, 3, seed=99), _feeds(model, 6, seed=1)
    asked = {"mode": QuantizationMode.STATIC, "flavours": OPENVINO.quant_flavours[Precision.INT8],
             "candidate_runner": OPENVINO.candidate_runner, "threads": 1, **request}
    return quantize_within_budget(
        _graph(model), request=QuantizationRequest(**asked),  # type: ignore[arg-type]
        tolerances=tolerances or default_tolerances("int8"), validation_feeds=validation,
        reference=run_outputs(model, validation), calibration_feeds=calibration,
        tables=lambda method, graph: pytest.fail("NNCF calibrates itself: no table"))


def test_nncf_writes_a_qdq_model_that_the_ir_keeps_and_openvino_runs_in_int8(
        tmp_path: Path) -> None:
    model = conv_stack(seed=3, size=16, blocks=2)
    graph = _graph(model)

    path = _nncf(graph, _feeds(model, 4, seed=1), tmp_path)
    engine = build_ov_engine(path, tmp_path / "engine", input_shapes={},
                             options=OvBuildOptions(precision=Precision.INT8, threads=1))

    ops = {node.op_type for node in onnx.load(path).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops
    manifest = json.loads(engine.manifest_path.read_text())
    assert manifest["inference_precision"] == "f32"  # the float remainder, as judged
    assert manifest["engine_model"]["op_histogram"]["FakeQuantize"] > 0
    assert manifest["runtime_precisions"].get("u8", 0) + manifest["runtime_precisions"].get(
        "i8", 0) > 0
    report = openvino_node_precisions(graph, path)
    convs = [node for node in report.nodes if node.op_type == "Conv"]
    assert len(convs) == 5 and all(node.precision == "int8" for node in convs), convs
    assert report.kernels["int8"] >= len(convs)


def test_nodes_and_op_types_kept_in_float_stay_in_float_in_openvino(tmp_path: Path) -> None:
    model = conv_stack(seed=4, size=16, blocks=2)
    graph = _graph(model)
    convs = [node.name for node in graph.graph.node if node.op_type == "Conv"]

    path = _nncf(graph, _feeds(model, 4, seed=1), tmp_path, exclude_nodes=[convs[1]],
                 exclude_op_types=["Gemm"])
    report = openvino_node_precisions(graph, path, kept={convs[1]: "kept by the test"})

    precision = {node.name: node for node in report.nodes}
    assert precision[convs[1]].precision == "float"
    assert precision[convs[1]].reason == "kept by the test"
    assert [precision[name].precision for name in convs if name != convs[1]] == ["int8"] * 4
    [gemm] = [node for node in report.nodes if node.op_type == "Gemm"]
    assert gemm.precision == "float" and gemm.reason is not None
    assert "f32" in gemm.reason


def _computed_bias_mlp(seed: int) -> onnx.ModelProto:
    """input [1, 64] -> Gemm (its bias an Add of two constants, as a fused graph may hold) ->
    Relu -> Gemm -> output [1, 10]."""
    rng = np.random.default_rng(seed)

    def tensor(name: str, shape: tuple[int, ...], scale: float) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)

    nodes = [onnx.helper.make_node("Add", ["bias.a", "bias.b"], ["bias"], name="bias_sum"),
             onnx.helper.make_node("Gemm", ["input", "w1", "bias"], ["hidden"], name="fc1"),
             onnx.helper.make_node("Relu", ["hidden"], ["relu"], name="relu"),
             onnx.helper.make_node("Gemm", ["relu", "w2", "b2"], ["output"], name="fc2")]
    graph = onnx.helper.make_graph(
        nodes, "computed_bias",
        [onnx.helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 64])],
        [onnx.helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, [1, 10])],
        [tensor("w1", (64, 64), 0.2), tensor("bias.a", (64,), 0.1), tensor("bias.b", (64,), 0.1),
         tensor("w2", (64, 10), 0.2), tensor("b2", (10,), 0.1)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_a_gemm_whose_c_is_computed_is_split_for_nncf_and_keeps_its_outputs(
        tmp_path: Path) -> None:
    # NNCF 3.4's bias correction raises on it ("There is no tensor with the name None").
    model = _computed_bias_mlp(seed=2)
    feeds = [{"input": np.random.default_rng(s).standard_normal((1, 64)).astype(np.float32)}
             for s in range(4)]

    split = computed_c_split(model)
    quantized = quantize_self_calibrated(model, feeds, QuantFlavour.OPENVINO_NNCF)

    assert [node.name for node in model.graph.node] == ["bias_sum", "fc1", "relu", "fc2"]
    assert [(node.name, list(node.input)) for node in split.graph.node][1:3] == [
        ("fc1", ["input", "w1"]), ("fc1/add_c", ["hidden/gemm_without_c", "bias"])]
    np.testing.assert_allclose(run_outputs(split, feeds)[0]["output"],
                               run_outputs(model, feeds)[0]["output"], rtol=1e-5, atol=1e-5)
    assert sum(node.op_type == "QuantizeLinear" for node in quantized.graph.node) > 0
    assert "fc1/add_c" in {node.name for node in quantized.graph.node}


def test_the_search_ships_nncf_int8_judged_and_timed_in_openvino() -> None:
    result = _search(conv_stack(seed=3))

    assert result.shipped == "int8", result.why
    assert result.chosen is not None and result.chosen["flavour"] == "openvino-nncf"
    assert result.chosen["method"] is None  # NNCF's own statistics, no table of ours
    assert result.calibrations == [{"method": "openvino-nncf (its own statistics)",
                                    "samples": 6}]
    assert result.validation is not None and result.validation.passed
    assert result.speed is not None and result.timed_threads == 1
    assert not any(c["label"] == "dynamic" for c in result.tried)


def test_a_node_int8_ruins_is_kept_in_float_through_nncfs_ignored_scope() -> None:
    strict = Tolerances(atol=math.inf, rtol=0.0, min_cosine=0.999)

    # Untimed: on a CPU without VNNI int8 may time slower and stop the search before it keeps
    # anything (the early stop has its own test); this one is of the ignored scope.
    result = _search(outlier_channel(seed=5), tolerances=strict, time_candidates=False)

    assert result.tried[0]["passed"] is False and result.tried[0]["worst_cosine"] < 0.999
    assert result.kept_nodes and result.kept_nodes[-1].worst_cosine_after >= 0.999
    assert "kept in float by the accuracy search" in result.kept_reasons[
        result.kept_nodes[0].name]
    assert result.why  # int8 within budget ships only when faster; either way it says which


def test_int8_out_of_budget_on_openvino_ships_fp32_and_says_why() -> None:
    strict = Tolerances(atol=math.inf, rtol=0.0, min_cosine=0.999)

    result = _search(outlier_channel(seed=5), tolerances=strict, max_kept_nodes=0)

    assert result.shipped == "fp32" and result.model is None
    assert result.why.startswith("no int8 form met the accuracy budget"), result.why
    assert "static openvino-nncf" in result.why and result.why.endswith("the fp32 model ships")


def test_dynamic_quantization_is_refused_for_a_flavour_without_a_dynamic_form() -> None:
    assert not FLAVOURS[QuantFlavour.OPENVINO_NNCF].runs_dynamic_form
    with pytest.raises(QuantizationError, match="ask for mode static or auto"):
        _search(conv_stack(seed=1, size=16, blocks=1), mode=QuantizationMode.DYNAMIC)


def test_openvinos_spec_names_its_int8_flavour_runner_and_node_report() -> None:
    assert Precision.INT8 in OPENVINO.precisions
    assert OPENVINO.quant_flavours[Precision.INT8] == (QuantFlavour.OPENVINO_NNCF,)
    assert OPENVINO.times_quantized_candidates and not OPENVINO.ort_runs_engines
    assert FLAVOURS[QuantFlavour.OPENVINO_NNCF].calibrates_itself
    for path in (OPENVINO.candidate_runner, OPENVINO.node_precisions,
                 FLAVOURS[QuantFlavour.OPENVINO_NNCF].quantizer):
        assert path is not None and callable(load_dotted(path))


def test_the_registries_and_the_search_import_without_openvino_or_nncf() -> None:
    code = ("import sys, optimizer.registries.backends, optimizer.registries.quantization, "
            "optimizer.quantization.search, optimizer.quantization.quantize; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('openvino', 'nncf')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]"
