"""Keep a transformer's hidden state 2-D between its GEMMs: sink row-to-3-D Reshapes and cancel
the round trips that meet.

Lowering 3-D MatMul + bias to Gemm (fuse_matmul_add, fuse_residual_gemm) views the hidden state
[B, S, H] as rows [B*S, H] before each Gemm and back after it, so every layer carries pairs of
Reshapes that undo each other across the ops between the GEMMs (LayerNorm, bias + GELU, the
residual Add): a 2-layer ViT's engine held 18 Reshapes for 10 Gemms. Each costs ONNX Runtime a
kernel launch (a few microseconds, several percent of a millisecond-scale model). A view to
[..., C] that keeps the last axis commutes with every op that works along the last axis alone,
so

    f(Reshape(x2, [d1, .., dk, C]))  =  Reshape(f(x2), [d1, .., dk, C'])

for f = LayerNormalization over the last axis, an element-wise op (Relu, Gelu, bias + GELU,
Add/Sub/Mul/Div with a constant of at most one dim), or MatMul by a constant [C, C'] matrix.
Moving the view below f, repeatedly, brings it next to the next rows view, Reshape(.., [d1*..*dk,
C']), and the two cancel: that Reshape's readers read f(x2) directly.

Safe only when: the view's input x2 has a known 2-D shape [R, C] (a static shape, a Reshape to
given dims, or a Gemm of such an input by constant weights) and the view's target is constant,
fully given, ends in C and its leading dims multiply to R; f reads the view only in its data
input and has one output read (LayerNormalization's mean and inverse std unused); no value the
move replaces is a graph output. Top-level graph only.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import RULE_NAME_TAG

from optimizer.passes.base import FusionPass, PassStage
from optimizer.passes.checks import attr_int, known_shape, unique_initializer_name
from optimizer.passes.matching import MS_DOMAIN, ONNX_DOMAINS

__all__ = ["SINK_RESHAPES", "sink_reshapes"]

SINK_RESHAPES_NAME = "sink_reshapes"
_ELEMENTWISE = frozenset({"Relu", "Gelu", "Erf", "Sigmoid", "Tanh", "Identity"})
_ELEMENTWISE_MS = frozenset({"Gelu", "FastGelu", "BiasGelu", "QuickGelu"})
_BINARY = frozenset({"Add", "Sub", "Mul", "Div"})


def sink_reshapes(model: ir.Model) -> int:
    """Sink and cancel row views in `model`'s main graph; returns the moves and cancellations."""
    graph, count = model.graph, 0
    changed = True
    while changed:
        changed = False
        for node in list(graph):
            view = _row_view(node)
            if view is None or node.graph is None:
                continue
            rows_value, (rows, columns) = view
            viewed = node.outputs[0]
            for user, index in list(viewed.uses()):
                if _cancels(user, rows, columns):
                    ir.convenience.replace_all_uses_with(user.outputs[0], rows_value)
                    graph.remove(user, safe=True)
                    count, changed = count + 1, True
                elif _sinkable(user, index, viewed):
                    _sink(graph, node, user, index)
                    count, changed = count + 1, True
            if not viewed.uses():
                graph.remove(node, safe=True)
    return count


def _row_view(node: ir.Node) -> tuple[ir.Value, tuple[int, int]] | None:
    """(x2, (R, C)) when `node` is Reshape(x2 [R, C], [d1, .., dk, C]) with d1*..*dk = R, k >= 2."""
    if node.op_type != "Reshape" or node.domain not in ONNX_DOMAINS or len(node.inputs) < 2:
        return None
    source, target = node.inputs[0], known_shape(node.outputs[0])
    if source is None or target is None or len(target) < 3 or node.outputs[0].is_graph_output():
        return None
    matrix = _matrix_shape(source)
    if matrix is None or matrix[1] != target[-1] or math.prod(target[:-1]) != matrix[0]:
        return None
    return source, matrix


def _matrix_shape(value: ir.Value) -> tuple[int, int] | None:
    """`value`'s [rows, columns], when it is known to be 2-D."""
    shape = known_shape(value)
    if shape is not None:
        return (shape[0], shape[1]) if len(shape) == 2 else None
    node = value.producer()
    if node is None or node.op_type != "Gemm" or node.domain not in ONNX_DOMAINS:
        return None
    a, b = node.inputs[0], node.inputs[1]
    if a is None or b is None or b.const_value is None:
        return None
    a_shape, b_shape = _matrix_shape(a), b.const_value.shape.numpy()
    if a_shape is None or len(b_shape) != 2:
        return None
    rows = a_shape[1] if attr_int(node, "transA", 0) else a_shape[0]
    columns = b_shape[0] if attr_int(node, "transB", 0) else b_shape[1]
    return int(rows), int(columns)


def _cancels(user: ir.Node, rows: int, columns: int) -> bool:
    """`user` is a Reshape back to exactly [R, C] (a -1 resolved), not a graph output."""
    if user.op_type != "Reshape" or user.domain not in ONNX_DOMAINS or len(user.inputs) < 2:
        return False
    target = user.inputs[1]
    if target is None or target.const_value is None or user.outputs[0].is_graph_output():
        return False
    dims = [int(d) for d in target.const_value.numpy().reshape(-1)]
    if len(dims) != 2 or 0 in dims or dims.count(-1) > 1:
        return False
    resolved = [d if d != -1 else rows * columns // math.prod(x for x in dims if x != -1)
                for d in dims]
    return resolved == [rows, columns]


def _sinkable(user: ir.Node, index: int, viewed: ir.Value) -> bool:
    if index != 0 or len(user.outputs) < 1 or user.outputs[0].is_graph_output():
        return False
    if any(output.uses() or output.is_graph_output() for output in user.outputs[1:]):
        return False
    if viewed in user.inputs[1:]:
        return False
    op, onnx_op = user.op_type, user.domain in ONNX_DOMAINS
    if onnx_op and op == "LayerNormalization":
        rank = len(viewed.shape) if viewed.shape is not None else 0
        return attr_int(user, "axis", -1) in (-1, rank - 1) and all(
            _const_rank(v) == 1 for v in user.inputs[1:] if v is not None)
    if (onnx_op and op in _ELEMENTWISE) or (user.domain == MS_DOMAIN and op in _ELEMENTWISE_MS):
        return all(_const_rank(v) in (0, 1) for v in user.inputs[1:] if v is not None)
    if onnx_op and op in _BINARY:
        return len(user.inputs) == 2 and _const_rank(user.inputs[1]) in (0, 1)
    if onnx_op and op == "MatMul":
        return len(user.inputs) == 2 and _const_rank(user.inputs[1]) == 2
    return False


def _const_rank(value: ir.Value | None) -> int | None:
    if value is None or value.const_value is None:
        return None
    return len(value.const_value.shape)


def _sink(graph: ir.Graph, view: ir.Node, user: ir.Node, index: int) -> None:
    """user(view(x2)) → view'(user'(x2)): the view moves below `user`."""
    rows_value, viewed = view.inputs[0], view.outputs[0]
    assert rows_value is not None
    out = user.outputs[0]
    lead = known_shape(viewed)
    assert lead is not None
    columns = _last_dim_after(user, lead[-1])
    moved = ir.Node(user.domain, user.op_type,
                    [rows_value if i == index else v for i, v in enumerate(user.inputs)],
                    attributes=list(user.attributes.values()), num_outputs=len(user.outputs),
                    overload=user.overload, version=user.version, name=f"{out.name}_rows_op")
    # Tagged like a rewrite's nodes, so validation's localiser sees the moved op and its view
    # as one rewritten region whose edges keep the original names (validation/localize.py).
    moved.metadata_props.update(user.metadata_props)
    moved.metadata_props[RULE_NAME_TAG] = _tag(user)
    moved.outputs[0].name = f"{out.name}_rows"
    # Every op moved computes in its input's element type; shape inference may not have said.
    value_type = out.type or rows_value.type
    moved.outputs[0].type = value_type
    moved.outputs[0].shape = ir.Shape([math.prod(lead[:-1]), columns])
    dims = (*lead[:-1], columns)
    target = ir.Value(name=unique_initializer_name(graph, f"{out.name}_view"),
                      shape=ir.Shape([len(dims)]), type=ir.TensorType(ir.DataType.INT64),
                      const_value=ir.tensor(np.array(dims, np.int64)))
    graph.register_initializer(target)
    reshaped = ir.Node("", "Reshape", [moved.outputs[0], target], name=f"{out.name}_view_op")
    reshaped.outputs[0].type = value_type
    reshaped.metadata_props[RULE_NAME_TAG] = SINK_RESHAPES_NAME
    reshaped.outputs[0].shape = ir.Shape(list(dims))
    graph.insert_before(user, [moved, reshaped])
    ir.convenience.replace_all_uses_with(out, reshaped.outputs[0])
    graph.remove(user, safe=True)
    reshaped.outputs[0].name = out.name  # free now: readers keep reading the name they read


def _tag(node: ir.Node) -> str:
    earlier = node.metadata_props.get(RULE_NAME_TAG)
    return f"{earlier},{SINK_RESHAPES_NAME}" if earlier else SINK_RESHAPES_NAME


def _last_dim_after(user: ir.Node, columns: int) -> int:
    if user.op_type == "MatMul":
        weights = user.inputs[1]
        assert weights is not None and weights.const_value is not None
        return int(weights.const_value.shape.numpy()[1])
    return columns


SINK_RESHAPES = FusionPass(
    name=SINK_RESHAPES_NAME,
    summary="Keep the hidden state 2-D between GEMMs: move row-to-3-D Reshapes below ops along "
            "the last axis and cancel the round trips that meet",
    stage=PassStage.MATMUL_GEMM,
    graph_function=sink_reshapes,
)
