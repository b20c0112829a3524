"""Check a fusion pass as its tests do: apply it alone, list the ops, compare outputs in onnxruntime."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort

from optimizer.fusion_report import FusionReport
from optimizer.passes import DEFAULT_PASSES
from optimizer.passes.base import FusionPass
from optimizer.passes.engine import run_passes
from optimizer.passes.fuse_layer_norm import FUSE_LAYER_NORM
from optimizer.passes.fuse_to_plugins import FUSE_TO_PLUGINS
from optimizer.registries.backends import DEFAULT_BACKEND

__all__ = [
    "apply_pass", "assert_outputs_close", "op_types", "random_inputs", "run_model", "tensorrt_passes",
]


def apply_pass(
    model: onnx.ModelProto, fusion_pass: FusionPass, *, backend: str = DEFAULT_BACKEND,
    expect_count: int | None = None,
) -> tuple[onnx.ModelProto, FusionReport]:
    """Run one pass on a copy of `model`; check it fired `expect_count` times when given."""
    ir_model = ir.from_proto(model)
    report = run_passes(ir_model, [fusion_pass], backend=backend)
    fused = ir.to_proto(ir_model)
    if expect_count is not None:
        assert report.applied(fusion_pass.name) == expect_count, report
    onnx.checker.check_model(fused, full_check=True)
    return fused, report


def op_types(model: onnx.ModelProto) -> list[str]:
    """The main graph's ops in order, "domain.Op" outside the default domain."""
    return [n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
            for n in model.graph.node]


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for every graph input (static shapes required)."""
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        shape = [d.dim_value for d in tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[value.name] = rng.integers(0, 4, shape).astype(dtype)
    return feeds


def run_model(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run in onnxruntime with its own graph optimizations off, so only our rewrite is tested."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    outputs: list[np.ndarray] = session.run(None, dict(feeds))
    return outputs


def assert_outputs_close(original: onnx.ModelProto, fused: onnx.ModelProto, *, atol: float,
                         rtol: float, seed: int = 0) -> None:
    feeds = random_inputs(original, seed)
    expected, actual = run_model(original, feeds), run_model(fused, feeds)
    assert len(expected) == len(actual)
    for want, got in zip(expected, actual, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)


def tensorrt_passes() -> list[FusionPass]:
    """DEFAULT_PASSES with FUSE_TO_PLUGINS right after FUSE_LAYER_NORM (the order wired in)."""
    passes = [p for p in DEFAULT_PASSES if p is not FUSE_TO_PLUGINS]
    at = passes.index(FUSE_LAYER_NORM) + 1
    return [*passes[:at], FUSE_TO_PLUGINS, *passes[at:]]
