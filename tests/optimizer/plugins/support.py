"""Helpers for plugin tests: a model holding one fuseforge node, and running models in ORT."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from optimizer.plugins import DOMAIN, OPSET_VERSION, Plugin, decompose_for_onnxruntime
from optimizer.testing.passes import run_model

__all__ = ["ONNX_TYPES", "kernel_parameters", "plugin_model", "run_decomposed"]

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
