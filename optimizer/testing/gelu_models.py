"""GELU written out (erf or tanh form, every spelling torch's exporters produce), with an
optional bias Add before it, for the pass and plugin tests and bench/."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

from optimizer.testing.models import IR_VERSION, NP_TO_ONNX

__all__ = ["PRODUCTS", "gelu"]

# The six ways to write x · half · s as two Muls (s is 1 + Erf or 1 + Tanh), as `product` spells them.
PRODUCTS = ["x*(half*s)", "(x*half)*s", "(half*x)*s", "s*(x*half)", "half*(x*s)", "(s*x)*half"]


def gelu(
    *, form: str = "erf", dtype: type = np.float32, shape: tuple[int, ...] = (2, 3, 16),
    opset: int = 18, scaling: str = "div", cube: str = "pow", product: str = "x*(half*s)",
    one_first: bool = False, half: float = 0.5, one: float = 1.0, cubic: float = 0.044715,
    sqrt_2_over_pi: float = math.sqrt(2 / math.pi), root_two: float = math.sqrt(2.0),
    bias: str | None = None, half_as_input: bool = False, erf_used_elsewhere: bool = False,
    scaled_is_output: bool = False, bias_used_elsewhere: bool = False, seed: int = 0,
) -> onnx.ModelProto:
    """x → [Add(bias)] → GELU written out → y.

    Defaults follow torch's dynamo exporter at opset 18 for nn.GELU(): Div(x, √2) → Erf →
    Add(·, 1) → Mul(0.5, ·) → Mul(x, ·); for nn.GELU("tanh"): Pow(x, 3) → Mul(0.044715, ·) →
    Add(x, ·) → Mul(√(2/π), ·) → Tanh → Add(·, 1) → Mul(0.5, ·) → Mul(x, ·). `product` spells
    the last two Muls (s is 1 + Erf or 1 + Tanh); `bias` "add" puts Add(x, b) in front, "gelu20"
    writes Add(x, b) → Gelu-20 instead of the written-out form.
    """
    rng = np.random.default_rng(seed)
    elem = NP_TO_ONNX[dtype]
    inits: list[onnx.TensorProto] = []
    inputs = [helper.make_tensor_value_info("input", elem, list(shape))]
    outputs = [helper.make_tensor_value_info("y", elem, list(shape))]
    nodes: list[onnx.NodeProto] = []

    def const(name: str, value: float) -> str:
        inits.append(numpy_helper.from_array(np.array(value, dtype), name))
        return name

    x = "input"
    if bias is not None:
        b: np.ndarray = rng.standard_normal(shape[-1]).astype(dtype)
        inits.append(numpy_helper.from_array(b, "bias"))
        nodes.append(helper.make_node("Add", ["input", "bias"], ["x"]))
        x = "x"
        if bias_used_elsewhere:
            nodes.append(helper.make_node("Relu", ["x"], ["x_relu"]))
            outputs.append(helper.make_tensor_value_info("x_relu", elem, list(shape)))
    if bias == "gelu20":
        approximate = "tanh" if form == "tanh" else "none"
        nodes.append(helper.make_node("Gelu", [x], ["y"], approximate=approximate))
    else:
        if form == "erf":
            if scaling == "div":
                nodes.append(helper.make_node("Div", [x, const("root_two", root_two)], ["scaled"]))
            else:
                operands = [x, const("inv_root_two", 1 / root_two)]
                nodes.append(helper.make_node("Mul", operands[::-1] if scaling == "mul_swapped"
                                              else operands, ["scaled"]))
            nodes.append(helper.make_node("Erf", ["scaled"], ["curve"]))
        else:
            if cube == "pow":
                nodes.append(helper.make_node("Pow", [x, const("three", 3.0)], ["cube"]))
            else:
                nodes += [helper.make_node("Mul", [x, x], ["square"]),
                          helper.make_node("Mul", ["square", x] if cube == "mul_left"
                                           else [x, "square"], ["cube"])]
            nodes += [
                helper.make_node("Mul", [const("cubic", cubic), "cube"], ["cubic_term"]),
                helper.make_node("Add", [x, "cubic_term"], ["inner"]),
                helper.make_node("Mul", [const("k", sqrt_2_over_pi), "inner"], ["scaled"]),
                helper.make_node("Tanh", ["scaled"], ["curve"]),
            ]
        operands = [const("one", one), "curve"] if one_first else ["curve", const("one", one)]
        nodes.append(helper.make_node("Add", operands, ["s"]))
        if half_as_input:
            inputs.append(helper.make_tensor_value_info("half", elem, []))
        names = {"x": x, "half": const("half", half), "s": "s"}
        nodes += _product_nodes(product, names)
    if erf_used_elsewhere:
        outputs.append(helper.make_tensor_value_info("curve", elem, list(shape)))
    if scaled_is_output:
        outputs.append(helper.make_tensor_value_info("scaled", elem, list(shape)))
    graph = helper.make_graph(nodes, "gelu", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    # The job's load stage infers shapes before the passes run; do the same.
    return onnx.shape_inference.infer_shapes(model)


def _product_nodes(product: str, names: dict[str, str]) -> list[onnx.NodeProto]:
    """'x*(half*s)' → Mul(half, s) → t, Mul(x, t) → y, with the graph's names for x, half, s."""
    if product.startswith("("):
        inner, lone = product[1:].split(")*")
        a, b = inner.split("*")
        return [helper.make_node("Mul", [names[a], names[b]], ["partial"]),
                helper.make_node("Mul", ["partial", names[lone]], ["y"])]
    lone, inner = product[:-1].split("*(")
    a, b = inner.split("*")
    return [helper.make_node("Mul", [names[a], names[b]], ["partial"]),
            helper.make_node("Mul", [names[lone], "partial"], ["y"])]
