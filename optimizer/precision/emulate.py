"""Emulate a float16/bfloat16 model on a CPU: compute in float32, round every low-precision tensor.

Why not run the converted model on onnxruntime's CPU provider? Because there it is not computed
in float16, and bfloat16 not at all (probed on onnxruntime 1.32, x86-64):
- float16: compute ops (Add, Mul, MatMul, Gemm, Conv, Exp, Pow, Sqrt, the Reduce* ops, Softmax,
  BatchNormalization, pooling...) have no float16 CPU kernel. onnxruntime's cast-insertion
  transformer then runs them in float32 and, between such nodes, deletes the Casts, including the
  graph's own Cast to float16: Cast(x->fp16) -> Exp -> Cast(->fp32) returns exp(11.5) = 98716
  where float16 gives inf. So the overflows this check exists to catch would pass unseen. Only
  data movement, Max/Min/Clip, Round and LayerNormalization run natively.
- bfloat16: almost no op has a CPU kernel (NOT_IMPLEMENTED on session creation), and
  Conv/pooling below opset 22 do not admit bfloat16 at all.

So the emulated model computes every node in float32 and rounds each tensor the converted model
holds in a low type through Cast(to=low) -> Cast(to=float32) ("storage rounding"). onnxruntime
keeps those pairs (a float32 graph has nothing for its cast-insertion to fix, at any optimization
level), and its fp32->fp16 and fp32->bf16 Casts round to nearest even, overflowing to inf as the
hardware does.

How faithful that is to a GPU engine of the same graph:
- Exact per op where the GPU kernel rounds once per output: Add, Sub, Mul, Div, Sqrt (float32
  has enough bits that rounding its result to float16/bfloat16 equals rounding the exact result),
  data movement, Relu/Max/Min, Cast. Transcendentals (Exp, Erf, Tanh, Sigmoid) differ by at most
  the kernel's own approximation error.
- Close for MatMul, Gemm and Conv: float16 tensor-core GEMMs take low-precision inputs and
  accumulate in float32, as the emulation does; only the summation order differs. A kernel that
  accumulated in float16 would be less accurate than emulated (TensorRT chooses its tactics; we
  do not control that).
- Optimistic where a real kernel keeps intermediates in the low type that the emulation keeps in
  float32: inside a single op (reductions with float16 accumulators; Softmax; contrib ops such as
  Gelu or MultiHeadAttention). LayerNormalization is the exception we model pessimistically: a
  low-precision LayerNormalization is expanded into its ONNX function body (ReduceMean, Sub, Mul,
  ReduceMean, Add eps, Sqrt, Reciprocal, Mul, Mul, Add) with every intermediate rounded, because
  TensorRT's parser ignores `stash_type` in strongly typed networks (see keep_list.py).
- fuseforge plugin nodes (graphs fused for TensorRT) are emulated as single ops, their outputs
  rounded, and decomposed into standard float32 ops only afterwards, when the emulated graph runs:
  the plugin kernels sum, normalise and accumulate in float32 and round once on store, so
  decomposition first (rounding every step, expanding SkipLayerNorm's LayerNormalization) would
  judge them far too harshly. Exact for SkipLayerNorm and BiasGelu up to the kernels' own
  float32 arithmetic; slightly optimistic for MultiHeadAttention, which also rounds its softmax
  weights to the value type before the product with V.
- Pessimistic where a backend fuses elementwise chains and keeps the intermediates in registers
  in float32: the emulation rounds after every node, as an unfused engine would.
Errors of a few units in the last place per op therefore match; overflow (inf) and underflow
(0) are reproduced exactly at every tensor the graph stores in low precision. Where a GPU is
present, run the converted model itself on the backend (`evaluate_precision(candidate=...)`).

The emulated model has float32 inputs and outputs wherever the converted model has low-precision
ones (inputs are rounded on entry), and every tensor keeps its name, so intermediate tensors can
be compared with the original model's by name.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from optimizer.passes.matching import ONNX_DOMAINS
from optimizer.precision.convert import LOW_DTYPES
from optimizer.precision.names import NameAllocator
from optimizer.precision.signatures import (
    infer_output_dtypes,
    model_opsets,
    node_signature,
    with_inferred_types,
)

__all__ = ["LOW_PRECISION_TYPES", "emulate_precision"]

LOW_PRECISION_TYPES = frozenset(LOW_DTYPES.values())
FLOAT = ir.DataType.FLOAT
_TYPE_ATTRIBUTES = ("to", "dtype")  # attributes that set an output type (EyeLike, RandomNormal)


def emulate_precision(model: onnx.ModelProto) -> onnx.ModelProto:
    """A float32 model that reproduces `model`'s float16/bfloat16 rounding (see module doc).

    `model` is typically `convert_precision`'s output. Tensors of other types pass unchanged;
    a model with no low-precision tensor comes back equivalent to itself.
    """
    ir_model = ir.from_proto(with_inferred_types(model))
    _Emulator(ir_model.graph, model_opsets(ir_model)).run()
    return ir.to_proto(ir_model)


class _Emulator:
    def __init__(self, graph: ir.Graph, opsets: dict[str, int]) -> None:
        self.graph, self.opset = graph, opsets[""]
        self.names = NameAllocator(graph)
        for node in graph:
            signature = node_signature(node, opsets)
            if signature is not None:
                infer_output_dtypes(node, signature)

    def run(self) -> None:
        for value in list(self.graph.initializers.values()):
            if value.dtype in LOW_PRECISION_TYPES and value.const_value is not None:
                value.const_value = _float32_tensor(value.const_value, value.name)
                value.dtype = FLOAT
        for value in list(self.graph.inputs):
            if value.dtype in LOW_PRECISION_TYPES:
                self._round_input(value)
        for node in list(self.graph):
            self._emulate(node)

    def _emulate(self, node: ir.Node) -> None:
        is_onnx = node.domain in ONNX_DOMAINS
        lows = [v for v in node.outputs if v.dtype in LOW_PRECISION_TYPES]
        if is_onnx and node.op_type == "Cast":
            if lows:
                self._round_after(node.outputs[0], already_low=True)
            return
        for name, attr in list(node.attributes.items()):
            if attr.is_ref():
                continue
            tensor = attr.as_tensor() if attr.type is ir.AttributeType.TENSOR else None
            if tensor is not None and tensor.dtype in LOW_PRECISION_TYPES:
                node.attributes[name] = ir.AttrTensor(name, _float32_tensor(tensor, None))
            elif name in _TYPE_ATTRIBUTES and attr.type is ir.AttributeType.INT \
                    and ir.DataType(attr.as_int()) in LOW_PRECISION_TYPES:
                node.attributes[name] = ir.AttrInt64(name, FLOAT)
        if not lows:
            return
        if is_onnx and node.op_type == "Constant":
            for value in lows:  # the stored value is exact in float32: nothing to round
                value.dtype = FLOAT
            return
        if is_onnx and node.op_type == "LayerNormalization" and self._expand_layer_norm(node):
            return
        for value in lows:
            self._round_after(value)

    # -- rounding ---------------------------------------------------------------------------

    def _round_input(self, value: ir.Value) -> None:
        """A low-precision graph input becomes float32, rounded before its first reader."""
        low = value.dtype
        assert low is not None
        value.dtype = FLOAT
        rounded = self._new_value(f"{value.name}_rounded", FLOAT, value.shape)
        value.replace_all_uses_with(rounded, replace_graph_outputs=True)
        nodes = self._rounding_nodes(value, rounded, low)
        first = next(iter(self.graph), None)
        if first is None:
            self.graph.extend(nodes)
        else:
            self.graph.insert_before(first, nodes)

    def _round_after(self, value: ir.Value, *, already_low: bool = False) -> None:
        """Readers of `value` (and the graph output, if it is one) get it rounded to its low
        type, in float32, under its own name; the node itself now writes float32."""
        low = value.dtype
        producer = value.producer()
        assert low is not None and producer is not None
        name = value.name or ""
        value.name = self.names.fresh(f"{name}_unrounded" if not already_low
                                  else f"{name}_{low.name.lower()}")
        rounded = ir.Value(name=name, type=ir.TensorType(FLOAT), shape=_copy(value.shape))
        value.replace_all_uses_with(rounded, replace_graph_outputs=True)
        if already_low:
            nodes = [self._cast(value, rounded, FLOAT)]
        else:
            value.dtype = FLOAT
            nodes = self._rounding_nodes(value, rounded, low)
        self.graph.insert_after(producer, nodes)

    def _rounding_nodes(self, source: ir.Value, target: ir.Value,
                        low: ir.DataType) -> list[ir.Node]:
        middle = self._new_value(f"{target.name}_{low.name.lower()}", low, source.shape)
        return [self._cast(source, middle, low), self._cast(middle, target, FLOAT)]

    def _cast(self, source: ir.Value, target: ir.Value, to: ir.DataType) -> ir.Node:
        return ir.Node("", "Cast", [source], [ir.AttrInt64("to", to)], outputs=[target],
                       name=self.names.fresh(f"{target.name}_cast"))

    # -- LayerNormalization ---------------------------------------------------------------------

    def _expand_layer_norm(self, node: ir.Node) -> bool:
        """Replace a low-precision LayerNormalization by its function body, rounding every step.

        Returns False (and leaves the node to op-level rounding) when the Mean/InvStdDev outputs
        are read or the input's rank is unknown.
        """
        x = node.inputs[0]
        low = node.outputs[0].dtype
        if (x is None or low is None or x.shape is None or any(
                out.uses() or out.is_graph_output() for out in node.outputs[1:])):
            return False
        rank = len(x.shape)
        axis_attr = node.attributes.get("axis")
        axis = (axis_attr.as_int() if axis_attr is not None else -1) % rank
        epsilon_attr = node.attributes.get("epsilon")
        epsilon = epsilon_attr.as_float() if epsilon_attr is not None else 1e-5
        scale = node.inputs[1]
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        axes = list(range(axis, rank))
        steps: list[ir.Node] = []

        def step(op_type: str, inputs: list[ir.Value], **attrs: int) -> ir.Value:
            raw = self._new_value(f"{node.name}_{op_type}", FLOAT, None)
            attributes = [ir.AttrInt64(key, val) for key, val in attrs.items()]
            steps.append(ir.Node("", op_type, inputs, attributes, outputs=[raw],
                                 name=self.names.fresh(f"{node.name}_{op_type}")))
            rounded = self._new_value(f"{raw.name}_rounded", FLOAT, None)
            steps.extend(self._rounding_nodes(raw, rounded, low))
            return rounded

        def reduce_mean(value: ir.Value) -> ir.Value:
            if self.opset >= 18:
                return step("ReduceMean", [value, self._constant(np.array(axes, np.int64))],
                            keepdims=1)
            # Before opset 18 ReduceMean takes its axes as an attribute.
            raw = self._new_value(f"{node.name}_ReduceMean", FLOAT, None)
            steps.append(ir.Node("", "ReduceMean", [value],
                                 [ir.AttrInt64s("axes", axes), ir.AttrInt64("keepdims", 1)],
                                 outputs=[raw], name=self.names.fresh(f"{node.name}_ReduceMean")))
            rounded = self._new_value(f"{raw.name}_rounded", FLOAT, None)
            steps.extend(self._rounding_nodes(raw, rounded, low))
            return rounded

        eps = self._constant(np.array(epsilon, np.float32).astype(low.numpy()).astype(np.float32))
        mean = reduce_mean(x)
        centered = step("Sub", [x, mean])
        variance = reduce_mean(step("Mul", [centered, centered]))
        std = step("Sqrt", [step("Add", [variance, eps])])
        normalized = step("Mul", [centered, step("Reciprocal", [std])])
        assert scale is not None
        y = step("Mul", [normalized, scale])
        if bias is not None:
            y = step("Add", [y, bias])
        output = node.outputs[0]
        output.replace_all_uses_with(y, replace_graph_outputs=True)
        self.graph.insert_before(node, steps)
        self.graph.remove(node, safe=True)
        name = output.name
        output.name = None
        y.name = name
        y.shape = _copy(output.shape)
        return True

    # -- names and values -----------------------------------------------------------------------

    def _constant(self, array: np.ndarray) -> ir.Value:
        name = self.names.fresh("emulation_constant")
        value = ir.Value(name=name, type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                         shape=ir.Shape(array.shape), const_value=ir.tensor(array, name=name))
        self.graph.register_initializer(value)
        return value

    def _new_value(self, base: str, dtype: ir.DataType, shape: ir.Shape | None) -> ir.Value:
        return ir.Value(name=self.names.fresh(base), type=ir.TensorType(dtype), shape=_copy(shape))



def _copy(shape: ir.Shape | None) -> ir.Shape | None:
    return ir.Shape(shape) if shape is not None else None


def _float32_tensor(tensor: ir.TensorProtocol, name: str | None) -> ir.TensorProtocol:
    """The same values in float32 (exact: float16 and bfloat16 are subsets of float32)."""
    return ir.tensor(np.asarray(tensor.numpy(), dtype=np.float32), name=name)
