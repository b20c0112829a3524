"""Rank the nodes of a precision-converted model by how much float32 would help each, in one pass.

The emulated model (`emulate.py`) computes in float32 and rounds each low-precision tensor under
its own name, so every tensor the original also produces can be compared with the original's by
name. For each node, the error it adds is the relative error of its output minus the largest
relative error among its inputs (relative L2 error over all feeds: ||c - r|| / ||r||); the
inputs a conversion Cast feeds it are traced back through the Cast to the float32 tensor, so a
node is charged with the rounding of what it reads. Candidates are grouped into units, each kept
in float32 together:

- range: a tensor whose original values exceed the low type's largest finite value (65504 for
  float16) turns into infinities wherever it is stored in that type, so its producer and every
  reader must compute in float32 together. Score: infinite.
- overflow: a node whose output is non-finite where the original's is finite, from finite inputs.
  Score: infinite.
- amplifier: a node whose added error is many units of rounding (`AMPLIFY` x the unit roundoff)
  and whose output error is many times its inputs' (`AMPLIFY` x) amplifies their rounding
  (cancellation in a Sub, a division by a small number, a softmax of large logits): keeping it
  alone cannot help, so its unit also holds the nearest converted producers of its inputs
  (through data movement, Casts and nodes already kept). A node kept in float32 can be an
  amplifier too; its unit then holds only those producers.
- otherwise the node alone, scored by the error it adds.

Tensors are read a chunk at a time (`intermediates.IntermediateReader`), so memory holds one
chunk's activations of each model, never all of them. The estimate is first order: it does not
say how an error reaches the outputs, which is why the search evaluates what it keeps.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from optimizer.passes.matching import ONNX_DOMAINS
from optimizer.precision.convert import LOW_DTYPES, Precision, low_type_limits
from optimizer.precision.emulate import emulate_precision
from optimizer.precision.keep_list import is_constant
from optimizer.validation.intermediates import IntermediateReader, topological_nodes
from optimizer.validation.metrics import abs_error

__all__ = ["AMPLIFY", "SensitivityProbe", "SensitivityUnit"]

AMPLIFY = 4.0  # added error (in units of rounding) and output/input error ratio of an amplifier
CHUNK_SIZE = 32  # tensors read at once from each model
FLOATS = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16})
# Ops whose low-precision output is exactly their input's values: keeping them in float32 helps
# only together with what produces their input.
EXACT_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity",
                       "Expand", "Slice", "Gather", "Concat", "Split", "Tile", "Pad"})


@dataclass(frozen=True)
class SensitivityUnit:
    """Converted nodes to keep in float32 together, how much that is expected to help, and why."""

    nodes: tuple[str, ...]
    score: float  # relative error the unit adds; inf for an overflow
    kind: str  # "range", "overflow", "amplifier" or "node"
    reason: str


@dataclass(frozen=True)
class _Stat:
    rel_err: float
    ref_absmax: float


class SensitivityProbe:
    """Measures converted variants of one original model against it on fixed feeds.

    The original's weights are written once to `directory` (see `IntermediateReader`) and each
    measurement writes the emulated variant's; the caller owns `directory`.
    """

    def __init__(self, original: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]],
                 precision: Precision, directory: Path) -> None:
        self.original, self.feeds, self.directory = original, feeds, directory
        self.reader = IntermediateReader(original, directory, "original")
        self.order = {name: index for index, node in enumerate(topological_nodes(original.graph))
                      for name in node.output if name}
        # Largest finite value and unit roundoff (half the spacing just above 1) of the low type.
        self.low_max, self.unit_roundoff = low_type_limits(LOW_DTYPES[precision])
        self.low_name = LOW_DTYPES[precision].name.lower()
        self.input_absmax = {name: max(float(np.max(np.abs(np.asarray(feed[name], np.float64)),
                                                    initial=0.0)) for feed in feeds)
                             for name in feeds[0]}
        self.measurements = 0

    def measure(self, converted: onnx.ModelProto, converted_nodes: Collection[str],
                kept: Collection[str]) -> list[SensitivityUnit]:
        """Units of `converted`'s low-precision nodes, most sensitive first.

        `converted_nodes` are the nodes computing in the low type (the conversion report's);
        `kept` the nodes a search already keeps in float32 (walked through to reach producers).
        """
        self.measurements += 1
        graph = ir.from_proto(converted).graph
        emulated = emulate_precision(converted)
        comparable = set(self.order) & {name for node in emulated.graph.node
                                        for name in node.output}
        view = _GraphView(graph, comparable, set(converted_nodes), set(kept))
        stats = self._stats(emulated, view.tensor_names())
        return _Ranker(view, stats, self).units()

    def _stats(self, emulated: onnx.ModelProto, names: set[str]) -> dict[str, _Stat]:
        stats = {name: _Stat(0.0, absmax) for name, absmax in self.input_absmax.items()}
        # Graph inputs nobody fed (an initializer's default) have no stat and count as exact.
        wanted = sorted((name for name in names if name in self.order),
                        key=lambda name: self.order[name])
        stem = f"emulated_{self.measurements}"
        reader = IntermediateReader(emulated, self.directory, stem)
        try:
            for start in range(0, len(wanted), CHUNK_SIZE):
                chunk = wanted[start:start + CHUNK_SIZE]
                references = self.reader.read(chunk, self.feeds)
                candidates = reader.read(chunk, self.feeds)
                for name in chunk:
                    stat = _tensor_stat([r[name] for r in references],
                                        [c[name] for c in candidates])
                    if stat is not None:
                        stats[name] = stat
        finally:
            for path in self.directory.glob(f"{stem}.*"):
                path.unlink()
        return stats


def _tensor_stat(references: list[object], candidates: list[object]) -> _Stat | None:
    """Relative L2 error over all feeds (inf for a NaN/inf the reference lacks) and the
    reference's largest finite magnitude; None for a tensor that is not float."""
    if not all(isinstance(a, np.ndarray) and a.dtype.kind == "f"
               for a in (*references, *candidates)):
        return None
    noise = signal = absmax = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for ref_array, cand_array in zip(references, candidates, strict=True):
            assert isinstance(ref_array, np.ndarray) and isinstance(cand_array, np.ndarray)
            if ref_array.shape != cand_array.shape:
                return _Stat(math.inf, 0.0)
            err = abs_error(ref_array, cand_array)
            ref = ref_array.astype(np.float64)[np.isfinite(ref_array)]
            noise += float(np.sum(err * err))
            signal += float(np.sum(ref * ref))
            absmax = max(absmax, float(np.max(np.abs(ref), initial=0.0)))
    rel_err = math.sqrt(noise / signal) if signal > 0.0 else math.sqrt(noise)
    return _Stat(rel_err, absmax)


class _GraphView:
    """The converted graph's nodes, with each float value traced to a comparable tensor name."""

    def __init__(self, graph: ir.Graph, comparable: set[str], converted: set[str],
                 kept: set[str]) -> None:
        self.graph, self.comparable = graph, comparable
        self.converted, self.kept = converted, kept
        self.inputs = {value.name for value in graph.inputs if value.name}

    def source(self, value: ir.Value) -> ir.Value | None:
        """The value under a comparable name (or a graph input) that `value` is a cast of."""
        seen = 0
        current: ir.Value | None = value
        while current is not None and seen < 8:
            if current.name in self.comparable or current.name in self.inputs:
                return current
            producer = current.producer()
            if producer is None or not _is_cast(producer):
                return None
            current, seen = producer.inputs[0], seen + 1
        return None

    def output(self, value: ir.Value) -> ir.Value | None:
        """`value`, or the boundary Cast that gives a graph output its name back."""
        if value.name in self.comparable:
            return value
        for user, _ in value.uses():
            if _is_cast(user) and user.outputs[0].name in self.comparable:
                return user.outputs[0]
        return None

    def float_inputs(self, node: ir.Node) -> list[ir.Value]:
        sources = (self.source(v) for v in node.inputs
                   if v is not None and v.dtype in FLOATS and not is_constant(v))
        return [v for v in sources if v is not None]

    def float_outputs(self, node: ir.Node) -> list[ir.Value]:
        outputs = (self.output(v) for v in node.outputs if v.dtype in FLOATS)
        return [v for v in outputs if v is not None]

    def measured_nodes(self) -> Iterator[ir.Node]:
        """Nodes that compute (not the conversion's own Casts) and write a comparable float."""
        for node in self.graph:
            if node.name in self.converted or node.name in self.kept or not _is_cast(node):
                if self.float_outputs(node):
                    yield node

    def tensor_names(self) -> set[str]:
        names: set[str] = set()
        for node in self.measured_nodes():
            names.update(v.name for v in (*self.float_inputs(node), *self.float_outputs(node))
                         if v.name)
        return names

    def is_candidate(self, node: ir.Node) -> bool:
        return node.name in self.converted

    def producers_to_keep(self, node: ir.Node) -> list[ir.Node]:
        """The nearest converted producers of `node`'s inputs, walking up through data
        movement (included), Casts and nodes already kept (passed)."""
        found: list[ir.Node] = []
        seen: set[ir.Node] = set()
        stack = list(self.float_inputs(node))
        while stack:
            producer = stack.pop().producer()
            if producer is None or producer in seen:
                continue
            seen.add(producer)
            if self.is_candidate(producer):
                found.append(producer)
                if producer.op_type not in EXACT_OPS:
                    continue
            elif producer.name not in self.kept:
                continue  # kept by the policy: its inputs are the policy's business
            stack.extend(self.float_inputs(producer))
        return found


class _Ranker:
    def __init__(self, view: _GraphView, stats: dict[str, _Stat],
                 probe: SensitivityProbe) -> None:
        self.view, self.stats = view, stats
        self.low_max, self.low_name = probe.low_max, probe.low_name
        self.threshold = AMPLIFY * probe.unit_roundoff

    def units(self) -> list[SensitivityUnit]:
        units = self._range_units()
        for node in self.view.measured_nodes():
            unit = self._node_unit(node)
            if unit is not None:
                units.append(unit)
        # Stable: equal scores stay in graph order, range units first.
        return sorted(units, key=lambda unit: -unit.score)

    def _error(self, values: list[ir.Value]) -> float | None:
        errors = [self.stats[v.name].rel_err for v in values if v.name in self.stats]
        return max(errors) if errors else None

    def _node_unit(self, node: ir.Node) -> SensitivityUnit | None:
        out_err = self._error(self.view.float_outputs(node))
        if out_err is None:
            return None
        in_err = self._error(self.view.float_inputs(node)) or 0.0
        candidate = self.view.is_candidate(node)
        label = f"{node.name!r} ({node.op_type})"
        if math.isinf(out_err):
            if math.isinf(in_err):
                return None  # the overflow came from upstream
            if candidate:
                return SensitivityUnit(
                    (node.name or "",), math.inf, "overflow",
                    f"its output overflows {self.low_name} (NaN or infinity where the original "
                    "is finite)")
            added = math.inf
        else:
            added = out_err - in_err
        if added <= 0.0:
            return None
        if added > self.threshold and out_err > AMPLIFY * in_err:
            producers = [p.name or "" for p in self.view.producers_to_keep(node)]
            nodes = ([node.name or ""] if candidate else []) + producers
            if nodes and producers:
                return SensitivityUnit(
                    tuple(nodes), added, "amplifier",
                    f"{label} amplifies the relative error of its inputs from {in_err:.2g} to "
                    f"{out_err:.2g}: float32 there and in its producers")
        if not candidate:
            return None
        return SensitivityUnit((node.name or "",), added, "node",
                               f"adds a relative error of {added:.2g} (output {out_err:.2g}, "
                               f"inputs {in_err:.2g})")

    def _range_units(self) -> list[SensitivityUnit]:
        """Candidates joined by tensors beyond the low type's range, one unit per group."""
        parent: dict[str, str] = {}

        def root(name: str) -> str:
            while parent[name] != name:
                parent[name] = parent[parent[name]]
                name = parent[name]
            return name

        tensors: dict[str, list[str]] = {}
        for node in self.view.measured_nodes():
            if not self.view.is_candidate(node):
                continue
            for value in (*self.view.float_inputs(node), *self.view.float_outputs(node)):
                stat = self.stats.get(value.name or "")
                if stat is not None and stat.ref_absmax > self.low_max:
                    tensors.setdefault(value.name or "", []).append(node.name or "")
        for names in tensors.values():
            for name in names:
                parent.setdefault(name, name)
            for name in names[1:]:
                parent[root(name)] = root(names[0])
        groups: dict[str, list[str]] = {}
        for name in parent:
            groups.setdefault(root(name), []).append(name)
        units = []
        for members in groups.values():
            crossing = [t for t, names in tensors.items() if root(names[0]) == root(members[0])]
            largest = max(self.stats[t].ref_absmax for t in crossing)
            units.append(SensitivityUnit(
                tuple(members), math.inf, "range",
                f"reads or writes {_quoted(crossing)}, whose values reach {largest:.3g}, past "
                f"the {self.low_name} maximum {self.low_max:.6g}"))
        return units


def _is_cast(node: ir.Node) -> bool:
    return node.op_type == "Cast" and node.domain in ONNX_DOMAINS


def _quoted(names: list[str], shown: int = 4) -> str:
    text = ", ".join(repr(name) for name in names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")
