"""The candidates of a search: every configuration the registries say a backend can build.

A candidate is a pass set × a precision (× a quantization mode, an ONNX Runtime level) drawn
from the registries (optimizer/passes, optimizer/registries), never from a hand-kept list, so a
new pass family or precision joins the search by being registered. Candidates that cannot run
here are refused up front with the reason, and listed so: a user sees why int8 static was not
tried, not just that it is missing.

The candidates come out in the order the search tries them: a float candidate first (it builds
in seconds, where a quantized one searches its accuracy budget for minutes), then those most
likely to win (int8 on a CPU with 8-bit dot products, fp16 on a GPU), so a search cut short by
its time budget has measured a contender and the likely winners.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import zip_longest
from typing import Any

from optimizer.passes import DEFAULT_PASSES, FusionPass, PassStage
from optimizer.registries.backends import BACKENDS, Backend
from optimizer.registries.precisions import PRECISIONS, REFERENCE_PRECISION, Precision
from optimizer.registries.quantization import QuantizationMode

__all__ = ["ALL_PASSES", "NO_PASSES", "Candidate", "CandidatePlan", "Refusal", "SearchSpace",
           "plan_candidates", "plan_search"]

ALL_PASSES, NO_PASSES = "all", "none"

_ORT_DEFAULT_LEVEL = "all"


@dataclass(frozen=True)
class Candidate:
    """One configuration to build, validate and time. `overrides` are the job-config fields
    that rebuild it: the recipe, applied over the search job's own config."""

    name: str
    precision: Precision
    passes: str | tuple[str, ...]
    quantization_mode: QuantizationMode | None = None
    ort_level: str | None = None
    threads: int | None = None  # a CPU backend's intra-op threads; None: its default
    backend: Backend | None = None  # set in a search of several backends; None: the job's

    def overrides(self) -> dict[str, Any]:
        recipe: dict[str, Any] = {} if self.backend is None else {"backend": str(self.backend)}
        recipe |= {
            "precision": str(self.precision),
            "passes": self.passes if isinstance(self.passes, str) else list(self.passes)}
        if self.quantization_mode is not None:
            recipe["quantization"] = {"mode": str(self.quantization_mode)}
        if self.ort_level is not None:
            recipe["ort_optimization_level"] = self.ort_level
        if self.threads is not None:
            recipe["intra_op_threads"] = self.threads
        return recipe


@dataclass(frozen=True)
class Refusal:
    """A candidate the search will not try, and why (a precision the backend lacks, int8
    static without a calibration dataset...)."""

    name: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "reason": self.reason}


@dataclass(frozen=True)
class SearchSpace:
    """What a search may vary. `precisions` None: every precision the backend builds;
    `ort_levels` None: ONNX Runtime's default level only (onnxruntime); `firing_passes`: the
    pass families that rewrite this model (from its fusion report), None: every family the
    backend runs; only those get an "off" candidate, the others would rebuild "all"."""

    backend: Backend
    precisions: tuple[Precision, ...] | None = None
    pass_sets: bool = True  # all, none, and each firing family off (fp32 only)
    ort_levels: tuple[str, ...] | None = None
    has_calibration: bool = False  # a calibration dataset: int8/fp8 static can run
    has_matrix_products: bool = True  # int8 dynamic quantizes MatMul/Gemm only
    target_gpu: str | None = None  # a compute capability: precisions it lacks are refused
    firing_passes: tuple[str, ...] | None = None
    threads: tuple[int, ...] | None = None  # onnxruntime: intra-op thread counts to try
    # The worker CPU's precision flags (HostCapabilities.cpu_flags): on a CPU backend, the
    # precisions it has no kernels for are refused (bf16 without AVX512_BF16 or AMX); None:
    # unknown (the plan of a dry run), nothing refused for it.
    cpu_flags: frozenset[str] | None = None


@dataclass(frozen=True)
class CandidatePlan:
    candidates: tuple[Candidate, ...]
    refused: tuple[Refusal, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"candidates": [{"name": c.name, "recipe": c.overrides()} for c in self.candidates],
                "refused": [r.to_dict() for r in self.refused]}


def plan_search(spaces: Sequence[SearchSpace]) -> CandidatePlan:
    """The candidates of a search over one backend or several. With several, each candidate
    and refusal is named after its backend ("onnxruntime:int8-dynamic/all") and its recipe
    sets the backend, and the backends take turns, in the order of `spaces` (the job's own
    first: its workers run the search): each one's likeliest winner comes before any one's
    second, so a search its time budget cuts short has raced every backend's best bet (a
    backend planned after another's pass-family variants went untried on PP-OCRv4's
    recognizer)."""
    if len(spaces) == 1:
        return plan_candidates(spaces[0])
    planned: list[list[Candidate]] = []
    refused: list[Refusal] = []
    for space in spaces:
        plan = plan_candidates(space)
        planned.append([replace(c, name=f"{space.backend}:{c.name}", backend=space.backend)
                        for c in plan.candidates])
        refused.extend(Refusal(f"{space.backend}:{r.name}", r.reason) for r in plan.refused)
    turns = zip_longest(*planned)
    return CandidatePlan(tuple(c for turn in turns for c in turn if c is not None),
                         tuple(refused))


def plan_candidates(space: SearchSpace) -> CandidatePlan:
    """Every candidate of `space`, likeliest winner first, and those refused with the reason."""
    spec = BACKENDS[space.backend]
    candidates: list[Candidate] = []
    refused: list[Refusal] = []
    for precision in _precisions_asked(space, refused):
        if precision not in spec.precisions:
            refused.append(Refusal(str(precision), spec.why_not.get(
                precision, f"backend {str(space.backend)!r} does not run {precision}.")))
            continue
        refusal = PRECISIONS[precision].gpu_refusal(space.target_gpu)
        if refusal is None and space.cpu_flags is not None and not spec.needs_gpu:
            refusal = PRECISIONS[precision].cpu_refusal(space.cpu_flags)
        if refusal is not None:
            refused.append(Refusal(str(precision), refusal))
            continue
        if PRECISIONS[precision].quantizes:
            _quantized(space, precision, candidates, refused)
        elif precision == REFERENCE_PRECISION:
            candidates.extend(_reference_candidates(space))
        else:
            candidates.append(Candidate(f"{precision}/{ALL_PASSES}", precision, ALL_PASSES,
                                        ort_level=_default_level(space)))
    return CandidatePlan(tuple(_with_threads(space, _float_first(candidates))), tuple(refused))


def _float_first(candidates: list[Candidate]) -> list[Candidate]:
    """The first float candidate ahead of the quantized ones. Each quantized candidate searches
    its accuracy budget (calibrations, nodes kept in float: a minute and more on an OCR model
    on two cores), so two of them could spend a search's whole time budget and leave no float
    candidate tried, the original shipping where a float engine beats it by 1.3x."""
    first = next((c for c in candidates if not PRECISIONS[c.precision].quantizes), None)
    return candidates if first is None else [first, *(c for c in candidates if c is not first)]


def _with_threads(space: SearchSpace, candidates: list[Candidate]) -> Iterable[Candidate]:
    """Each candidate, and after it each thread count of `space` for those with all passes at
    the default level (a thread count changes the kernels' speed, not what the passes do)."""
    for candidate in candidates:
        yield candidate
        if candidate.passes != ALL_PASSES or candidate.ort_level != _default_level(space):
            continue
        for threads in space.threads or ():
            yield replace(candidate, name=f"{candidate.name}@{threads}t", threads=threads)


def _precisions_asked(space: SearchSpace, refused: list[Refusal]) -> list[Precision]:
    order = BACKENDS[space.backend].precision_order  # the likeliest winner first
    if space.precisions is None:
        return [p for p in order if p in BACKENDS[space.backend].precisions]
    asked = list(dict.fromkeys(space.precisions))
    return sorted(asked, key=lambda p: order.index(p) if p in order else len(order))


def _quantized(space: SearchSpace, precision: Precision, candidates: list[Candidate],
               refused: list[Refusal]) -> None:
    forms = [(QuantizationMode.STATIC, space.has_calibration,
              "static quantization needs a calibration dataset (quantization.calibration); "
              "FuseForge never calibrates on random inputs")]
    if BACKENDS[space.backend].has_dynamic_form(precision):
        forms.append((QuantizationMode.DYNAMIC, space.has_matrix_products,
                      "dynamic quantization quantizes MatMul/Gemm only, and this model has "
                      "none (dynamic convolutions run several times slower than fp32 on CPU)"))
    for mode, possible, why_not in forms:
        name = f"{precision}-{mode}"
        if possible:
            candidates.append(Candidate(f"{name}/{ALL_PASSES}", precision, ALL_PASSES, mode,
                                        _default_level(space)))
        else:
            refused.append(Refusal(name, why_not))


def _reference_candidates(space: SearchSpace) -> Iterable[Candidate]:
    fp32 = REFERENCE_PRECISION
    levels = space.ort_levels if _takes_ort_levels(space) and space.ort_levels \
        else (_default_level(space),)
    for level in levels:
        suffix = "" if level in (None, _ORT_DEFAULT_LEVEL) else f"@ort-{level}"
        yield Candidate(f"{fp32}/{ALL_PASSES}{suffix}", fp32, ALL_PASSES, ort_level=level)
    if not space.pass_sets:
        return
    level = _default_level(space)
    backend = str(space.backend)
    runs_by_default = [p.name for p in DEFAULT_PASSES if backend not in p.off_by_default]
    for family in _families(space):
        kept = tuple(name for name in runs_by_default if name != family.name)
        yield Candidate(f"{fp32}/without-{family.name}", fp32, kept, ort_level=level)
    yield Candidate(f"{fp32}/{NO_PASSES}", fp32, NO_PASSES, ort_level=level)


def _families(space: SearchSpace) -> list[FusionPass]:
    """The fusion families that can be switched off: those the backend runs by default (not
    the clean-up every job needs), and that rewrite this model where that is known."""
    backend = str(space.backend)
    families = [p for p in DEFAULT_PASSES if p.stage is not PassStage.CLEANUP
                and p.supports(backend) and backend not in p.off_by_default]
    if space.firing_passes is None:
        return families
    return [p for p in families if p.name in space.firing_passes]


def _takes_ort_levels(space: SearchSpace) -> bool:
    """Whether the backend's jobs take an ONNX Runtime optimization level (its spec's options)."""
    return "ort_optimization_level" in BACKENDS[space.backend].options


def _default_level(space: SearchSpace) -> str | None:
    return _ORT_DEFAULT_LEVEL if _takes_ort_levels(space) else None
