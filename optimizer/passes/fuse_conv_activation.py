"""Fuse a Conv and the activation that follows it into onnxruntime's com.microsoft.FusedConv.

FusedConv(X, W, B; activation=a, activation_params=p) computes a(Conv(X, W, B)) with the Conv
attributes unchanged: the CPU kernel is ORT's Conv<float> with an MLAS activation applied to each
output tile (contrib_ops/cpu/fused_conv.cc, fused_activation.cc). In onnxruntime 1.32 it knows
    Relu                                      max(x, 0)
    Tanh, Sigmoid                             (MLAS tanh / logistic, as ORT's own Tanh / Sigmoid)
    LeakyRelu  [alpha]                        x if x >= 0 else alpha * x         (alpha = 0.01)
    HardSigmoid [alpha, beta]                 max(0, min(1, alpha * x + beta))   (0.2, 0.5)
    Clip [min, max]                           min(max(x, min), max)
and refuses any other name when the session is created; Relu6 is Clip(0, 6). Clip takes its
bounds as attributes before opset 11 and as optional inputs from 11 on; both are read, an absent
bound becomes float32 lowest / max exactly as ORT's Clip kernel defaults it. Every spatial rank
runs (1-3 through MLAS, higher through im2col + Gemm), checked here for 1-D, 2-D, 3-D and 4-D.

SiLU, x * Sigmoid(x): 1.32's FusedConv has no "Silu" (newer onnxruntime sources add one), so
Conv -> Sigmoid -> Mul becomes Conv -> com.microsoft.QuickGelu(alpha=1), which computes
x * sigmoid(1 * x) in one pass with the same MLAS logistic (bit-identical in our tests).

Safe only when: the Conv output feeds only the activation (both Sigmoid and Mul for SiLU) and is
not a graph output; the tensors are float32 (the CPU kernels of FusedConv and QuickGelu are
float-only: a float16 node would only run because ORT wraps it in Casts, so float16 is refused);
the Conv has only the attributes FusedConv shares with Conv; activation parameters are known
(Clip bounds must be constants, not graph inputs); and no unknown attribute is ignored.

Speed (bench/fuse_conv_activation.py, ORT 1.32 CPU, one thread, 3x3 convs at 64ch 56x56 and
256ch 14x14, batch 1 and 8): 0.99-1.03x at level "disabled", so none is off by default; parity at
level "all", where ORT makes the same fusions itself.

TensorRT gets no rules: it fuses Conv + activation itself from the standard ops, so the pass is
skipped there. Only ORT's CPU execution provider is targeted: its CUDA FusedConv implements Relu
alone (contrib_ops/cuda/fused_conv.cc) and would fail at run time on the other activations.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRuleClassBase

from optimizer.passes.base import FusionPass, PassStage
from optimizer.passes.checks import (
    attr_float,
    const_array,
    first_refusal,
    refuse_if_escapes,
    refuse_if_not_constant,
    refuse_if_not_float32,
    refuse_unknown_attributes,
)
from optimizer.passes.matching import MS_DOMAIN
from optimizer.registries.backends import Backend

__all__ = [
    "FUSE_CONV_ACTIVATION",
    "FuseConvClip",
    "FuseConvHardSigmoid",
    "FuseConvLeakyRelu",
    "FuseConvRelu",
    "FuseConvSigmoid",
    "FuseConvSilu",
    "FuseConvSiluSwapped",
    "FuseConvTanh",
    "refuse_unless_fused_conv_can_replace",
]

# The attributes FusedConv shares with Conv (the ConvAttributes both kernels parse).
_CONV_ATTRIBUTES = frozenset({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})
_FLOAT32_LOWEST = float(np.finfo(np.float32).min)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def refuse_unless_fused_conv_can_replace(conv: ir.Node, conv_out: ir.Value,
                                         consumer: ir.Node) -> MatchResult | None:
    """Conditions for turning `conv` (whose output feeds only `consumer`) into a FusedConv."""
    for name in conv.attributes:
        if name not in _CONV_ATTRIBUTES:
            return MatchResult().fail(f"Conv '{conv.name}' has attribute '{name}' FusedConv lacks")
    return first_refusal(refuse_if_not_float32(conv, "FusedConv"),
                         refuse_if_escapes(conv_out, consumer))


class _FuseConvActivationBase(RewriteRuleClassBase):
    """Activation(Conv(x, W, b)) → FusedConv(x, W, b, activation=..., activation_params=...)."""

    activation: ClassVar[str]  # the ONNX op matched, and FusedConv's name for it
    attributes: ClassVar[tuple[str, ...]] = ()  # the activation's attributes we translate
    extra_inputs: ClassVar[bool] = False  # Clip's optional min / max inputs

    def pattern(self, op: Any, x: ir.Value, w: ir.Value) -> ir.Value:
        conv = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        return getattr(op, self.activation)(conv, _allow_other_inputs=self.extra_inputs,
                                            _outputs=["act_out"])

    def activation_params(self, act: ir.Node) -> list[float] | MatchResult:
        """FusedConv's activation_params for `act`, or why they cannot be known."""
        return []

    def check(self, context: Any, x: ir.Value, w: ir.Value, conv_out: ir.Value,
              act_out: ir.Value) -> MatchResult:
        conv, act = conv_out.producer(), act_out.producer()
        assert conv is not None and act is not None
        refusal = first_refusal(refuse_unless_fused_conv_can_replace(conv, conv_out, act),
                                refuse_unknown_attributes(act, self.attributes))
        if refusal is not None:
            return refusal
        params = self.activation_params(act)
        return params if isinstance(params, MatchResult) else MatchResult()

    def rewrite(self, op: Any, x: ir.Value, w: ir.Value, conv_out: ir.Value,
                act_out: ir.Value) -> ir.Value:
        conv, act = conv_out.producer(), act_out.producer()
        assert conv is not None and act is not None
        params = self.activation_params(act)
        assert not isinstance(params, MatchResult)  # check() refused those
        extra = {"activation_params": params} if params else {}
        return op.FusedConv(*conv.inputs, _domain=MS_DOMAIN, activation=self.activation,
                            **extra, **conv.attributes)


class FuseConvRelu(_FuseConvActivationBase):
    activation = "Relu"


class FuseConvTanh(_FuseConvActivationBase):
    activation = "Tanh"


class FuseConvSigmoid(_FuseConvActivationBase):
    activation = "Sigmoid"


class FuseConvLeakyRelu(_FuseConvActivationBase):
    activation = "LeakyRelu"
    attributes = ("alpha",)

    def activation_params(self, act: ir.Node) -> list[float] | MatchResult:
        return [attr_float(act, "alpha", 0.01)]  # the spec default


class FuseConvHardSigmoid(_FuseConvActivationBase):
    activation = "HardSigmoid"
    attributes = ("alpha", "beta")

    def activation_params(self, act: ir.Node) -> list[float] | MatchResult:
        return [attr_float(act, "alpha", 0.2), attr_float(act, "beta", 0.5)]  # spec defaults


class FuseConvClip(_FuseConvActivationBase):
    """Clip(Conv) with constant bounds, given as attributes (opset < 11) or inputs (11+)."""

    activation = "Clip"
    attributes = ("min", "max")
    extra_inputs = True

    def activation_params(self, act: ir.Node) -> list[float] | MatchResult:
        bound_inputs = list(act.inputs[1:3])
        if any(v is not None for v in bound_inputs) and act.attributes:
            return MatchResult().fail(f"Clip '{act.name}' has bounds as inputs and attributes")
        refusal = refuse_if_not_constant(*bound_inputs)
        if refusal is not None:
            return refusal
        bounds: list[float] = []
        for i, (name, default) in enumerate((("min", _FLOAT32_LOWEST), ("max", _FLOAT32_MAX))):
            value = bound_inputs[i] if i < len(bound_inputs) else None
            if value is not None:
                array = const_array(value)
                if array.size != 1:
                    return MatchResult().fail(f"Clip {name} '{value.name}' has shape {array.shape}")
                bounds.append(float(array.reshape(())))
            else:
                bounds.append(attr_float(act, name, default))
        low, high = bounds
        if np.isnan(low) or np.isnan(high) or low > high:
            return MatchResult().fail(f"Clip '{act.name}' has bounds min={low}, max={high}")
        return bounds


class FuseConvSilu(RewriteRuleClassBase):
    """Mul(Conv, Sigmoid(Conv)) → QuickGelu(Conv, alpha=1); FusedConv has no Silu in ORT 1.32."""

    sigmoid_first: ClassVar[bool] = False

    def pattern(self, op: Any, x: ir.Value, w: ir.Value) -> ir.Value:
        conv = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        gate = op.Sigmoid(conv, _outputs=["gate"])
        if self.sigmoid_first:
            return op.Mul(gate, conv, _outputs=["silu_out"])
        return op.Mul(conv, gate, _outputs=["silu_out"])

    def check(self, context: Any, x: ir.Value, w: ir.Value, conv_out: ir.Value, gate: ir.Value,
              silu_out: ir.Value) -> MatchResult:
        conv, sigmoid, mul = conv_out.producer(), gate.producer(), silu_out.producer()
        assert conv is not None and sigmoid is not None and mul is not None
        refusal = first_refusal(
            refuse_if_escapes(conv_out, sigmoid, mul),
            refuse_if_not_float32(conv, "QuickGelu"), refuse_if_escapes(gate, mul),
            refuse_unknown_attributes(sigmoid), refuse_unknown_attributes(mul))
        return refusal if refusal is not None else MatchResult()

    def rewrite(self, op: Any, x: ir.Value, w: ir.Value, conv_out: ir.Value, gate: ir.Value,
                silu_out: ir.Value) -> ir.Value:
        conv = conv_out.producer()
        assert conv is not None
        return op.QuickGelu(op.Conv(*conv.inputs, **conv.attributes), _domain=MS_DOMAIN,
                            alpha=1.0)


class FuseConvSiluSwapped(FuseConvSilu):
    """The same with the Mul operands the other way round: Mul(Sigmoid(Conv), Conv)."""

    sigmoid_first = True


FUSE_CONV_ACTIVATION = FusionPass(
    name="fuse_conv_activation",
    summary="Fuse Conv + Relu / Clip / LeakyRelu / Sigmoid / HardSigmoid / Tanh into "
            "com.microsoft.FusedConv, and Conv + SiLU into Conv + com.microsoft.QuickGelu",
    stage=PassStage.CONV_BN_ACT,
    rules={
        Backend.ONNXRUNTIME: [
            FuseConvRelu.rule(), FuseConvClip.rule(), FuseConvLeakyRelu.rule(),
            FuseConvSigmoid.rule(), FuseConvHardSigmoid.rule(), FuseConvTanh.rule(),
            FuseConvSilu.rule(), FuseConvSiluSwapped.rule(),
        ],
    },
    hides_from_quantizer="com.microsoft.FusedConv has no int8 kernel and ONNX Runtime's "
                         "quantizer skips it; ONNX Runtime fuses the quantized Conv and its "
                         "activation into QLinearConv itself",
)
