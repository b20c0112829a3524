"""Walk an ONNX model's graphs, including the subgraphs of If/Loop/Scan and local functions, and
name what a rewrite adds to them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

import onnx

__all__ = ["constant_tensors", "fresh_name", "iter_nodes", "iter_tensors", "op_histogram"]


def iter_nodes(model: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    """Every node of the main graph, its subgraphs and the model's local functions."""
    yield from _graph_nodes(model.graph)
    for function in model.functions:
        for node in function.node:
            yield node
            for graph in _subgraphs(node):
                yield from _graph_nodes(graph)


def iter_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every stored tensor: initializers, sparse initializers and tensor-valued attributes.

    This covers Constant nodes (their `value` attribute) and tensors inside subgraphs, which is
    where a check for external data has to look besides the top-level initializers.
    """
    yield from _graph_tensors(model.graph)
    for function in model.functions:
        for node in function.node:
            yield from _attribute_tensors(node)


def graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every stored tensor of one graph, as `iter_tensors` finds them, subgraphs included."""
    return _graph_tensors(graph)


def constant_tensors(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """The graph's initializers and Constant nodes' values, by name (this graph only)."""
    found = {tensor.name: tensor for tensor in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                found[node.output[0]] = value
    return found


def op_histogram(model: onnx.ModelProto) -> dict[str, int]:
    """Node count per operator, keyed "Conv" for the default domain and "domain.Op" otherwise.

    Sorted by key so two histograms diff cleanly in a manifest.
    """
    counts = Counter(
        node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        for node in iter_nodes(model)
    )
    return dict(sorted(counts.items()))


def fresh_name(base: str, taken: set[str]) -> str:
    """`base`, else `base_2`, `base_3`...: the first not in `taken`, which it joins.

    >>> fresh_name("x", {"x"})
    'x_2'
    """
    name, index = base, 1
    while name in taken:
        index += 1
        name = f"{base}_{index}"
    taken.add(name)
    return name


def _graph_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for subgraph in _subgraphs(node):
            yield from _graph_nodes(subgraph)


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    yield from _sparse_parts(graph.sparse_initializer)
    for node in graph.node:
        yield from _attribute_tensors(node)


def _attribute_tensors(node: onnx.NodeProto) -> Iterator[onnx.TensorProto]:
    for attribute in node.attribute:
        if attribute.HasField("t"):
            yield attribute.t
        yield from attribute.tensors
        if attribute.HasField("sparse_tensor"):
            yield from _sparse_parts([attribute.sparse_tensor])
        yield from _sparse_parts(attribute.sparse_tensors)
    for subgraph in _subgraphs(node):
        yield from _graph_tensors(subgraph)


def _sparse_parts(sparse_tensors: Iterable[onnx.SparseTensorProto]) -> Iterator[onnx.TensorProto]:
    # A sparse tensor stores its data in two dense tensors, either of which may be external.
    for sparse in sparse_tensors:
        yield sparse.values
        yield sparse.indices


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attribute in node.attribute:
        if attribute.HasField("g"):
            yield attribute.g
        yield from attribute.graphs
