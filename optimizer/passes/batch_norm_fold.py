"""The rule every BatchNormalization fold shares: BN after a layer folded into its weights and bias.

BN computes y = (z - mean) * s + beta with s = gamma / sqrt(var + epsilon), per channel of
axis 1. When the layer computes z[c] = (W applied to x)[c] + b[c] for output channel c, scaling
W's part for channel c by s[c] and taking b' = (b - mean) * s + beta (b = 0 if absent) gives y.
Folding is computed in float64, then cast back to W's type.

Safe only when: BatchNormalization is in inference mode (training_mode = 0, one output: training
mode normalizes with the batch's own statistics); W, b and every BN parameter are constants (not
graph inputs); W and b feed no other node; the layer output feeds only the BN and is not a graph
output; W is floating point; and the BN parameters are 1-D with one value per output channel.
Subclasses (fuse_conv_bn.py, fold_batch_norm_gemm.py) say where a layer keeps its output
channels and add the conditions particular to the layer.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRuleClassBase

from optimizer.passes.checks import (
    attr_float,
    attr_int,
    const_array,
    first_refusal,
    refuse_if_escapes,
    refuse_if_not_constant,
    refuse_if_shared,
    unique_initializer_name,
)

__all__ = ["FoldBatchNormRule", "layer_bias"]

_DEFAULT_EPSILON = 1e-5  # BatchNormalization's spec default


def layer_bias(layer: ir.Node) -> ir.Value | None:
    """The layer's optional third input: Conv's B, Gemm's C."""
    return layer.inputs[2] if len(layer.inputs) > 2 else None


class FoldBatchNormRule(RewriteRuleClassBase):
    """BatchNormalization(Layer(x, W[, b])) → the layer with W', b'; subclasses name the layer."""

    layer_op: ClassVar[str]  # the ONNX op before the BN
    weights_rank: ClassVar[int | None] = None  # W's required rank, when the layer needs one
    bias_per_channel: ClassVar[bool] = True  # b must be 1-D [C]; else check_layer checks it

    def pattern(self, op: Any, x: ir.Value, w: ir.Value, gamma: ir.Value, beta: ir.Value,
                mean: ir.Value, var: ir.Value) -> ir.Value:
        layer = getattr(op, self.layer_op)(x, w, _allow_other_inputs=True, _outputs=["layer_out"])
        return op.BatchNormalization(layer, gamma, beta, mean, var, _outputs=["bn_out"])

    def output_channels(self, layer: ir.Node, weights: np.ndarray) -> int:
        """How many output channels the layer has, read from its weights."""
        raise NotImplementedError

    def check_layer(self, layer: ir.Node, x: ir.Value, w: ir.Value) -> MatchResult | None:
        """Refusals particular to the layer, after the common ones passed."""
        return None

    def scale_weights(self, layer: ir.Node, weights: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """`weights` (float64) with each output channel's part multiplied by `scale`."""
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
        bias = layer_bias(layer)
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
        weights = const_array(w)
        if weights.dtype.kind != "f":
            return MatchResult().fail(f"weights '{w.name}' are {weights.dtype}, not floating point")
        if self.weights_rank is not None and weights.ndim != self.weights_rank:
            return MatchResult().fail(f"weights '{w.name}' have shape {weights.shape}, expected "
                                      f"{self.weights_rank}-D")
        return None

    def _refuse_unless_per_channel(self, layer: ir.Node, w: ir.Value,
                                   bn_params: tuple[ir.Value, ...],
                                   bias: ir.Value | None) -> MatchResult | None:
        """The BN parameters (and b, if bias_per_channel) must hold one value per channel."""
        channels = self.output_channels(layer, const_array(w))
        for param in (*bn_params, bias) if self.bias_per_channel else bn_params:
            if param is not None and const_array(param).shape != (channels,):
                return MatchResult().fail(
                    f"'{param.name}' has shape {const_array(param).shape}, expected ({channels},)"
                )
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
        bias = layer_bias(layer)
        old_bias = 0.0 if bias is None else self.bias_term(
            layer, const_array(bias).astype(np.float64))
        weights = const_array(w)
        new_weights = self.scale_weights(layer, weights.astype(np.float64), scale)
        new_bias = (old_bias - f64["mean"]) * scale + f64["beta"]
        graph = layer.graph
        new_w = op.initializer(ir.tensor(new_weights.astype(weights.dtype),
                                         name=unique_initializer_name(graph, f"{w.name}_bnfold")))
        new_b = op.initializer(ir.tensor(
            new_bias.astype(weights.dtype),
            name=unique_initializer_name(graph, f"{w.name}_bnfold_bias")))
        return self.emit(op, layer, x, new_w, new_b)
