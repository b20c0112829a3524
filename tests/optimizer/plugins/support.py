"""Helpers for plugin tests: a model holding one fuseforge node, a chain of two, and running
models in ORT."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from optimizer.plugins import DOMAIN, OPSET_VERSION, PLUGINS, Plugin, decompose_for_onnxruntime
from optimizer.testing.passes import run_model

__all__ = [
    "ONNX_TYPES", "kernel_parameters", "plugin_chain", "plugin_chain_output", "plugin_model",
    "run_decomposed",
]

_GELU = PLUGINS["bias_gelu"]
_SKIP_LN = PLUGINS["skip_layer_norm"]
ONNX_TYPES = {np.dtype(np.float32): onnx.TensorProto.FLOAT,
              np.dtype(np.float16): onnx.TensorProto.FLOAT16}


def plugin_model(plugin: Plugin, inputs: Mapping[str, np.ndarray],
                 attributes: Mapping[str, float | int | str], *, outputs: int = 1,
                 constants: Sequence[str] = (), opset: int = 17,
                 infer_shapes: bool = True) -> onnx.ModelProto:
    """A model whose graph is one `plugin` node: `inputs` in the op's order (graph inputs, or
    initializers for the names in `constants`), the first `outputs` outputs."""
    graph_inputs, initializers = [], []
    for name, array in inputs.items():
        if name in constants:
            initializers.append(numpy_helper.from_array(array, name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                name, ONNX_TYPES[array.dtype], list(array.shape)))
    output_names = [p.name for p in plugin.outputs[:outputs]]
    node = helper.make_node(plugin.op_type, list(inputs), output_names, name="plugin",
                            domain=DOMAIN, **plugin.node_attributes(**attributes))
    graph = helper.make_graph(
        [node], plugin.name, graph_inputs,
        [helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None)
         for name in output_names],
        initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(DOMAIN, OPSET_VERSION)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model, strict_mode=True) if infer_shapes else model


def run_decomposed(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Decompose the plugin nodes, check the result, and run it in ONNX Runtime."""
    decomposed = decompose_for_onnxruntime(model)
    onnx.checker.check_model(decomposed, full_check=True)
    return run_model(decomposed, feeds)


def kernel_parameters(kernel_source: str, name: str) -> tuple[list[str], list[str]]:
    """(runtime parameters, constexpr parameters) of Triton kernel `name`, read from source."""
    [function] = [n for n in ast.walk(ast.parse(kernel_source))
                  if isinstance(n, ast.FunctionDef) and n.name == name]
    runtime, constexprs = [], []
    for arg in function.args.args:
        is_constexpr = arg.annotation is not None and ast.unparse(arg.annotation) == "tl.constexpr"
        (constexprs if is_constexpr else runtime).append(arg.arg)
    return runtime, constexprs


def plugin_chain() -> onnx.ModelProto:
    """x → BiasGelu → SkipLayerNorm(·, x) → y, plus a value named like decomposition's own names."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), n)
             for n in ("b", "gamma", "beta", "bias")]
    nodes = [
        helper.make_node("Relu", ["x"], ["plugin/decomposed/Add_0_out0"]),  # a clashing name
        helper.make_node("BiasGelu", ["plugin/decomposed/Add_0_out0", "b"], ["h"], name="plugin",
                         domain=DOMAIN, **_GELU.node_attributes(approximate="none")),
        helper.make_node("SkipLayerNorm", ["h", "x", "gamma", "beta", "bias"], ["y"],
                         name="plugin_2", domain=DOMAIN,
                         **_SKIP_LN.node_attributes(epsilon=1e-5)),
    ]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 8])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(DOMAIN, 1)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def plugin_chain_output(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """What plugin_chain() computes for input `x`, from the plugins' reference implementations."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    [h] = _GELU.reference(np.maximum(x, 0), inits["b"], approximate="none")
    return _SKIP_LN.reference(h, x, inits["gamma"], inits["beta"], inits["bias"],
                             epsilon=1e-5)[0]
