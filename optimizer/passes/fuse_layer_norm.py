"""Fuse LayerNorm written out in primitive ops into one LayerNormalization (opset 17).

With mean = ReduceMean(x, axes), d = x - mean and var = ReduceMean(d², axes) (d² written as
Pow(d, 2) or Mul(d, d)), the written-out form
    y = d / Sqrt(var + eps) * gamma + beta        (or d * Reciprocal(Sqrt(var + eps)) ...)
equals LayerNormalization(x, gamma', beta', axis=-k, epsilon=eps) when `axes` are the last k
axes of x. gamma' and beta' are gamma and beta broadcast to the normalized shape
x.shape[-k:]; without gamma the scale is ones, without beta the bias is left out. Add and Mul
operands may come in either order. Sqrt(var) without the Add is eps = 0 (torch's dynamo
exporter drops an Add of 1e-12 as negligible).

Safe only when: the model imports opset >= 17 of the default domain (LayerNormalization's first
version; pass upgrade_opset_for_layer_norm, which runs just before, converts a model at 11-16
to 17 when this pass would then fuse, see there why no other form serves below 17); both
ReduceMeans reduce the same trailing, contiguous axes with keepdims=1 (axes from the attribute
before opset 18, from a constant input from 18 on; no axes means all axes); x's normalized dims
are known statically (the job's load stage infers shapes); eps, the exponent, gamma and beta
are constants (not graph inputs) of x's floating-point type, eps one value >= 0 and the
exponent exactly 2; gamma and beta vary only along normalized axes (else the result is not
x-shaped or not a per-row affine map); and no intermediate (mean, d, var, ...) is read outside
the pattern or is a graph output.

Numerics: LayerNormalization accumulates in float32 (stash_type=1) also for float16 input, so a
float16 model gets slightly more accurate, not bit-identical, results.

Speed: on ONNX Runtime 1.32 CPU with graph optimizations disabled, LayerNormalization is 2.0-2.3x
(one thread) as fast as the written-out ops at sequence 128, hidden 128-768, batch 1 and 8
(bench/fuse_norm_gelu.py); at level "all" ORT fuses the pattern itself (1.0x).

Backends: LayerNormalization-17 is native to ONNX Runtime and to TensorRT's ONNX parser, so both
get the same rules (and the same opset upgrade below 17).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, OrValue, RewriteRule

from optimizer.passes.base import FusionPass, PassStage, on_every_backend
from optimizer.passes.checks import (
    attr_int,
    const_array,
    first_refusal,
    producer,
    refuse_if_intermediates_escape,
    refuse_if_not_constant,
    unique_initializer_name,
)
from optimizer.passes.matching import ONNX_DOMAINS, FormsRule, default_opset, node_label

__all__ = [
    "FUSE_LAYER_NORM",
    "LAYER_NORM_OPSET",
    "UPGRADE_REFUSAL_KEY",
    "FuseLayerNorm",
    "FuseLayerNormBiasOnly",
    "FuseLayerNormScaleOnly",
    "FuseLayerNormUnscaled",
    "layer_norm_rules",
]

LAYER_NORM_OPSET = 17
# model.meta key under which upgrade_opset_for_layer_norm keeps why it left the opset alone.
UPGRADE_REFUSAL_KEY = "fuseforge.layer_norm_opset_upgrade_refused"
LAYER_NORM_DTYPES = frozenset(
    {ir.DataType.FLOAT16, ir.DataType.BFLOAT16, ir.DataType.FLOAT, ir.DataType.DOUBLE}
)


# --- LayerNorm -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _LayerNormPlan:
    axis: int  # negative: -k for the last k axes
    epsilon: float
    scale: np.ndarray  # gamma broadcast to the normalized shape
    bias: np.ndarray | None
    scale_is_gamma: bool  # gamma already has the normalized shape: reuse its value
    bias_is_beta: bool


def _reduced_axes(node: ir.Node, rank: int) -> list[int] | str:
    """The axes a ReduceMean reduces, in 0..rank-1, or why they cannot be used."""
    if attr_int(node, "keepdims", 1) != 1:
        return f"{node_label(node)} has keepdims=0"
    axes_input = node.inputs[1] if len(node.inputs) > 1 else None
    if axes_input is not None:
        if axes_input.const_value is None or axes_input.is_graph_input():
            return f"axes '{axes_input.name}' of {node_label(node)} are not a constant"
        axes = [int(a) for a in const_array(axes_input).reshape(-1)]
    elif "axes" in node.attributes:
        axes = list(node.attributes["axes"].as_ints())
    else:
        axes = []
    if not axes:
        if attr_int(node, "noop_with_empty_axes", 0):
            return f"{node_label(node)} has no axes and noop_with_empty_axes=1"
        return list(range(rank))
    if any(not -rank <= a < rank for a in axes):
        return f"{node_label(node)} axes {axes} are out of range for rank {rank}"
    return sorted({a % rank for a in axes})


def _fit_to_normalized(array: np.ndarray, name: str, norm_shape: tuple[int, ...],
                       rank: int) -> np.ndarray | str:
    """`array` broadcast to `norm_shape`, or why it varies along other axes or does not fit."""
    k = len(norm_shape)
    if array.ndim > rank:
        return f"'{name}' has rank {array.ndim}, above x's rank {rank}"
    leading, trailing = array.shape[:-k] if array.ndim > k else (), array.shape[-k:]
    if any(d != 1 for d in leading):
        return f"'{name}' with shape {array.shape} varies along axes that are not normalized"
    trailing = (1,) * (k - len(trailing)) + tuple(trailing)
    if any(t not in (1, n) for t, n in zip(trailing, norm_shape, strict=True)):
        return f"'{name}' with shape {array.shape} does not broadcast to {norm_shape}"
    return np.broadcast_to(array.reshape(trailing), norm_shape)


def _first_known_shape(*values: ir.Value | None) -> tuple[int | None, ...] | None:
    """The first known shape among `values`, with None for symbolic dims."""
    for value in values:
        if value is not None and value.shape is not None:
            return tuple(d if isinstance(d, int) else None for d in value.shape)
    return None


def _scalar(value: ir.Value, rank: int) -> float | str:
    array = const_array(value)
    if array.size != 1 or array.ndim > rank:
        return f"'{value.name}' has shape {array.shape}, expected a single value"
    return float(array.reshape(-1)[0])


class _LayerNormRule(FormsRule):
    has_scale: ClassVar[bool]
    has_bias: ClassVar[bool]
    # Ops after this rule's root that a larger rule of this pass would take in as gamma or beta.
    larger_rule_ops: ClassVar[tuple[str, ...]]

    def __init__(self, *, require_opset: bool = True) -> None:
        """`require_opset=False` matches below opset 17 too: the opset upgrade counts with it
        the LayerNorms a conversion would let fuse (its rewrite would write an invalid node)."""
        super().__init__()
        self.require_opset = require_opset

    def forms(self) -> Sequence[Callable[..., Any]]:
        return [self._form(divide, scale_first, bias_first)
                for divide, scale_first, bias_first in product(
                    ("div", "mul_reciprocal", "reciprocal_mul"),
                    (False, True) if self.has_scale else (False,),
                    (False, True) if self.has_bias else (False,))]

    def _form(self, divide: str, scale_first: bool, bias_first: bool) -> Callable[..., Any]:
        def form(op: Any, x: ir.Value, two: ir.Value, epsilon: ir.Value, gamma: ir.Value,
                 beta: ir.Value) -> Any:
            mean = op.ReduceMean(x, _allow_other_inputs=True, _outputs=["mean"])
            deviation = op.Sub(x, mean, _outputs=["deviation"])
            squared = OrValue([op.Pow(deviation, two), op.Mul(deviation, deviation)])
            variance = op.ReduceMean(squared, _allow_other_inputs=True, _outputs=["variance"])
            std = op.Sqrt(OrValue([op.Add(variance, epsilon), op.Add(epsilon, variance),
                                   variance]))
            if divide == "div":
                y = op.Div(deviation, std)
            elif divide == "mul_reciprocal":
                y = op.Mul(deviation, op.Reciprocal(std))
            else:
                y = op.Mul(op.Reciprocal(std), deviation)
            if self.has_scale:
                y = op.Mul(gamma, y) if scale_first else op.Mul(y, gamma)
            if self.has_bias:
                y = op.Add(beta, y) if bias_first else op.Add(y, beta)
            return y

        return form

    def check(self, context: Any, x: ir.Value, two: ir.Value | None,
              epsilon: ir.Value | None, gamma: ir.Value | None, beta: ir.Value | None,
              mean: ir.Value, variance: ir.Value, deviation: ir.Value) -> MatchResult:
        refusal = first_refusal(self._refuse_if_a_larger_rule_decides(context.output_values[0]),
                                refuse_if_not_constant(epsilon, two, gamma, beta),
                                refuse_if_intermediates_escape(context))
        if refusal is not None:
            return refusal
        plan = self._plan(x, two, epsilon, gamma, beta, mean, variance, deviation)
        if isinstance(plan, MatchResult):
            return plan
        # The opset last: upgrade_opset_for_layer_norm converts a model only for LayerNorms
        # that pass every other check, so a refusal for the opset alone means that pass did not
        # run or said why it left the model as it is (an unknown shape, say, is named above).
        opset = default_opset(context.model)
        if self.require_opset and opset < LAYER_NORM_OPSET:
            upgrade_refused = context.model.meta.get(UPGRADE_REFUSAL_KEY)
            return MatchResult().fail(
                f"the model imports opset {opset} of the default domain; LayerNormalization "
                f"needs {LAYER_NORM_OPSET} and "
                + (f"the model was not converted: {upgrade_refused}" if upgrade_refused else
                   "pass 'upgrade_opset_for_layer_norm', which converts the model to it, is not "
                   "among this run's passes"))
        return MatchResult()

    def _refuse_if_a_larger_rule_decides(self, output: ir.Value) -> MatchResult | None:
        """A Mul or Add by a constant after the root is a gamma or beta the larger rule refused.

        Fusing the core alone would hide that refusal from the report (refusals are collected
        after fusing). A non-constant operand is no gamma or beta: then the core fuses alone,
        e.g. LayerNorm without affine parameters followed by a residual Add.
        """
        users = [user for user, _ in output.uses()]
        if output.is_graph_output() or len(users) != 1:
            return None
        [user] = users
        if user.op_type not in self.larger_rule_ops or user.domain not in ONNX_DOMAINS:
            return None
        others = [v for v in user.inputs if v is not output]
        other = others[0] if len(others) == 1 else None
        if other is not None and refuse_if_not_constant(other) is None:
            return MatchResult().fail(
                f"'{output.name}' feeds {node_label(user)} with constant '{other.name}': "
                "the rule for the larger pattern decides")
        return None

    def _plan(self, x: ir.Value, two: ir.Value | None, epsilon: ir.Value | None,
              gamma: ir.Value | None, beta: ir.Value | None, mean: ir.Value,
              variance: ir.Value, deviation: ir.Value) -> _LayerNormPlan | MatchResult:
        """What to emit, or why not; the parameters are known to be constants."""
        shape = _first_known_shape(x, deviation)
        if shape is None:
            return MatchResult().fail(f"the shape of '{x.name}' is unknown (run shape inference)")
        rank = len(shape)
        mean_axes = _reduced_axes(producer(mean), rank)
        var_axes = _reduced_axes(producer(variance), rank)
        for axes in (mean_axes, var_axes):
            if isinstance(axes, str):
                return MatchResult().fail(axes)
        if mean_axes != var_axes:
            return MatchResult().fail(
                f"the mean reduces axes {mean_axes} but the variance reduces {var_axes}")
        assert isinstance(mean_axes, list)
        k = len(mean_axes)
        if mean_axes != list(range(rank - k, rank)):
            return MatchResult().fail(
                f"reduced axes {mean_axes} are not the trailing axes of rank-{rank} '{x.name}'")
        norm_shape = shape[rank - k:]
        if any(d is None for d in norm_shape):
            return MatchResult().fail(
                f"normalized dims {norm_shape} of '{x.name}' are not static (run shape inference)")
        norm_dims = tuple(int(d) for d in norm_shape if d is not None)
        typed = [(str(v.name), v.const_value.dtype) for v in (epsilon, gamma, beta)
                 if v is not None and v.const_value is not None]
        if x.dtype is not None:
            typed.append((str(x.name), x.dtype))
        if not typed:
            return MatchResult().fail(f"the type of '{x.name}' is unknown (run shape inference)")
        first, dtype = typed[0]
        for name, found in typed[1:]:
            if found != dtype:
                return MatchResult().fail(f"'{name}' is {found} but '{first}' is {dtype}")
        if dtype not in LAYER_NORM_DTYPES:
            return MatchResult().fail(f"'{first}' is {dtype}; LayerNormalization takes float16, "
                                      "bfloat16, float or double")
        if two is not None and _scalar(two, rank) != 2.0:
            return MatchResult().fail(f"exponent '{two.name}' is {const_array(two)}, not 2")
        # An exporter may drop an epsilon it deems negligible: Sqrt(var) is epsilon 0.
        eps = 0.0 if epsilon is None else _scalar(epsilon, rank)
        if isinstance(eps, str):
            return MatchResult().fail(eps)
        if not (np.isfinite(eps) and eps >= 0):
            return MatchResult().fail(f"epsilon '{epsilon.name if epsilon else ''}' is {eps}, "
                                      "not a finite value >= 0")
        fitted: list[np.ndarray | None] = []
        for param in (gamma, beta):
            if param is None:
                fitted.append(None)
                continue
            array = _fit_to_normalized(const_array(param), str(param.name), norm_dims, rank)
            if isinstance(array, str):
                return MatchResult().fail(array)
            fitted.append(array)
        scale, bias = fitted
        return _LayerNormPlan(
            axis=-k,
            epsilon=eps,
            scale=np.ones(norm_dims, dtype.numpy()) if scale is None else scale,
            bias=bias,
            scale_is_gamma=gamma is not None and const_array(gamma).shape == norm_dims,
            bias_is_beta=beta is not None and const_array(beta).shape == norm_dims,
        )

    def rewrite(self, op: Any, x: ir.Value, two: ir.Value | None, epsilon: ir.Value | None,
                gamma: ir.Value | None, beta: ir.Value | None, mean: ir.Value,
                variance: ir.Value, deviation: ir.Value, **_: Any) -> ir.Value:
        plan = self._plan(x, two, epsilon, gamma, beta, mean, variance, deviation)
        assert isinstance(plan, _LayerNormPlan)  # check() accepted this match
        graph = producer(mean).graph
        if plan.scale_is_gamma and gamma is not None:
            scale = gamma
        else:
            scale = op.initializer(ir.tensor(np.ascontiguousarray(plan.scale), name=(
                unique_initializer_name(graph, f"{x.name}_layer_norm_scale"))))
        inputs = [x, scale]
        if plan.bias is not None:
            if plan.bias_is_beta and beta is not None:
                inputs.append(beta)
            else:
                inputs.append(op.initializer(ir.tensor(np.ascontiguousarray(plan.bias), name=(
                    unique_initializer_name(graph, f"{x.name}_layer_norm_bias")))))
        return op.LayerNormalization(*inputs, axis=plan.axis, epsilon=plan.epsilon,
                                     stash_type=1)


class FuseLayerNorm(_LayerNormRule):
    """(x - mean) / Sqrt(var + eps) * gamma + beta → LayerNormalization(x, gamma, beta)."""

    has_scale, has_bias, larger_rule_ops = True, True, ()


class FuseLayerNormScaleOnly(_LayerNormRule):
    """(x - mean) / Sqrt(var + eps) * gamma → LayerNormalization(x, gamma)."""

    has_scale, has_bias, larger_rule_ops = True, False, ("Add",)


class FuseLayerNormBiasOnly(_LayerNormRule):
    """(x - mean) / Sqrt(var + eps) + beta → LayerNormalization(x, ones, beta)."""

    has_scale, has_bias, larger_rule_ops = False, True, ()


class FuseLayerNormUnscaled(_LayerNormRule):
    """(x - mean) / Sqrt(var + eps) → LayerNormalization(x, ones)."""

    has_scale, has_bias, larger_rule_ops = False, False, ("Mul", "Add")


def layer_norm_rules(*, require_opset: bool = True) -> list[RewriteRule]:
    """The pass's rules, largest pattern first: a smaller rule would fuse the core and leave
    the affine ops behind. Without constant gamma or beta the core still fuses, and Mul / Add
    stay after it."""
    return [rule.rule(require_opset=require_opset) for rule in (
        FuseLayerNorm, FuseLayerNormScaleOnly, FuseLayerNormBiasOnly, FuseLayerNormUnscaled)]


FUSE_LAYER_NORM = FusionPass(
    name="fuse_layer_norm",
    summary="Fuse LayerNorm written out (ReduceMean, Sub, Pow, Sqrt, Div, Mul, Add) into "
            "LayerNormalization-17",
    stage=PassStage.OTHER,
    rules=on_every_backend(layer_norm_rules),
)
