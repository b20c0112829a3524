"""Structural limits an uploaded model must stay within, checked before anything else reads it.

A hostile model can be valid protobuf, pass the ONNX checker and still sink whatever loads it
later: control flow nested deep enough to exhaust a recursive walker, a declared dim of 2**40
that a backend tries to allocate, a shape of rank 10,000, names of megabytes, or names a
database refuses to store (NUL bytes; protobuf hands back `bytes` for a string that is not
UTF-8). `check_limits` walks every graph (the main graph, If/Loop/Scan bodies, local functions)
once, iteratively, so the walk itself cannot run out of stack.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import onnx

from optimizer.errors import InvalidModelError, ModelLimitError

__all__ = ["ModelLimits", "check_limits"]

_SHOWN_CHARS = 40  # how much of an offending name a message repeats


@dataclass(frozen=True)
class ModelLimits:
    """Upper bounds on a model's structure; the defaults admit every real model we know of.

    max_dim: a declared dim (of a value's shape or a stored tensor). TensorRT's dims are int32.
    max_rank: dims in one shape. ONNX sets no bound; real models stay under 8.
    max_subgraph_depth: If/Loop/Scan bodies nested in bodies; real models nest 1-3.
    max_name_length: characters in one name (graph, node, value, initializer, op, domain...).
    """

    max_dim: int = 2**31 - 1
    max_rank: int = 32
    max_subgraph_depth: int = 8
    max_name_length: int = 4096


def check_limits(model: onnx.ModelProto, limits: ModelLimits, file_name: str) -> None:
    """Refuse a model over `limits`, or with a name that is not storable text.

    `file_name` is the upload's name, for messages.

    Raises:
        ModelLimitError: over a limit; its `limit` names the `ModelLimits` field.
        InvalidModelError: a name holds a NUL character or is not valid UTF-8.
    """
    check = _Checker(limits, file_name)
    for what, text in (("producer_name", model.producer_name),
                       ("producer_version", model.producer_version), ("domain", model.domain)):
        check.text(text, f"the model's {what}")
    for opset in model.opset_import:
        check.text(opset.domain, "an opset import's domain")
    graphs: list[tuple[onnx.GraphProto, int, str]] = [(model.graph, 0, "the main graph")]
    for function in model.functions:
        check.function(function)
        graphs += [(graph, 1, f"{where} of local function {_shown(function.name)}")
                   for where, graph in check.nodes(function.node)]
    while graphs:
        graph, depth, where = graphs.pop()
        if depth > limits.max_subgraph_depth:
            raise ModelLimitError(
                f"Model file {file_name!r}: the body in {where} is nested {depth} deep in "
                f"If/Loop/Scan bodies; the limit is {limits.max_subgraph_depth}. Flatten the "
                "control flow (real models nest 1-3 levels).", limit="max_subgraph_depth")
        check.graph(graph, where)
        graphs += [(subgraph, depth + 1, sub_where)
                   for sub_where, subgraph in check.nodes(graph.node)]


class _Checker:
    """The per-object checks, each raising with the object named."""

    def __init__(self, limits: ModelLimits, file_name: str) -> None:
        self.limits = limits
        self.file_name = file_name

    def text(self, text: str | bytes, what: str) -> None:
        if isinstance(text, bytes):  # upb's answer for a proto2 string that is not UTF-8
            raise InvalidModelError(
                f"Model file {self.file_name!r}: {what} is not valid UTF-8 text "
                f"({_shown(text)}); ONNX strings are UTF-8. Re-export the model.")
        if len(text) > self.limits.max_name_length:
            raise ModelLimitError(
                f"Model file {self.file_name!r}: {what} is {len(text)} characters long "
                f"({_shown(text)}); the limit is {self.limits.max_name_length}. Shorten the "
                "names when exporting.", limit="max_name_length")
        if "\0" in text:
            raise InvalidModelError(
                f"Model file {self.file_name!r}: {what} holds a NUL character "
                f"({_shown(text)}), which names cannot be stored with. Re-export the model "
                "without it.")

    def dims(self, dims: Iterable[int], what: str) -> None:
        dims = list(dims)
        if len(dims) > self.limits.max_rank:
            raise ModelLimitError(
                f"Model file {self.file_name!r}: {what} has rank {len(dims)}; the limit is "
                f"{self.limits.max_rank} dims.", limit="max_rank")
        for axis, dim in enumerate(dims):
            if dim > self.limits.max_dim:
                raise ModelLimitError(
                    f"Model file {self.file_name!r}: {what} declares dim {axis} = {dim}; the "
                    f"limit is {self.limits.max_dim}. Declare the dim symbolic (a name such "
                    "as 'batch') or at its real size.", limit="max_dim")

    def function(self, function: onnx.FunctionProto) -> None:
        what = f"local function {_shown(function.name)}"
        self.text(function.name, f"the name of {what}")
        self.text(function.domain, f"the domain of {what}")
        for role, names in (("input", function.input), ("output", function.output)):
            for name in names:
                self.text(name, f"an {role} name of {what}")
        for index, value in enumerate(function.value_info):
            self.value(value, f"value_info {index} of {what}")

    def graph(self, graph: onnx.GraphProto, where: str) -> None:
        self.text(graph.name, f"the name of {where}")
        for role, values in (("input", graph.input), ("output", graph.output),
                             ("value_info", graph.value_info)):
            for index, value in enumerate(values):
                self.value(value, f"{role} {index} of {where}")
        for index, tensor in enumerate(graph.initializer):
            self.tensor(tensor, f"initializer {index} of {where}")
        for index, sparse in enumerate(graph.sparse_initializer):
            what = f"sparse initializer {index} of {where}"
            self.dims(sparse.dims, what)
            self.tensor(sparse.values, f"the values of {what}")
            self.tensor(sparse.indices, f"the indices of {what}")

    def value(self, value: onnx.ValueInfoProto, what: str) -> None:
        self.text(value.name, f"the name of {what}")
        what = f"{what} ({_shown(value.name)})"
        for shape in _shapes(value.type):
            self.dims((dim.dim_value for dim in shape.dim), what)
            for dim in shape.dim:
                self.text(dim.dim_param, f"a dim name of {what}")

    def tensor(self, tensor: onnx.TensorProto, what: str) -> None:
        self.text(tensor.name, f"the name of {what}")
        self.dims(tensor.dims, f"{what} ({_shown(tensor.name)})")

    def nodes(self, nodes: Iterable[onnx.NodeProto]) -> Iterator[tuple[str, onnx.GraphProto]]:
        """Check each node; yield (where, subgraph) for every body it holds."""
        for index, node in enumerate(nodes):
            self.text(node.op_type, f"the op type of node {index}")
            self.text(node.name, f"the name of node {index} ({_shown(node.op_type)})")
            node_what = f"node {index} ({_shown(node.op_type)} named {_shown(node.name)})"
            self.text(node.domain, f"the domain of {node_what}")
            for role, names in (("input", node.input), ("output", node.output)):
                for name in names:
                    self.text(name, f"an {role} name of {node_what}")
            for attribute in node.attribute:
                self.text(attribute.name, f"an attribute name of {node_what}")
                for tensor in [attribute.t] if attribute.HasField("t") else []:
                    self.tensor(tensor, f"tensor attribute of {node_what}")
                for tensor in attribute.tensors:
                    self.tensor(tensor, f"tensor attribute of {node_what}")
                subgraphs = [attribute.g] if attribute.HasField("g") else []
                for subgraph in [*subgraphs, *attribute.graphs]:
                    yield f"attribute {_shown(attribute.name)} of {node_what}", subgraph


def _shapes(value_type: onnx.TypeProto) -> Iterator[onnx.TensorShapeProto]:
    """The shapes a type declares, through sequences, optionals and maps."""
    pending = [value_type]
    while pending:
        current = pending.pop()
        kind = current.WhichOneof("value")
        if kind in ("tensor_type", "sparse_tensor_type"):
            inner = getattr(current, kind)
            if inner.HasField("shape"):
                yield inner.shape
        elif kind in ("sequence_type", "optional_type"):
            pending.append(getattr(current, kind).elem_type)
        elif kind == "map_type":
            pending.append(current.map_type.value_type)


def _shown(text: str | bytes) -> str:
    """`text` quoted for a message, cut to its first characters."""
    cut = text[:_SHOWN_CHARS]
    return repr(cut) + ("..." if len(text) > _SHOWN_CHARS else "")
