"""Fold an inference-mode BatchNormalization into the Conv or ConvTranspose that feeds it.

BN computes y = (x - mean) * s + beta with s = gamma / sqrt(var + epsilon), per channel of axis 1.
For Conv, output channel c is sum(W[c] * x) + b[c], so
    W'[c] = W[c] * s[c]    and    b'[c] = (b[c] - mean[c]) * s[c] + beta[c]   (b = 0 if absent).
ConvTranspose stores W as (C_in, C_out / group, k...): output channel g * (C_out / group) + j
is scaled in W[g-th block of C_in, j]. Folding is computed in float64, then cast back to W's type.

Safe only when: BatchNormalization is in inference mode (training_mode = 0, one output: training
mode normalizes with the batch's own statistics); W, b and every BN parameter are constants (not
graph inputs); W and b feed no other node; the conv output feeds only the BN and is not a graph
output; and the BN parameters are 1-D with one value per output channel.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRuleClassBase

from optimizer.passes.base import FusionPass
from optimizer.passes.fold_batch_norm_gemm import FoldBatchNormIntoGemm, FoldBatchNormIntoMatMul
from optimizer.passes.checks import (
    attr_int,
    const_array,
    refuse_if_escapes,
    refuse_if_not_constant,
    refuse_if_shared,
    unique_initializer_name,
)

__all__ = ["FOLD_BATCH_NORM", "FoldBatchNormIntoConv", "FoldBatchNormIntoConvTranspose"]


class _FoldBatchNormBase(RewriteRuleClassBase):
    conv_op: ClassVar[str]

    def pattern(self, op: Any, x: ir.Value, w: ir.Value, gamma: ir.Value, beta: ir.Value,
                mean: ir.Value, var: ir.Value) -> ir.Value:
        conv = getattr(op, self.conv_op)(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.BatchNormalization(conv, gamma, beta, mean, var, _outputs=["bn_out"])

    def output_channels(self, conv: ir.Node, weights: np.ndarray) -> int:
        raise NotImplementedError

    def scale_weights(self, conv: ir.Node, weights: np.ndarray, scale: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def check(self, context: Any, x: ir.Value, w: ir.Value, gamma: ir.Value, beta: ir.Value,
              mean: ir.Value, var: ir.Value, conv_out: ir.Value, bn_out: ir.Value) -> MatchResult:
        conv, bn = conv_out.producer(), bn_out.producer()
        assert conv is not None and bn is not None
        if attr_int(bn, "training_mode", 0) != 0 or len(bn.outputs) != 1:
            return MatchResult().fail("BatchNormalization is in training mode (batch statistics)")
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        for refusal in (
            refuse_if_not_constant(w, bias, gamma, beta, mean, var),
            refuse_if_shared(w, conv),
            refuse_if_shared(bias, conv) if bias is not None else None,
            refuse_if_escapes(conv_out, bn),
        ):
            if refusal is not None:
                return refusal
        weights = const_array(w)
        if weights.dtype.kind != "f":
            return MatchResult().fail(f"weights '{w.name}' are {weights.dtype}, not floating point")
        channels = self.output_channels(conv, weights)
        for param in (gamma, beta, mean, var, bias):
            if param is not None and const_array(param).shape != (channels,):
                return MatchResult().fail(
                    f"'{param.name}' has shape {const_array(param).shape}, expected ({channels},)"
                )
        return MatchResult()

    def rewrite(self, op: Any, x: ir.Value, w: ir.Value, gamma: ir.Value, beta: ir.Value,
                mean: ir.Value, var: ir.Value, conv_out: ir.Value, bn_out: ir.Value) -> ir.Value:
        conv, bn = conv_out.producer(), bn_out.producer()
        assert conv is not None and bn is not None
        epsilon_attr = bn.attributes.get("epsilon")
        epsilon = 1e-5 if epsilon_attr is None else epsilon_attr.as_float()  # the spec default
        weights = const_array(w)
        f64 = {name: const_array(v).astype(np.float64)
               for name, v in (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var))}
        scale = f64["gamma"] / np.sqrt(f64["var"] + epsilon)
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        old_bias = const_array(bias).astype(np.float64) if bias is not None else np.zeros_like(scale)
        new_weights = self.scale_weights(conv, weights.astype(np.float64), scale)
        new_bias = (old_bias - f64["mean"]) * scale + f64["beta"]
        graph = conv.graph
        w_name = unique_initializer_name(graph, f"{w.name}_bnfold")
        b_name = unique_initializer_name(graph, f"{w.name}_bnfold_bias")
        return getattr(op, self.conv_op)(
            x,
            op.initializer(ir.tensor(new_weights.astype(weights.dtype), name=w_name)),
            op.initializer(ir.tensor(new_bias.astype(weights.dtype), name=b_name)),
            **conv.attributes,
        )


class FoldBatchNormIntoConv(_FoldBatchNormBase):
    """BatchNormalization(Conv(x, W, b)) → Conv(x, W', b')."""

    conv_op = "Conv"

    def output_channels(self, conv: ir.Node, weights: np.ndarray) -> int:
        return int(weights.shape[0])  # (C_out, C_in / group, k...) whatever the group

    def scale_weights(self, conv: ir.Node, weights: np.ndarray, scale: np.ndarray) -> np.ndarray:
        return weights * scale.reshape((-1,) + (1,) * (weights.ndim - 1))


class FoldBatchNormIntoConvTranspose(_FoldBatchNormBase):
    """BatchNormalization(ConvTranspose(x, W, b)) → ConvTranspose(x, W', b')."""

    conv_op = "ConvTranspose"

    def output_channels(self, conv: ir.Node, weights: np.ndarray) -> int:
        return int(weights.shape[1]) * attr_int(conv, "group", 1)

    def scale_weights(self, conv: ir.Node, weights: np.ndarray, scale: np.ndarray) -> np.ndarray:
        group = attr_int(conv, "group", 1)
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
        for backend in ("onnxruntime", "tensorrt")
    },
)
