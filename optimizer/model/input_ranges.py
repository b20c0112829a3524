"""Infer the values each integer input of a model can take from how its graph uses the input.

Random token ids in a fixed range break real models: a token-type embedding has 2 rows, and
ONNX Runtime refuses a Gather index past them. So each integer input is followed forward
through the ops that only move or retype its values (Cast, Unsqueeze, Reshape, Squeeze, Expand,
Identity, Flatten, Transpose, Slice, Tile) to the ops that limit it:

- Gather (or com.microsoft EmbedLayerNormalization) indexing a stored table of N rows → [0, N);
- a mask: an arithmetic op (Sub, Mul, Add) once the input is cast to a float, a Where
  condition or Not once cast to bool, Equal/Less/Greater against a stored 0 or 1, or the mask
  input of com.microsoft Attention → {0, 1}, drawn as [0, 2).

Every use found limits the range; the range is their intersection (several embeddings: the
smallest). An input no use limits keeps the caller's default.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

__all__ = ["InputRange", "effective_ranges", "infer_input_ranges"]

# Ops whose first input's values reach their output unchanged (or only moved): follow through.
_VALUE_PRESERVING = frozenset({
    "Cast", "CastLike", "Unsqueeze", "Reshape", "Squeeze", "Expand", "Identity", "Flatten",
    "Transpose", "Slice", "Tile",
})
_ARITHMETIC = frozenset({"Sub", "Mul", "Add"})  # not Div: a mask of 0 would divide by it
_COMPARISONS = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
_FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                          onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16})
_MASK = (0, 2)


@dataclass(frozen=True)
class InputRange:
    """Values drawn for one input: [low, high), and where that range comes from.

    `source` is "given" (the caller's --input-range / input_ranges) or "inferred"; `reason`
    says why, e.g. "from Gather on 'embeddings.word_embeddings.weight' (30522 rows)".
    """

    low: int | float
    high: int | float
    source: str
    reason: str

    def describe(self, name: str) -> str:
        """One line for a report: "input_ids: [0, 30522) from Gather on 'w' (30522 rows)"."""
        return f"{name}: [{self.low}, {self.high}) {self.reason}"

    def to_dict(self) -> dict[str, object]:
        return {"low": self.low, "high": self.high, "source": self.source, "reason": self.reason}


def infer_input_ranges(model: onnx.ModelProto) -> dict[str, InputRange]:
    """The range each integer input of `model`'s main graph is limited to by its uses, for the
    inputs some use limits (see the module docstring); never raises on odd graphs.

    >>> infer_input_ranges(bert)["token_type_ids"]                      # doctest: +SKIP
    InputRange(low=0, high=2, source='inferred', reason="from Gather on 'type_emb' (2 rows)")
    """
    graph = model.graph
    stored = _stored_tensors(graph)
    users: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            if name:
                users[name].append(node)
    initializers = {tensor.name for tensor in graph.initializer}
    ranges = {}
    for value in graph.input:
        elem_type = value.type.tensor_type.elem_type
        if value.name in initializers or not _is_integer(elem_type):
            continue
        limits = list(_limits(value.name, users, stored))
        if limits:
            # A table larger than the dtype holds (an int8 input into 300 rows): its values.
            top = int(np.iinfo(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).max) + 1
            limits = [(low, min(high, top), reason) for low, high, reason in limits]
            ranges[value.name] = _intersection(limits)
    return ranges


def effective_ranges(inferred: Mapping[str, InputRange],
                     given: Mapping[str, tuple[float, float]] | None) -> dict[str, InputRange]:
    """The ranges to draw with: the caller's `given` ranges win, inferred ones fill the rest."""
    ranges = dict(inferred)
    for name, bounds in (given or {}).items():
        low, high = bounds
        ranges[name] = InputRange(low=low, high=high, source="given", reason="as given")
    return ranges


def _limits(name: str, users: Mapping[str, list[onnx.NodeProto]],
            stored: Mapping[str, _Stored]) -> Iterator[tuple[int, int, str]]:
    # (low, high, reason) for every use of `name` that limits its values, following it through
    # value-preserving ops; `kind` is the element type it has reached (int, float or bool).
    seen: set[str] = set()
    pending = [(name, "int")]
    while pending:
        value, kind = pending.pop()
        if value in seen:
            continue
        seen.add(value)
        for node in users.get(value, ()):
            limit = _limit_of_use(node, value, kind, stored)
            if limit is not None:
                yield limit
            if node.op_type in _VALUE_PRESERVING and node.input[0] == value and node.output:
                pending.append((node.output[0], _kind_after(node, kind)))


def _limit_of_use(node: onnx.NodeProto, value: str, kind: str,
                  stored: Mapping[str, _Stored]) -> tuple[int, int, str] | None:
    op, inputs = node.op_type, list(node.input)
    if node.domain in ("", "ai.onnx") and op == "Gather" and len(inputs) > 1 \
            and inputs[1] == value and kind == "int":
        return _table_limit(inputs[0], _attribute(node, "axis", 0), stored, op)
    if node.domain == "com.microsoft" and op == "EmbedLayerNormalization" and kind == "int":
        # inputs: input_ids, segment_ids, word_embedding, position_embedding, segment_embedding
        tables = {0: 2, 1: 4}
        for position, table in tables.items():
            if len(inputs) > table and inputs[position] == value:
                return _table_limit(inputs[table], 0, stored, op)
        return None
    if node.domain == "com.microsoft" and op == "Attention" and len(inputs) > 3 \
            and inputs[3] == value:
        return (*_MASK, "as the mask of Attention")
    if node.domain not in ("", "ai.onnx"):
        return None
    if kind == "float" and op in _ARITHMETIC:
        return (*_MASK, f"as a mask (cast to float, then {op})")
    if kind == "bool" and (op == "Not" or (op == "Where" and inputs[0] == value)):
        return (*_MASK, f"as a mask (cast to bool, then {op})")
    if op in _COMPARISONS and kind == "int":
        others = [stored.get(name) for name in inputs if name != value]
        constant = others[0].scalar if others and others[0] is not None else None
        if constant in (0.0, 1.0):
            return (*_MASK, f"as a mask ({op} with {constant:g})")
    return None


def _table_limit(table: str, axis: int, stored: Mapping[str, _Stored],
                 op: str) -> tuple[int, int, str] | None:
    found = stored.get(table)
    rank = 0 if found is None else len(found.shape)
    if found is None or rank == 0 or not -rank <= axis < rank:
        return None
    rows = found.shape[axis]
    if rows < 1:
        return None
    axis_note = "" if axis in (0, -rank) else f" axis {axis}"
    return 0, rows, f"from {op} on {table!r}{axis_note} ({rows} rows)"


def _intersection(limits: list[tuple[int, int, str]]) -> InputRange:
    low = max(limit[0] for limit in limits)
    high = min(limit[1] for limit in limits)
    # The uses that set the bounds, each once, in graph order.
    lowest = min(limit[0] for limit in limits)
    reasons = list(dict.fromkeys(reason for l_low, l_high, reason in limits
                                 if l_high == high or lowest < l_low == low))
    if low >= high:  # uses that contradict each other: the tightest alone is still drawable
        low, high, reason = min(limits, key=lambda limit: limit[1] - limit[0])
        reasons = [reason]
    return InputRange(low=low, high=high, source="inferred", reason="; ".join(reasons))


def _kind_after(node: onnx.NodeProto, kind: str) -> str:
    if node.op_type != "Cast":
        return kind
    to = _attribute(node, "to", 0)
    if to == onnx.TensorProto.BOOL:
        return "bool"
    if to in _FLOAT_TYPES:
        return "float"
    return "int" if _is_integer(to) else "other"


@dataclass(frozen=True)
class _Stored:
    """A stored tensor as far as ranges need it: its shape, and its value when a scalar."""

    shape: tuple[int, ...]
    scalar: float | None


def _stored_tensors(graph: onnx.GraphProto) -> dict[str, _Stored]:
    # Initializers and Constant outputs: a table's rows, a comparison's constant.
    stored: dict[str, _Stored] = {}
    for tensor in graph.initializer:
        stored[tensor.name] = _describe(tensor)
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output:
            for attribute in node.attribute:
                if attribute.name == "value":
                    stored[node.output[0]] = _describe(attribute.t)
    return stored


def _describe(tensor: onnx.TensorProto) -> _Stored:
    shape = tuple(int(dim) for dim in tensor.dims)
    if int(np.prod(shape, dtype=np.int64)) != 1:
        return _Stored(shape, None)  # a table: never decode a 100 MB embedding for its rows
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return _Stored(shape, None)  # its value is in a file this walk has no folder for
    try:
        return _Stored(shape, float(numpy_helper.to_array(tensor).reshape(-1)[0]))
    except (ValueError, TypeError):
        return _Stored(shape, None)


def _attribute(node: onnx.NodeProto, name: str, default: int) -> int:
    for attribute in node.attribute:
        if attribute.name == name:
            return int(attribute.i)
    return default


def _is_integer(elem_type: int) -> bool:
    return elem_type in (onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32,
                         onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.UINT16,
                         onnx.TensorProto.UINT32, onnx.TensorProto.UINT64)
