"""Which nodes a precision conversion keeps in float32 because float16/bfloat16 would hurt them.

float16 holds magnitudes up to 65504 with 11 significant bits; bfloat16 holds float32's range
with 8 bits. The ops below fail in those formats in known ways, so the default policy keeps them
in float32 (the conversion adds Casts around them):

- Pow, Exp: x**2 exceeds 65504 once |x| > 256 and exp(x) once x > 11.1.
- Reductions that sum (ReduceSum, ReduceSumSquare, ReduceL1/L2, ReduceLogSumExp, ReduceProd,
  CumSum): a sum over thousands of elements leaves the float16 range even when each term fits.
- Softmax, LogSoftmax: their statistics (the row max and the sum of exponentials).
- Normalisation ops (LayerNormalization, GroupNormalization, RMSNormalization,
  InstanceNormalization and onnxruntime's SkipLayerNormalization family): their mean and
  variance. LayerNormalization's `stash_type=1` promises float32 statistics for float16 input,
  but TensorRT's ONNX parser applies it only to weakly typed networks
  (`if (!stronglyTyped) layer->setComputePrecision(...)` in onnx-tensorrt's LayerNormalization
  importer) and TensorRT 11 builds only strongly typed ones, so the op itself stays float32.
- The same statistics written out in primitive ops (LayerNorm as ReduceMean, Sub, Pow or Mul,
  ReduceMean, Add eps, Sqrt, Div or Reciprocal+Mul; RMSNorm without the Sub): found by
  structure, so a plain ReduceMean or Div elsewhere still converts.
- TopK: float16 ties and rounding change which indices win.
- Range and shape arithmetic (float ops fed only by Shape/Size): float16 counts exactly only to
  2048, so a computed size or position would come out wrong.
- Regions with nothing to gain: connected low-precision nodes with no compute-bound op
  (MatMul, Gemm, Conv...) and no large weight, between float32 neighbours, would only add
  rounding and Casts.

The fuseforge plugins (SkipLayerNorm, BiasGelu, MultiHeadAttention) are not on the list either:
their kernels compute sums, statistics, softmax and products in float32 whatever their I/O type
(optimizer/plugins/*/README.md), so only their inputs and outputs are rounded. Whether a plugin
may take a type at all is a schema question, settled in plan.py.

Erf is not on the list: its output lies in [-1, 1] and GELU's use of it loses at most
|x| * 2**-11 absolutely on the negative tail, well inside float16 tolerances.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import onnx_ir as ir

from optimizer.passes.matching import MS_DOMAIN, ONNX_DOMAINS

__all__ = [
    "DEFAULT_KEEP",
    "NO_KEEP",
    "KeepPolicy",
    "constant_array",
    "is_constant",
    "op_key",
    "policy_reasons",
]

_SUM_OVERFLOW = "sums many elements: the total can exceed the float16 range"
_NORM_STATISTICS = ("normalisation statistics (mean and variance); TensorRT ignores stash_type "
                    "in strongly typed networks")


@dataclass(frozen=True)
class KeepPolicy:
    """What a conversion keeps in float32 for accuracy (not for schema reasons, which are fixed).

    `ops` maps an op key ("Pow", or "com.microsoft.SkipLayerNormalization" outside the default
    domain) to the reason the report gives. `normalization_statistics` keeps the statistics of
    LayerNorm/RMSNorm written out in primitive ops; `shape_arithmetic` keeps float ops computed
    only from Shape/Size outputs. `cast_only_regions` keeps a connected region of would-be
    low-precision nodes in float32 when it holds no compute-bound op (MatMul, Gemm, Conv...)
    and no large weight, and float32 surrounds it: converting it would buy only rounding and
    Casts (e.g. the BatchNormalization and Relu between float32 Convs when bfloat16 Conv needs
    opset 22).
    """

    ops: Mapping[str, str] = field(default_factory=dict, hash=False)
    normalization_statistics: bool = False
    shape_arithmetic: bool = False
    cast_only_regions: bool = False


DEFAULT_KEEP = KeepPolicy(
    ops=MappingProxyType({
        "Pow": "raises to a power: x**2 exceeds 65504 for |x| > 256",
        "Exp": "exp(x) exceeds 65504 for x > 11.1",
        "ReduceSum": _SUM_OVERFLOW,
        "ReduceSumSquare": _SUM_OVERFLOW,
        "ReduceL1": _SUM_OVERFLOW,
        "ReduceL2": _SUM_OVERFLOW,
        "ReduceLogSumExp": _SUM_OVERFLOW,
        "ReduceProd": "multiplies many elements: the product leaves the float16 range",
        "CumSum": _SUM_OVERFLOW,
        "Softmax": "softmax statistics (row max and sum of exponentials)",
        "LogSoftmax": "softmax statistics (row max and sum of exponentials)",
        "LayerNormalization": _NORM_STATISTICS,
        "GroupNormalization": _NORM_STATISTICS,
        "InstanceNormalization": _NORM_STATISTICS,
        "RMSNormalization": _NORM_STATISTICS,
        f"{MS_DOMAIN}.SkipLayerNormalization": _NORM_STATISTICS,
        f"{MS_DOMAIN}.SimplifiedLayerNormalization": _NORM_STATISTICS,
        f"{MS_DOMAIN}.SkipSimplifiedLayerNormalization": _NORM_STATISTICS,
        "TopK": "selects by value: float16 rounding and ties change the indices",
        "Range": "produces positions: float16 counts exactly only to 2048",
    }),
    normalization_statistics=True,
    shape_arithmetic=True,
    cast_only_regions=True,
)

NO_KEEP = KeepPolicy()

_REDUCTIONS = ("ReduceMean", "ReduceSum")
_DENSE_CONSTANT = ("value", "value_float", "value_floats", "value_int", "value_ints")
# Ops that carry a statistic forward when every other operand is a constant (eps, 1, 0.5...).
_STATISTIC_STEPS = ("Add", "Sub", "Mul", "Div", "Sqrt", "Reciprocal", "Max", "Clip", "Pow")


def op_key(node: ir.Node) -> str:
    """"Conv" for the default domain, "domain.Op" otherwise (as in op histograms)."""
    return node.op_type if node.domain in ONNX_DOMAINS else f"{node.domain}.{node.op_type}"


def policy_reasons(graph: ir.Graph, policy: KeepPolicy) -> dict[ir.Node, str]:
    """The nodes of `graph` (not of its subgraphs) that `policy` keeps in float32, with why."""
    reasons: dict[ir.Node, str] = {}
    if policy.shape_arithmetic:
        for node in _shape_arithmetic(graph):
            reasons.setdefault(node, "computes only from Shape/Size outputs (shape arithmetic)")
    if policy.normalization_statistics:
        for node in _normalization_statistics(graph):
            reasons.setdefault(node, "statistics of a written-out LayerNorm/RMSNorm (mean, "
                                     "variance and the division by the standard deviation)")
    for node in graph:
        reason = policy.ops.get(op_key(node))
        if reason is not None:
            reasons.setdefault(node, reason)
    return reasons


def is_constant(value: ir.Value) -> bool:
    """An initializer that callers cannot feed, or the output of a Constant node."""
    if value.const_value is not None and not value.is_graph_input():
        return True
    producer = value.producer()
    if producer is None or producer.op_type != "Constant" or producer.domain not in ONNX_DOMAINS:
        return False
    # Dense forms only: a sparse or referenced (function attribute) value is not read here.
    return any(name in _DENSE_CONSTANT and not attr.is_ref()
               for name, attr in producer.attributes.items())


def constant_array(value: ir.Value) -> np.ndarray | None:
    """The value of a constant (see `is_constant`); None for anything else."""
    if not is_constant(value):
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    producer = value.producer()
    assert producer is not None
    for name, attr in producer.attributes.items():
        if name == "value":
            return attr.as_tensor().numpy()
        if name in _DENSE_CONSTANT:
            return np.asarray(attr.value)
    return None


def _is_onnx(node: ir.Node | None, *op_types: str) -> bool:
    return node is not None and node.domain in ONNX_DOMAINS and node.op_type in op_types


def _shape_arithmetic(graph: ir.Graph) -> Iterator[ir.Node]:
    """Nodes whose every non-constant input descends from Shape or Size only."""
    derived: set[ir.Value] = set()
    for node in graph:
        if _is_onnx(node, "Shape", "Size"):
            derived.update(node.outputs)
            continue
        live = [v for v in node.inputs if v is not None and not is_constant(v)]
        if live and all(v in derived for v in live):
            derived.update(node.outputs)
            if any(out.dtype is not None and out.dtype.is_floating_point()
                   for out in node.outputs):
                yield node


def _square_source(node: ir.Node) -> ir.Value | None:
    """x for Pow(x, 2) or Mul(x, x); None otherwise."""
    if _is_onnx(node, "Mul") and len(node.inputs) == 2 and node.inputs[0] is node.inputs[1]:
        return node.inputs[0]
    if _is_onnx(node, "Pow") and len(node.inputs) == 2:
        exponent = node.inputs[1]
        array = constant_array(exponent) if exponent is not None else None
        if array is not None and array.size == 1 and float(array.reshape(-1)[0]) == 2:
            return node.inputs[0]
    return None


def _normalization_statistics(graph: ir.Graph) -> Iterator[ir.Node]:
    """Every node of a written-out LayerNorm/RMSNorm's statistics.

    Anchored on a reduction of a square: ReduceMean/ReduceSum(Pow(a, 2) or Mul(a, a)). With
    a = Sub(x, ReduceMean(x)) that is LayerNorm (the Sub and the mean belong to it), otherwise
    RMSNorm. From the variance, steps with constant operands (Add eps, Sqrt, Reciprocal...) carry
    the statistic forward up to the Div/Mul that applies it to a.
    """
    for square in graph:
        centered = _square_source(square)
        if centered is None:
            continue
        for variance, _ in square.outputs[0].uses():
            if not _is_onnx(variance, *_REDUCTIONS):
                continue
            region = [square, variance]
            sub = centered.producer()
            if _is_onnx(sub, "Sub") and sub is not None and sub.inputs[1] is not None:
                mean = sub.inputs[1].producer()
                if (_is_onnx(mean, *_REDUCTIONS) and mean is not None
                        and mean.inputs[0] is sub.inputs[0]):
                    region += [sub, mean]
            region += _statistic_consumers(variance.outputs[0], centered)
            yield from region


def _statistic_consumers(variance: ir.Value, centered: ir.Value) -> list[ir.Node]:
    statistics = {variance}
    frontier = [variance]
    found: list[ir.Node] = []
    while frontier:
        value = frontier.pop()
        for user, index in value.uses():
            if user in found or not _is_onnx(user, *_STATISTIC_STEPS):
                continue
            others = [v for i, v in enumerate(user.inputs) if i != index and v is not None]
            if all(is_constant(v) or v in statistics for v in others):
                found.append(user)
                statistics.update(user.outputs)
                frontier.extend(user.outputs)
            elif _is_onnx(user, "Div", "Mul") and centered in others and all(
                    v is centered or v in statistics or is_constant(v) for v in others):
                found.append(user)  # applies the statistic: d / std or d * (1 / std)
    return found
