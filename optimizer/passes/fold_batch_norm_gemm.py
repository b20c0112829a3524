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

These are rule classes for the FOLD_BATCH_NORM pass (fuse_conv_bn.py), on the checks and
rewrite every BatchNormalization fold shares (batch_norm_fold.py); both backends parse Gemm and
MatMul natively.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult

from optimizer.passes.batch_norm_fold import FoldBatchNormRule, layer_bias
from optimizer.passes.checks import attr_float, attr_int, const_array

__all__ = ["FoldBatchNormIntoGemm", "FoldBatchNormIntoMatMul"]


class _FoldBatchNormIntoLinear(FoldBatchNormRule):
    """B is [K, N] (or [N, K] for Gemm's transB = 1): output column j is B's column (row) j."""

    weights_rank = 2
    bias_per_channel = False  # Gemm's C broadcasts to [M, N]: check_layer checks it

    def scale_weights(self, layer: ir.Node, weights: np.ndarray, scale: np.ndarray) -> np.ndarray:
        trans_b = attr_int(layer, "transB", 0)  # 0 for MatMul, which has no such attribute
        return weights * (scale[:, None] if trans_b else scale[None, :])


class FoldBatchNormIntoGemm(_FoldBatchNormIntoLinear):
    """BatchNormalization(Gemm(A, B, C)) → Gemm(A, B', C')."""

    layer_op = "Gemm"

    def output_channels(self, layer: ir.Node, weights: np.ndarray) -> int:
        return int(weights.shape[0 if attr_int(layer, "transB", 0) else 1])

    def check_layer(self, layer: ir.Node, x: ir.Value, w: ir.Value) -> MatchResult | None:
        c = layer_bias(layer)
        if c is None:
            return None
        shape, n = const_array(c).shape, self.output_channels(layer, const_array(w))
        if len(shape) > 2 or (shape and shape[-1] not in (1, n)):
            return MatchResult().fail(
                f"Gemm's C '{c.name}' has shape {shape}, which does not broadcast to [M, {n}]")
        return None

    def bias_term(self, layer: ir.Node, bias: np.ndarray) -> np.ndarray:
        return attr_float(layer, "beta", 1.0) * bias  # Gemm adds beta * C

    def emit(self, op: Any, layer: ir.Node, x: ir.Value, new_w: ir.Value, new_b: ir.Value
             ) -> ir.Value:
        attributes = {k: v for k, v in layer.attributes.items() if k != "beta"}  # folded in C'
        return op.Gemm(x, new_w, new_b, **attributes)


class FoldBatchNormIntoMatMul(_FoldBatchNormIntoLinear):
    """BatchNormalization(MatMul(A, B)) → Gemm(A, B', b'), or MatMul(A, B') + b'."""

    layer_op = "MatMul"

    def output_channels(self, layer: ir.Node, weights: np.ndarray) -> int:
        return int(weights.shape[1])

    def check_layer(self, layer: ir.Node, x: ir.Value, w: ir.Value) -> MatchResult | None:
        ranks = {len(v.shape) for v in (x, layer.outputs[0]) if v.shape is not None}
        if ranks != {2}:
            return MatchResult().fail(
                f"MatMul output '{layer.outputs[0].name}' is not known to be 2-D (ranks seen: "
                f"{sorted(ranks)}); only then is BatchNormalization's axis 1 its column")
        return None

    def emit(self, op: Any, layer: ir.Node, x: ir.Value, new_w: ir.Value, new_b: ir.Value
             ) -> ir.Value:
        if x.shape is not None and len(x.shape) == 2:
            return op.Gemm(x, new_w, new_b)
        return op.Add(op.MatMul(x, new_w), new_b)
