"""Replace every fuseforge node by its standard-op subgraph, so ONNX Runtime runs the model.

A model fused for TensorRT holds plugin nodes ONNX Runtime cannot run; validating it on the
CPU runs this decomposition first. Each node is replaced by what its plugin's `decompose` writes
(in the model's default-domain opset), its outputs keep their names, and the fuseforge opset
import is dropped once no node uses it.

Every CPU tool (bisection, localisation, precision evaluation and search, the default ablation
runner) reaches ONNX Runtime through `runnable_in_onnxruntime`, called just before a session is
made: by `backends.onnxruntime.runner.runner_for_model` and by
`validation.intermediates.IntermediateReader`. The tools themselves keep working on the fused
graph, so what they report (a node, a rule, a precision plan) names the plugin nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import overload

import numpy as np
import onnx
import onnx_ir as ir

from optimizer.errors import InternalError
from optimizer.model.graphs import fresh_name
from optimizer.plugins.base import DOMAIN
from optimizer.plugins.registry import plugin_for_op

__all__ = [
    "has_plugin_nodes",
    "imports_plugin_opset",
    "decompose_for_onnxruntime",
    "runnable_in_onnxruntime",
]

_ONNX_DOMAINS = ("", "ai.onnx")


class _Builder:
    """Records the standard-op nodes a decomposition writes (a SubgraphBuilder)."""

    def __init__(self, opset: int) -> None:
        self._opset = opset
        self._tape = ir.tape.Tape()

    @property
    def opset(self) -> int:
        return self._opset

    @property
    def nodes(self) -> Sequence[ir.Node]:
        return self._tape.nodes

    def op(self, op_type: str, inputs: Sequence[ir.Value | None],
           attributes: Mapping[str, float | int | str | Sequence[int]] | None = None,
           ) -> ir.Value:
        return self._tape.op(op_type, inputs, attributes)

    def constant(self, array: np.ndarray) -> ir.Value:
        return self._tape.op("Constant", [], {"value": ir.tensor(array)})


def has_plugin_nodes(model: ir.Model) -> bool:
    return any(node.domain == DOMAIN for node in ir.traversal.RecursiveGraphIterator(model.graph))


def imports_plugin_opset(model: onnx.ModelProto) -> bool:
    """Whether `model` imports the fuseforge opset: a cheap test for plugin nodes (a fuseforge
    node without its import is an invalid model, which ONNX Runtime rejects either way)."""
    return any(opset.domain == DOMAIN for opset in model.opset_import)


def runnable_in_onnxruntime(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` itself when it imports no fuseforge opset, else a decomposed copy.

    Raises:
        PluginNotFoundError: a fuseforge node has an op no plugin implements.
        PassError: a node cannot be decomposed (e.g. its input type is unknown).
    """
    if not imports_plugin_opset(model):
        return model
    decomposed: onnx.ModelProto = ir.to_proto(decompose_for_onnxruntime(ir.from_proto(model)))
    return decomposed


@overload
def decompose_for_onnxruntime(model: ir.Model) -> ir.Model: ...


@overload
def decompose_for_onnxruntime(model: onnx.ModelProto) -> onnx.ModelProto: ...


def decompose_for_onnxruntime(model: ir.Model | onnx.ModelProto) -> ir.Model | onnx.ModelProto:
    """`model` with every fuseforge node replaced by standard ONNX ops.

    An `ir.Model` is rewritten in place and returned; a `ModelProto` is left as it is and a
    new, decomposed one returned.

    Raises:
        PluginNotFoundError: a fuseforge node has an op no plugin implements.
        PassError: a node cannot be decomposed (e.g. its input type is unknown).
    """
    if isinstance(model, onnx.ModelProto):
        return ir.to_proto(decompose_for_onnxruntime(ir.from_proto(model)))
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if opset is None:
        raise InternalError("the model imports no default ONNX opset to decompose plugins into")
    nodes = [n for n in ir.traversal.RecursiveGraphIterator(model.graph) if n.domain == DOMAIN]
    taken = _names(model)
    for node in nodes:
        plugin = plugin_for_op(node.domain, node.op_type)
        builder = _Builder(opset)
        # A decomposition gives every output the op has; the node may declare fewer.
        replacements = list(plugin.decompose(builder, node))[:len(node.outputs)]
        if len(replacements) != len(node.outputs):
            raise InternalError(f"{plugin.name} decomposition gave {len(replacements)} values for "
                                f"{len(node.outputs)} outputs of '{node.name}'")
        _name_new(builder.nodes, node.name or plugin.op_type, taken)
        # An output the node omits (empty name, e.g. SkipLayerNorm's sum) is not replaced:
        # the new value would take its empty name.
        pairs = [(out, new) for out, new in zip(node.outputs, replacements, strict=True)
                 if new is not None and (out.name or out.uses() or out.is_graph_output())]
        old, new_values = [out for out, _ in pairs], [new for _, new in pairs]
        graph = node.graph
        assert graph is not None  # nodes come from a graph traversal
        ir.convenience.replace_nodes_and_values(graph, node, [node], builder.nodes, old,
                                                new_values)
    if not has_plugin_nodes(model):
        model.opset_imports.pop(DOMAIN, None)
    return model


def _names(model: ir.Model) -> set[str]:
    names = {v.name for v in (*model.graph.inputs, *model.graph.initializers.values())
             if v.name}
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if node.name:
            names.add(node.name)
        names.update(v.name for v in (*node.inputs, *node.outputs) if v is not None and v.name)
    return names


def _name_new(nodes: Sequence[ir.Node], base: str, taken: set[str]) -> None:
    """Name the decomposition's nodes and values after the node they replace, avoiding `taken`."""
    for i, node in enumerate(nodes):
        node.name = fresh_name(f"{base}/decomposed/{node.op_type}_{i}", taken)
        for j, value in enumerate(node.outputs):
            value.name = fresh_name(f"{base}/decomposed/{node.op_type}_{i}_out{j}", taken)
