"""Fold an inference-mode BatchNormalization into the Conv or ConvTranspose that feeds it.

BN computes y = (x - mean) * s + beta with s = gamma / sqrt(var + epsilon), per channel of axis 1.
For Conv, output channel c is sum(W[c] * x) + b[c], so
    W'[c] = W[c] * s[c]    and    b'[c] = (b[c] - mean[c]) * s[c] + beta[c]   (b = 0 if absent).
ConvTranspose stores W as (C_in, C_out / group, k...): output channel g * (C_out / group) + j
is scaled in W[g-th block of C_in, j]. Folding is computed in float64, then cast back to W's type.

Safe only when: BatchNormalization is in inference mode (training_mode = 0, one output: training
mode normalizes with the batch's own statistics); W, b and every BN parameter are constants (not
graph inputs); W and b feed no other node; the conv output feeds only the BN and is not a graph
output; and the BN parameters are 1-D with one value per output channel. These checks and the
rewrite are shared with the Gemm / MatMul folds (batch_norm_fold.py).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from optimizer.passes.base import BACKENDS, FusionPass
from optimizer.passes.batch_norm_fold import FoldBatchNormRule
from optimizer.passes.checks import attr_int
from optimizer.passes.fold_batch_norm_gemm import FoldBatchNormIntoGemm, FoldBatchNormIntoMatMul

__all__ = ["FOLD_BATCH_NORM", "FoldBatchNormIntoConv", "FoldBatchNormIntoConvTranspose"]


class FoldBatchNormIntoConv(FoldBatchNormRule):
    """BatchNormalization(Conv(x, W, b)) → Conv(x, W', b')."""

    layer_op = "Conv"

    def output_channels(self, layer: ir.Node, weights: np.ndarray) -> int:
        return int(weights.shape[0])  # (C_out, C_in / group, k...) whatever the group

    def scale_weights(self, layer: ir.Node, weights: np.ndarray, scale: np.ndarray) -> np.ndarray:
        return weights * scale.reshape((-1,) + (1,) * (weights.ndim - 1))


class FoldBatchNormIntoConvTranspose(FoldBatchNormRule):
    """BatchNormalization(ConvTranspose(x, W, b)) → ConvTranspose(x, W', b')."""

    layer_op = "ConvTranspose"

    def output_channels(self, layer: ir.Node, weights: np.ndarray) -> int:
        return int(weights.shape[1]) * attr_int(layer, "group", 1)

    def scale_weights(self, layer: ir.Node, weights: np.ndarray, scale: np.ndarray) -> np.ndarray:
        group = attr_int(layer, "group", 1)
        c_in, per_group = weights.shape[0], weights.shape[1]
        blocks = weights.reshape((group, c_in // group, per_group) + weights.shape[2:])
        factors = scale.reshape((group, 1, per_group) + (1,) * (weights.ndim - 2))
        return (blocks * factors).reshape(weights.shape)


FOLD_BATCH_NORM = FusionPass(
    name="fold_batch_norm",
    summary="Fold inference-mode BatchNormalization into the preceding Conv, ConvTranspose, "
    "Gemm or 2-D MatMul",
    stage="conv_bn_act",
    rules={
        backend: [
            FoldBatchNormIntoConv.rule(),
            FoldBatchNormIntoConvTranspose.rule(),
            FoldBatchNormIntoGemm.rule(),
            FoldBatchNormIntoMatMul.rule(),
        ]
        for backend in BACKENDS
    },
)
