"""Convert a float32 model to float16 or bfloat16 in the graph, keeping sensitive ops in float32.

TensorRT 11 builds only strongly typed networks: an engine computes in the types the ONNX graph
declares, so a float16 engine needs a float16 graph (../shared/tensorrt-stubs/API-NOTES.md §1).
This pass writes that graph. Each node is planned (`plan.py`): it converts when its schema admits
the low type and the keep policy (`keep_list.py`) does not hold it back. Then, in graph order:

- a converted node's float32 inputs and outputs take the low type (only those bound to the type
  parameters that change; fixed-type inputs such as Resize's `scales` stay float32);
- where a value's type differs from what a reader needs, one Cast per (value, type) is shared by
  all readers; a value produced by a Cast is re-cast from that Cast's source, never chained
  (Cast→Cast), and a Cast to float32 whose readers all need the low type is retyped instead;
- constants (initializers and Constant nodes) are stored in the type their readers need, never
  cast at run time: converted in place when every reader wants the low type, copied
  ("<name>_fp16") when float32 readers remain. float16 saturates at ±65504, so finite values
  beyond it are clamped (masks written as -3.4e38 become -65504, not -inf) and named in the report;
- graph inputs and outputs keep float32 behind boundary Casts (`keep_io_types=True`, the output
  keeps its name), or become low precision themselves.

Integer and bool values are never touched, nor are the bodies of If/Loop/Scan.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir

from optimizer.passes.matching import ONNX_DOMAINS
from optimizer.precision.keep_list import (
    DEFAULT_KEEP,
    KeepPolicy,
    constant_array,
    is_constant,
    op_key,
)
from optimizer.precision.names import NameAllocator
from optimizer.precision.plan import NodePlan, Role, cast_goes_low, plan_nodes
from optimizer.precision.signatures import model_opsets, with_inferred_types
from optimizer.registries.precisions import PRECISIONS, Precision

__all__ = ["KeptNode", "LOW_DTYPES", "Precision", "PrecisionReport", "convert_precision",
           "low_type_limits"]

class _LowDtypes(Mapping[str, ir.DataType]):
    """Precision -> the ONNX type its registry entry says this step converts to, read from the
    registry on each use (a precision a plug-in registers later converts too)."""

    def __getitem__(self, precision: str) -> ir.DataType:
        for name, spec in PRECISIONS.items():
            if name == precision and spec.onnx_type is not None:
                return ir.DataType[spec.onnx_type]
        raise KeyError(precision)

    def __iter__(self) -> Iterator[str]:
        return (name for name, spec in PRECISIONS.items() if spec.onnx_type is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


# The precisions this step converts to, each to the ONNX type its registry entry names.
LOW_DTYPES: Mapping[str, ir.DataType] = _LowDtypes()


@functools.cache
def low_type_limits(low: ir.DataType) -> tuple[float, float]:
    """(largest finite value, unit roundoff: half the spacing just above 1) of a low type:
    float16 65504 and 2**-11, bfloat16 (2 - 2**-7) * 2**127 and 2**-8."""
    info = ml_dtypes.finfo(np.dtype(low.numpy()))  # type: ignore[no-untyped-call]  # ml_dtypes has no stubs
    return float(info.max), float(info.eps) / 2


def _suffix(dtype: ir.DataType) -> str:
    """The name tensors converted to `dtype` end in: the first precision converting to it."""
    return next((str(name) for name, low in LOW_DTYPES.items() if low == dtype), "fp32")


FLOAT = ir.DataType.FLOAT


@dataclass(frozen=True)
class KeptNode:
    """A node with float32 values that stays in float32, and why."""

    name: str
    op_type: str  # "domain.Op" outside the default domain
    reason: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class PrecisionReport:
    """What `convert_precision` did. `converted_nodes` names the nodes now computing in low
    precision (the candidates a precision search may send back to float32)."""

    precision: str
    converted: int
    kept: tuple[KeptNode, ...]
    converted_nodes: tuple[str, ...]
    casts_inserted: int
    initializers_converted: int
    saturated_constants: tuple[str, ...]  # float32 constants clamped to the low type's range
    keep_io_types: bool
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        """JSON for the job record; the converted names are left out (thousands on big models)."""
        data = asdict(self)
        data.pop("converted_nodes")
        data["kept"] = [node.to_dict() for node in self.kept]
        data["saturated_constants"] = list(self.saturated_constants)
        return data


def convert_precision(
    model: onnx.ModelProto,
    precision: Precision,
    *,
    keep_fp32: KeepPolicy = DEFAULT_KEEP,
    keep_io_types: bool = True,
    extra_fp32_nodes: Collection[str] = (),
) -> tuple[onnx.ModelProto, PrecisionReport]:
    """A copy of `model` computing in `precision` (one of `LOW_DTYPES`: fp16, bf16), and what
    was done.

    `keep_fp32` says which numerically sensitive ops stay float32 (`NO_KEEP` converts all it
    can); `extra_fp32_nodes` names further nodes to keep. Unnamed nodes are named
    "<OpType>_<index>" in the result so that every node the report lists can be named back.

    >>> fp16, report = convert_precision(model, "fp16")          # doctest: +SKIP
    >>> [(k.name, k.reason) for k in report.kept]                 # doctest: +SKIP

    Raises:
        ValueError: `precision` is not one of `LOW_DTYPES`, or `extra_fp32_nodes` names a node the
            model does not have.
    """
    if precision not in LOW_DTYPES:
        raise ValueError(f"Cannot convert to precision {precision!r}; expected one of "
                         f"{', '.join(LOW_DTYPES)}.")
    started = time.perf_counter()
    ir_model = ir.from_proto(with_inferred_types(model))
    graph = ir_model.graph
    _name_unnamed_nodes(graph)
    missing = set(extra_fp32_nodes) - {node.name for node in graph}
    if missing:
        raise ValueError(
            f"extra_fp32_nodes names {sorted(missing)}, which model {model.graph.name!r} does "
            "not have; use the node names of the model (or of a precision report).")
    low = LOW_DTYPES[precision]
    opsets = model_opsets(ir_model)
    plans = plan_nodes(graph, low=low, opsets=opsets, policy=keep_fp32,
                       extra_fp32_nodes=extra_fp32_nodes, keep_io_types=keep_io_types)
    rewriter = _Rewriter(graph, low, plans, keep_io_types)
    converted = rewriter.run()
    converted_model = ir.to_proto(ir_model)
    kept = tuple(KeptNode(node.name or "", op_key(node), plan.reason)
                 for node, plan in plans.items() if plan.role is Role.FLOAT32)
    report = PrecisionReport(
        precision=precision,
        converted=len(converted),
        kept=kept,
        converted_nodes=tuple(node.name or "" for node in converted),
        casts_inserted=rewriter.casts_inserted,
        initializers_converted=rewriter.constants_converted,
        saturated_constants=tuple(rewriter.saturated),
        keep_io_types=keep_io_types,
        seconds=time.perf_counter() - started,
    )
    return converted_model, report


def _name_unnamed_nodes(graph: ir.Graph) -> None:
    taken = {node.name for node in graph if node.name}
    for index, node in enumerate(graph):
        if not node.name:
            name, n = f"{node.op_type}_{index}", 0
            while name in taken:
                n += 1
                name = f"{node.op_type}_{index}_{n}"
            node.name = name
            taken.add(name)


def _all_values(graph: ir.Graph) -> Iterator[ir.Value]:
    yield from graph.inputs
    yield from graph.initializers.values()
    for node in graph:
        yield from node.outputs


class _Rewriter:
    """Applies the node plans to the graph in place, in graph (topological) order."""

    def __init__(self, graph: ir.Graph, low: ir.DataType, plans: dict[ir.Node, NodePlan],
                 keep_io_types: bool) -> None:
        self.graph, self.low, self.plans, self.keep_io_types = graph, low, plans, keep_io_types
        self.names = NameAllocator(graph)
        self.float32 = {v for v in _all_values(graph) if v.dtype == FLOAT}
        self.casts: dict[tuple[ir.Value, ir.DataType], ir.Value] = {}
        self.copies: dict[ir.Value, dict[ir.DataType, ir.Value]] = {}
        self.casts_inserted = 0
        self.constants_converted = 0
        self.saturated: list[str] = []

    def run(self) -> list[ir.Node]:
        """Rewrite the graph; returns the nodes that now compute in the low type."""
        if not self.keep_io_types:
            for value in self.graph.inputs:
                if value in self.float32 and not _read_in_subgraph(value, self.graph):
                    value.dtype = self.low
        low_casts = {node for node, plan in self.plans.items()
                     if plan.role is Role.CAST and cast_goes_low(node, self.plans,
                                                                 self.keep_io_types)}
        converted = []
        for node in list(self.graph):
            plan = self.plans[node]
            if plan.role is Role.CAST:
                if node in low_casts:
                    node.attributes["to"] = ir.AttrInt64("to", self.low)
                    node.outputs[0].dtype = self.low
                continue
            if plan.role is Role.UNTOUCHED:
                continue
            runs_low = plan.role is Role.LOW or (plan.role is Role.FOLLOW
                                                 and self._inputs_low(node))
            self._retype_inputs(node, plan, runs_low)
            if runs_low:
                converted.append(node)
                for index, value in enumerate(node.outputs):
                    if value in self.float32 and plan.converts_output(index):
                        value.dtype = self.low
        self._fix_outputs()
        self._drop_replaced_constants()
        return converted

    def _inputs_low(self, node: ir.Node) -> bool:
        plan = self.plans[node]
        live = [v for i, v in enumerate(node.inputs) if v is not None and v in self.float32
                and plan.converts_input(i) and not is_constant(v)]
        return bool(live) and all(v.dtype == self.low for v in live)

    def _retype_inputs(self, node: ir.Node, plan: NodePlan, runs_low: bool) -> None:
        for index, value in enumerate(node.inputs):
            if value is None or value not in self.float32:
                continue
            want = self.low if runs_low and plan.converts_input(index) else FLOAT
            if value.dtype == want:
                continue
            if is_constant(value):
                replacement = self._constant_as(value, want)
            else:
                replacement = self._cast(value, want, before=node)
            node.replace_input_with(index, replacement)

    def _cast(self, value: ir.Value, dtype: ir.DataType, *, before: ir.Node | None) -> ir.Value:
        """`value` as `dtype`: one shared Cast, reading past a Cast that produced `value`."""
        key = (value, dtype)
        if key in self.casts:
            return self.casts[key]
        source = value
        producer = value.producer()
        if producer is not None and producer.op_type == "Cast" and producer.domain in ONNX_DOMAINS:
            assert producer.inputs[0] is not None
            source = producer.inputs[0]
            if source.dtype == dtype:
                self.casts[key] = source
                return source
        name = self.names.fresh(f"{value.name}_{_suffix(dtype)}")
        output = ir.Value(name=name, type=ir.TensorType(dtype),
                          shape=ir.Shape(value.shape) if value.shape is not None else None)
        cast = ir.Node("", "Cast", [source], [ir.AttrInt64("to", dtype)], outputs=[output],
                       name=name)
        if before is None:
            self.graph.append(cast)
        else:
            self.graph.insert_before(before, cast)
        self.casts_inserted += 1
        self.casts[key] = output
        return output

    def _constant_as(self, value: ir.Value, dtype: ir.DataType) -> ir.Value:
        copies = self.copies.setdefault(value, {})
        if dtype in copies:
            return copies[dtype]
        array = _constant_array(value)
        if dtype in LOW_DTYPES.values():
            # Clamp rather than overflow: a finite float32 constant (a -3.4e38 mask fill) must
            # not turn into an infinity that later meets another one as NaN.
            limit = low_type_limits(dtype)[0]
            if (np.isfinite(array) & (np.abs(array) > limit)).any():
                array = np.clip(array, -limit, limit)
                self.saturated.append(value.name or "")
            converted = array.astype(np.dtype(dtype.numpy()))  # ml_dtypes' for bfloat16
        else:
            converted = array
        name = self.names.fresh(f"{value.name}_{_suffix(dtype)}")
        copy = ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape(array.shape),
                        const_value=ir.tensor(converted, dtype=dtype, name=name))
        self.graph.register_initializer(copy)
        copies[dtype] = copy
        return copy

    def _fix_outputs(self) -> None:
        """Give each float32 graph output its boundary type, keeping the output's name."""
        for index, value in enumerate(list(self.graph.outputs)):
            if value not in self.float32 or value.is_graph_input() or is_constant(value):
                continue
            want = FLOAT if self.keep_io_types else self.low
            if value.dtype == want:
                continue
            name = value.name or ""
            value.name = self.names.fresh(f"{name}_{_suffix(value.dtype or FLOAT)}")
            output = ir.Value(name=name, type=ir.TensorType(want),
                              shape=ir.Shape(value.shape) if value.shape is not None else None)
            cast = ir.Node("", "Cast", [value], [ir.AttrInt64("to", want)], outputs=[output],
                           name=self.names.fresh(f"{name}_cast"))
            self.graph.append(cast)
            self.casts_inserted += 1
            self.graph.outputs[index] = output

    def _drop_replaced_constants(self) -> None:
        """Store a constant only in the types still read; a sole copy takes the original name."""
        for original, copies in self.copies.items():
            self.constants_converted += 1
            if original.uses() or original.is_graph_output():
                continue
            name = original.name
            producer = original.producer()
            if producer is not None:
                self.graph.remove(producer, safe=True)
            elif name is not None and name in self.graph.initializers:
                self.graph.initializers.pop(name)
            original.name = None
            if len(copies) == 1:
                next(iter(copies.values())).name = name



def _constant_array(value: ir.Value) -> np.ndarray:
    array = constant_array(value)
    assert array is not None  # is_constant() holds
    return np.asarray(array, dtype=np.float32)


def _read_in_subgraph(value: ir.Value, graph: ir.Graph) -> bool:
    return any(user.graph is not graph for user, _ in value.uses())
