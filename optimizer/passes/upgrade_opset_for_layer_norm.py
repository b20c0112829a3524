"""Convert a model below opset 17 to opset 17 when that lets its written-out LayerNorms fuse.

LayerNormalization's first ONNX version is 17, and below it neither backend has a form
FuseForge can write and check:
- ONNX Runtime loads a default-domain LayerNormalization at any opset (its CPU provider
  registers a contrib kernel for versions 1-16, which its own LayerNormFusion emits), but the ONNX
  checker refuses that node below 17 ("No Op registered for LayerNormalization with
  domain_version of 13"), so FuseForge's own model check (uploads, `fuseforge validate`) would
  refuse the model FuseForge wrote; `com.microsoft` has no LayerNormalization at all.
- TensorRT's ONNX parser imports LayerNormalization only at opset >= 17, and no fuseforge
  plugin normalizes without a residual Add.
So when the model imports opset 11-16 of the default domain and fuse_layer_norm's rules would
fuse a LayerNorm but for the opset, the whole model is converted with onnx.version_converter,
whose adapters rewrite every op whose signature changed since (Squeeze, Unsqueeze, Split and
ReduceSum take axes as inputs from 13, Softmax's axis semantics change at 13, ...), subgraphs
included. fuse_layer_norm then writes LayerNormalization-17, which ONNX Runtime, TensorRT's
parser and the ONNX checker all take. The reduce ops keep their `axes` attribute up to 17, so
the matcher reads the same ReduceMean before and after.

Safe when the converter's adapters are exact: tests compare the converted model's outputs with
the original's at every opset 11-16, and a job validates the optimized model against the
original, where a mismatch's bisection can blame this pass by name like any clean-up. Refused
(model left as it is; the reason is a note in the fusion report and in fuse_layer_norm's
refusal) when the model has local functions (their own opset imports would stay behind), the
converter fails (an op without an adapter) or its result fails the ONNX checker, or the graph
without its weights is over protobuf's 2 GiB (the converter takes it serialized; the weights
stay out of it). Opsets below 11 are left alone: the conversion is tested from 11 on.

Backends: both; the conversion itself is backend-neutral.

Cost: the weights stay out of the converter (large initializers go in as graph inputs and are
put back after), so a 12-layer BERT-base at opset 13 optimizes in 2.8 s against 1.6 s for the
same model at opset 17 (14 s with the weights round-tripped through protobuf).
"""

from __future__ import annotations

import functools
from typing import Any

import onnx
import onnx.version_converter
import onnx_ir as ir
from onnxscript.rewriter.pattern import MatchingTracer, MatchStatus, RewriteRule, RewriteRuleSet

from optimizer.passes.base import FusionPass, PassStage
from optimizer.passes.fuse_layer_norm import (
    LAYER_NORM_OPSET,
    UPGRADE_REFUSAL_KEY,
    layer_norm_rules,
)
from optimizer.passes.matching import OpsPresent, default_opset
from optimizer.passes.notes import add_note

__all__ = ["MIN_SOURCE_OPSET", "UPGRADE_OPSET_FOR_LAYER_NORM", "upgrade_opset_for_layer_norm"]

MIN_SOURCE_OPSET = 11
PASS_NAME = "upgrade_opset_for_layer_norm"
_PROTOBUF_LIMIT = 2**31  # the converter serializes the model to hand it to C++
_KEPT_INITIALIZER_BYTES = 1024
_MIN_IR_VERSION = onnx.helper.find_min_ir_version_for([onnx.helper.make_opsetid("", LAYER_NORM_OPSET)])


class _MatchCounter(MatchingTracer):
    """Counts the matches a rule set would rewrite (with a tracer the rewriter changes nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.matches = 0

    def log(self, rule: Any, container: Any, node: Any, match_result: Any,
            status: MatchStatus) -> None:
        if status == MatchStatus.SUCCESS:
            self.matches += 1
        elif status == MatchStatus.REPLACEMENT_FAILED:  # logged after its match's SUCCESS
            self.matches -= 1


@functools.cache
def _counting_rules() -> tuple[RewriteRule, ...]:
    return tuple(layer_norm_rules(require_opset=False))


def _layer_norms_waiting_for_opset(model: ir.Model) -> int:
    """How many LayerNorms fuse_layer_norm would fuse if the model imported opset 17."""
    # Only the rules whose ops the model holds: a ResNet-50 has no ReduceMean, and matching
    # every LayerNorm form at each of its nodes took 0.05-0.1 s a round.
    present = OpsPresent(model)
    rules = [rule for rule in _counting_rules() if present.may_match(rule)]
    if not rules:
        return 0
    counter = _MatchCounter()
    RewriteRuleSet(rules).apply_to_model(model, tracer=counter)
    return counter.matches


def _without_weights(model: ir.Model) -> tuple[onnx.ModelProto, set[str]]:
    """`model` as a proto whose large main-graph initializers are graph inputs instead, and
    their names. The converter rewrites ops, not weights, yet round-trips everything it is
    given through protobuf: a BERT-base took 7 s with its weights and the checker 2 s more.
    Small initializers stay, since an adapter may read a constant (axes, split sizes)."""
    proto = ir.to_proto(model)
    graph = proto.graph
    declared = {value.name for value in graph.input}
    lifted = [t for t in graph.initializer
              if t.name not in declared and t.ByteSize() > _KEPT_INITIALIZER_BYTES]
    for tensor in lifted:
        graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type,
                                                              list(tensor.dims)))
    names = {t.name for t in lifted}
    kept = [t for t in graph.initializer if t.name not in names]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return proto, names


def _with_weights(converted: onnx.ModelProto, lifted: set[str], model: ir.Model) -> ir.Model:
    """The converted model with `model`'s weights put back as initializers."""
    upgraded = ir.from_proto(converted)
    graph = upgraded.graph
    for value in [v for v in graph.inputs if v.name in lifted]:
        graph.inputs.remove(value)
        value.const_value = model.graph.initializers[str(value.name)].const_value
        graph.register_initializer(value)
    return upgraded


def _converted(model: ir.Model, opset: int) -> ir.Model | str:
    """The model converted to LayerNormalization's opset, or why it cannot be."""
    if model.functions:
        return (f"the model has {len(model.functions)} local function(s), whose opset imports "
                "the converter would leave behind")
    light, lifted = _without_weights(model)
    if light.ByteSize() >= _PROTOBUF_LIMIT:
        return ("its graph without the weights is over protobuf's 2 GiB limit, which "
                "onnx.version_converter needs it to fit in")
    try:
        converted = onnx.version_converter.convert_version(light, LAYER_NORM_OPSET)
        onnx.checker.check_model(converted)
    except (onnx.checker.ValidationError, RuntimeError, ValueError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"onnx.version_converter could not convert it from opset {opset}: {first_line}"
    return _with_weights(converted, lifted, model)


def upgrade_opset_for_layer_norm(model: ir.Model) -> int:
    """Convert `model` in place to opset 17 if that lets a LayerNorm fuse; 1 if it did, else 0.

    A refusal is kept on the model (`model.meta`) so later rounds do not retry it and
    fuse_layer_norm's refusal can say why; it also becomes a note in the fusion report.
    """
    opset = default_opset(model)
    if not 0 < opset < LAYER_NORM_OPSET or UPGRADE_REFUSAL_KEY in model.meta:
        return 0
    waiting = _layer_norms_waiting_for_opset(model)
    if not waiting:
        return 0
    converted = _converted(model, opset) if opset >= MIN_SOURCE_OPSET else (
        f"opset {opset} is below {MIN_SOURCE_OPSET}, the oldest this conversion is tested from")
    if isinstance(converted, str):
        model.meta[UPGRADE_REFUSAL_KEY] = converted
        add_note(model, f"{PASS_NAME}: left the model at opset {opset}, so {waiting} written-out "
                        f"LayerNorm(s) stay unfused: {converted}")
        return 0
    model.graph = converted.graph
    # The converter keeps the IR version (6 and 7 are common at opsets 11-13); opset 17's is 8.
    model.ir_version = max(converted.ir_version, _MIN_IR_VERSION)
    add_note(model, f"{PASS_NAME}: converted the model from opset {opset} to "
                    f"{LAYER_NORM_OPSET} (onnx.version_converter) so that {waiting} written-out "
                    "LayerNorm(s) become LayerNormalization-17, the form both ONNX Runtime and "
                    "TensorRT's ONNX parser take and the ONNX checker accepts (below 17 the "
                    "checker refuses LayerNormalization and TensorRT's parser cannot import it)")
    return 1


UPGRADE_OPSET_FOR_LAYER_NORM = FusionPass(
    name=PASS_NAME,
    summary="Convert a model at opset 11-16 to opset 17 (onnx.version_converter) when its "
            "written-out LayerNorms would then fuse into LayerNormalization-17",
    stage=PassStage.OTHER,
    graph_function=upgrade_opset_for_layer_norm,
)
