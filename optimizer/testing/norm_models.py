"""Normalization layers written out as exporters write them, for the pass tests and bench/:
LayerNorm in primitive ops, a residual Add before LayerNormalization, and BatchNormalization
after a Conv. Each builder takes the unsafe variants its pass must refuse as flags."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optimizer.testing.models import IR_VERSION, NP_TO_ONNX

__all__ = ["conv_bn", "layer_norm", "skip_layer_norm"]


def layer_norm(
    *, shape: tuple[int, ...] = (2, 5, 16), axes: tuple[int, ...] = (-1,),
    variance_axes: tuple[int, ...] | None = None, dtype: type = np.float32,
    epsilon: float | None = 1e-5, opset: int = 18, square: str = "pow", divide: str = "div",
    scale: bool = True, bias: bool = True, scale_first: bool = False, bias_first: bool = False,
    param_shape: tuple[int, ...] | None = None, exponent: float = 2.0, seed: int = 0,
    gamma_as_input: bool = False, epsilon_as_input: bool = False,
    deviation_used_elsewhere: bool = False, mean_is_output: bool = False,
    pre_op: bool = False, infer_shapes: bool = True,
) -> onnx.ModelProto:
    """x → ReduceMean → Sub → Pow/Mul → ReduceMean → Add(eps) → Sqrt → Div → Mul → Add → y.

    gamma and beta are random with `param_shape` (default: the normalized dims). `pre_op` puts
    a Relu before the LayerNorm, so x is an intermediate whose shape only inference knows.
    `epsilon` None leaves out the Add, as torch's dynamo exporter does with eps=1e-12.
    """
    rng = np.random.default_rng(seed)
    elem = NP_TO_ONNX[dtype]
    rank = len(shape)
    k_dims = tuple(shape[a % rank] for a in sorted(a % rank for a in axes))
    param_shape = k_dims if param_shape is None else param_shape
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    graph_inputs = [helper.make_tensor_value_info("input", elem, list(shape))]
    # Left for inference to fill in: a gamma of higher rank makes y larger than x.
    outputs = [helper.make_tensor_value_info("y", elem, None if infer_shapes else list(shape))]
    x = "input"
    if pre_op:
        nodes.append(helper.make_node("Relu", ["input"], ["x"]))
        x = "x"

    def reduce_mean(src: str, dst: str, reduce_axes: tuple[int, ...]) -> None:
        if opset >= 18:
            name = f"{dst}_axes"
            inits.append(numpy_helper.from_array(np.array(reduce_axes, np.int64), name))
            nodes.append(helper.make_node("ReduceMean", [src, name], [dst], keepdims=1))
        else:
            nodes.append(helper.make_node("ReduceMean", [src], [dst], axes=list(reduce_axes),
                                          keepdims=1))

    reduce_mean(x, "mean", axes)
    nodes.append(helper.make_node("Sub", [x, "mean"], ["d"]))
    if square == "pow":
        inits.append(numpy_helper.from_array(np.array(exponent, dtype), "two"))
        nodes.append(helper.make_node("Pow", ["d", "two"], ["d2"]))
    else:
        nodes.append(helper.make_node("Mul", ["d", "d"], ["d2"]))
    reduce_mean("d2", "var", axes if variance_axes is None else variance_axes)
    if epsilon_as_input:
        graph_inputs.append(helper.make_tensor_value_info("eps", elem, []))
    if epsilon is None:
        nodes.append(helper.make_node("Sqrt", ["var"], ["std"]))
    else:
        inits.append(numpy_helper.from_array(np.array(epsilon, dtype), "eps"))
        nodes += [helper.make_node("Add", ["var", "eps"], ["var_eps"]),
                  helper.make_node("Sqrt", ["var_eps"], ["std"])]
    if divide == "div":
        nodes.append(helper.make_node("Div", ["d", "std"], ["normalized"]))
    else:
        nodes.append(helper.make_node("Reciprocal", ["std"], ["inv_std"]))
        operands = ["d", "inv_std"] if divide == "mul_reciprocal" else ["inv_std", "d"]
        nodes.append(helper.make_node("Mul", operands, ["normalized"]))
    last = "normalized"
    if scale:
        gamma = rng.uniform(0.5, 1.5, param_shape) * rng.choice([-1, 1], param_shape)
        inits.append(numpy_helper.from_array(gamma.astype(dtype), "gamma"))
        if gamma_as_input:
            graph_inputs.append(helper.make_tensor_value_info("gamma", elem, list(param_shape)))
        operands = ["gamma", last] if scale_first else [last, "gamma"]
        nodes.append(helper.make_node("Mul", operands, ["scaled"]))
        last = "scaled"
    if bias:
        beta = rng.standard_normal(param_shape)
        inits.append(numpy_helper.from_array(beta.astype(dtype), "beta"))
        operands = ["beta", last] if bias_first else [last, "beta"]
        nodes.append(helper.make_node("Add", operands, ["biased"]))
        last = "biased"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    if deviation_used_elsewhere:
        nodes.append(helper.make_node("Abs", ["d"], ["abs_d"]))
        outputs.append(helper.make_tensor_value_info("abs_d", elem, list(shape)))
    if mean_is_output:
        outputs.append(helper.make_tensor_value_info("mean", elem, None))
    graph = helper.make_graph(nodes, "layer_norm", graph_inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    # The job's load stage infers shapes before the passes run; do the same.
    return onnx.shape_inference.infer_shapes(model) if infer_shapes else model


def skip_layer_norm(
    *, shape: tuple[int, ...] = (2, 5, 16), skip_shape: tuple[int, ...] | None = None,
    dtype: type = np.float32, bias: str | None = None, swap: bool = False,
    beta: bool = True, epsilon: float = 1e-5, axis: int = -1, stash_type: int | None = None,
    sum_read_by_next_residual: bool = False, sum_is_output: bool = False,
    inner_sum_used_elsewhere: bool = False, gamma_as_input: bool = False,
    bias_as_input: bool = False, mean_output_used: bool = False, skip_from_relu: bool = False,
    infer_shapes: bool = True, seed: int = 0,
) -> onnx.ModelProto:
    """x, skip → Add (with a bias Add "first" or "last" when `bias`) → LayerNormalization → y.

    `swap` reverses the operands of every Add. The parameters are random. `skip_from_relu`
    computes skip by a Relu, so only shape inference knows its shape.
    """
    rng = np.random.default_rng(seed)
    elem = NP_TO_ONNX[dtype]
    hidden = shape[-1]
    skip_shape = shape if skip_shape is None else skip_shape
    normalized_shape = shape[axis:] if axis != -1 else shape[-1:]
    skip_input = "skip_in" if skip_from_relu else "skip"
    inputs = [helper.make_tensor_value_info("x", elem, list(shape)),
              helper.make_tensor_value_info(skip_input, elem, list(skip_shape))]
    outputs = [helper.make_tensor_value_info("y", elem, None if infer_shapes else list(shape))]
    inits = [numpy_helper.from_array(
        (rng.uniform(0.5, 1.5, normalized_shape) * rng.choice([-1, 1], normalized_shape))
        .astype(dtype), "gamma")]
    ln_inputs = ["sum", "gamma"]
    if beta:
        inits.append(numpy_helper.from_array(rng.standard_normal(normalized_shape).astype(dtype),
                                             "beta"))
        ln_inputs.append("beta")
    if gamma_as_input:
        inputs.append(helper.make_tensor_value_info("gamma", elem, list(normalized_shape)))

    def add(a: str, b: str, out: str) -> onnx.NodeProto:
        return helper.make_node("Add", [b, a] if swap else [a, b], [out])

    nodes = [helper.make_node("Relu", ["skip_in"], ["skip"])] if skip_from_relu else []
    if bias is not None:
        inits.append(numpy_helper.from_array(rng.standard_normal(hidden).astype(dtype), "bias"))
        if bias_as_input:
            inputs.append(helper.make_tensor_value_info("bias", elem, [hidden]))
    if bias == "first":
        nodes += [add("x", "bias", "inner"), add("inner", "skip", "sum")]
    elif bias == "last":
        nodes += [add("x", "skip", "inner"), add("inner", "bias", "sum")]
    else:
        nodes.append(add("x", "skip", "sum"))
    ln_outputs = ["y", "mean"] if mean_output_used else ["y"]
    ln_attrs: dict[str, Any] = {"axis": axis, "epsilon": epsilon}
    if stash_type is not None:
        ln_attrs["stash_type"] = stash_type
    nodes.append(helper.make_node("LayerNormalization", ln_inputs, ln_outputs, **ln_attrs))
    if sum_read_by_next_residual:
        nodes.append(helper.make_node("Add", ["sum", "y"], ["next"]))
        outputs.append(helper.make_tensor_value_info("next", elem, None))
    if sum_is_output:
        outputs.append(helper.make_tensor_value_info("sum", elem, None))
    if inner_sum_used_elsewhere:
        nodes.append(helper.make_node("Relu", ["inner"], ["inner_relu"]))
        outputs.append(helper.make_tensor_value_info("inner_relu", elem, None))
    if mean_output_used:
        outputs.append(helper.make_tensor_value_info("mean", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "skip_layer_norm", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    # The job's load stage infers shapes before the passes run; do the same.
    return onnx.shape_inference.infer_shapes(model) if infer_shapes else model


def conv_bn(
    *, channels: int = 8, in_channels: int = 4, dtype: type = np.float32, bias: bool = True,
    group: int = 1, epsilon: float = 1e-5, transpose: bool = False, seed: int = 0,
    training_mode: int | None = None, params_as_inputs: bool = False,
    conv_out_is_graph_output: bool = False, share_weights: bool = False, size: int = 6,
) -> onnx.ModelProto:
    """x → Conv (or ConvTranspose) → BatchNormalization → y, with random weights and statistics."""
    rng = np.random.default_rng(seed)
    elem = NP_TO_ONNX[dtype]
    if transpose:
        w_shape = (in_channels, channels // group, 3, 3)
    else:
        w_shape = (channels, in_channels // group, 3, 3)
    inits = [numpy_helper.from_array(rng.standard_normal(w_shape).astype(dtype) * 0.3, "w")]
    conv_inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(channels).astype(dtype), "b"))
        conv_inputs.append("b")
    bn_params = {
        "gamma": rng.uniform(0.5, 1.5, channels), "beta": rng.standard_normal(channels),
        "mean": rng.standard_normal(channels), "var": rng.uniform(0.5, 2.0, channels),
    }
    graph_inputs = [helper.make_tensor_value_info("x", elem, [1, in_channels, size, size])]
    for name, values in bn_params.items():
        if params_as_inputs and name == "mean":
            graph_inputs.append(helper.make_tensor_value_info(name, elem, [channels]))
            inits.append(numpy_helper.from_array(values.astype(dtype), name))  # default value
        else:
            inits.append(numpy_helper.from_array(values.astype(dtype), name))
    bn_attrs: dict[str, Any] = {"epsilon": epsilon}
    bn_outputs = ["y"]
    if training_mode is not None:
        bn_attrs["training_mode"] = training_mode
        if training_mode:
            bn_outputs = ["y", "running_mean", "running_var"]
    nodes = [
        helper.make_node("ConvTranspose" if transpose else "Conv", conv_inputs, ["c"],
                         pads=[1, 1, 1, 1], group=group, name="conv"),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], bn_outputs,
                         name="bn", **bn_attrs),
    ]
    out_shape = [1, channels, size, size]  # 3x3 kernels with padding 1 keep the size
    outputs = [helper.make_tensor_value_info("y", elem, out_shape)]
    if conv_out_is_graph_output:
        outputs.append(helper.make_tensor_value_info("c", elem, out_shape))
    if share_weights:
        nodes.append(helper.make_node("Conv", ["x", "w"], ["other"], pads=[1, 1, 1, 1],
                                      group=group, name="other_conv"))
        outputs.append(helper.make_tensor_value_info("other", elem, out_shape))
    graph = helper.make_graph(nodes, "conv_bn", graph_inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model
