"""Keep an `If` branch that cannot run at a model's fixed input shapes from stopping the model
loading in ONNX Runtime.

silero-vad picks its 16 kHz or 8 kHz network with `If(sr == 16000)`; inside each, torch's
exporter checks the input's rank with more Ifs (`if input.dim() == 2`). Fixed at the 16 kHz
shapes (input [1, 512]), the 8 kHz branch cannot run (the original fails there too), which is
harmless, except that ONNX Runtime's graph optimizations now fold its rank checks (the shapes
are static) and type-check its LSTM with a rank-5 input: the session fails to load, at every
level above "disabled", although that branch never runs.

`relax_dead_branches` finds such branches and gives them their outer inputs through
`Reshape(x, Where(cond, Shape(x), Shape(x)))`, where `cond` is the If's own condition: the same
values (exact), but a shape ONNX Runtime cannot compute before the run (it folds no node that
reads a value only known at run time), so the branch is checked as it was with dynamic inputs.
Branches that can run keep their static shapes and are optimized at them. A branch "cannot run"
when ONNX Runtime cannot load it as a model of its own, its outer values at the shapes the
enclosing graphs infer (constants as constants): a branch ONNX Runtime refuses to load would
fail whenever it ran. It is asked only when the whole model fails to load and holds such an If,
so a model without control flow costs nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import onnx
import onnxruntime as ort
from onnx import helper

__all__ = ["relax_dead_branches"]

_LOG = logging.getLogger(__name__)
_QUIET = 4  # ONNX Runtime's FATAL: a load failure is an answer here, not something to print
_BRANCHES = ("then_branch", "else_branch")
_PROTOBUF_LIMIT = 2**31


def relax_dead_branches(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """`model` (shapes inferred) with its dead If branches relaxed as the module doc says, and
    their names ("If 'name' else_branch"); `model` itself and [] when it loads as it is, or
    when relaxing does not make it load (the caller's load check then says why)."""
    if not any(_open_ifs(model.graph)) or model.ByteSize() >= _PROTOBUF_LIMIT or _loads(model):
        return model, []  # (past 2 GB a model cannot be loaded from bytes: nothing to ask)
    relaxed_model = onnx.ModelProto()
    relaxed_model.CopyFrom(model)
    scope = _Scope(relaxed_model)
    relaxed: list[str] = []
    _relax_graph(relaxed_model, relaxed_model.graph, scope, relaxed)
    if not relaxed or not _loads(relaxed_model):
        return model, []
    _LOG.info("If branches that cannot run at these input shapes keep dynamic shapes so ONNX "
              "Runtime loads the model: %s", ", ".join(relaxed))
    return relaxed_model, relaxed


class _Scope:
    """What every value of the model is: its inferred type, or its constant value."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.types: dict[str, onnx.ValueInfoProto] = {}
        self.constants: dict[str, onnx.TensorProto] = {}
        for graph in _graphs(model.graph):
            for value in (*graph.input, *graph.value_info, *graph.output):
                if value.type.HasField("tensor_type"):
                    self.types.setdefault(value.name, value)
            for tensor in graph.initializer:
                self.constants.setdefault(tensor.name, tensor)
            for node in graph.node:
                if node.op_type == "Constant" and node.attribute[0].name == "value":
                    tensor = onnx.TensorProto()
                    tensor.CopyFrom(node.attribute[0].t)
                    tensor.name = node.output[0]
                    self.constants.setdefault(node.output[0], tensor)
        inputs = {value.name for value in model.graph.input}
        for name in inputs & self.constants.keys():  # an input may override its initializer
            del self.constants[name]


def _relax_graph(model: onnx.ModelProto, graph: onnx.GraphProto, scope: _Scope,
                 relaxed: list[str]) -> None:
    for node in graph.node:
        open_if = node.op_type == "If" and node.input[0] not in scope.constants
        for attribute in node.attribute:
            for body in _bodies(attribute):
                if not (open_if and attribute.name in _BRANCHES):
                    _relax_graph(model, body, scope, relaxed)
                    continue
                if _branch_loads(model, body, scope):
                    continue
                _relax_graph(model, body, scope, relaxed)  # its own dead branches first
                if _branch_loads(model, body, scope):
                    continue
                _hide_outer_shapes(body, node.input[0], scope)
                relaxed.append(f"If {node.name or node.output[0]!r} {attribute.name}")


def _hide_outer_shapes(branch: onnx.GraphProto, condition: str, scope: _Scope) -> None:
    # Every computed outer value the branch reads, at a rank of at least 1, is read through a
    # Reshape to its own shape, chosen by the If's condition (the same shape either way).
    hidden = sorted(name for name in _outer_names(branch)
                    if name not in scope.constants and _rank(scope, name))
    nodes = []
    for name in hidden:
        shape, chosen, value = (f"{name}__dead_branch_{part}" for part in ("shape", "chosen", "x"))
        nodes += [helper.make_node("Shape", [name], [shape]),
                  helper.make_node("Where", [condition, shape, shape], [chosen]),
                  helper.make_node("Reshape", [name, chosen], [value])]
        _rename_reads(branch, name, value)
    kept = list(branch.node)
    del branch.node[:]
    branch.node.extend(nodes + kept)


def _rank(scope: _Scope, name: str) -> int:
    value = scope.types.get(name)
    if value is None or not value.type.tensor_type.HasField("shape"):
        return 0
    return len(value.type.tensor_type.shape.dim)


def _rename_reads(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for attribute in node.attribute:
            for body in _bodies(attribute):
                _rename_reads(body, old, new)
    for output in graph.output:
        if output.name == old:  # a branch may pass an outer value straight out
            identity = helper.make_node("Identity", [new], [f"{old}__dead_branch_out"])
            graph.node.append(identity)
            output.name = identity.output[0]


def _branch_loads(model: onnx.ModelProto, branch: onnx.GraphProto, scope: _Scope) -> bool:
    """Whether ONNX Runtime loads `branch` as a model of its own (see the module doc)."""
    outer = sorted(_outer_names(branch))
    if any(name not in scope.constants and name not in scope.types for name in outer):
        return True  # a value of unknown type: no judgement, leave the branch as it is
    outputs = [helper.make_node("Identity", [value.name], [f"__branch_output_{k}"])
               for k, value in enumerate(branch.output)]
    graph = helper.make_graph(
        [*branch.node, *outputs], "branch",
        [scope.types[name] for name in outer if name not in scope.constants],
        [helper.make_empty_tensor_value_info(node.output[0]) for node in outputs],
        initializer=[*branch.initializer,
                     *(scope.constants[name] for name in outer if name in scope.constants)])
    # IR 4 and up: its initializers need not be inputs.
    standalone = helper.make_model(graph, opset_imports=model.opset_import,
                                   ir_version=max(model.ir_version, 4))
    standalone.functions.extend(model.functions)
    return _loads(standalone)


def _loads(model: onnx.ModelProto) -> bool:
    options = ort.SessionOptions()
    options.log_severity_level = _QUIET
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.disable_prepacking", "1")
    try:
        ort.InferenceSession(model.SerializeToString(), sess_options=options,
                             providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - ORT raises its own unrelated exception types
        return False
    return True


def _outer_names(graph: onnx.GraphProto) -> set[str]:
    """The names `graph` (its subgraphs included) reads but does not define."""
    read: set[str] = {value.name for value in graph.output}
    defined: set[str] = set()
    for inner in _graphs(graph):
        defined.update(value.name for value in inner.input)
        defined.update(tensor.name for tensor in inner.initializer)
        for node in inner.node:
            read.update(name for name in node.input if name)
            defined.update(node.output)
    return read - defined


def _open_ifs(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    constants = {tensor.name for tensor in graph.initializer}
    for inner in _graphs(graph):
        for node in inner.node:
            if node.op_type == "If" and node.input[0] not in constants:
                yield node


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            for body in _bodies(attribute):
                yield from _graphs(body)


def _bodies(attribute: onnx.AttributeProto) -> list[onnx.GraphProto]:
    return [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
