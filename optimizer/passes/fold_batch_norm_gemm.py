"""Fold an inference-mode BatchNormalization into the Gemm or 2-D MatMul that feeds it.

BN computes y = (z - mean) * s + beta with s = gamma / sqrt(var + epsilon), per channel of
axis 1. On a 2-D [M, N] input that axis is the column, so for
    Gemm:   z = alpha * A' @ B' + gamma_c * C   (B' = B or B^T by transB; gamma_c is Gemm's beta)
            B' columns scaled by s (B's rows when transB = 1), alpha and transA kept, and
            C' = (gamma_c * C - mean) * s + beta with Gemm's beta reset to 1 (C = 0 if absent;
            C' takes the broadcast shape of C and [N], still valid for Gemm);
    MatMul: z = A @ B with B [K, N], so B' = B * s and the bias b' = beta - mean * s appear:
            Gemm(A, B', b') when A is known to be 2-D, else MatMul(A, B') + b'.
Folding is computed in float64, then cast back to B's type.

Safe only when: BatchNormalization is in inference mode (training_mode = 0, one output); B, C
and every BN parameter are constants (not graph inputs); B and C feed no other node; the Gemm /
MatMul output feeds only the BN and is not a graph output; B is a 2-D floating point tensor;
the MatMul output is known to be 2-D (for rank 3+ BN's channel axis is not MatMul's column);
and the BN parameters are 1-D with one value per output column N.

These are rule classes for the FOLD_BATCH_NORM pass (fuse_conv_bn.py); both backends parse
Gemm and MatMul natively.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRuleClassBase

from optimizer.passes.checks import (
    attr_int,
    const_array,
    refuse_if_escapes,
    refuse_if_not_constant,
    refuse_if_shared,
    unique_initializer_name,
)

__all__ = ["FoldBatchNormIntoGemm", "FoldBatchNormIntoMatMul"]


def _refuse_training_mode(bn: ir.Node) -> MatchResult | None:
    if attr_int(bn, "training_mode", 0) != 0 or len(bn.outputs) != 1:
        return MatchResult().fail("BatchNormalization is in training mode (batch statistics)")
    return None


def _refuse_bad_weight(w: ir.Value) -> MatchResult | None:
    weights = const_array(w)
    if weights.dtype.kind != "f":
        return MatchResult().fail(f"weights '{w.name}' are {weights.dtype}, not floating point")
    if weights.ndim != 2:
        return MatchResult().fail(f"weights '{w.name}' have shape {weights.shape}, expected 2-D")
    return None


def _bn_scale_shift(bn: ir.Node, gamma: ir.Value, beta: ir.Value, mean: ir.Value,
                    var: ir.Value) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(s, mean, beta) in float64, with s = gamma / sqrt(var + epsilon)."""
    epsilon_attr = bn.attributes.get("epsilon")
    epsilon = 1e-5 if epsilon_attr is None else epsilon_attr.as_float()  # the spec default
    f64 = [const_array(v).astype(np.float64) for v in (gamma, beta, mean, var)]
    return f64[0] / np.sqrt(f64[3] + epsilon), f64[2], f64[1]


class _FoldBatchNormBase(RewriteRuleClassBase):
    linear_op: ClassVar[str]

    def pattern(self, op: Any, a: ir.Value, b: ir.Value, gamma: ir.Value, beta: ir.Value,
                mean: ir.Value, var: ir.Value) -> ir.Value:
        linear = getattr(op, self.linear_op)(a, b, _allow_other_inputs=True,
                                             _outputs=["linear_out"])
        return op.BatchNormalization(linear, gamma, beta, mean, var, _outputs=["bn_out"])

    def check_layer(self, linear: ir.Node, a: ir.Value, b: ir.Value) -> MatchResult | None:
        """Refusals particular to the layer, after the common ones passed."""
        raise NotImplementedError

    def output_columns(self, linear: ir.Node, weights: np.ndarray) -> int:
        raise NotImplementedError

    def check(self, context: Any, a: ir.Value, b: ir.Value, gamma: ir.Value, beta: ir.Value,
              mean: ir.Value, var: ir.Value, linear_out: ir.Value, bn_out: ir.Value
              ) -> MatchResult:
        linear, bn = linear_out.producer(), bn_out.producer()
        assert linear is not None and bn is not None
        c = linear.inputs[2] if len(linear.inputs) > 2 else None
        for refusal in (
            _refuse_training_mode(bn),
            refuse_if_not_constant(b, c, gamma, beta, mean, var),
            refuse_if_shared(b, linear),
            refuse_if_shared(c, linear) if c is not None else None,
            refuse_if_escapes(linear_out, bn),
        ):
            if refusal is not None:
                return refusal
        refusal = _refuse_bad_weight(b)  # reads B, so only once it is known to be constant
        if refusal is not None:
            return refusal
        n = self.output_columns(linear, const_array(b))
        for param in (gamma, beta, mean, var):
            if const_array(param).shape != (n,):
                return MatchResult().fail(
                    f"'{param.name}' has shape {const_array(param).shape}, expected ({n},)")
        refusal = self.check_layer(linear, a, b)
        return refusal if refusal is not None else MatchResult()

    def emit(self, op: Any, linear: ir.Node, a: ir.Value, new_b: ir.Value, new_c: ir.Value
             ) -> ir.Value:
        raise NotImplementedError

    def rewrite(self, op: Any, a: ir.Value, b: ir.Value, gamma: ir.Value, beta: ir.Value,
                mean: ir.Value, var: ir.Value, linear_out: ir.Value, bn_out: ir.Value
                ) -> ir.Value:
        linear, bn = linear_out.producer(), bn_out.producer()
        assert linear is not None and bn is not None
        scale, mean64, beta64 = _bn_scale_shift(bn, gamma, beta, mean, var)
        weights = const_array(b)
        trans_b = attr_int(linear, "transB", 0)  # 0 for MatMul, which has no such attribute
        new_weights = weights.astype(np.float64) * (scale[:, None] if trans_b else scale[None, :])
        beta_attr = linear.attributes.get("beta")
        gemm_beta = 1.0 if beta_attr is None else beta_attr.as_float()
        c = linear.inputs[2] if len(linear.inputs) > 2 else None
        old_bias = 0.0 if c is None else gemm_beta * const_array(c).astype(np.float64)
        new_bias = (old_bias - mean64) * scale + beta64
        graph = linear.graph
        new_b = op.initializer(ir.tensor(new_weights.astype(weights.dtype),
                                         name=unique_initializer_name(graph, f"{b.name}_bnfold")))
        new_c = op.initializer(ir.tensor(
            new_bias.astype(weights.dtype),
            name=unique_initializer_name(graph, f"{b.name}_bnfold_bias")))
        return self.emit(op, linear, a, new_b, new_c)


class FoldBatchNormIntoGemm(_FoldBatchNormBase):
    """BatchNormalization(Gemm(A, B, C)) → Gemm(A, B', C')."""

    linear_op = "Gemm"

    def output_columns(self, linear: ir.Node, weights: np.ndarray) -> int:
        return int(weights.shape[0 if attr_int(linear, "transB", 0) else 1])

    def check_layer(self, linear: ir.Node, a: ir.Value, b: ir.Value) -> MatchResult | None:
        c = linear.inputs[2] if len(linear.inputs) > 2 else None
        if c is None:
            return None
        shape, n = const_array(c).shape, self.output_columns(linear, const_array(b))
        if len(shape) > 2 or (shape and shape[-1] not in (1, n)):
            return MatchResult().fail(
                f"Gemm's C '{c.name}' has shape {shape}, which does not broadcast to [M, {n}]")
        return None

    def emit(self, op: Any, linear: ir.Node, a: ir.Value, new_b: ir.Value, new_c: ir.Value
             ) -> ir.Value:
        attributes = {k: v for k, v in linear.attributes.items() if k != "beta"}  # folded in C'
        return op.Gemm(a, new_b, new_c, **attributes)


class FoldBatchNormIntoMatMul(_FoldBatchNormBase):
    """BatchNormalization(MatMul(A, B)) → Gemm(A, B', b'), or MatMul(A, B') + b'."""

    linear_op = "MatMul"

    def output_columns(self, linear: ir.Node, weights: np.ndarray) -> int:
        return int(weights.shape[1])

    def check_layer(self, linear: ir.Node, a: ir.Value, b: ir.Value) -> MatchResult | None:
        ranks = {len(v.shape) for v in (a, linear.outputs[0]) if v.shape is not None}
        if ranks != {2}:
            return MatchResult().fail(
                f"MatMul output '{linear.outputs[0].name}' is not known to be 2-D (ranks seen: "
                f"{sorted(ranks)}); only then is BatchNormalization's axis 1 its column")
        return None

    def emit(self, op: Any, linear: ir.Node, a: ir.Value, new_b: ir.Value, new_c: ir.Value
             ) -> ir.Value:
        if a.shape is not None and len(a.shape) == 2:
            return op.Gemm(a, new_b, new_c)
        return op.Add(op.MatMul(a, new_b), new_c)
