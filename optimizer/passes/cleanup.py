"""Clean a graph up before fusion: lift constants, fold what is constant, drop no-ops and dead code.

Every step computes the same outputs (folding evaluates with ONNX's reference ops, which may
round a float16 result differently from the runtime in the last bit):
- Constant nodes become initializers, so rules that want constant weights see them either way.
- Constant folding (onnxscript's FoldConstantsPass, which evaluates with ONNX's reference ops)
  turns nodes whose inputs are all constant into initializers, and with static input shapes
  folds shape arithmetic (Shape → Gather → Unsqueeze → Concat → Reshape) down to a constant.
- y = Identity(x), inference Dropout, Cast to x's own type, Reshape to x's own static shape and
  Transpose with the identity permutation are all y = x. Reshape(Reshape(x, s1), s2) is
  Reshape(x, s2) when s2 copies no dims from the middle tensor (no 0 entries, or
  allowzero = 1). Transpose(Transpose(x, p1), p2) is Transpose(x, p1[p2]), and x itself when
  p1[p2] is the identity.
- An If whose condition folded to a constant is replaced by the nodes of the branch it takes
  (inline_constant_ifs.py: our own exact inlining, with renaming; not onnxscript's).
- Nodes whose outputs nobody reads, and initializers nobody reads, are removed.

Safety: all of it runs on the main graph and inside If/Loop/Scan bodies (folding skips the
branches of an If whose condition is not constant and Loop bodies that may not run: see
passes/may_never_run.py); a subgraph's outputs and signature never change. When y = x and y
is a graph output, x takes y's name, which is only possible when x is computed by a node of
that same graph and is not already an output; otherwise the node stays. Dropout goes only in
inference (training_mode absent or a constant false, no is_test = 0) with its mask output
unread. Nodes outside the ONNX domains and the
quantization ops (QuantizeLinear, DequantizeLinear, QLinear*, *Integer) are neither folded nor
removed, and nothing inside model-local functions is touched. Folding refuses a node whose
output is a graph output and, by FoldConstantsPass's own rules, a node fed by a graph input.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.optimizer._constant_folding import (
    DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
    DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT,
    FoldConstantsPass,
    FoldConstantsResult,
    Replacement,
)

from optimizer.passes.base import FusionPass, PassStage
from optimizer.passes.checks import attr_int, perm
from optimizer.passes.inline_constant_ifs import inline_constant_ifs
from optimizer.passes.matching import MS_DOMAIN, ONNX_DOMAINS, default_opset
from optimizer.passes.may_never_run import graphs_that_may_never_run

__all__ = ["CLEANUP", "cleanup_graph"]

# Domains whose ops are pure functions of their inputs, so an unread node can go.
_PURE_DOMAINS = (*ONNX_DOMAINS, "ai.onnx.ml", MS_DOMAIN)
_QUANTIZATION_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "ConvInteger",
    "MatMulInteger",
})
# The folder rewrites these into more nodes (sequence ops) or inlines branches (If, without
# renaming what collides); we keep the folder to removals, inline constant Ifs ourselves, and
# handle Dropout below with stricter conditions.
_SHAPE_SIZED_ELEMENTS = 64
_NOT_FOLDED = frozenset({
    "If", "Loop", "Scan", "Dropout", "SplitToSequence", "ConcatFromSequence", "SequenceAt",
    "SequenceConstruct", "ConstantOfShape",
})


def _is_onnx(node: ir.Node, *op_types: str) -> bool:
    return node.domain in ONNX_DOMAINS and node.op_type in op_types


def _is_quantization_op(node: ir.Node) -> bool:
    return node.op_type in _QUANTIZATION_OPS or node.op_type.startswith("QLinear")


def _all_graphs(model: ir.Model) -> list[ir.Graph]:
    return [model.graph, *model.graph.subgraphs()]


def _node_count(model: ir.Model) -> int:
    return sum(1 for _ in ir.traversal.RecursiveGraphIterator(model.graph))


def _const_ints(value: ir.Value | None) -> list[int] | None:
    if value is None or value.const_value is None:
        return None
    array = value.const_value.numpy()
    if array.ndim != 1 or array.dtype.kind not in "iu":
        return None
    return [int(v) for v in array]


# -- constants ------------------------------------------------------------------------------

_CONSTANT_ATTRS = {
    "value_float": ir.DataType.FLOAT, "value_floats": ir.DataType.FLOAT,
    "value_int": ir.DataType.INT64, "value_ints": ir.DataType.INT64,
}


def _constant_tensor(node: ir.Node) -> ir.TensorProtocol | None:
    """The tensor a Constant node holds; None for sparse, string or attribute-reference forms."""
    if len(node.attributes) != 1:
        return None
    name, attr = next(iter(node.attributes.items()))
    if attr.is_ref():
        return None
    if name == "value":
        return attr.as_tensor()
    if name in _CONSTANT_ATTRS:
        return ir.tensor(attr.value, dtype=_CONSTANT_ATTRS[name])
    return None  # sparse_value, value_string(s): rare, and no rule wants them as initializers


def _lift_constants(graph: ir.Graph) -> int:
    count = 0
    for node in list(graph):
        if not _is_onnx(node, "Constant") or node.outputs[0].is_graph_output():
            continue
        tensor = _constant_tensor(node)
        output = node.outputs[0]
        if tensor is None or not output.name or output.name in graph.initializers:
            continue
        initializer = ir.Value(name=output.name, shape=ir.Shape(list(tensor.shape.numpy())),
                               type=ir.TensorType(tensor.dtype), const_value=tensor)
        output.replace_all_uses_with(initializer)
        graph.remove(node, safe=True)
        output.name = None  # free the name before the initializer takes it
        graph.register_initializer(initializer)
        count += 1
    return count


class _CleanupFolder(FoldConstantsPass):
    """FoldConstantsPass restricted to ONNX ops that are safe to fold here (see module doc)."""

    def call(self, model: ir.Model) -> FoldConstantsResult:
        self._maybe_never_run = graphs_that_may_never_run(model)
        return super().call(model)

    def process_node(self, node: ir.Node, is_function: bool) -> Replacement | None:
        if is_function or node.domain not in ONNX_DOMAINS:
            return None
        if (_is_quantization_op(node) or node.graph in self._maybe_never_run
                or (node.op_type in _NOT_FOLDED and not _is_shape_sized_fill(node))
                or any(output.is_graph_output() for output in node.outputs)):
            if self.shape_inference and node.op_type not in ("If", "Loop", "Scan"):
                self._do_inference(node)  # keep shapes flowing for the nodes after it
            return None
        return super().process_node(node, is_function)


def _is_shape_sized_fill(node: ir.Node) -> bool:
    """A ConstantOfShape of a constant shape with a handful of elements: shape arithmetic, as in
    torch's "expand with -1" (Where(Equal(shape, ConstantOfShape(...) * -1), ...)), whose folding
    lets a mask's shape be known. A big fill stays a node rather than becoming a big weight."""
    if not (node.op_type == "ConstantOfShape" and node.inputs and node.inputs[0] is not None):
        return False
    shape = node.inputs[0].const_value
    return shape is not None and int(np.prod(shape.numpy())) <= _SHAPE_SIZED_ELEMENTS


def _should_fold(node: ir.Node) -> bool | None:
    """Fold big constants too when this node is their only reader, so nothing is duplicated."""
    inputs = [value for value in node.inputs if value is not None]
    if inputs and all(value.const_value is not None and len(value.uses()) == 1
                      for value in inputs):
        return True
    return None  # FoldConstantsPass's size limits decide


def _fold_constants(model: ir.Model) -> int:
    before = _node_count(model)
    folder = _CleanupFolder(
        shape_inference=True,
        input_size_limit=DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
        output_size_limit=DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT,
        should_fold=_should_fold,
    )
    folder(model)
    return max(0, before - _node_count(model))


# -- nodes equal to one of their inputs -----------------------------------------------------

def _bypass(node: ir.Node, output: ir.Value, source: ir.Value) -> bool:
    """Make readers of `output` read `source` instead and remove `node` if nothing else reads it.

    A graph output keeps its name by renaming `source`, possible only when `source` is computed
    by a node of the same graph and is not an output already. Returns False if nothing changed.
    """
    graph = node.graph
    assert graph is not None
    if output.is_graph_output():
        producer = source.producer()
        if producer is None or producer.graph is not graph or source.is_graph_output():
            return False
        name = output.name
        output.replace_all_uses_with(source, replace_graph_outputs=True)
        output.name = None
        source.name = name
    else:
        output.replace_all_uses_with(source)
    if not any(value.uses() or value.is_graph_output() for value in node.outputs):
        graph.remove(node, safe=True)
    return True


def _is_inference_dropout(node: ir.Node, opset: int) -> bool:
    if len(node.outputs) > 1 and (node.outputs[1].uses() or node.outputs[1].is_graph_output()):
        return False
    is_test = node.attributes.get("is_test")
    if is_test is not None:
        return is_test.as_int() == 1
    if opset < 7:  # Dropout-1 and -6 default to is_test = 0, i.e. training
        return False
    training_mode = node.inputs[2] if len(node.inputs) > 2 else None
    if training_mode is None:
        return True
    if training_mode.const_value is None or training_mode.is_graph_input():
        return False
    flag = training_mode.const_value.numpy()
    return flag.size == 1 and not bool(flag.reshape(-1)[0])


def _reshape_target(input_shape: tuple[int, ...], target: list[int], allowzero: bool
                    ) -> tuple[int, ...] | None:
    """The output shape of Reshape for a static input shape, or None if invalid."""
    dims = list(target)
    for i, dim in enumerate(dims):
        if dim == 0 and not allowzero:
            if i >= len(input_shape):
                return None
            dims[i] = input_shape[i]
    if dims.count(-1) > 1:
        return None
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1]))
        if known == 0:
            return None
        dims[dims.index(-1)] = int(np.prod(input_shape)) // known
    return tuple(dims)


def _no_op_source(node: ir.Node, opset: int) -> ir.Value | None:
    """The input that `node`'s first output always equals, if it is a no-op."""
    source = node.inputs[0] if node.inputs else None
    if source is None or len(node.outputs) < 1:
        return None
    if _is_onnx(node, "Identity"):
        return source
    if _is_onnx(node, "Dropout"):
        return source if _is_inference_dropout(node, opset) else None
    if _is_onnx(node, "Cast"):
        to = node.attributes.get("to")
        same = to is not None and source.dtype is not None and source.dtype.value == to.as_int()
        return source if same else None
    if _is_onnx(node, "Reshape"):
        shape, target = source.shape, _const_ints(node.inputs[1] if len(node.inputs) > 1 else None)
        if shape is None or not shape.is_static() or target is None:
            return None
        static = tuple(int(d) for d in shape.numpy())
        literal_zeros = attr_int(node, "allowzero", 0) == 1
        new_shape = _reshape_target(static, target, literal_zeros)
        return source if new_shape == static else None
    if _is_onnx(node, "Transpose"):
        axes = perm(node)
        return source if axes is not None and axes == tuple(range(len(axes))) else None
    return None


def _collapse_reshapes(node: ir.Node) -> bool:
    """Reshape(Reshape(x, s1), s2) → Reshape(x, s2), unless s2 copies dims (0) of the middle."""
    inner = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
    if inner is None or not _is_onnx(node, "Reshape") or not _is_onnx(inner, "Reshape"):
        return False
    target = _const_ints(node.inputs[1] if len(node.inputs) > 1 else None)
    if target is None or (0 in target and attr_int(node, "allowzero", 0) == 0):
        return False
    x = inner.inputs[0]
    if x is None:
        return False
    node.replace_input_with(0, x)
    return True


def _merge_transposes(node: ir.Node) -> bool:
    """Transpose(Transpose(x, p1), p2) → Transpose(x, p1[p2]), or x when that is the identity."""
    inner = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
    if inner is None or not _is_onnx(node, "Transpose") or not _is_onnx(inner, "Transpose"):
        return False
    x = inner.inputs[0]
    if x is None:
        return False
    rank = len(x.shape) if x.shape is not None else None
    p1, p2 = perm(inner, rank), perm(node, rank)
    if p1 is None or p2 is None or len(p1) != len(p2):
        return False
    combined = [p1[j] for j in p2]
    if combined == list(range(len(combined))) and _bypass(node, node.outputs[0], x):
        return True
    node.replace_input_with(0, x)
    node.attributes["perm"] = ir.AttrInt64s("perm", combined)
    return True


def _simplify(graph: ir.Graph, opset: int) -> int:
    count = 0
    for node in list(graph):
        if node.graph is not graph:
            continue  # removed earlier in this sweep
        source = _no_op_source(node, opset)
        if source is not None and _bypass(node, node.outputs[0], source):
            count += 1
        elif _collapse_reshapes(node) or _merge_transposes(node):
            count += 1
    return count


# -- dead code ------------------------------------------------------------------------------

def _detach_subgraph_inputs(node: ir.Node) -> None:
    """Release the uses a removed node's bodies hold on outer values (e.g. an initializer)."""
    for attr in node.attributes.values():
        if attr.is_ref() or attr.type not in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS):
            continue
        bodies = [attr.as_graph()] if attr.type == ir.AttributeType.GRAPH else attr.as_graphs()
        for body in bodies:
            for inner in ir.traversal.RecursiveGraphIterator(body):
                for i in range(len(inner.inputs)):
                    inner.replace_input_with(i, None)


def _remove_dead_nodes(graph: ir.Graph) -> int:
    count = 0
    for node in reversed(list(graph)):
        if node.domain not in _PURE_DOMAINS:
            continue  # an unknown op may have effects we cannot see
        if any(value.uses() or value.is_graph_output() for value in node.outputs):
            continue
        _detach_subgraph_inputs(node)
        graph.remove(node, safe=True)
        count += 1
    return count


def _remove_unused_initializers(graph: ir.Graph) -> int:
    unused = [name for name, value in graph.initializers.items()
              if not value.uses() and not value.is_graph_output() and not value.is_graph_input()]
    for name in unused:
        graph.initializers.pop(name)
    return len(unused)


def cleanup_graph(model: ir.Model) -> int:
    """Clean `model` up in place (main graph and every subgraph); returns the changes made.

    Each lifted constant, folded-away node, bypassed no-op, merged Reshape/Transpose, removed
    dead node and removed initializer counts one, so 0 means the model is already clean.
    """
    opset = default_opset(model, default=1)
    count = sum(_lift_constants(graph) for graph in _all_graphs(model))
    count += _fold_constants(model)
    count += sum(_lift_constants(graph) for graph in _all_graphs(model))  # folded shape values
    count += inline_constant_ifs(model)  # conditions folded just above; the engine refolds after
    count += sum(_simplify(graph, opset) for graph in _all_graphs(model))
    # Inner bodies first, so a body's dead nodes release outer values before the outer sweep.
    bottom_up = list(reversed(_all_graphs(model)))
    count += sum(_remove_dead_nodes(graph) for graph in bottom_up)
    count += sum(_remove_unused_initializers(graph) for graph in bottom_up)
    return count


CLEANUP = FusionPass(
    name="cleanup",
    summary="Lift constants, fold constant and shape arithmetic, drop no-ops and dead code",
    stage=PassStage.CLEANUP,
    graph_function=cleanup_graph,
)
