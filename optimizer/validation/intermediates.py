"""Read a model's intermediate tensors by name, a few at a time, in ONNX Runtime.

`IntermediateReader(model, directory).read(names, feeds)` makes `names` the only outputs of a
copy of the model pruned to the nodes they depend on, runs it with ONNX Runtime's graph
optimizations disabled (so every node, and every name, survives as written) and returns the
arrays. Only the requested tensors are held at once: a caller reading a large model in chunks
holds one chunk's activations, not the model's.

The weights are written once, as ONNX external data, to `directory`; each read writes only a
small graph that points into that file. ONNX Runtime maps page-aligned external data into
memory instead of copying it, so a read costs little more than the activations it returns,
where serializing the model for each chunk would cost three to four times its size (measured
on ResNet-50: +300 MiB per session from bytes, +20 MiB to open from external data; see
bench/localize.py).

The added outputs carry a name and no type: ONNX Runtime infers the types itself, including for
contrib ops (FusedConv, MultiHeadAttention...) that onnx's shape inference does not know, and a
declared value_info shape may be stale after a rewrite. Only the top-level graph is addressed;
tensors inside subgraphs (If/Loop/Scan bodies) cannot be outputs and are not offered.

A graph fused for TensorRT is read with its fuseforge plugin nodes decomposed into standard ops
(`plugins.decompose.runnable_in_onnxruntime`): a plugin's outputs keep their names, so they, and
every tensor outside the plugins, read as in the fused graph; the decomposition's own tensors exist
only in the decomposed copy and callers, who name tensors of the graph they passed, never ask for
them.
"""

from __future__ import annotations

import heapq
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto

from optimizer.backends.onnxruntime.runner import PROVIDERS, session_options
from optimizer.errors import EngineBuildError, InferenceError, InternalError, UnsupportedModelError
from optimizer.plugins.decompose import runnable_in_onnxruntime

__all__ = ["IntermediateReader", "consumed_names", "intermediate_values", "topological_nodes"]

_ORT_ERRORS_ONLY = 3  # unused initializers and inputs of a pruned copy are expected, not news
# ONNX Runtime maps external data into memory when its offset is a multiple of the allocation
# granularity: the page size on Linux (Windows' 64 KiB falls back to reading, still correct).
_ALIGNMENT = 4096


def consumed_names(node: onnx.NodeProto) -> set[str]:
    """Every name `node` reads: its inputs and the outer-scope names its subgraphs capture."""
    names = {name for name in node.input if name}
    for attribute in node.attribute:
        for graph in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
            for inner in graph.node:
                names |= consumed_names(inner)
    return names


def topological_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The top-level nodes in a topological order, keeping the file's order where it is one.

    ONNX requires graph.node to be sorted already; this also accepts a graph that is not
    (Kahn's algorithm, always taking the earliest ready node). Nodes in a cycle, or reading a
    name nobody defines, are appended in file order rather than dropped.
    """
    made_by = {name: index for index, node in enumerate(graph.node)
               for name in node.output if name}
    waiting_on = [0] * len(graph.node)
    readers: dict[int, list[int]] = {}
    for index, node in enumerate(graph.node):
        sources = {made_by[name] for name in consumed_names(node) if name in made_by} - {index}
        waiting_on[index] = len(sources)
        for source in sources:
            readers.setdefault(source, []).append(index)
    ready = [index for index, count in enumerate(waiting_on) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for reader in readers.get(index, ()):
            waiting_on[reader] -= 1
            if waiting_on[reader] == 0:
                heapq.heappush(ready, reader)
    placed = set(order)
    order += [index for index in range(len(graph.node)) if index not in placed]
    return [graph.node[index] for index in order]


class IntermediateReader:
    """Reads chunks of one model's intermediate tensors; owns `directory/stem.*` meanwhile.

    >>> with tempfile.TemporaryDirectory() as tmp:                   # doctest: +SKIP
    ...     reader = IntermediateReader(model, Path(tmp), "original")
    ...     values = reader.read(["conv1_out", "relu1_out"], feeds)   # one dict per feed

    Raises (on construction):
        UnsupportedModelError: the model's weights are external data not loaded into it.
        PluginNotFoundError, PassError: a fuseforge plugin node cannot be decomposed.
    """

    def __init__(self, model: onnx.ModelProto, directory: Path, stem: str) -> None:
        self.model = runnable_in_onnxruntime(model)
        self.model_path = directory / f"{stem}.onnx"
        self._made_by = {name: index for index, node in enumerate(self.model.graph.node)
                         for name in node.output if name}
        self._weights = _write_weights(self.model, directory / f"{stem}.weights")

    def read(self, names: Sequence[str], feeds: Sequence[Mapping[str, np.ndarray]],
             ) -> list[dict[str, object]]:
        """For each feed, tensor name -> value (an ndarray, or a list for sequence types).

        `names` must be produced by top-level nodes; feeds may name inputs the pruned copy no
        longer reads (they are dropped).

        Raises:
            InternalError: a name is not produced by a top-level node, or a feed lacks an input.
            EngineBuildError: ONNX Runtime cannot load the pruned copy.
            InferenceError: ONNX Runtime fails while running it.
        """
        graph_name = self.model.graph.name
        missing = [name for name in names if name not in self._made_by]
        if missing:
            raise InternalError(
                f"IntermediateReader: {missing[:5]} are not produced by a top-level node of "
                f"graph {graph_name!r}; only node outputs of the main graph can be read.")
        self.model_path.write_bytes(self._pruned_copy(names).SerializeToString())
        options = session_options("disabled", None)
        options.log_severity_level = _ORT_ERRORS_ONLY
        try:
            session = ort.InferenceSession(str(self.model_path), sess_options=options,
                                           providers=list(PROVIDERS))
        # ONNX Runtime's errors share no base class below Exception.
        except Exception as err:
            raise EngineBuildError(
                f"ONNX Runtime could not load graph {graph_name!r} with {len(names)} "
                f"intermediate tensors as outputs (first {names[0]!r}): {err}") from err
        wanted = [arg.name for arg in session.get_inputs()]
        values = []
        for feed in feeds:
            if absent := [name for name in wanted if name not in feed]:
                raise InternalError(
                    f"IntermediateReader: the feeds for graph {graph_name!r} lack inputs "
                    f"{absent}; they name {sorted(feed)}.")
            try:
                outputs = session.run(list(names), {name: feed[name] for name in wanted})
            except Exception as err:
                raise InferenceError(
                    f"ONNX Runtime failed to compute intermediate tensors of graph "
                    f"{graph_name!r} (first {names[0]!r}) on inputs {sorted(feed)}: "
                    f"{err}") from err
            values.append(dict(zip(names, outputs, strict=True)))
        return values

    def _pruned_copy(self, names: Sequence[str]) -> onnx.ModelProto:
        """The graph cut down to the nodes `names` depend on, with `names` as its only outputs
        and its weights pointing into the weights file."""
        model, all_nodes = self.model, self.model.graph.node
        nodes = [all_nodes[i] for i in sorted(_ancestors(names, all_nodes, self._made_by))]
        read = set().union(*(consumed_names(node) for node in nodes)) if nodes else set()
        pruned = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name,
                                 producer_version=model.producer_version, domain=model.domain,
                                 model_version=model.model_version)
        pruned.opset_import.extend(model.opset_import)
        pruned.functions.extend(model.functions)
        graph = pruned.graph
        graph.name = model.graph.name
        graph.node.extend(nodes)
        graph.initializer.extend(stub for name, stub in self._weights.items() if name in read)
        graph.sparse_initializer.extend(
            t for t in model.graph.sparse_initializer if t.values.name in read)
        # Before IR 4 initializers are also listed as inputs; keep those only with their weight.
        graph.input.extend(value for value in model.graph.input
                           if value.name not in self._weights or value.name in read)
        graph.output.extend(onnx.ValueInfoProto(name=name) for name in names)
        return pruned


def intermediate_values(
    model: onnx.ModelProto, names: Sequence[str], feeds: Sequence[Mapping[str, np.ndarray]],
) -> list[dict[str, object]]:
    """One read of `IntermediateReader` in a temporary directory; see there."""
    with tempfile.TemporaryDirectory(prefix="fuseforge-intermediates-") as tmp:
        return IntermediateReader(model, Path(tmp), "model").read(names, feeds)


def _write_weights(model: onnx.ModelProto, path: Path) -> dict[str, TensorProto]:
    """Write the initializers' raw data to `path`; name -> a tensor that points there.

    Tensors under one page stay inline, and so do tensors stored in typed fields rather than
    raw_data: shape inference reads small constants (Reshape shapes, ReduceMean axes, Resize
    scales) while loading and cannot read external data.

    Raises:
        UnsupportedModelError: an initializer is external data the model does not hold.
    """
    stubs: dict[str, TensorProto] = {}
    with path.open("wb") as file:
        for tensor in model.graph.initializer:
            if tensor.data_location == TensorProto.EXTERNAL:
                raise UnsupportedModelError(
                    f"Initializer {tensor.name!r} of graph {model.graph.name!r} is stored in "
                    "an external data file; load the model with its external data "
                    "(onnx.load(path, load_external_data=True)) before localising.")
            if not tensor.HasField("raw_data") or len(tensor.raw_data) < _ALIGNMENT:
                stubs[tensor.name] = tensor
                continue
            offset = file.tell()
            padding = -offset % _ALIGNMENT
            file.write(b"\0" * padding)
            file.write(tensor.raw_data)
            stub = TensorProto(name=tensor.name, data_type=tensor.data_type,
                               dims=tensor.dims, data_location=TensorProto.EXTERNAL)
            for key, value in (("location", path.name), ("offset", str(offset + padding)),
                               ("length", str(len(tensor.raw_data)))):
                stub.external_data.add(key=key, value=value)
            stubs[tensor.name] = stub
    return stubs


def _ancestors(names: Iterable[str], nodes: Sequence[onnx.NodeProto],
               made_by: Mapping[str, int]) -> set[int]:
    """Indices of the nodes that must run to compute `names`."""
    seen: set[int] = set()
    stack = [made_by[name] for name in names]
    while stack:
        index = stack.pop()
        if index in seen:
            continue
        seen.add(index)
        stack.extend(made_by[name] for name in consumed_names(nodes[index]) if name in made_by)
    return seen
