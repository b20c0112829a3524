"""upgrade_opset_for_layer_norm: a model at opset 11-16 goes to opset 17 when its LayerNorms
would then fuse, so both backends get LayerNormalization-17 (see the module for why no other
form serves)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from optimizer.errors import InvalidModelError
from optimizer.fusion_report import FusionReport
from optimizer.model_check import check_model_file
from optimizer.passes import DEFAULT_PASSES
from optimizer.passes.base import FusionPass
from optimizer.passes.engine import run_passes
from optimizer.passes.fuse_layer_norm import FUSE_LAYER_NORM
from optimizer.passes.upgrade_opset_for_layer_norm import UPGRADE_OPSET_FOR_LAYER_NORM
from optimizer.plugins import decompose_for_onnxruntime
from optimizer.testing.norm_models import layer_norm
from optimizer.testing.passes import (
    assert_outputs_close,
    op_types,
    random_inputs,
    run_model,
    tensorrt_passes,
)
from optimizer.testing.real_models import bert_encoder

UPGRADE = UPGRADE_OPSET_FOR_LAYER_NORM.name
PASSES = [UPGRADE_OPSET_FOR_LAYER_NORM, FUSE_LAYER_NORM]


def optimize(model: onnx.ModelProto, backend: str,
             passes: Sequence[FusionPass] = PASSES) -> tuple[onnx.ModelProto, FusionReport]:
    ir_model = ir.from_proto(model)
    report = run_passes(ir_model, passes, backend=backend)
    fused = ir.to_proto(ir_model)
    onnx.checker.check_model(fused, full_check=True)  # what FuseForge's own model check runs
    return fused, report


def opset_of(model: onnx.ModelProto) -> int:
    [version] = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    return version


def randomized(opset: int, seed: int) -> onnx.ModelProto:
    """A LayerNorm with random gamma, beta and epsilon, axes as the opset writes them."""
    return layer_norm(opset=opset, seed=seed, epsilon=float(np.random.default_rng(seed)
                                                             .uniform(1e-6, 1e-2)))


@pytest.mark.parametrize("backend", ["onnxruntime", "tensorrt"])
@pytest.mark.parametrize("opset", [11, 12, 13, 14, 15, 16])
def test_layer_norm_below_opset_17_fuses_after_the_upgrade(backend: str, opset: int) -> None:
    model = randomized(opset, seed=opset)
    fused, report = optimize(model, backend)
    assert report.applied(UPGRADE) == 1 and report.applied("FuseLayerNorm") == 1, report
    assert op_types(fused) == ["LayerNormalization", "Identity"]
    # LayerNormalization-17: what ONNX Runtime, TensorRT's parser and the ONNX checker all take.
    assert opset_of(fused) == 17
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)
    assert any(f"from opset {opset} to 17" in note for note in report.notes), report.notes


@pytest.mark.parametrize("backend", ["onnxruntime", "tensorrt"])
def test_layer_norm_at_opset_18_with_axes_as_input_needs_no_upgrade(backend: str) -> None:
    model = randomized(18, seed=18)
    fused, report = optimize(model, backend)
    assert report.applied(UPGRADE) == 0 and report.applied("FuseLayerNorm") == 1
    assert op_types(fused) == ["LayerNormalization", "Identity"] and opset_of(fused) == 18
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_fused_model_runs_in_onnxruntime_at_every_optimization_level() -> None:
    model = randomized(13, seed=1)
    fused, _ = optimize(model, "onnxruntime")
    feeds = random_inputs(model)
    [want] = run_model(model, feeds)
    for level in (ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                  ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        session = ort.InferenceSession(fused.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(session.run(None, feeds)[0], want, atol=1e-5, rtol=1e-4)


def old_export(opset: int, seed: int = 0) -> onnx.ModelProto:
    """LayerNorm amid the ops whose signatures changed between opset 11 and 17.

    x [2, 6, 16] → Softmax(axis=1) (semantics change at 13) → Split(axis=2, split attribute,
    an input from 13) → Unsqueeze / Squeeze (axes attribute, an input from 13) → LayerNorm
    (ReduceMean axes attribute) → ReduceSum(axes attribute, an input from 13) → Concat.
    """
    rng = np.random.default_rng(seed)
    hidden = 8
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, hidden).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "beta"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "eps")]
    axes_13 = opset >= 13

    def axes_node(op: str, src: str, dst: str, axes: list[int], **attrs: int) -> onnx.NodeProto:
        if axes_13:
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), f"{dst}_axes"))
            return helper.make_node(op, [src, f"{dst}_axes"], [dst], **attrs)
        return helper.make_node(op, [src], [dst], axes=axes, **attrs)

    if axes_13:
        inits.append(numpy_helper.from_array(np.array([hidden, hidden], np.int64), "split"))
        split = helper.make_node("Split", ["probs", "split"], ["a", "b"], axis=2)
    else:
        split = helper.make_node("Split", ["probs"], ["a", "b"], axis=2, split=[hidden, hidden])
    nodes = [
        helper.make_node("Softmax", ["x"], ["probs"], axis=1),
        split,
        axes_node("Unsqueeze", "a", "a4", [0]),
        axes_node("Squeeze", "a4", "a3", [0]),
        helper.make_node("ReduceMean", ["a3"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["a3", "mean"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["var_eps"]),
        helper.make_node("Sqrt", ["var_eps"], ["std"]),
        helper.make_node("Div", ["d", "std"], ["normalized"]),
        helper.make_node("Mul", ["normalized", "gamma"], ["scaled"]),
        helper.make_node("Add", ["scaled", "beta"], ["ln"]),
        axes_node("ReduceSum", "b", "b_sum", [1], keepdims=1),
        helper.make_node("Concat", ["ln", "b_sum"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "old_export", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("opset", [11, 12, 13, 14, 15, 16])
def test_the_conversion_is_exact_for_ops_whose_signature_changed(opset: int) -> None:
    model = old_export(opset, seed=opset)
    fused, report = optimize(model, "onnxruntime")
    assert report.applied(UPGRADE) == 1 and report.applied("FuseLayerNorm") == 1, report
    assert "LayerNormalization" in op_types(fused)
    feeds = random_inputs(model, seed=opset)
    for want, got in zip(run_model(model, feeds), run_model(fused, feeds), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("opset", "ir_version"), [(11, 6), (13, 7)])
def test_the_converted_model_gets_opset_17s_ir_version(opset: int, ir_version: int) -> None:
    model = layer_norm(opset=opset)
    model.ir_version = ir_version  # what older exporters stamp
    fused, report = optimize(model, "onnxruntime")
    assert report.applied(UPGRADE) == 1 and fused.ir_version == 8
    assert_outputs_close(model, fused, atol=1e-5, rtol=1e-4)


def test_a_model_without_a_layer_norm_keeps_its_opset() -> None:
    model = layer_norm(opset=13, exponent=3.0)  # a cube: not a LayerNorm
    fused, report = optimize(model, "onnxruntime")
    assert report.applied(UPGRADE) == 0 and opset_of(fused) == 13
    assert not any(UPGRADE in note for note in report.notes)


def test_a_model_with_local_functions_is_left_at_its_opset_and_the_report_says_why() -> None:
    model = layer_norm(opset=13)
    function = helper.make_function("local", "Twice", ["t"], ["u"],
                                    [helper.make_node("Add", ["t", "t"], ["u"])],
                                    opset_imports=[helper.make_opsetid("", 13)])
    model.functions.append(function)
    model.opset_import.append(helper.make_opsetid("local", 1))
    fused, report = optimize(model, "tensorrt")
    assert report.applied(UPGRADE) == 0 and opset_of(fused) == 13
    assert "LayerNormalization" not in op_types(fused)
    assert any("local function" in note for note in report.notes), report.notes
    [stats] = [s for s in report.rules if s.rule == "FuseLayerNorm"]
    assert any("was not converted" in r.reason and "local function" in r.reason
               for r in stats.refusals), stats


def test_fuse_layer_norm_alone_names_the_upgrade_pass() -> None:
    model = layer_norm(opset=13)
    _, report = optimize(model, "onnxruntime", passes=[FUSE_LAYER_NORM])
    [stats] = [s for s in report.rules if s.rule == "FuseLayerNorm"]
    assert any("opset 13" in r.reason and UPGRADE in r.reason and "not among this run" in r.reason
               for r in stats.refusals), stats


def test_a_layer_norm_that_cannot_fuse_at_any_opset_is_refused_for_its_own_reason() -> None:
    """A Paddle2ONNX recognizer at opset 12 with a dynamic width: the upgrade found no LayerNorm
    it would fuse, so the refusal names what blocks it, not the opset (nor a pass as not run)."""
    model = layer_norm(opset=12, infer_shapes=False)
    model.graph.input[0].type.tensor_type.shape.dim[-1].dim_param = "hidden"
    fused, report = optimize(model, "tensorrt")
    assert report.applied(UPGRADE) == 0 and opset_of(fused) == 12
    [stats] = [s for s in report.rules if s.rule == "FuseLayerNorm"]
    assert stats.refusals and all("opset" not in r.reason and "not run" not in r.reason
                                  for r in stats.refusals), stats
    assert any("not static" in r.reason or "unknown" in r.reason for r in stats.refusals), stats


def test_the_upgrade_runs_right_before_fuse_layer_norm() -> None:
    names = [p.name for p in DEFAULT_PASSES]
    assert names.index(UPGRADE) + 1 == names.index(FUSE_LAYER_NORM.name)


def test_opsets_below_11_are_left_alone_and_the_report_says_why() -> None:
    model = layer_norm(opset=10)
    fused, report = optimize(model, "onnxruntime")
    assert report.applied(UPGRADE) == 0 and opset_of(fused) == 10
    [stats] = [s for s in report.rules if s.rule == "FuseLayerNorm"]
    assert any("opset 10 is below 11" in r.reason for r in stats.refusals), stats


def torch_export_at_opset_13(layers: int) -> onnx.ModelProto:
    """bert_encoder's TorchScript form (opset 17) as opset 13 writes it: every op it uses has
    the same signature at 13 except Reshape, whose allowzero (0 = the default) came in 14."""
    model = bert_encoder(layers=layers, hidden=64, heads=2, seq=16, form="torchscript")
    [default] = [o for o in model.opset_import if o.domain == ""]
    default.version = 13
    for node in model.graph.node:
        kept = [a for a in node.attribute if not (a.name == "allowzero" and a.i == 0)]
        del node.attribute[:]
        node.attribute.extend(kept)
    onnx.checker.check_model(model, full_check=True)
    return model


@pytest.mark.parametrize(("backend", "layer_norm_ops"), [
    ("onnxruntime", {"LayerNormalization", "com.microsoft.SkipLayerNormalization"}),
    ("tensorrt", {"fuseforge.SkipLayerNorm"})])
def test_bert_at_opset_13_gets_every_layer_norm_fused(backend: str,
                                                      layer_norm_ops: set[str]) -> None:
    layers = 2
    model = torch_export_at_opset_13(layers)
    passes = DEFAULT_PASSES if backend == "onnxruntime" else tensorrt_passes()
    fused, report = optimize(model, backend, passes=passes)
    assert report.applied(UPGRADE) == 1 and opset_of(fused) == 17
    ops = op_types(fused)
    assert sum(ops.count(op) for op in layer_norm_ops) == 2 * layers + 1, report
    assert not {"ReduceMean", "Sqrt"} & set(ops)
    feeds = random_inputs(model)
    feeds["input_ids"] = np.random.default_rng(0).integers(0, 1000, (1, 16))
    [want] = run_model(model, feeds)
    [got] = run_model(decompose_for_onnxruntime(fused), feeds)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("opset", [11, 13, 16])
def test_why_not_onnx_runtimes_own_layer_norm_below_17(opset: int, tmp_path: Path) -> None:
    """The facts behind the conversion: ONNX Runtime runs a default-domain LayerNormalization
    below 17 (its contrib kernel, registered for versions 1-16), but FuseForge's own model check
    refuses such a model, and com.microsoft has no LayerNormalization."""
    model = layer_norm(opset=opset)
    fused, _ = optimize(model, "onnxruntime")
    node = next(n for n in fused.graph.node if n.op_type == "LayerNormalization")
    graph = helper.make_graph([node, *fused.graph.node[1:]], "below_17", list(fused.graph.input),
                              list(fused.graph.output), list(fused.graph.initializer))
    below = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    below.ir_version = 8
    assert_outputs_close(model, below, atol=1e-5, rtol=1e-4)  # ORT takes it ...
    path = tmp_path / "below_17.onnx"
    onnx.save(below, path)
    with pytest.raises(InvalidModelError, match="No Op registered for LayerNormalization"):
        check_model_file(path)  # ... FuseForge's upload and `fuseforge validate` checks do not
    microsoft = [s for s in ort.capi.onnxruntime_pybind11_state.get_all_operator_schema()
                 if s.name == "LayerNormalization" and s.domain == "com.microsoft"]
    assert microsoft == []
