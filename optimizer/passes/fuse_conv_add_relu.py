"""Fuse Conv + residual Add + Relu into onnxruntime's com.microsoft.FusedConv with input Z.

FusedConv(X, W, B, Z; activation="Relu") computes Relu(Conv(X, W, B) + Z): the CPU kernel copies
Z into the output buffer, lets the convolution accumulate onto it (beta = 1), then applies the
activation (core/providers/cpu/nn/conv.cc, Conv<float>::Compute). So
    Relu(Add(Conv(X, W, B), Z))  and  Relu(Add(Z, Conv(X, W, B)))  →  FusedConv(X, W, B, Z)
(addition commutes; a Conv without B passes an empty B). B may be absent, Z may not.

Safe only when: Z has exactly the Conv output's shape, known statically from shape inference
(the kernel adds Z element by element, with no broadcasting, and fails if the shapes differ, so
a broadcasting Add is refused, and so are shapes that are unknown or symbolic); Z is not the
Conv output itself; Z and the Conv output are both float32 (the CPU kernel is float-only;
float16 would only run wrapped in Casts); the Conv output feeds only the Add and the
Add output only the Relu, neither being a graph output; and the Conv has only the attributes
FusedConv shares with Conv.

Speed (bench/fuse_conv_activation.py, ORT 1.32 CPU, one thread, 64ch 56x56 and 256ch 14x14, batch
1 and 8): 1.00-1.02x at level "disabled", parity at level "all" (where ORT itself fuses the Add
into its NCHWc Conv) when Z is computed by the graph, as residuals are. A Z that is a graph input
or initializer (or an Identity of one) is refused: ORT's NCHWc transform then leaves the FusedConv
in NCHW, measured 0.82-0.85x. A Z from another op NCHWc cannot convert would do the same; the
residuals of ResNet-style blocks come from Conv, MaxPool, Relu or Add, which it converts.

The kernel may write its output into Z's buffer (MayInplace(3, 0)); ONNX Runtime's allocation
planner does that only when this node is Z's last reader, so a Z read elsewhere is unaffected.

TensorRT gets no rules: it fuses Conv + Add + Relu itself from the standard ops, so the pass is
skipped there. Only ORT's CPU execution provider is targeted (see fuse_conv_activation).
"""

from __future__ import annotations

from typing import Any, ClassVar

import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchResult, RewriteRuleClassBase

from optimizer.passes.base import FusionPass, PassStage
from optimizer.passes.checks import first_refusal, refuse_if_escapes, refuse_unknown_attributes
from optimizer.passes.fuse_conv_activation import refuse_unless_fused_conv_can_replace
from optimizer.passes.matching import MS_DOMAIN
from optimizer.registries.backends import Backend

__all__ = ["FUSE_CONV_ADD_RELU", "FuseAddConvRelu", "FuseConvAddRelu"]

# Fused / unfused speed at ORT level "all" when Z is a graph input: 64ch 56x56 and 256ch 14x14,
# batch 1 and 8, one thread, ORT 1.32 (at level "disabled" the same fusion is 1.00-1.02x).
_NOT_COMPUTED_Z_SPEEDUP = "0.82-0.85x"


def _uncomputed_source(value: ir.Value) -> str | None:
    """The graph input or initializer `value` is, through any Identity nodes (which ORT removes
    at its basic level); None when a node computes it."""
    producer = value.producer()
    while producer is not None and producer.op_type == "Identity" and producer.domain == "":
        source = producer.inputs[0]
        if source is None:
            return None
        value, producer = source, source.producer()
    return value.name if producer is None else None


def _refuse_unless_same_static_shape(z: ir.Value, conv_out: ir.Value) -> MatchResult | None:
    """Z must match the Conv output dim for dim, with every dim known."""
    shapes = []
    for value in (conv_out, z):
        if value.shape is None:
            return MatchResult().fail(
                f"'{value.name}' has no inferred shape (run shape inference), so the Add "
                "might broadcast")
        if not value.shape.is_static():
            return MatchResult().fail(
                f"'{value.name}' has shape {value.shape} with symbolic or unknown dims, so the "
                "Add might broadcast")
        shapes.append(tuple(value.shape))
    if shapes[0] != shapes[1]:
        return MatchResult().fail(
            f"'{z.name}' has shape {z.shape} but the Conv output '{conv_out.name}' has "
            f"{conv_out.shape}: the Add broadcasts")
    return None


class _FuseConvAddReluBase(RewriteRuleClassBase):
    conv_first: ClassVar[bool]  # whether the Conv output is the Add's first operand

    def pattern(self, op: Any, x: ir.Value, w: ir.Value, z: ir.Value) -> ir.Value:
        conv = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        summed = (op.Add(conv, z, _outputs=["sum_out"]) if self.conv_first
                  else op.Add(z, conv, _outputs=["sum_out"]))
        return op.Relu(summed, _outputs=["relu_out"])

    def check(self, context: Any, x: ir.Value, w: ir.Value, z: ir.Value, conv_out: ir.Value,
              sum_out: ir.Value, relu_out: ir.Value) -> MatchResult:
        conv, add, relu = conv_out.producer(), sum_out.producer(), relu_out.producer()
        assert conv is not None and add is not None and relu is not None
        if z is conv_out:
            return MatchResult().fail(f"the Add adds '{conv_out.name}' to itself")
        source = _uncomputed_source(z)
        if source is not None:
            # A speed refusal, not a safety one: see the module docstring.
            return MatchResult().fail(
                f"residual '{z.name}' is (an Identity of) graph input or initializer '{source}': "
                "ORT's NCHWc layout transform (level all) cannot take it as FusedConv's Z, and "
                f"the fused form measured {_NOT_COMPUTED_Z_SPEEDUP} there")
        refusal = first_refusal(
            refuse_unknown_attributes(add),
            refuse_unknown_attributes(relu),
            refuse_unless_fused_conv_can_replace(conv, conv_out, add),
            refuse_if_escapes(sum_out, relu),
            _refuse_unless_same_static_shape(z, conv_out),
        )
        if refusal is not None:
            return refusal
        if z.dtype != ir.DataType.FLOAT:  # the Conv's is, as checked above
            return MatchResult().fail(f"'{z.name}' is {z.dtype}, the Conv output is FLOAT")
        return MatchResult()

    def rewrite(self, op: Any, x: ir.Value, w: ir.Value, z: ir.Value, conv_out: ir.Value,
                sum_out: ir.Value, relu_out: ir.Value) -> ir.Value:
        conv = conv_out.producer()
        assert conv is not None
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        return op.FusedConv(conv.inputs[0], conv.inputs[1], bias, z, _domain=MS_DOMAIN,
                            activation="Relu", **conv.attributes)


class FuseConvAddRelu(_FuseConvAddReluBase):
    """Relu(Add(Conv(X, W, B), Z)) → FusedConv(X, W, B, Z, activation="Relu")."""

    conv_first = True


class FuseAddConvRelu(_FuseConvAddReluBase):
    """Relu(Add(Z, Conv(X, W, B))) → FusedConv(X, W, B, Z, activation="Relu")."""

    conv_first = False


FUSE_CONV_ADD_RELU = FusionPass(
    name="fuse_conv_add_relu",
    summary="Fuse Conv + residual Add + Relu into com.microsoft.FusedConv with the residual as Z",
    stage=PassStage.ADD_RELU,
    rules={Backend.ONNXRUNTIME: [FuseConvAddRelu.rule(), FuseAddConvRelu.rule()]},
    hides_from_quantizer="com.microsoft.FusedConv has no int8 kernel and ONNX Runtime's "
                         "quantizer skips it; ONNX Runtime fuses the quantized Conv and its "
                         "activation into QLinearConv itself",
)
