"""Small models built in code for the precision tests: a LayerNorm whose activations overflow
float16 when squared, and graphs that exercise casts, constants and shape arithmetic."""

from __future__ import annotations

from typing import Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optimizer.testing.models import IR_VERSION

__all__ = ["finish", "loud_layer_norm", "tensor"]

LayerNormForm = Literal["written", "op"]


def loud_layer_norm(form: LayerNormForm, *, seed: int = 0, hidden: int = 32, seq: int = 8,
                    scale: float = 400.0) -> onnx.ModelProto:
    """x [1, seq, hidden] → MatMul + bias (activations of std ≈ `scale`) → LayerNorm → MatMul
    + bias → y [1, seq, 8].

    With the default scale, (h - mean)² reaches ~10⁶: far past float16's 65504, while h itself
    (≈ 400) is held to 3 significant digits. `form` "written" spells LayerNorm as ReduceMean,
    Sub, Pow, ReduceMean, Add eps, Sqrt, Div, Mul, Add (opset 18); "op" uses
    LayerNormalization (opset 17). Weights, biases, gamma and beta are random.
    """
    rng = np.random.default_rng(seed)
    inits = [
        tensor("w1", rng.normal(0.0, scale / np.sqrt(hidden), (hidden, hidden))),
        tensor("b1", rng.normal(0.0, scale / 10, hidden)),
        tensor("gamma", rng.uniform(0.5, 1.5, hidden)),
        tensor("beta", rng.normal(0.0, 0.1, hidden)),
        tensor("w2", rng.normal(0.0, 1.0 / np.sqrt(hidden), (hidden, 8))),
        tensor("b2", rng.normal(0.0, 0.1, 8)),
    ]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="fc1"),
             helper.make_node("Add", ["m1", "b1"], ["h"], name="fc1_bias")]
    if form == "op":
        nodes.append(helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["n"],
                                      name="ln", axis=-1, epsilon=1e-5))
        opset = 17
    else:
        inits += [tensor("two", np.array(2.0)), tensor("eps", np.array(1e-5)),
                  numpy_helper.from_array(np.array([-1], np.int64), "axes")]
        nodes += [
            helper.make_node("ReduceMean", ["h", "axes"], ["mean"], name="ln_mean"),
            helper.make_node("Sub", ["h", "mean"], ["d"], name="ln_sub"),
            helper.make_node("Pow", ["d", "two"], ["d2"], name="ln_pow"),
            helper.make_node("ReduceMean", ["d2", "axes"], ["var"], name="ln_var"),
            helper.make_node("Add", ["var", "eps"], ["var_eps"], name="ln_add_eps"),
            helper.make_node("Sqrt", ["var_eps"], ["std"], name="ln_sqrt"),
            helper.make_node("Div", ["d", "std"], ["normed"], name="ln_div"),
            helper.make_node("Mul", ["normed", "gamma"], ["scaled"], name="ln_gamma"),
            helper.make_node("Add", ["scaled", "beta"], ["n"], name="ln_beta"),
        ]
        opset = 18
    nodes += [helper.make_node("MatMul", ["n", "w2"], ["m2"], name="fc2"),
              helper.make_node("Add", ["m2", "b2"], ["y"], name="fc2_bias")]
    return finish(nodes, inits, [("x", TensorProto.FLOAT, [1, seq, hidden])],
                  [("y", TensorProto.FLOAT, [1, seq, 8])], opset=opset, name=f"loud_ln_{form}")


def tensor(name: str, values: np.ndarray, dtype: type = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def finish(nodes: list[onnx.NodeProto], initializers: list[onnx.TensorProto],
           inputs: list[tuple[str, int, list[int | str]]],
           outputs: list[tuple[str, int, list[int | str] | None]], *, opset: int,
           name: str = "g", domains: dict[str, int] | None = None) -> onnx.ModelProto:
    """A checked model from nodes, initializers and (name, elem_type, shape) inputs/outputs."""
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], initializers)
    imports = [helper.make_opsetid("", opset)]
    imports += [helper.make_opsetid(d, v) for d, v in (domains or {}).items()]
    model = helper.make_model(graph, opset_imports=imports, producer_name="fuseforge-tests")
    model.ir_version = IR_VERSION
    if not domains:
        onnx.checker.check_model(model, full_check=True)
    return model
