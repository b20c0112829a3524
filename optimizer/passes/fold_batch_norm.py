"""Fold inference-mode BatchNormalization into the Conv, ConvTranspose, Gemm or MatMul feeding it.

BN computes y = (z - mean) * s + beta with s = gamma / sqrt(var + epsilon), per channel of
axis 1. When the layer computes z[c] = (W applied to x)[c] + b[c] for output channel c, scaling
W's part for channel c by s[c] and taking b' = (b - mean) * s + beta (b = 0 if absent) gives y:
- Conv: output channel c is sum(W[c] * x) + b[c], so W'[c] = W[c] * s[c].
- ConvTranspose stores W as (C_in, C_out / group, k...): output channel g * (C_out / group) + j
  is scaled in W[g-th block of C_in, j].
- Gemm, on a 2-D [M, N] input where axis 1 is the column: z = alpha * A' @ B' + gamma_c * C
  (B' = B or B^T by transB; gamma_c is Gemm's beta), so B' columns are scaled by s (B's rows
  when transB = 1), alpha and transA kept, and C' = (gamma_c * C - mean) * s + beta with Gemm's
  beta reset to 1 (C = 0 if absent; C' takes the broadcast shape of C and [N], still valid).
- MatMul: z = A @ B with B [K, N], so B' = B * s and the bias b' = beta - mean * s appear:
  Gemm(A, B', b') when A is known to be 2-D, else MatMul(A, B') + b'.
Folding is computed in float64, then cast back to W's type; the one exception is scaling float32
weights, done in float32 with s rounded to float32 (at most 1 ulp from the float64 product
rounded, and a quarter of the memory traffic on the largest tensors of the graph).

Safe only when: BatchNormalization is in inference mode (training_mode = 0, one output: training
mode normalizes with the batch's own statistics); W, b and every BN parameter are constants (not
graph inputs); W and b feed no other node; the layer output feeds only the BN and is not a graph
output; W is floating point (2-D for Gemm and MatMul); a MatMul output is known to be 2-D (for
rank 3+ BN's channel axis is not MatMul's column); and the BN parameters are 1-D with one value
per output channel (Gemm's C need only broadcast to [M, N]). Both backends parse Conv,
ConvTranspose, Gemm and MatMul natively, so both get the fold.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRule, RewriteRuleClassBase

from optimizer.passes.base import FusionPass, PassStage, on_every_backend
from optimizer.passes.checks import (
    attr_float,
    attr_int,
    const_array,
    const_dtype,
    const_shape,
    first_refusal,
    refuse_if_escapes,
    refuse_if_not_constant,
    refuse_if_shared,
    unique_initializer_name,
)
from optimizer.registries.backends import Backend

__all__ = [
    "FOLD_BATCH_NORM",
    "FoldBatchNormIntoConv",
    "FoldBatchNormIntoConvTranspose",
    "FoldBatchNormIntoGemm",
    "FoldBatchNormIntoMatMul",
]

_DEFAULT_EPSILON = 1e-5  # BatchNormalization's spec default


def _layer_bias(layer: ir.Node) -> ir.Value | None:
    """The layer's optional third input: Conv's B, Gemm's C."""
    return layer.inputs[2] if len(layer.inputs) > 2 else None


class _FoldBatchNorm(RewriteRuleClassBase):
    """BatchNormalization(Layer(x, W[, b])) → the layer with W', b'; subclasses name the layer."""

    layer_op: ClassVar[str]  # the ONNX op before the BN
    weights_rank: ClassVar[int | None] = None  # W's required rank, when the layer needs one
    bias_per_channel: ClassVar[bool] = True  # b must be 1-D [C]; else check_layer checks it

    def pattern(self, op: Any, x: ir.Value, w: ir.Value, gamma: ir.Value, beta: ir.Value,
                mean: ir.Value, var: ir.Value) -> ir.Value:
        layer = getattr(op, self.layer_op)(x, w, _allow_other_inputs=True, _outputs=["layer_out"])
        return op.BatchNormalization(layer, gamma, beta, mean, var, _outputs=["bn_out"])

    def output_channels(self, layer: ir.Node, weights: tuple[int, ...]) -> int:
        """How many output channels the layer has, read from its weights' shape."""
        raise NotImplementedError

    def check_layer(self, layer: ir.Node, x: ir.Value, w: ir.Value) -> MatchResult | None:
        """Refusals particular to the layer, after the common ones passed."""
        return None

    def scale_weights(self, layer: ir.Node, weights: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """`weights` (float64, or float32 as they came) with each output channel's part
        multiplied by `scale` (of the same type)."""
        raise NotImplementedError

    def bias_term(self, layer: ir.Node, bias: np.ndarray) -> np.ndarray:
        """What the layer adds for its bias input `bias` (float64)."""
        return bias

    def emit(self, op: Any, layer: ir.Node, x: ir.Value, new_w: ir.Value, new_b: ir.Value
             ) -> ir.Value:
        """The folded layer: by default the same op with the same attributes."""
        return getattr(op, self.layer_op)(x, new_w, new_b, **layer.attributes)

    def check(self, context: Any, x: ir.Value, w: ir.Value, gamma: ir.Value, beta: ir.Value,
              mean: ir.Value, var: ir.Value, layer_out: ir.Value, bn_out: ir.Value
              ) -> MatchResult:
        layer, bn = layer_out.producer(), bn_out.producer()
        assert layer is not None and bn is not None
        bias = _layer_bias(layer)
        if attr_int(bn, "training_mode", 0) != 0 or len(bn.outputs) != 1:
            return MatchResult().fail("BatchNormalization is in training mode (batch statistics)")
        refusal = first_refusal(
            refuse_if_not_constant(w, bias, gamma, beta, mean, var),
            refuse_if_shared(w, layer),
            refuse_if_shared(bias, layer) if bias is not None else None,
            refuse_if_escapes(layer_out, bn),
            # The rest read W and the parameters, known constant only by now.
            lambda: self._refuse_unless_float_weights(w),
            lambda: self._refuse_unless_per_channel(layer, w, (gamma, beta, mean, var), bias),
            lambda: self.check_layer(layer, x, w),
        )
        return refusal if refusal is not None else MatchResult()

    def _refuse_unless_float_weights(self, w: ir.Value) -> MatchResult | None:
        # Type and shape, not the weights: only the rewrite reads those.
        dtype, shape = const_dtype(w), const_shape(w)
        if dtype.kind != "f":
            return MatchResult().fail(f"weights '{w.name}' are {dtype}, not floating point")
        if self.weights_rank is not None and len(shape) != self.weights_rank:
            return MatchResult().fail(f"weights '{w.name}' have shape {shape}, expected "
                                      f"{self.weights_rank}-D")
        return None

    def _refuse_unless_per_channel(self, layer: ir.Node, w: ir.Value,
                                   bn_params: tuple[ir.Value, ...],
                                   bias: ir.Value | None) -> MatchResult | None:
        """The BN parameters (and b, if bias_per_channel) must hold one value per channel."""
        channels = self.output_channels(layer, const_shape(w))
        for param in (*bn_params, bias) if self.bias_per_channel else bn_params:
            if param is not None and const_shape(param) != (channels,):
                return MatchResult().fail(
                    f"'{param.name}' has shape {const_shape(param)}, expected ({channels},)")
        return None

    def rewrite(self, op: Any, x: ir.Value, w: ir.Value, gamma: ir.Value, beta: ir.Value,
                mean: ir.Value, var: ir.Value, layer_out: ir.Value, bn_out: ir.Value
                ) -> ir.Value:
        layer, bn = layer_out.producer(), bn_out.producer()
        assert layer is not None and bn is not None
        epsilon = attr_float(bn, "epsilon", _DEFAULT_EPSILON)
        f64 = {name: const_array(v).astype(np.float64)
               for name, v in (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var))}
        scale = f64["gamma"] / np.sqrt(f64["var"] + epsilon)
        bias = _layer_bias(layer)
        old_bias = 0.0 if bias is None else self.bias_term(
            layer, const_array(bias).astype(np.float64))
        weights = const_array(w)
        wide = np.float32 if weights.dtype == np.float32 else np.float64
        new_weights = self.scale_weights(layer, weights.astype(wide, copy=False),
                                         scale.astype(wide))
        new_bias = (old_bias - f64["mean"]) * scale + f64["beta"]
        graph = layer.graph
        # copy=False: float32 weights were scaled in float32, a second 100 MB copy buys nothing.
        new_w = op.initializer(ir.tensor(new_weights.astype(weights.dtype, copy=False),
                                         name=unique_initializer_name(graph, f"{w.name}_bnfold")))
        new_b = op.initializer(ir.tensor(
            new_bias.astype(weights.dtype),
            name=unique_initializer_name(graph, f"{w.name}_bnfold_bias")))
        return self.emit(op, layer, x, new_w, new_b)


class FoldBatchNormIntoConv(_FoldBatchNorm):
    """BatchNormalization(Conv(x, W, b)) → Conv(x, W', b')."""

    layer_op = "Conv"

    def output_channels(self, layer: ir.Node, weights: tuple[int, ...]) -> int:
        return weights[0]  # (C_out, C_in / group, k...) whatever the group

    def scale_weights(self, layer: ir.Node, weights: np.ndarray, scale: np.ndarray) -> np.ndarray:
        return weights * scale.reshape((-1,) + (1,) * (weights.ndim - 1))


class FoldBatchNormIntoConvTranspose(_FoldBatchNorm):
    """BatchNormalization(ConvTranspose(x, W, b)) → ConvTranspose(x, W', b')."""

    layer_op = "ConvTranspose"

    def output_channels(self, layer: ir.Node, weights: tuple[int, ...]) -> int:
        return weights[1] * attr_int(layer, "group", 1)

    def scale_weights(self, layer: ir.Node, weights: np.ndarray, scale: np.ndarray) -> np.ndarray:
        group = attr_int(layer, "group", 1)
        c_in, per_group = weights.shape[0], weights.shape[1]
        blocks = weights.reshape((group, c_in // group, per_group) + weights.shape[2:])
        factors = scale.reshape((group, 1, per_group) + (1,) * (weights.ndim - 2))
        return (blocks * factors).reshape(weights.shape)


class _FoldBatchNormIntoLinear(_FoldBatchNorm):
    """B is [K, N] (or [N, K] for Gemm's transB = 1): output column j is B's column (row) j."""

    weights_rank = 2
    bias_per_channel = False  # Gemm's C broadcasts to [M, N]: check_layer checks it

    def scale_weights(self, layer: ir.Node, weights: np.ndarray, scale: np.ndarray) -> np.ndarray:
        trans_b = attr_int(layer, "transB", 0)  # 0 for MatMul, which has no such attribute
        return weights * (scale[:, None] if trans_b else scale[None, :])


class FoldBatchNormIntoGemm(_FoldBatchNormIntoLinear):
    """BatchNormalization(Gemm(A, B, C)) → Gemm(A, B', C')."""

    layer_op = "Gemm"

    def output_channels(self, layer: ir.Node, weights: tuple[int, ...]) -> int:
        return weights[0 if attr_int(layer, "transB", 0) else 1]

    def check_layer(self, layer: ir.Node, x: ir.Value, w: ir.Value) -> MatchResult | None:
        c = _layer_bias(layer)
        if c is None:
            return None
        shape, n = const_shape(c), self.output_channels(layer, const_shape(w))
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

    def output_channels(self, layer: ir.Node, weights: tuple[int, ...]) -> int:
        return weights[1]

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


def _rules() -> list[RewriteRule]:
    return [FoldBatchNormIntoConv.rule(), FoldBatchNormIntoConvTranspose.rule(),
            FoldBatchNormIntoGemm.rule(), FoldBatchNormIntoMatMul.rule()]


FOLD_BATCH_NORM = FusionPass(
    name="fold_batch_norm",
    summary="Fold inference-mode BatchNormalization into the preceding Conv, ConvTranspose, "
    "Gemm or 2-D MatMul",
    stage=PassStage.CONV_BN_ACT,
    rules=on_every_backend(_rules),
    off_by_default={Backend.OPENVINO: (
        "OpenVINO does it itself: its IR of the unfused model holds no BatchNormalization (the "
        "CPU plugin folds it into the Conv), and folding it first was no faster: OpenVINO "
        "2026.4.1 f32 on PP-OCRv5's detector and recognizer, the job's passes with it over "
        "without it 0.955/0.884 and 1.065/1.011 at 1 thread, 1.29/1.17 and 1.04/1.08 at 2, "
        "every interval overlapping (bench/openvino_passes.py)")},
)
