"""Find the first node where an optimized model's intermediate tensors leave the original's.

Which tensors can be compared: our passes keep the name of the value a fused region replaces,
so the fused node's output carries the name of the region's last output (BatchNormalization
folded into Conv, then Relu fused: the FusedConv outputs the Relu's tensor). The tensors that
a top-level node produces in both graphs under the same name are therefore exactly the region
boundaries; names only one graph has (the fused-away Conv output, a rewrite's helper values
such as "val_3") are skipped. Checked on small_cnn, mlp, the BERT encoder's three forms and
ResNet-50 (optimizer/testing/models.py and real_models.py) after `optimize_model`.

The walk follows the original graph's topological order, so when a tensor is the first to
exceed tolerance, every shared tensor it depends on was compared before it and passed: the
fault lies in the nodes between those inputs and it (the "region"). Memory stays bounded: the
shared tensors are read `chunk_size` at a time (optimizer/validation/intermediates.py) and each
chunk's arrays are dropped before the next; both models' weights are written once to a temporary
directory, as external data ONNX Runtime maps rather than copies, so disk space for one more
copy of each model's weights is needed while localising.

What produced the region: onnxscript's rewriter tags every replacement node with the rule's
name (metadata_props[RULE_NAME_TAG], merged with a comma when a rule rewrites an already
rewritten node), and the tag survives `ir.to_proto`; the fusion report (or the pass catalog,
DEFAULT_PASSES unless given) names the pass that holds the rule. A Cast to float16/bfloat16 in
the region, a low-precision weight, or a low-precision tensor at the region's edge is a
precision change. A weight the
region reads that differs from the original's weight of the same name is a changed weight (our
rules store the weights they compute under new names).

A graph fused for TensorRT is read with its fuseforge plugin nodes decomposed (intermediates.py)
but explained as fused: a plugin's outputs keep their names, so the divergence names the plugin
node ("fuseforge.MultiHeadAttention") and the rule that wrote it, never a decomposed op. Only the
main graph is examined: tensors inside If/Loop/Scan bodies are not compared. Models must hold
their weights in memory (no external data files).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnxscript.rewriter import RULE_NAME_TAG

from optimizer.errors import InternalError
from optimizer.fusion_report import FusionReport
from optimizer.jsonable import json_safe
from optimizer.passes import DEFAULT_PASSES, FusionPass
from optimizer.validation.compare import compare_outputs
from optimizer.validation.intermediates import (
    IntermediateReader,
    consumed_names,
    topological_nodes,
)
from optimizer.validation.tolerances import Tolerances

__all__ = ["Divergence", "TensorError", "localize_divergence", "shared_tensors"]

_LOW_PRECISION: dict[int, str] = {TensorProto.FLOAT16: "float16",
                                  TensorProto.BFLOAT16: "bfloat16"}
_LOW_PRECISION_DTYPES = {"float16", "bfloat16"}
_NAMES_SHOWN = 6  # in describe(): the replaced nodes of a large region are elided


@dataclass(frozen=True)
class TensorError:
    """How one intermediate tensor differs from the original's, over all feeds together."""

    name: str
    max_abs_err: float  # infinite when the shapes differ
    max_rel_err: float
    cosine_similarity: float  # NaN when the shapes differ
    reference_dtype: str
    candidate_dtype: str
    reference_shape: tuple[int, ...]  # of the first feed (or the first whose shapes differ)
    candidate_shape: tuple[int, ...]
    failures: tuple[str, ...] = ()  # each limit of the tolerances it broke, in words

    def to_dict(self) -> dict[str, Any]:
        safe: dict[str, Any] = json_safe(asdict(self))
        return safe


@dataclass(frozen=True)
class Divergence:
    """The first tensor out of tolerance whose inputs are within it, and what made it.

    `node`/`op_type` name the candidate's node that produces `tensor` (the fused node when a
    rule replaced the region); `original_node`/`original_op_type` the original's. `region` and
    `replaced` list the candidate and original nodes between `inputs` (the shared tensors the
    region reads, each within tolerance) and `tensor`.
    """

    tensor: TensorError
    node: str
    op_type: str
    original_node: str
    original_op_type: str
    rules: tuple[str, ...]  # rewrite rules that produced the region's nodes
    passes: tuple[str, ...]  # the passes holding those rules, where known
    precision_change: str | None  # e.g. "Cast to float16 in node 'cast_3'"
    changed_weights: tuple[str, ...]  # weights differing from the original's same-named ones
    region: tuple[str, ...]
    replaced: tuple[str, ...]
    inputs: tuple[TensorError, ...]
    samples: int
    tolerances: Tolerances

    @property
    def produced_by(self) -> str:
        """The pass, rule, precision change or weight change behind the divergence, in words."""
        causes = []
        if self.precision_change:
            causes.append(f"precision change ({self.precision_change})")
        if self.rules:
            passes = f" of pass {', '.join(self.passes)}" if self.passes else ""
            causes.append(f"rewrite rule {', '.join(self.rules)}{passes}")
        if self.changed_weights:
            causes.append(f"changed weights {', '.join(self.changed_weights)}")
        return "; ".join(causes) or (
            "no rewrite rule, precision change or weight change within this region: the "
            "difference comes in through its inputs, each within tolerance, and grows here")

    def describe(self, blamed: Sequence[str] = ()) -> str:
        """A few sentences for a job's error message or the CLI: where, how much, and why.

        `blamed`: the rules a bisection blamed. Where none of them produced this region, the
        text says their rewrites lie before it (the region only magnifies what they changed),
        so the two verdicts read as one.
        """
        t, tol = self.tensor, self.tolerances
        where = f"The first divergence is at node {self.node!r} ({self.op_type})"
        if (self.node, self.op_type) != (self.original_node, self.original_op_type):
            shown = ", ".join(repr(name) for name in self.replaced[:_NAMES_SHOWN])
            more = (f" and {len(self.replaced) - _NAMES_SHOWN} more"
                    if len(self.replaced) > _NAMES_SHOWN else "")
            where += f", which replaces original node(s) {shown}{more}"
        if t.reference_shape != t.candidate_shape:
            error = (f"tensor {t.name!r} has shape {list(t.candidate_shape)} instead of the "
                     f"original's {list(t.reference_shape)}")
        else:
            error = (f"over {self.samples} samples tensor {t.name!r} differs by max abs "
                     f"{t.max_abs_err:.3g}, max rel {t.max_rel_err:.3g}, cosine "
                     f"{t.cosine_similarity:.6f} (atol={tol.atol:g}, rtol={tol.rtol:g}, "
                     f"min cosine={tol.min_cosine:g})")
        inputs = (f"its inputs {', '.join(repr(i.name) for i in self.inputs)} are within "
                  "tolerance" if self.inputs else "it reads only graph inputs and weights")
        broken = f" Limits broken: {'; '.join(t.failures)}." if t.failures else ""
        elsewhere = [rule for rule in blamed if rule not in self.rules]
        upstream = (f" Bisection blames rule(s) {', '.join(elsewhere)}, whose rewrites before "
                    "this region shift its inputs within tolerance; this region magnifies "
                    "that difference." if elsewhere and not self.rules else "")
        return (f"{where}: {error}, while {inputs}. Produced by {self.produced_by}."
                f"{upstream}{broken}")

    def to_dict(self) -> dict[str, Any]:
        """A strict-JSON dict (non-finite numbers become None), with `produced_by`."""
        fields = {**asdict(self), "tolerances": self.tolerances.to_dict(),
                  "produced_by": self.produced_by}
        safe: dict[str, Any] = json_safe(fields)
        return safe


def shared_tensors(original: onnx.ModelProto, candidate: onnx.ModelProto) -> list[str]:
    """Names produced by a top-level node in both graphs, in the original's topological order.

    Constant nodes' outputs are left out: they say nothing about the computation.
    """
    in_candidate = {name for node in candidate.graph.node for name in node.output if name}
    return [name for node in topological_nodes(original.graph) if node.op_type != "Constant"
            for name in node.output if name and name in in_candidate]


def localize_divergence(
    original: onnx.ModelProto,
    candidate: onnx.ModelProto,
    feeds: Sequence[Mapping[str, np.ndarray]],
    tolerances: Tolerances,
    *,
    fusion_report: FusionReport | None = None,
    catalog: Sequence[FusionPass] = DEFAULT_PASSES,
    chunk_size: int = 64,
) -> Divergence | None:
    """The first shared tensor that exceeds `tolerances` while its inputs do not, or None.

    Both models run in ONNX Runtime (CPU, graph optimizations off) on every feed; a tensor's
    error is measured over all feeds, in float64 when the dtypes differ (an fp16 candidate
    against the fp32 original). A shape mismatch is a divergence. `fusion_report` maps rule
    names to passes; without it the rules of `catalog` (the OptimizeOptions.catalog that made
    `candidate`) are used. None means every shared tensor is within tolerance.

    >>> divergence = localize_divergence(model, fused, feeds, default_tolerances("fp32"))
    >>> divergence.node, divergence.rules                           # doctest: +SKIP
    ('node_FusedConv_2', ('FuseConvAddRelu', 'FoldBatchNormIntoConv'))

    Raises:
        InternalError: no feeds, or `chunk_size` < 1.
        EngineBuildError, InferenceError: ONNX Runtime cannot load or run either model.
        UnsupportedModelError: a model's weights are external data it does not hold.
    """
    if not feeds or chunk_size < 1:
        raise InternalError(
            f"localize_divergence needs at least one feed and chunk_size >= 1; got "
            f"{len(feeds)} feeds and chunk_size {chunk_size}.")
    names = shared_tensors(original, candidate)
    within: dict[str, TensorError] = {}
    with tempfile.TemporaryDirectory(prefix="fuseforge-localize-") as tmp:
        readers = (IntermediateReader(original, Path(tmp), "original"),
                   IntermediateReader(candidate, Path(tmp), "candidate"))
        for start in range(0, len(names), chunk_size):
            for error, passed in _compare_chunk(readers, names[start:start + chunk_size], feeds,
                                                tolerances):
                if not passed:
                    return _explain(error, original, candidate, set(names), within, feeds,
                                    tolerances, _rule_owners(fusion_report, catalog))
                within[error.name] = error
    return None


def _compare_chunk(
    readers: tuple[IntermediateReader, IntermediateReader], names: Sequence[str],
    feeds: Sequence[Mapping[str, np.ndarray]], tolerances: Tolerances,
) -> list[tuple[TensorError, bool]]:
    """Each comparable tensor of the chunk, in order, with whether it is within tolerance."""
    references = readers[0].read(names, feeds)
    candidates = readers[1].read(names, feeds)
    results = []
    for name in names:
        ref = [values.pop(name) for values in references]
        cand = [values.pop(name) for values in candidates]
        if not all(_is_numeric(value) for value in (*ref, *cand)):
            continue  # sequences, maps, strings: nothing to measure
        ref_arrays = [np.asarray(value) for value in ref]
        cand_arrays = [np.asarray(value) for value in cand]
        reference_dtype, candidate_dtype = str(ref_arrays[0].dtype), str(cand_arrays[0].dtype)
        if reference_dtype != candidate_dtype:
            # compare_outputs fails differing dtypes outright; float64 holds fp16, bf16 and
            # fp32 exactly, so comparing there measures only the values.
            ref_arrays = [a.astype(np.float64) for a in ref_arrays]
            cand_arrays = [a.astype(np.float64) for a in cand_arrays]
        # No intermediate tensor holds class scores, whatever its shape.
        report = compare_outputs([{name: a} for a in ref_arrays], [{name: a} for a in cand_arrays],
                                 tolerances, class_outputs=())
        (comparison,) = report.outputs
        shapes = next(((r.shape, c.shape) for r, c in zip(ref_arrays, cand_arrays, strict=True)
                       if r.shape != c.shape), (ref_arrays[0].shape, cand_arrays[0].shape))
        error = TensorError(
            name=name, max_abs_err=comparison.max_abs_err, max_rel_err=comparison.max_rel_err,
            cosine_similarity=comparison.cosine_similarity, reference_dtype=reference_dtype,
            candidate_dtype=candidate_dtype, reference_shape=tuple(shapes[0]),
            candidate_shape=tuple(shapes[1]),
            failures=tuple(failure.message for failure in report.failures))
        results.append((error, report.passed))
    return results


def _is_numeric(value: object) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind in "fiub"


class _Graph:
    """A top-level graph's producers and weights, for walking back from a tensor."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.nodes = list(graph.node)
        self.made_by = {name: index for index, node in enumerate(self.nodes)
                        for name in node.output if name}
        self.weights = {t.name: t for t in graph.initializer}

    def region(self, tensor: str, boundary: set[str]) -> tuple[list[onnx.NodeProto], list[str]]:
        """The nodes that compute `tensor` from boundary tensors, graph inputs and weights
        (in graph order, the producer of `tensor` included), and the boundary tensors read."""
        seen: set[int] = set()
        edges: list[str] = []
        stack = [self.made_by[tensor]]
        while stack:
            index = stack.pop()
            if index in seen:
                continue
            seen.add(index)
            node = self.nodes[index]
            # An If/Loop body reads outer values by name; they belong to the region too.
            captured = sorted(consumed_names(node) - set(node.input))
            for name in (*node.input, *captured):
                if name in boundary:
                    edges.append(name)
                elif name in self.made_by:
                    stack.append(self.made_by[name])
        return [self.nodes[index] for index in sorted(seen)], list(dict.fromkeys(edges))


def _explain(
    error: TensorError, original: onnx.ModelProto, candidate: onnx.ModelProto, shared: set[str],
    within: Mapping[str, TensorError], feeds: Sequence[Mapping[str, np.ndarray]],
    tolerances: Tolerances, owners: Mapping[str, str],
) -> Divergence:
    before, after = _Graph(original.graph), _Graph(candidate.graph)
    boundary = shared - {error.name}
    replaced, _ = before.region(error.name, boundary)
    region, edges = after.region(error.name, boundary)
    producer = _computing_node(after, error.name, boundary)
    source = before.nodes[before.made_by[error.name]]
    inputs = tuple(within[name] for name in edges if name in within)
    rules = _rules([producer, *region])
    return Divergence(
        tensor=error,
        node=_label(producer),
        op_type=_op(producer),
        original_node=_label(source),
        original_op_type=_op(source),
        rules=rules,
        passes=tuple(dict.fromkeys(owners[rule] for rule in rules if rule in owners)),
        precision_change=_precision_change(region, after.weights, error, inputs),
        changed_weights=_changed_weights(region, after.weights, before.weights),
        region=tuple(_label(node) for node in region),
        replaced=tuple(_label(node) for node in replaced),
        inputs=inputs,
        samples=len(feeds),
        tolerances=tolerances,
    )


def _computing_node(graph: _Graph, tensor: str, boundary: set[str]) -> onnx.NodeProto:
    """The node that computes `tensor`: its producer, or, when that is a view (Reshape) a
    rewrite put after the op computing it (sink_reshapes keeps a transformer's hidden state
    2-D and views it back where the original's tensor was), that op."""
    node: onnx.NodeProto = graph.nodes[graph.made_by[tensor]]
    while (node.op_type == "Reshape" and node.domain in ("", "ai.onnx") and node.input
           and node.input[0] in graph.made_by and node.input[0] not in boundary
           and any(prop.key == RULE_NAME_TAG for prop in node.metadata_props)):
        node = graph.nodes[graph.made_by[node.input[0]]]
    return node


def _rules(nodes: Sequence[onnx.NodeProto]) -> tuple[str, ...]:
    found: dict[str, None] = {}
    for node in nodes:
        for prop in node.metadata_props:
            if prop.key == RULE_NAME_TAG:
                found.update((rule.strip(), None) for rule in prop.value.split(",") if rule.strip())
    return tuple(found)


def _rule_owners(report: FusionReport | None,
                 catalog: Sequence[FusionPass]) -> dict[str, str]:
    """Rule name -> the name of the pass holding it, from `report` when given."""
    if report is not None:
        return {stats.rule: stats.pass_name for stats in report.rules}
    return {rule.name: fusion_pass.name for fusion_pass in catalog
            for backend_rules in fusion_pass.rules.values() for rule in backend_rules
            if rule.name}


def _precision_change(region: Sequence[onnx.NodeProto], weights: Mapping[str, TensorProto],
                      error: TensorError, inputs: Sequence[TensorError]) -> str | None:
    for node in region:
        if node.op_type == "Cast":
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            if to in _LOW_PRECISION:
                return f"Cast to {_LOW_PRECISION[to]} in node {_label(node)!r}"
        for name in node.input:
            if name in weights and weights[name].data_type in _LOW_PRECISION:
                return (f"weight {name!r} of node {_label(node)!r} is stored in "
                        f"{_LOW_PRECISION[weights[name].data_type]}")
    for tensor in (error, *inputs):
        if (tensor.candidate_dtype in _LOW_PRECISION_DTYPES
                and tensor.reference_dtype not in _LOW_PRECISION_DTYPES):
            return (f"tensor {tensor.name!r} is {tensor.candidate_dtype} in the candidate, "
                    f"{tensor.reference_dtype} in the original")
    return None


def _changed_weights(region: Sequence[onnx.NodeProto], weights: Mapping[str, TensorProto],
                     original_weights: Mapping[str, TensorProto]) -> tuple[str, ...]:
    """Weights the region reads that differ from the original's weight of the same name.

    Our rules store the weights they compute under new names ("conv1.w_bnfold"), so a
    same-named weight with other values was changed by something else.
    """
    changed: dict[str, None] = {}
    for node in region:
        for name in node.input:
            if name in weights and name in original_weights and not _same_weight(
                    weights[name], original_weights[name]):
                changed[name] = None
    return tuple(changed)


def _same_weight(candidate: TensorProto, original: TensorProto) -> bool:
    """Equal values, counting a weight rounded to the candidate's dtype (a precision change,
    reported as such) as the same weight."""
    ours, theirs = numpy_helper.to_array(candidate), numpy_helper.to_array(original)
    if ours.shape != theirs.shape:
        return False
    if ours.dtype != theirs.dtype:
        theirs = theirs.astype(ours.dtype)
    return bool(np.array_equal(ours, theirs, equal_nan=ours.dtype.kind == "f"))


def _label(node: onnx.NodeProto) -> str:
    return node.name or f"{node.op_type} producing {node.output[0]}"


def _op(node: onnx.NodeProto) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
