"""Fuse a residual Add (and a bias Add) with the LayerNormalization after it (ONNX Runtime).

com.microsoft.SkipLayerNormalization(input, skip, gamma, beta, bias, epsilon) computes
    s = input + skip (+ bias)      and      y = LayerNormalization(s, gamma, beta, axis=-1)
and its optional 4th output (input_skip_bias_sum) is s itself. So
    LayerNormalization(Add(input, skip)) and LayerNormalization(Add(Add(input, bias), skip))
(either operand order, bias added first or last) become one node; when s also feeds the next
residual Add or is a graph output, the *KeepSum rules emit the 4th output and route those
readers to it.

Safe only when: LayerNormalization normalizes the last axis only (axis -1 or rank-1) with
stash_type=1, and its Mean / InvStdDev outputs are unused; input and skip have the same known
shape of rank 2 or 3 (what the kernel takes; its own skip broadcasting is not relied on); gamma,
beta and the bias are constants (not graph inputs) of shape (hidden,); the type is float or
float16 (the CPU kernel's; float16 is accumulated in float32, as stash_type=1 does); and in the
bias form the inner sum feeds only the outer Add.

Numerics: the kernel sums input + skip + bias in float32 (float16 sums are not rounded to
float16 between the Adds) and takes the variance in one pass (E[s²] - E[s]²), so results differ
from the unfused ops in the last bits.

Backends: "onnxruntime" only; TensorRT would need a plugin for SkipLayerNormalization (a later
issue), so it gets no rules.

Speed: off by default on ONNX Runtime, measured slower at every BERT-like shape tried
(SLOWER_ON_ORT_CPU). At level "all" ORT builds SkipLayerNormalization from Add +
LayerNormalization itself, so there the rewrite changes nothing, except with the sum kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult

from optimizer.passes.base import FusionPass, LazyRules, PassStage
from optimizer.passes.checks import (
    attr_float,
    attr_int,
    refuse_if_intermediates_escape,
    refuse_if_not_constant,
)
from optimizer.passes.matching import MS_DOMAIN, FormsRule, node_label
from optimizer.passes.symbolic_dims import DimTracer, describe_dims
from optimizer.registries.backends import Backend

__all__ = ["FUSE_SKIP_LAYER_NORM", "FuseSkipLayerNorm", "SkipPlan", "plan_skip_layer_norm"]

SKIP_LAYER_NORM_DTYPES = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16})
_DEFAULT_EPSILON = 1e-5  # LayerNormalization's default


# Measured with bench/fuse_norm_gelu.py (speed-up = unfused time / fused time).
SLOWER_ON_ORT_CPU = (
    "slower: SkipLayerNormalization ran at 0.18x-0.44x the speed of Add + LayerNormalization "
    "(0.15x-0.26x with one thread) on ONNX Runtime 1.32 CPU, graph optimizations disabled, "
    "sequence 128, hidden 128-768, batch 1 and 8, with and without bias or sum output "
    "(bench/fuse_norm_gelu.py)"
)


@dataclass(frozen=True)
class SkipPlan:
    """The operands of one SkipLayerNorm the match can write (beta and bias optional)."""

    input: ir.Value
    skip: ir.Value
    bias: ir.Value | None
    gamma: ir.Value
    beta: ir.Value | None
    epsilon: float


class FuseSkipLayerNorm(FormsRule):
    """LayerNormalization(input + skip [+ bias]) → com.microsoft.SkipLayerNormalization.

    `bias`: match the form with a bias Add; `keep_sum`: the sum has other readers, which the
    fused node's 4th output then serves (without them, the plain rule emits one output only).
    """

    def __init__(self, name: str, *, bias: bool, keep_sum: bool) -> None:
        super().__init__(name)
        self.bias = bias
        self.keep_sum = keep_sum

    def forms(self) -> Sequence[Callable[..., Any]]:
        if not self.bias:
            return [self._form(bias_last=False)]
        return [self._form(bias_last=False), self._form(bias_last=True)]

    def _form(self, *, bias_last: bool) -> Callable[..., Any]:
        # p, q, r: the summed values in any order; check() finds which one is the bias.
        def form(op: Any, p: ir.Value, q: ir.Value, r: ir.Value, gamma: ir.Value) -> Any:
            if self.bias:
                inner = op.Add(p, q, _outputs=["inner_sum"])
                operands = (r, inner) if bias_last else (inner, r)
                total = op.Add(*operands, _outputs=["residual_sum"])
            else:
                total = op.Add(p, q, _outputs=["residual_sum"])
            normalized = op.LayerNormalization(total, gamma, _allow_other_inputs=True,
                                               _outputs=["normalized"])
            return (normalized, total) if self.keep_sum else normalized

        return form

    def check(self, context: Any, p: ir.Value, q: ir.Value, r: ir.Value | None,
              gamma: ir.Value, normalized: ir.Value, residual_sum: ir.Value,
              inner_sum: ir.Value | None = None) -> MatchResult:
        plan = plan_skip_layer_norm(p, q, r, gamma, normalized)
        if isinstance(plan, MatchResult):
            return plan
        refusal = refuse_if_intermediates_escape(context)
        if refusal is not None:
            return refusal
        readers = [user for user, _ in residual_sum.uses() if user is not normalized.producer()]
        if self.keep_sum and not readers and not residual_sum.is_graph_output():
            return MatchResult().fail(
                f"'{residual_sum.name}' feeds only the LayerNormalization: the rule without the "
                "sum output takes it")
        return MatchResult()

    def rewrite(self, op: Any, p: ir.Value, q: ir.Value, r: ir.Value | None, gamma: ir.Value,
                normalized: ir.Value, **_: Any) -> Any:
        plan = plan_skip_layer_norm(p, q, r, gamma, normalized)
        assert isinstance(plan, SkipPlan)  # check() accepted this match
        inputs: list[ir.Value | None] = [plan.input, plan.skip, plan.gamma, plan.beta, plan.bias]
        while inputs[-1] is None:
            inputs.pop()
        if not self.keep_sum:
            return op.SkipLayerNormalization(*inputs, epsilon=plan.epsilon,
                                             _domain=MS_DOMAIN)
        # Outputs 1 and 2 (mean, inv_std_var) are training outputs the CPU kernel leaves unset.
        output, _mean, _inv_std_var, total = op.SkipLayerNormalization(
            *inputs, epsilon=plan.epsilon, _domain=MS_DOMAIN, _outputs=4)
        return output, total


def plan_skip_layer_norm(p: ir.Value, q: ir.Value, r: ir.Value | None, gamma: ir.Value,
                         normalized: ir.Value) -> SkipPlan | MatchResult:
    """What to emit, or why not (everything but the readers of intermediates)."""
    layer_norm = normalized.producer()
    assert layer_norm is not None  # bound by the pattern
    beta = layer_norm.inputs[2] if len(layer_norm.inputs) > 2 else None
    if r is None:
        summed, bias = [p, q], None
    else:
        constants = [v for v in (p, q, r) if refuse_if_not_constant(v) is None
                     and v.const_value is not None and len(v.const_value.shape) == 1]
        if len(constants) != 1:
            return MatchResult().fail(
                f"expected one constant 1-D bias among '{p.name}', '{q.name}', '{r.name}', "
                f"found {len(constants)}")
        [bias] = constants
        summed = [v for v in (p, q, r) if v is not bias]
    if any(v is None for v in summed):
        return MatchResult().fail("an operand of the residual Add is missing")
    input_, skip = summed
    refusal = _refuse_unless_same_shape(input_, skip)
    if refusal is not None:
        return refusal
    assert input_.shape is not None
    rank, hidden = len(input_.shape), input_.shape[-1]
    axis = attr_int(layer_norm, "axis", -1)
    if axis not in (-1, rank - 1):
        return MatchResult().fail(
            f"{node_label(layer_norm)} normalizes from axis {axis}, not only the last axis")
    if attr_int(layer_norm, "stash_type", 1) != 1:
        return MatchResult().fail(f"{node_label(layer_norm)} has stash_type "
                                  f"{attr_int(layer_norm, 'stash_type', 1)}, not 1 (float32)")
    refusal = refuse_if_not_constant(gamma, beta, bias)
    if refusal is not None:
        return refusal
    dtype = gamma.const_value.dtype if gamma.const_value is not None else None
    if dtype not in SKIP_LAYER_NORM_DTYPES:
        return MatchResult().fail(
            f"'{gamma.name}' is {dtype}; SkipLayerNormalization runs float or float16 on CPU")
    for value in (input_, skip, gamma, beta, bias):
        if value is None:
            continue
        if value.dtype is not None and value.dtype != dtype:
            return MatchResult().fail(f"'{value.name}' is {value.dtype}, '{gamma.name}' {dtype}")
        if value in (gamma, beta, bias) and (value.const_value is None
                                              or tuple(value.const_value.shape) != (hidden,)):
            shape = None if value.const_value is None else tuple(value.const_value.shape)
            return MatchResult().fail(
                f"'{value.name}' has shape {shape}, expected ({hidden},)")
    return SkipPlan(input=input_, skip=skip, bias=bias, gamma=gamma, beta=beta,
                     epsilon=attr_float(layer_norm, "epsilon", _DEFAULT_EPSILON))


def _refuse_unless_same_shape(input_: ir.Value, skip: ir.Value) -> MatchResult | None:
    if input_.shape is None or skip.shape is None:
        unknown = input_ if input_.shape is None else skip
        return MatchResult().fail(f"the shape of '{unknown.name}' is unknown (run shape inference)")
    if input_.shape != skip.shape:
        # Inference may name one dim differently on each side; equal only if traced so.
        tracer = DimTracer(input_.graph)
        traced = tracer.dims(input_), tracer.dims(skip)
        if traced[0] is None or traced[0] != traced[1]:
            return MatchResult().fail(
                f"'{input_.name}' {input_.shape} and '{skip.name}' {skip.shape} differ in shape "
                f"(traced: {describe_dims(traced[0])} and {describe_dims(traced[1])})")
    if len(input_.shape) not in (2, 3):
        return MatchResult().fail(
            f"'{input_.name}' has rank {len(input_.shape)}; SkipLayerNormalization takes 2 or 3")
    if not isinstance(input_.shape[-1], int):
        return MatchResult().fail(f"the hidden size of '{input_.name}' is not static")
    if any(not isinstance(d, int) and d.value is None for d in input_.shape):
        return MatchResult().fail(f"'{input_.name}' has an unknown dim (run shape inference)")
    return None


FUSE_SKIP_LAYER_NORM = FusionPass(
    name="fuse_skip_layer_norm",
    summary="Fuse residual Add (+ bias Add) + LayerNormalization into "
            "com.microsoft.SkipLayerNormalization",
    stage=PassStage.OTHER,
    # Bias forms first, so the bias Add is taken in rather than left as the fused node's input.
    rules=LazyRules({
        Backend.ONNXRUNTIME: lambda: [
            FuseSkipLayerNorm.rule("FuseSkipLayerNormBias", bias=True, keep_sum=False),
            FuseSkipLayerNorm.rule("FuseSkipLayerNormBiasKeepSum", bias=True, keep_sum=True),
            FuseSkipLayerNorm.rule("FuseSkipLayerNorm", bias=False, keep_sum=False),
            FuseSkipLayerNorm.rule("FuseSkipLayerNormKeepSum", bias=False, keep_sum=True),
        ],
    }),
    off_by_default={Backend.ONNXRUNTIME: SLOWER_ON_ORT_CPU},
)
