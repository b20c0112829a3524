"""Quantize a fused fp32 model to int8 within an accuracy budget, and only if it is faster.

`quantize_within_budget` is the whole int8 step, in this order:

1. the graph is brought to the Q/DQ opset (qdq_opset.py);
2. static candidates: for each calibration method (the one asked, or `auto`'s order until one
   meets the budget) the table comes from `tables` (the caller's store, else a calibration
   run), and each flavour the backend runs is written from it; dynamic candidates (`dynamic`,
   or `auto` on a model with matrix products) need no table;
3. each candidate is judged on the validation samples, against the original's outputs, by the
   budget (`Tolerances`);
   Stopping early: when the first method's static forms are all out of budget and timing them
   (the full int8 graphs: the fastest int8 can be, since other methods change only scales and
   each node kept in float adds float work) finds none faster than fp32 at the median, int8
   cannot win: no other method, dynamic form or kept node is tried, and `why` says so;
4. none within budget: where the backend's own runtime runs the most accurate static
   candidate out of budget while ONNX Runtime runs the same Q/DQ graph within it, the nodes
   that runtime mishandles are found by bisection and given float inputs (mishandled.py);
   then the candidate's nodes are ranked by the error
   each adds (sensitivity.py) and kept in float one at a time, most harmful first, until the
   budget is met or `max_kept_nodes` are kept, or the cosine's pace over the last few nodes
   shows the nodes left cannot reach the budget (a stop early, said in `why`); each kept node
   is reported with the cosine it restored and the time it costs;
5. the candidates within budget are timed against the fp32 model, interleaved (timing.py): the
   fastest ships when its whole interval lies below 1, else the fp32 model does, and the result
   says why.

A flavour whose quantizer calibrates itself (`FlavourSpec.calibrates_itself`) is written
from the calibration samples themselves, once, rather than from a table per method. Candidates
run in ONNX Runtime at the request's level, or in the backend's own runtime where the request
names its `candidate_runner` (judged and timed there, against the fp32 graph in that runtime).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from optimizer.backends.onnxruntime.runner import OptimizationLevel, runner_for_model
from optimizer.backends.runner import Runner
from optimizer.errors import EngineBuildError, InferenceError, QuantizationError
from optimizer.jsonable import json_safe
from optimizer.quantization.calibration import CalibrationTable
from optimizer.quantization.mishandled import find_mishandled, float_inputs, quantized_nodes
from optimizer.quantization.node_precision import CONVERSIONS, INTEGER_KERNELS
from optimizer.quantization.qdq_opset import at_qdq_opset
from optimizer.quantization.quantize import (
    DYNAMIC_OP_TYPES,
    quantize_dynamic_model,
    quantize_self_calibrated,
    quantize_static_model,
)
from optimizer.quantization.sensitivity import rank_nodes
from optimizer.quantization.timing import LatencyRatio, interleaved_ratios, runner_ratios
from optimizer.registries.backends import load_dotted
from optimizer.registries.quantization import (
    CALIBRATION_METHODS_TRIED,
    DEFAULT_FLAVOURS,
    FLAVOURS,
    CalibrationMethod,
    QuantFlavour,
    QuantizationMode,
)
from optimizer.validation.compare import MetricFailure, ValidationReport, compare_outputs
from optimizer.validation.tolerances import Tolerances

__all__ = ["KeptFloatNode", "QuantizationRequest", "QuantizationResult", "TableSource",
           "quantize_within_budget"]

Feed = Mapping[str, np.ndarray]
# The calibration table of a graph by a method: the caller's stored one, or a fresh run.
TableSource = Callable[[CalibrationMethod, onnx.ModelProto], CalibrationTable]
# A backend's runner for a model file at a thread count (BackendSpec.candidate_runner).
CandidateRunner = Callable[[Path, int | None], Runner]
_SENSITIVITY_SAMPLES = 2
_QUANTIZED_OPS = INTEGER_KERNELS | CONVERSIONS  # a form without any is not quantized
_NOT_QUANTIZED = "quantized"  # the failure of a form the quantizer left all in float
_TIMING_ATTEMPTS = 3  # an uncertain verdict is timed again with twice the rounds, twice
_PACE_STEPS = 3  # nodes kept in float whose cosine gains say whether the budget is in reach


@dataclass(frozen=True)
class QuantizationRequest:
    mode: QuantizationMode = QuantizationMode.AUTO
    method: CalibrationMethod = CalibrationMethod.AUTO
    per_channel: bool = True
    keep_nodes: tuple[str, ...] = ()
    keep_op_types: tuple[str, ...] = ()
    flavours: tuple[QuantFlavour, ...] = DEFAULT_FLAVOURS
    max_kept_nodes: int = 16
    level: OptimizationLevel = "all"  # the ONNX Runtime level candidates are judged and timed at
    threads: int | None = None
    timing_rounds: int = 9
    # False: candidates are not timed here (their backend is not ONNX Runtime on this CPU);
    # the most accurate within budget ships and the caller times it where it runs.
    time_candidates: bool = True
    # False: no dynamic candidate (fp8 has no run-time-scaled form).
    allow_dynamic: bool = True
    precision: str = "int8"  # what a quantized result is called: "int8" or "fp8"
    # "module:function" of the `CandidateRunner` candidates are judged and timed with (the
    # backend's own runtime, at `threads`); None: ONNX Runtime at `level`.
    candidate_runner: str | None = None


@dataclass
class _Candidate:
    label: str
    mode: QuantizationMode
    flavour: QuantFlavour | None
    method: CalibrationMethod | None
    model: onnx.ModelProto
    kept: tuple[str, ...]
    validation: ValidationReport
    speed: LatencyRatio | None = None

    @property
    def worst_cosine(self) -> float:
        return min((o.cosine_similarity for o in self.validation.outputs), default=math.nan)

    def summary(self) -> dict[str, Any]:
        return {"label": self.label, "passed": self.validation.passed,
                "worst_cosine": self.worst_cosine, "kept_in_float": len(self.kept),
                "failures": [failure.message for failure in self.validation.failures[:3]],
                "speed": self.speed.to_dict() if self.speed else None}


@dataclass(frozen=True)
class KeptFloatNode:
    """A node the search kept in float, what it restored and what it cost."""

    name: str
    op_type: str
    added_error: float  # its rank's score (sensitivity.py)
    worst_cosine_after: float  # the model's worst output cosine once it is kept too
    ms_cost: float | None  # the engine's time with it kept less without, where measured


@dataclass
class QuantizationResult:
    """What the int8 step ships: `model` (None: the fp32 model ships, `why` says why)."""

    model: onnx.ModelProto | None
    why: str
    chosen: dict[str, Any] | None
    opset_note: str | None
    tried: list[dict[str, Any]] = field(default_factory=list)
    kept_nodes: list[KeptFloatNode] = field(default_factory=list)
    calibrations: list[dict[str, Any]] = field(default_factory=list)
    speed: LatencyRatio | None = None
    validation: ValidationReport | None = None
    kept_reasons: dict[str, str] = field(default_factory=dict)
    precision: str = "int8"  # the request's
    timed_threads: int | None = None  # the intra-op threads `speed` was timed at (None: ORT's)
    stopped_early: str | None = None  # why the search stopped before trying every form

    @property
    def shipped(self) -> str:
        return "fp32" if self.model is None else self.precision

    def to_dict(self) -> dict[str, Any]:
        safe: dict[str, Any] = json_safe({
            "shipped": self.shipped, "why": self.why, "chosen": self.chosen,
            "opset_note": self.opset_note, "tried": self.tried,
            "kept_nodes": [vars(node) for node in self.kept_nodes],
            "calibrations": self.calibrations, "stopped_early": self.stopped_early,
            "speed": {**self.speed.to_dict(), "intra_op_threads": self.timed_threads}
            if self.speed else None})
        return safe


def quantize_within_budget(
    fused: onnx.ModelProto, *, request: QuantizationRequest, tolerances: Tolerances,
    validation_feeds: Sequence[Feed], reference: Sequence[Mapping[str, np.ndarray]],
    calibration_feeds: Sequence[Feed] | None, tables: TableSource,
    labels: np.ndarray | None = None, progress: Callable[[str], None] = lambda _: None,
) -> QuantizationResult:
    """The int8 form of `fused` to ship, or why fp32 ships (see the module's docstring).

    `reference` holds the original model's outputs on `validation_feeds`; `calibration_feeds`
    (None without a calibration dataset) never overlap them: the caller holds them apart.

    Raises:
        QuantizationError: static quantization without calibration samples, dynamic
            quantization for flavours without a dynamic form, or the model cannot be brought
            to the Q/DQ opset.
    """
    if request.mode is QuantizationMode.STATIC and not calibration_feeds:
        raise QuantizationError("static quantization needs calibration samples: name a "
                                "calibration dataset (quantization.calibration)")
    graph, opset_note = at_qdq_opset(fused)
    judge = _Judge(reference, validation_feeds, tolerances, labels, request)
    result = QuantizationResult(model=None, why="", chosen=None, opset_note=opset_note,
                                precision=request.precision,
                                kept_reasons=dict.fromkeys(request.keep_nodes,
                                                           "kept in float by the job"))
    for op_type in request.keep_op_types:
        for node in graph.graph.node:
            if node.op_type == op_type:
                result.kept_reasons.setdefault(node.name, f"op type {op_type} kept in float "
                                                          "by the job")
    candidates: list[_Candidate] = []
    if calibration_feeds and request.mode is not QuantizationMode.DYNAMIC:
        candidates += _static_candidates(graph, request, tables, calibration_feeds, judge,
                                         result, progress, validation_feeds[0])
    if result.stopped_early is not None:
        result.tried = [c.summary() for c in candidates]
        result.why = f"{result.stopped_early}; the fp32 model ships"
        return result
    dynamic = request.allow_dynamic and all(FLAVOURS[f].runs_dynamic_form
                                            for f in request.flavours)
    if request.mode is QuantizationMode.DYNAMIC and not dynamic:
        raise QuantizationError(
            f"dynamic quantization does not run in {request.precision} on this backend (its "
            f"flavours {', '.join(map(str, request.flavours))} have no integer kernels for "
            "activations scaled at run time): ask for mode static or auto")
    if dynamic and (request.mode is QuantizationMode.DYNAMIC or (
            request.mode is QuantizationMode.AUTO and _has_matrix_products(graph))):
        progress(f"{request.precision}: dynamic quantization")
        model = quantize_dynamic_model(graph, per_channel=request.per_channel,
                                       exclude_nodes=request.keep_nodes,
                                       exclude_op_types=request.keep_op_types)
        candidates.append(judge.candidate("dynamic", QuantizationMode.DYNAMIC, None, None,
                                          model, ()))
    if not any(_quantized(c) for c in candidates):
        # Not the accuracy budget: there was nothing to quantize (or no way to try).
        result.tried = [c.summary() for c in candidates]
        result.why = (_nothing_to_quantize(request, graph, tried=bool(candidates))
                      + "; the fp32 model ships")
        return result
    passing = [c for c in candidates if c.validation.passed]
    steps: list[_Candidate] = []
    statics = [c for c in candidates if c.mode is QuantizationMode.STATIC]
    # Static int8 out of budget: keep nodes in float, even where a dynamic form passed (it
    # quantizes only matrix products, and may well not pay).
    if statics and not any(c.validation.passed for c in statics):
        base = max(statics, key=lambda c: c.worst_cosine)
        steps = _keep_in_float(graph, base, request, tables, calibration_feeds or (), judge,
                               result, progress)
        if steps and steps[-1].validation.passed:
            passing.append(steps[-1])
    result.tried = [c.summary() for c in candidates]
    if not passing:
        closest = max(candidates, key=lambda c: c.worst_cosine, default=None)
        result.why = ("no int8 form met the accuracy budget" + (
            f": the closest, {closest.label}, reached a worst output cosine of "
            f"{closest.worst_cosine:.5f}{_broken(closest)}" if closest else "") + (
            f", still out of budget with {len(steps[-1].kept)} nodes kept in float"
            if steps else "") + (f" ({result.stopped_early})" if result.stopped_early else "")
            + "; the fp32 model ships")
        return result
    if not request.time_candidates:
        best = max(passing, key=lambda c: c.worst_cosine)
        result.model, result.validation = best.model, best.validation
        result.chosen = _chosen(best)
        result.why = (f"{request.precision} ({best.label}) is within budget (worst output "
                      f"cosine {best.worst_cosine:.5f}); its speed is measured where it runs")
        return result
    rounds = request.timing_rounds
    for _ in range(_TIMING_ATTEMPTS):
        progress(f"{request.precision}: timing the candidates against fp32 ({rounds} rounds)")
        _time(graph, passing, steps, request, validation_feeds[0], result, rounds)
        best = min(passing, key=lambda c: c.speed.ratio if c.speed else math.inf)
        # Uncertain (faster at the median, its interval reaching 1): time again, longer.
        if best.speed is None or best.speed.faster or best.speed.ratio >= 1.0:
            break
        rounds *= 2
    result.tried = [c.summary() for c in candidates] + (
        [steps[-1].summary()] if steps and steps[-1] not in candidates else [])
    assert best.speed is not None
    result.speed, result.validation = best.speed, best.validation
    result.timed_threads = request.threads
    result.chosen = _chosen(best)
    speed = best.speed
    interval = f"{speed.ratio:.3f}x [{speed.ratio_low:.3f}, {speed.ratio_high:.3f}]"
    if not speed.faster:
        result.why = (f"{request.precision} ({best.label}) ran at {interval} the fp32 model's "
                      "time: not faster beyond its interval, so the fp32 model ships")
        return result
    result.model = best.model
    result.why = (f"{request.precision} ({best.label}) ran at {interval} the fp32 model's "
                  "time, within budget")
    return result


def _quantized(candidate: _Candidate) -> bool:
    """The candidate holds an op the quantizer made (see `_Judge.candidate`)."""
    return not any(f.metric == _NOT_QUANTIZED for f in candidate.validation.failures)


def _nothing_to_quantize(request: QuantizationRequest, graph: onnx.ModelProto, *,
                         tried: bool) -> str:
    """Why no int8 form exists: the model has no op the quantizer handles, or the job's mode
    and data left it none to try."""
    ops = sorted({node.op_type for node in graph.graph.node})
    shown = ", ".join(ops[:8]) + (", ..." if len(ops) > 8 else "")
    if tried:
        return (f"the quantizer found no op it quantizes in this model (it has {shown}): no "
                f"{request.precision} form exists")
    return (f"no {request.precision} form was tried: the model has no MatMul/Gemm with constant "
            f"weights to quantize dynamically (it has {shown}), and static quantization needs a "
            "calibration dataset (quantization.calibration)")


class _Judge:
    """Judges candidates on the validation samples against the original's outputs."""

    def __init__(self, reference: Sequence[Mapping[str, np.ndarray]], feeds: Sequence[Feed],
                 tolerances: Tolerances, labels: np.ndarray | None,
                 request: QuantizationRequest) -> None:
        self.reference, self.feeds, self.tolerances = reference, feeds, tolerances
        self.labels, self.request = labels, request

    def candidate(self, label: str, mode: QuantizationMode, flavour: QuantFlavour | None,
                  method: CalibrationMethod | None, model: onnx.ModelProto,
                  kept: tuple[str, ...]) -> _Candidate:
        outputs = self.outputs(model)
        report = compare_outputs(self.reference, outputs, self.tolerances, labels=self.labels)
        if not any(node.op_type in _QUANTIZED_OPS for node in model.graph.node):
            # Nothing the quantizer knows (an LSTM, say): the fp32 model itself, not int8.
            report = replace(report, passed=False, failures=(MetricFailure(
                output="", metric=_NOT_QUANTIZED, value=0, limit=1, excess=None,
                message="the quantizer found no op it quantizes: this form is the fp32 "
                        "model"),))
        return _Candidate(label, mode, flavour, method, model, kept, report)

    def in_onnx_runtime(self, model: onnx.ModelProto) -> ValidationReport:
        """`model` judged as ONNX Runtime runs it: the Q/DQ graph as its operators define it,
        whatever runtime the candidates run in."""
        return compare_outputs(self.reference, self._onnx_runtime_outputs(model),
                               self.tolerances, labels=self.labels)

    def outputs(self, model: onnx.ModelProto) -> list[dict[str, np.ndarray]]:
        """`model`'s outputs on the validation samples, in the runtime candidates run in."""
        if self.request.candidate_runner is None:
            return self._onnx_runtime_outputs(model)
        opened: CandidateRunner = load_dotted(self.request.candidate_runner)
        with tempfile.TemporaryDirectory(prefix="fuseforge-int8-candidate-") as tmp:
            path = Path(tmp) / "candidate.onnx"
            onnx.save(model, path)
            with opened(path, self.request.threads) as runner:
                return [runner.infer(dict(feed)) for feed in self.feeds]

    def _onnx_runtime_outputs(self, model: onnx.ModelProto) -> list[dict[str, np.ndarray]]:
        with runner_for_model(model, optimization_level=self.request.level,
                              intra_op_threads=self.request.threads) as runner:
            return [runner.infer(dict(feed)) for feed in self.feeds]

def _static_candidates(graph: onnx.ModelProto, request: QuantizationRequest, tables: TableSource,
                       feeds: Sequence[Feed], judge: _Judge, result: QuantizationResult,
                       progress: Callable[[str], None], feed: Feed) -> list[_Candidate]:
    methods = (CALIBRATION_METHODS_TRIED if request.method is CalibrationMethod.AUTO
               else (request.method,))
    candidates: list[_Candidate] = []
    for flavour in request.flavours:
        if not FLAVOURS[flavour].calibrates_itself:
            continue
        # Its quantizer gathers its own statistics: no table, no method of ours to try.
        progress(f"{request.precision}: static {flavour} (its own calibration)")
        result.calibrations.append({"method": f"{flavour} (its own statistics)",
                                    "samples": len(feeds)})
        model = _write(graph, request, flavour, None, tables, feeds, ())
        candidates.append(judge.candidate(f"static {flavour}", QuantizationMode.STATIC,
                                          flavour, None, model, ()))
    # The first forms written (self-calibrated, else the first method's), nothing kept in
    # float, are the fastest int8 gets: timed once, they say whether searching on can win.
    timed_early = False
    if candidates and not any(c.validation.passed for c in candidates) \
            and request.time_candidates:
        timed_early = True
        result.stopped_early = _cannot_win(graph, candidates, request, feed, result, progress)
        if result.stopped_early is not None:
            return candidates
    tabled = tuple(f for f in request.flavours if not FLAVOURS[f].calibrates_itself)
    for method in methods if tabled else ():
        progress(f"{request.precision}: calibrating ({method})")
        try:
            table = tables(method, graph)
        except QuantizationError as err:
            if request.method is not CalibrationMethod.AUTO:
                raise
            # `auto` goes on to the next method (a histogram with no finite range fails).
            result.calibrations.append({"method": str(method), "error": str(err)})
            continue
        result.calibrations.append({"method": str(method), "samples": table.samples,
                                    "tensors": table.tensor_count(),
                                    "graph_sha256": table.graph_sha256})
        for flavour in tabled:
            progress(f"{request.precision}: static {flavour} ({method})")
            model = quantize_static_model(graph, table, flavour, per_channel=request.per_channel,
                                          exclude_nodes=request.keep_nodes,
                                          exclude_op_types=request.keep_op_types)
            candidates.append(judge.candidate(f"static {flavour} {method}",
                                              QuantizationMode.STATIC, flavour, method, model,
                                              ()))
        if any(c.validation.passed for c in candidates):
            break
        if not timed_early and request.time_candidates:  # the first method's forms only
            timed_early = True
            result.stopped_early = _cannot_win(graph, candidates, request, feed, result, progress)
            if result.stopped_early is not None:
                break
    return candidates


def _write(graph: onnx.ModelProto, request: QuantizationRequest, flavour: QuantFlavour,
           method: CalibrationMethod | None, tables: TableSource, feeds: Sequence[Feed],
           kept: Sequence[str]) -> onnx.ModelProto:
    """`graph` in `flavour`, with the request's kept nodes and `kept` in float: from the
    calibration samples where the flavour calibrates itself, else from `method`'s table."""
    exclude_nodes = (*request.keep_nodes, *kept)
    if FLAVOURS[flavour].calibrates_itself:
        return quantize_self_calibrated(graph, feeds, flavour, per_channel=request.per_channel,
                                        exclude_nodes=exclude_nodes,
                                        exclude_op_types=request.keep_op_types)
    assert method is not None  # a table flavour's candidates all name their method
    return quantize_static_model(graph, tables(method, graph), flavour,
                                 per_channel=request.per_channel, exclude_nodes=exclude_nodes,
                                 exclude_op_types=request.keep_op_types)


def _cannot_win(graph: onnx.ModelProto, full: list[_Candidate], request: QuantizationRequest,
                feed: Feed, result: QuantizationResult,
                progress: Callable[[str], None]) -> str | None:
    """Why int8 cannot beat fp32, when `full` (the first method's forms, nothing kept in
    float: the fastest int8 gets) are none faster at the median; None when one may be, or
    none holds anything quantized (then nothing is worth timing: see `_nothing_to_quantize`)."""
    full = [c for c in full if _quantized(c)]
    if not full:
        return None
    progress(f"{request.precision}: timing its fastest forms against fp32 before searching on")
    _time(graph, full, [], request, feed, result, request.timing_rounds)
    best = min(full, key=lambda c: c.speed.ratio if c.speed else math.inf)
    if best.speed is None or best.speed.ratio < 1.0:
        return None
    speed = best.speed
    why = (f"{request.precision} cannot win here: its fastest form ({best.label}, nothing kept "
           f"in float) ran at {speed.ratio:.3f}x [{speed.ratio_low:.3f}, {speed.ratio_high:.3f}] "
           "the fp32 model's time, and other calibrations only move scales while each node kept "
           "in float adds float work, so the search stopped early")
    progress(f"{request.precision}: stopped early: {why}")
    return why


def _keep_in_float(graph: onnx.ModelProto, base: _Candidate, request: QuantizationRequest,
                   tables: TableSource, feeds: Sequence[Feed], judge: _Judge,
                   result: QuantizationResult, progress: Callable[[str], None]
                   ) -> list[_Candidate]:
    """Steps keeping one more node in float each, most harmful first, until within budget."""
    assert base.flavour is not None
    if base.method is not None:  # one table for every step
        table = tables(base.method, graph)
        tables = lambda method, graph: table  # noqa: E731
    steps = [base]
    # Nodes the backend's runtime mishandles: every later step gives them float inputs too.
    mishandled = _mishandled_in_runtime(base, request, judge, result, progress)
    found = list(mishandled.kept) if mishandled is not None else []
    if mishandled is not None:
        steps.append(mishandled)
        if mishandled.validation.passed:
            return steps
    progress(f"{request.precision}: ranking nodes by the error they add")
    ranked = [node for node in rank_nodes(graph, base.model, judge.feeds[:_SENSITIVITY_SAMPLES])
              if node.name not in found]
    kept: list[str] = []
    for node in ranked[:max(0, request.max_kept_nodes - len(found))]:
        kept.append(node.name)
        progress(f"{request.precision}: keeping {len(found) + len(kept)} node(s) in float "
                 f"({node.name})")
        model = float_inputs(_write(graph, request, base.flavour, base.method, tables, feeds,
                                    kept), found)
        step = judge.candidate(f"{base.label}, {len(found) + len(kept)} kept in float",
                               base.mode, base.flavour, base.method, model, (*found, *kept))
        steps.append(step)
        result.kept_nodes.append(KeptFloatNode(node.name, node.op_type, node.added_error,
                                               step.worst_cosine, None))
        result.kept_reasons[node.name] = (
            f"kept in float by the accuracy search: it added {node.added_error:.4f} "
            f"normalised RMS error; the worst output cosine is {step.worst_cosine:.5f} with it "
            "in float")
        if step.validation.passed:
            break
        result.stopped_early = _cannot_reach(steps, judge.tolerances.min_cosine,
                                             request.max_kept_nodes - len(kept))
        if result.stopped_early is not None:
            progress(f"{request.precision}: stopped early: {result.stopped_early}")
            break
    return steps


def _mishandled_in_runtime(base: _Candidate, request: QuantizationRequest, judge: _Judge,
                           result: QuantizationResult, progress: Callable[[str], None]
                           ) -> _Candidate | None:
    """Where the backend's runtime runs `base` out of budget but ONNX Runtime runs the same
    Q/DQ graph within it, `base` with float inputs for the nodes that runtime mishandles, found
    by bisection (mishandled.py); None elsewhere, or where no few nodes explain it. The graph
    is not quantized again: NNCF's ignored scope can leave the pattern the runtime mishandles
    in place (it did on PP-OCRv4's detector)."""
    if request.candidate_runner is None or not judge.in_onnx_runtime(base.model).passed:
        return None
    progress(f"{request.precision}: within budget as ONNX Runtime runs the Q/DQ graph, out of "
             "it in the backend's runtime: finding the nodes that runtime mishandles")
    judged: dict[tuple[str, ...], _Candidate] = {}  # the last, for the nodes found, ships

    def within_budget(names: Sequence[str]) -> bool:
        label = f"{base.label}, {len(names)} kept in float (mishandled by its runtime)"
        try:
            step = judge.candidate(label, base.mode, base.flavour, base.method,
                                   float_inputs(base.model, names), tuple(names))
        except (EngineBuildError, InferenceError):  # a form the runtime refuses: not this one
            return False
        judged[tuple(names)] = step
        return step.validation.passed

    found = find_mishandled(quantized_nodes(base.model), within_budget)
    if not found:
        return None
    step = judged[tuple(found)]
    op_types = {node.name: node.op_type for node in base.model.graph.node}
    for name in found:
        result.kept_nodes.append(KeptFloatNode(name, op_types.get(name, ""), math.nan,
                                               step.worst_cosine, None))
        result.kept_reasons[name] = (
            "kept in float: the backend's runtime computes its quantized form wrongly (found "
            f"by bisection: the worst output cosine is {base.worst_cosine:.5f} with it "
            "quantized there, within budget in ONNX Runtime, and "
            f"{step.worst_cosine:.5f} with its inputs in float)")
    progress(f"{request.precision}: kept in float, mishandled by the backend's runtime: "
             f"{', '.join(found)}")
    return step


def _cannot_reach(steps: list[_Candidate], min_cosine: float, left: int) -> str | None:
    """Why keeping `left` more nodes in float cannot bring the worst cosine to `min_cosine`,
    at the pace of the last _PACE_STEPS kept (an optimistic pace: the nodes come most harmful
    first); None while it may, or too few have been kept to tell."""
    if len(steps) <= _PACE_STEPS or left <= 0:
        return None
    now, before = steps[-1].worst_cosine, steps[-1 - _PACE_STEPS].worst_cosine
    if not (math.isfinite(now) and math.isfinite(before)):
        return None
    pace = max(now - before, 0.0) / _PACE_STEPS
    reach = now + pace * left
    if reach >= min_cosine:
        return None
    return (f"with {len(steps[-1].kept)} nodes kept in float the worst output cosine is "
            f"{now:.5f}; the {left} more allowed, at the last {_PACE_STEPS} nodes' pace "
            f"(+{pace:.5f} each, and later nodes add less error), would reach {reach:.5f}, "
            f"short of the budget's {min_cosine}, so the search stopped early")


def _time(graph: onnx.ModelProto, passing: list[_Candidate], steps: list[_Candidate],
          request: QuantizationRequest, feed: Feed, result: QuantizationResult,
          rounds: int) -> None:
    """Times the candidates (and the search's steps, for each kept node's cost) against fp32."""
    timed = [*passing, *(s for s in steps if s not in passing)]
    with tempfile.TemporaryDirectory(prefix="fuseforge-int8-timing-") as tmp:
        paths = [Path(tmp) / "fp32.onnx"]
        onnx.save(graph, paths[0])
        for index, candidate in enumerate(timed):
            paths.append(Path(tmp) / f"candidate{index}.onnx")
            onnx.save(candidate.model, paths[-1])
        ratios = (interleaved_ratios(paths, feed, level=request.level, threads=request.threads,
                                     rounds=rounds) if request.candidate_runner is None else
                  runner_ratios(paths, feed, load_dotted(request.candidate_runner),
                                threads=request.threads, rounds=rounds))
    for candidate, ratio in zip(timed, ratios[1:], strict=True):
        candidate.speed = ratio
    for index, kept in enumerate(result.kept_nodes, start=1):
        before, after = steps[index - 1].speed, steps[index].speed
        if before is not None and after is not None:
            result.kept_nodes[index - 1] = KeptFloatNode(
                kept.name, kept.op_type, kept.added_error, kept.worst_cosine_after,
                round(after.median_ms - before.median_ms, 4))


def _broken(candidate: _Candidate) -> str:
    """The limits `candidate` broke, for the verdict ("; failed: ...")."""
    failures = candidate.validation.failures
    return f" (failed: {'; '.join(f.message for f in failures[:3])})" if failures else ""


def _chosen(candidate: _Candidate) -> dict[str, Any]:
    return {"mode": str(candidate.mode),
            "flavour": candidate.flavour and str(candidate.flavour),
            "method": candidate.method and str(candidate.method), "label": candidate.label}


def _has_matrix_products(model: onnx.ModelProto) -> bool:
    weights = {init.name for init in model.graph.initializer}
    return any(node.op_type in DYNAMIC_OP_TYPES and len(node.input) > 1
               and node.input[1] in weights for node in model.graph.node)
