"""A finished job's outcome, declared once: what was asked, what shipped, the speed-up over the
original with the server's verdict, the accuracy verdict with its worst metric, why shipped
differs from asked, and the one `headline` sentence every surface prints in the same words.

`job_outcome` computes it from what the job recorded (its config, report columns, validation,
comparison benchmark and error); the worker stores it in `jobs.outcome` when the job ends, and the
API, the SSE end event, webhooks, the client, the CLI, the dashboard and report.html show it.

>>> job_outcome(config={"backend": "onnxruntime", "precision": "int8"}, status="succeeded",
...             reports={"accuracy_report": {"quantization": {"shipped": "fp32", "why": "..."}}},
...             engine_record={"speedup_vs_reference": 1.04, "speedup_ci_low": 0.92,
...                            "speedup_ci_high": 1.09,
...                            "speedup_verdict": "no measurable difference"},
...             validation={"passed": True, "outputs": [...]}).headline   # doctest: +SKIP
'Shipped the onnxruntime fp32 engine (int8 asked): no measurable difference in speed (1.04x,
0.92-1.09), accuracy passed.'
"""

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from optimizer.measure.stats import FASTER, NO_DIFFERENCE, SLOWER
from optimizer.registries.backends import DEFAULT_BACKEND
from optimizer.registries.precisions import REFERENCE_PRECISION, is_quantized

__all__ = [
    "ACCURACY_FAILED",
    "ACCURACY_NOT_JUDGED",
    "ACCURACY_PASSED",
    "AccuracyVerdict",
    "Asked",
    "Outcome",
    "OutcomeAccuracy",
    "Shipped",
    "Speedup",
    "WorstMetric",
    "job_outcome",
    "speedup_words",
]

AccuracyVerdict = Literal["passed", "failed", "not judged"]
ACCURACY_PASSED: AccuracyVerdict = "passed"
ACCURACY_FAILED: AccuracyVerdict = "failed"
ACCURACY_NOT_JUDGED: AccuracyVerdict = "not judged"
_FIRST_SENTENCE_CHARS = 400  # a failed job's headline quotes its error up to this long
# The quantizer's reason ends saying what ships; the `why` sentence has said it already.
_SHIPS_TAIL = re.compile(r"[;:,]\s*(so )?the \w+ (model|engine) ships$")


class Asked(BaseModel):
    """What the job's config asked for."""

    backend: str
    precision: str
    mode: str | None = Field(default=None, description="int8 jobs: the quantization mode asked "
                             "(auto, static, dynamic); null otherwise")
    passes: str | list[str] = Field(description='"all", "none" or the passes named')
    search: bool = Field(default=False, description="the job searched for its configuration")


class Shipped(BaseModel):
    """What the job shipped: an engine, or the user's own model unchanged (`what` "original"),
    when nothing beat it."""

    what: Literal["engine", "original"]
    backend: str
    precision: str
    passes: list[str] = Field(
        description="the fusion passes that rewrote the shipped engine's graph, in run order "
                    "(a pass that ran and matched nothing is not listed)")
    label: str = Field(description='e.g. "onnxruntime fp32 engine", "original model"')


class Speedup(BaseModel):
    """The shipped engine's speed-up over the original: the comparison benchmark's median over
    interleaved rounds, its bootstrap 95% interval and the server's verdict on it."""

    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str | None = Field(default=None, description='"faster", "slower" or "no measurable '
                                'difference" (the interval reaches within 1% of 1.0)')


class WorstMetric(BaseModel):
    """The output and metric that came closest to (or went past) its limit."""

    output: str
    metric: str
    value: float | str | None
    limit: float | str | None
    text: str


class OutcomeAccuracy(BaseModel):
    verdict: AccuracyVerdict
    worst: WorstMetric | None = None


class Outcome(BaseModel):
    """A finished job's outcome (`jobs.outcome`; null while it is queued or running)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "asked": {"backend": "onnxruntime", "precision": "int8", "mode": "auto",
                  "passes": "all", "search": False},
        "shipped": {"what": "engine", "backend": "onnxruntime", "precision": "fp32",
                    "passes": ["FoldBatchNormIntoConv"], "label": "onnxruntime fp32 engine"},
        "speedup": {"value": 1.04, "ci_low": 0.92, "ci_high": 1.09,
                    "verdict": "no measurable difference"},
        "accuracy": {"verdict": "passed", "worst": {
            "output": "logits", "metric": "cosine_similarity", "value": 0.99998,
            "limit": 0.9999, "text": "logits: cosine similarity 0.99998 (limit 0.9999)"}},
        "why": "int8 was asked; fp32 shipped: the quantizer found no op it quantizes "
               "(MatMul, Conv, Gemm...) in this model.",
        "headline": "Shipped the onnxruntime fp32 engine (int8 asked): no measurable "
                    "difference in speed (1.04x, 0.92-1.09), accuracy passed.",
    }]})

    asked: Asked
    shipped: Shipped | None = Field(default=None, description="null: nothing shipped (failed "
                                    "or cancelled)")
    speedup: Speedup | None = Field(default=None, description="null: not benchmarked, or the "
                                    "original shipped")
    accuracy: OutcomeAccuracy | None = Field(default=None, description="null: the original "
                                             "shipped (it is the reference itself)")
    why: str | None = Field(default=None, description="one sentence: why shipped differs from "
                            "asked, or why nothing shipped")
    headline: str = Field(description="the one sentence every surface prints")


def job_outcome(*, config: Mapping[str, Any], status: str,
                reports: Mapping[str, Any] | None = None,
                engine_record: Mapping[str, Any] | None = None,
                validation: Mapping[str, Any] | None = None,
                error: tuple[str, str] | None = None,
                original_shipped: str | None = None,
                original_backend: str | None = None) -> Outcome:
    """The outcome of a job that ended in `status` ("succeeded", "failed" or "cancelled").

    `config`: the job's config as stored; `reports`: its report columns as stored
    (`core.reports.JobReports.columns()`: fusion_report, accuracy_report with `quantization`,
    `fallback` and `failures`, search_report with the winner's `recipe`); `engine_record`: the
    comparison benchmark's engine record (speedup_vs_reference, speedup_ci_low/high,
    speedup_verdict); `validation`: `ValidationReport.to_dict()` ("passed", "tolerances",
    "outputs", "failures"); `error`: (code, message) of a failed job; `original_shipped`: why the
    user's own model ships instead of an engine (worker/pipeline/results.py's JobOutcome), and
    `original_backend` the backend it ships on (ONNX Runtime at its default level, whatever
    backend the job asked for: what its user runs today).
    """
    reports = reports or {}
    asked = _asked(config)
    accuracy_report = reports.get("accuracy_report") or {}
    if status != "succeeded":
        unshipped = _unshipped(asked, status, error)
        if validation is not None:  # a failed verdict explains the failure: its worst metric
            unshipped.accuracy = _accuracy(validation, accuracy_report)
        return unshipped
    recipe = (reports.get("search_report") or {}).get("recipe") or {}
    backend = str(recipe.get("backend") or asked.backend)
    precision = str(recipe.get("precision") or asked.precision)
    quantization = accuracy_report.get("quantization") or {}
    if quantization.get("shipped"):
        precision = str(quantization["shipped"])
    if original_shipped is not None:
        shipped = Shipped(what="original", backend=original_backend or backend, precision="fp32",
                          passes=[], label="original model")
        reason = _sentence(original_shipped)
        headline = f"Shipped your original model unchanged ({_asked_words(asked)} asked): {reason}"
        return Outcome(asked=asked, shipped=shipped, why=reason, headline=headline)
    fusion = reports.get("fusion_report") or {}
    shipped = Shipped(what="engine", backend=backend, precision=precision,
                      passes=_rewriting_passes(fusion),
                      label=f"{backend} {precision} engine")
    speedup = _speedup(engine_record)
    accuracy = _accuracy(validation, accuracy_report)
    why = _why(asked, shipped, quantization, accuracy_report, reports.get("search_report"))
    differs = asked.search or (asked.backend, asked.precision) != (backend, precision)
    asked_note = (f" ({_asked_words(asked, shipped)} asked"
                  f"{_backends_raced(reports.get('search_report'))})" if differs else "")
    headline = (f"Shipped the {shipped.label}{asked_note}: {speedup_words(speedup)}, "
                f"accuracy {accuracy.verdict}.")
    return Outcome(asked=asked, shipped=shipped, speedup=speedup, accuracy=accuracy, why=why,
                   headline=headline)


def speedup_words(speedup: Speedup | None) -> str:
    """The speed-up as the verdict says it, never a bare median: "1.52x faster (1.48-1.57)",
    "no measurable difference in speed (1.04x, 0.92-1.09)", "slower (0.82x, 0.80-0.85)"."""
    if speedup is None or speedup.value is None:
        return "not benchmarked"
    value = f"{speedup.value:.2f}x"
    if speedup.ci_low is None or speedup.ci_high is None or speedup.verdict is None:
        return f"{value} the original's speed (no interval to judge it by)"
    interval = f"{speedup.ci_low:.2f}-{speedup.ci_high:.2f}"
    if speedup.verdict == FASTER:
        return f"{value} faster ({interval})"
    if speedup.verdict == SLOWER:
        return f"slower than the original ({value}, {interval})"
    if speedup.verdict == NO_DIFFERENCE:
        return f"no measurable difference in speed ({value}, {interval})"
    return f"{value} the original's speed, {speedup.verdict} ({interval})"


def _asked(config: Mapping[str, Any]) -> Asked:
    precision = str(config.get("precision") or REFERENCE_PRECISION)
    quantization = config.get("quantization") or {}
    mode = quantization.get("mode") if isinstance(quantization, Mapping) else None
    if mode is None and is_quantized(precision):
        mode = "auto"  # QuantizationConfig's default
    passes = config.get("passes", "all")
    return Asked(backend=str(config.get("backend") or DEFAULT_BACKEND), precision=precision,
                 mode=None if mode is None else str(mode),
                 passes=passes if isinstance(passes, str) else [str(p) for p in passes],
                 search=config.get("search") is not None)


def _asked_words(asked: Asked, shipped: Shipped | None = None) -> str:
    """What was asked, in a headline: "search", "int8" (beside an onnxruntime engine shipped),
    "tensorrt fp16"."""
    if asked.search:
        return "search"
    if shipped is not None and shipped.backend == asked.backend:
        return asked.precision
    return f"{asked.backend} {asked.precision}"


def _backends_raced(search_report: Mapping[str, Any] | None) -> str:
    """Of a search that raced several backends: "; OpenVINO won, 1.9x faster than the best
    ONNX Runtime candidate" (each other backend's best, by its speed-up over the original)."""
    backends = (search_report or {}).get("backends") or []
    if len(backends) < 2 or not (search_report or {}).get("winner"):
        return ""
    won = backends[0]
    against = ", ".join(f"{won['speedup'] / other['speedup']:.2g}x faster than the best "
                        f"{other['label']} candidate" for other in backends[1:])
    return f"; {won['label']} won, {against}"


def _unshipped(asked: Asked, status: str, error: tuple[str, str] | None) -> Outcome:
    if status == "cancelled":
        why = "The job was cancelled before it shipped anything."
        return Outcome(asked=asked, why=why, headline=f"Cancelled: nothing shipped "
                                                      f"({_asked_words(asked)} asked).")
    code, message = error or ("Failed", "no error was recorded")
    why = _sentence(message)
    return Outcome(asked=asked, why=why,
                   headline=f"Failed ({code}), nothing shipped ({_asked_words(asked)} asked): "
                            f"{why}")


def _speedup(record: Mapping[str, Any] | None) -> Speedup | None:
    if record is None or record.get("speedup_vs_reference") is None:
        return None
    return Speedup(value=record["speedup_vs_reference"], ci_low=record.get("speedup_ci_low"),
                   ci_high=record.get("speedup_ci_high"),
                   verdict=record.get("speedup_verdict"))


def _accuracy(validation: Mapping[str, Any] | None,
              accuracy_report: Mapping[str, Any]) -> OutcomeAccuracy:
    if validation is None:
        return OutcomeAccuracy(verdict=ACCURACY_NOT_JUDGED)
    passed = bool(validation.get("passed"))
    failures = validation.get("failures") or accuracy_report.get("failures") or []
    worst = (_failure_metric(failures[0]) if not passed and failures
             else _closest_metric(validation))
    return OutcomeAccuracy(verdict=ACCURACY_PASSED if passed else ACCURACY_FAILED, worst=worst)


def _failure_metric(failure: Mapping[str, Any]) -> WorstMetric:
    return WorstMetric(output=str(failure.get("output", "")), metric=str(failure.get("metric")),
                       value=failure.get("value"), limit=failure.get("limit"),
                       text=str(failure.get("message") or ""))


def _closest_metric(validation: Mapping[str, Any]) -> WorstMetric | None:
    """A passed verdict's worst output: the lowest cosine similarity that held its limit, or
    else (the output judged by its error, near zero) the largest absolute error against atol."""
    tolerances = validation.get("tolerances") or {}
    outputs: Sequence[Mapping[str, Any]] = validation.get("outputs") or []
    min_cosine, atol = tolerances.get("min_cosine"), tolerances.get("atol")
    held = [o for o in outputs if o.get("cosine_similarity") is not None
            and (min_cosine is None or o["cosine_similarity"] >= min_cosine)]
    if held:
        worst = min(held, key=lambda o: o["cosine_similarity"])
        value = worst["cosine_similarity"]
        return WorstMetric(output=str(worst.get("name", "")), metric="cosine_similarity",
                           value=value, limit=min_cosine,
                           text=f"{worst.get('name')}: cosine similarity {value:.5f}"
                                + (f" (limit {min_cosine:g})" if min_cosine is not None else ""))
    errors = [o for o in outputs if o.get("max_abs_err") is not None]
    if not errors:
        return None
    worst = max(errors, key=lambda o: o["max_abs_err"])
    value = worst["max_abs_err"]
    return WorstMetric(output=str(worst.get("name", "")), metric="max_abs_err", value=value,
                       limit=atol, text=f"{worst.get('name')}: largest absolute error {value:.3g}"
                                        + (f" (atol {atol:g})" if atol is not None else ""))


def _why(asked: Asked, shipped: Shipped, quantization: Mapping[str, Any],
         accuracy_report: Mapping[str, Any], search_report: Mapping[str, Any] | None) -> str | None:
    """One sentence: why what shipped differs from what was asked; None where it does not."""
    if asked.search and search_report:
        winner = search_report.get("winner")
        reason = search_report.get("why")
        return _sentence(f"the search shipped {winner or 'its winner'}"
                         + (f": {reason}" if reason else ""))
    if shipped.precision != asked.precision:
        reason = _SHIPS_TAIL.sub("", str(quantization.get("why") or "no reason was recorded"))
        return _sentence(f"{asked.precision} was asked; {shipped.precision} shipped: {reason}")
    fallback = accuracy_report.get("fallback")
    if fallback:
        return _sentence("the job's own engine failed validation; it fell back to "
                         f"{fallback.get('kept', 'a more conservative attempt')}")
    return None


def _sentence(text: str) -> str:
    """`text`'s first sentence with one full stop, cut at a readable length (its case kept:
    "int8 was asked; ..." starts with a precision's name)."""
    text = " ".join(str(text).split())
    head, found, _ = text.partition(". ")
    if found and len(head) > 20:
        text = head
    if len(text) > _FIRST_SENTENCE_CHARS:
        return text[:_FIRST_SENTENCE_CHARS - 1].rstrip() + "…"
    return text.rstrip(". ") + "." if text else text


def _rewriting_passes(fusion: Mapping[str, Any]) -> list[str]:
    """The passes of the fusion report whose rules applied at least once, in run order; every
    pass run where the report has no rule counts (a report from before them)."""
    run = [str(name) for name in fusion.get("passes_run") or []]
    rules = fusion.get("rules")
    if not rules:
        return run
    rewrote = {str(rule.get("pass_name")) for rule in rules if (rule.get("applied") or 0) > 0}
    return [name for name in run if name in rewrote]
