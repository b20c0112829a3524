"""The job configuration contract: what the API accepts and stores, and what the worker runs.

The API validates a request into a `JobConfig` (field rules and the cross-field rules below),
resolves its input shapes against the model, and stores `model_dump(mode="json")` on the job.
The worker reads it back with `JobConfig.model_validate`, so both sides hold one typed object.
"""

import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from core.callbacks.urls import callback_url_problem
from optimizer.capabilities import HostCapabilities, normalize_compute_capability
from optimizer.passes import PASSES_BY_NAME
from optimizer.registries.backends import (
    BACKENDS,
    DEFAULT_BACKEND,
    Backend,
    QueueKind,
    backends_for,
)
from optimizer.registries.ort_levels import DEFAULT_ORT_LEVEL, OrtLevel
from optimizer.registries.precisions import (
    PRECISIONS,
    REFERENCE_PRECISION,
    Precision,
    reduced_precisions,
)
from optimizer.registries.quantization import FLAVOURS, CalibrationMethod, QuantizationMode
from optimizer.search.candidates import SearchSpace
from optimizer.search.decision import Strategy

__all__ = [
    "DEFAULT_ORT_LEVEL",
    "JOB_CONFIG_ERROR",
    "AccuracyBudget",
    "Backend",
    "BenchmarkConfig",
    "JobConfig",
    "OptimizationProfileRequest",
    "OrtLevel",
    "Precision",
    "QuantizationConfig",
    "SearchConfig",
    "checked_callback_url",
    "quantization_of",
    "ValidationConfig",
]

_STRICT = ConfigDict(extra="forbid")  # a misspelt option is a 422, never silently ignored

# Backend, Precision and OrtLevel are the optimizer's (optimizer/registries/), re-exported
# here for the config's readers.
JOB_CONFIG_ERROR = "job_config"  # the error type of a broken rule between fields


class ValidationConfig(BaseModel):
    model_config = _STRICT

    samples: int = Field(default=8, ge=1, le=256, description="seeded random input sets")
    seed: int = Field(default=0, ge=0)
    atol: float | None = Field(default=None, gt=0, description="overrides the precision default")
    rtol: float | None = Field(default=None, ge=0)
    min_cosine: float | None = Field(default=None, gt=0, le=1)
    # Optional limits, unchecked unless given (optimizer.validation.Tolerances).
    max_rel_err: float | None = Field(default=None, gt=0)
    max_rmse: float | None = Field(default=None, gt=0)
    min_snr_db: float | None = None
    min_top1_agreement: float | None = Field(default=None, ge=0, le=1)
    min_top5_agreement: float | None = Field(default=None, ge=0, le=1)
    max_accuracy_drop: float | None = Field(default=None, ge=0, le=1)

    def tolerance_overrides(self) -> dict[str, float]:
        """The limits the job sets (every field but `samples` and `seed`, where given)."""
        return self.model_dump(exclude={"samples", "seed"}, exclude_none=True)


_MAX_SWEEP_BATCHES, _MAX_SWEEP_BATCH = 16, 4096


class BenchmarkConfig(BaseModel):
    model_config = _STRICT

    warmup: int = Field(default=5, ge=0, le=1000, description="fewest warm-up runs per variant")
    iterations: int = Field(default=30, ge=1, le=10000)
    measure_memory: bool = True
    # The warm-up goes on until the last 5 runs vary by less than this coefficient of
    # variation, or until max_warmup runs (never fewer than warmup).
    warmup_cv_threshold: float = Field(default=0.05, gt=0, le=1)
    max_warmup: int = Field(default=50, ge=0, le=1000)
    batch_sizes: list[Annotated[int, Field(strict=True)]] | None = Field(
        default=None, description="also time the original and the engine at each of these "
        "batch sizes (suite 'sweep'); models with a fixed batch dim skip the sweep")

    @field_validator("batch_sizes")
    @classmethod
    def _batch_sizes(cls, value: list[int] | None) -> list[int] | None:
        if value is None:
            return None
        if not 1 <= len(value) <= _MAX_SWEEP_BATCHES:
            raise ValueError(f"batch_sizes: give 1 to {_MAX_SWEEP_BATCHES} batch sizes, got "
                             f"{len(value)}")
        outside = [size for size in value if not 1 <= size <= _MAX_SWEEP_BATCH]
        if outside:
            raise ValueError(f"batch_sizes: each must be 1 to {_MAX_SWEEP_BATCH}, got {outside}")
        if len(set(value)) != len(value):
            repeated = sorted({size for size in value if value.count(size) > 1})
            raise ValueError(f"batch_sizes: each size once, {repeated} repeated")
        return value


class AccuracyBudget(BaseModel):
    """What `precision_search` and int8 quantization must keep: limits on the worst output
    against the fp32 original (int8 without a budget given: its precision's defaults)."""

    model_config = _STRICT

    min_cosine: float | None = Field(default=0.999, gt=0, le=1)
    min_top1_agreement: float | None = Field(default=None, ge=0, le=1)
    max_abs_err: float | None = Field(default=None, gt=0)
    max_accuracy_drop: float | None = Field(
        default=None, ge=0, le=1, description="int8 only, with a labelled validation dataset: "
        "the most top-1 accuracy may drop, as a fraction (0.01 is one point)")

    @model_validator(mode="after")
    def _at_least_one_limit(self) -> "AccuracyBudget":
        if self.min_cosine is None and self.min_top1_agreement is None and self.max_abs_err is None:
            raise ValueError("set at least one of min_cosine, min_top1_agreement, max_abs_err")
        return self


class QuantizationConfig(BaseModel):
    """How an int8 job quantizes (precision "int8")."""

    model_config = _STRICT

    mode: QuantizationMode = Field(
        default=QuantizationMode.AUTO,
        description='"static": int8 weights and activations, scales from the calibration '
        'dataset; "dynamic": int8 weights of matrix products, activation scales at run time; '
        '"auto": static when a calibration dataset is named, and dynamic where the model has '
        "matrix products, each measured: the fastest within the accuracy budget ships")
    calibration: uuid.UUID | None = Field(
        default=None, description="the calibration dataset (POST /v1/datasets?role=calibration); "
        "static quantization needs one. Without dataset_id, part of it is held apart to judge "
        "the engine, and the report says which samples")
    method: CalibrationMethod = Field(
        default=CalibrationMethod.AUTO,
        description='activation ranges: "minmax", "entropy", "percentile", or "auto" (in that '
        "order of cost until the budget is met)")
    per_channel: bool = Field(default=True, description="one weight scale per output channel")
    keep_nodes: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description="node names of the fused model to keep in float")
    keep_op_types: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description='op types to keep in float, e.g. ["Softmax"]')
    max_kept_nodes: int = Field(
        default=16, ge=0, le=256, description="the most nodes the accuracy search keeps in "
        "float before it gives up on int8 (the fp32 model then ships, saying why)")


class SearchConfig(BaseModel):
    """A search job: try every candidate the registries allow (pass sets, precisions, int8
    forms, ONNX Runtime levels), race those within the accuracy budget, and ship the winner."""

    model_config = _STRICT

    strategy: Strategy = Field(
        default=Strategy.MIN_LATENCY,
        description='"min_latency": the lowest p50; "max_throughput": the most inferences a '
        "second the worker serves at the job's batch, each onnxruntime candidate running as "
        "many requests at once as the cores hold at its threads (and one thread is tried too, "
        'unless threads says otherwise); "min_latency_under_budget": the lowest p50 of those '
        "whose p99 stays within latency_budget_ms")
    latency_budget_ms: float | None = Field(
        default=None, gt=0, description='strategy "min_latency_under_budget" only: the p99 '
        "a candidate must stay within")
    time_budget_s: float = Field(
        default=600, ge=10, le=3 * 3600, description="the most the search may take: no candidate "
        "starts building after 75% of it, one still building then stops at its next step (the "
        "first excepted; those left are listed as not tried), and the race stops at its end; "
        "it stops earlier once no remaining candidate can win")
    precisions: list[Precision] | None = Field(
        default=None, description="the precisions to try; unset: every one the backend builds "
        "(int8 static needs quantization.calibration)")
    pass_sets: bool = Field(
        default=True, description='also try fp32 with no passes and with each pass family '
        'that rewrites the model switched off (the measured answer to "is this fusion worth '
        'it here")')
    ort_levels: list[OrtLevel] | None = Field(
        default=None, description="onnxruntime only: also try fp32 at these ONNX Runtime "
        'levels (unset: "all" only)')
    backends: list[Backend] | None = Field(
        default=None, description="the backends to try (unset: a CPU job's search tries every "
        "CPU backend the worker that runs it has, its own first; a GPU job's, its own only). The "
        "job's backend decides which workers run the search, so it must be one of them and "
        "each other must build on its workers: a tensorrt search (on a GPU worker) can also "
        "try onnxruntime; an onnxruntime search (on a CPU worker) cannot try tensorrt")
    threads: list[Annotated[int, Field(strict=True, ge=1, le=256)]] | None = Field(
        default=None, description="onnxruntime only: also try each precision with all passes "
        "at these intra-op thread counts (unset: ONNX Runtime's default only); the winner's "
        "count is kept in its engine's manifest")


# strict: JSON true or 2.0 is not a dim (pydantic would otherwise take them as 1 and 2)
_Dim = Annotated[int, Field(strict=True, ge=1)]


class OptimizationProfileRequest(BaseModel):
    """The shapes a TensorRT engine accepts for one input: min <= opt <= max on every axis."""

    model_config = _STRICT

    min: list[_Dim] = Field(description="smallest shape the engine accepts")
    opt: list[_Dim] = Field(description="the shape TensorRT tunes its kernels for")
    max: list[_Dim] = Field(description="largest shape the engine accepts")


def checked_callback_url(value: str | None) -> str | None:
    """A webhook URL as given, or None; a pydantic validation error naming the problem with a
    URL FuseForge will not post to (core/callbacks/urls.py). For job and project fields alike."""
    if value is None:
        return None
    problem = callback_url_problem(value)
    if problem is not None:
        raise PydanticCustomError("callback_url", "{problem}", {"problem": problem})
    return value


class JobConfig(BaseModel):
    """How to optimize: stored on the job exactly as it ran (input shapes resolved)."""

    model_config = _STRICT

    backend: Backend = Field(
        default=DEFAULT_BACKEND,
        description='"onnxruntime" runs on CPU workers; "tensorrt" builds a TensorRT engine on a '
        "GPU worker",
    )
    target_gpu: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description='tensorrt only: build on this GPU, named by compute capability ("9.0") or by '
        'model as the driver reports it, with or without "NVIDIA" ("H200")',
    )
    precision: Precision = Field(
        default=REFERENCE_PRECISION,
        description="fp16/bf16 convert the graph (sensitive ops kept in fp32) and validate it "
        "against the fp32 original with that precision's tolerances",
    )
    input_shapes: dict[str, list[int]] | None = Field(
        default=None,
        description="static shape per input; dynamic dims not given come from the dataset's "
        "sample shape (with dataset_id), else the profile's opt (with profiles), else 1",
    )
    profiles: dict[str, OptimizationProfileRequest] | None = Field(
        default=None,
        description="tensorrt only: the range of shapes the engine accepts per input, e.g. "
        '{"input": {"min": [1, 3, 224, 224], "opt": [8, 3, 224, 224], "max": [32, 3, 224, '
        "224]}}; only the model's dynamic dims may vary. Inputs left out are built for their "
        "input_shapes entry; a profiled input without one is validated and benchmarked at its "
        "opt shape (or the dataset's sample shape, which must lie within the profile)",
        examples=[{"input": {"min": [1, 3, 224, 224], "opt": [8, 3, 224, 224],
                             "max": [32, 3, 224, 224]}}],
    )
    input_ranges: dict[str, tuple[float, float]] | None = Field(
        default=None,
        description="[low, high) per input for the seeded random inputs, e.g. token ids in "
        "[0, vocab_size): integer inputs (whole-number bounds) draw low..high-1, float inputs "
        "uniform values",
    )
    dataset_id: uuid.UUID | None = Field(
        default=None,
        description="validate on an uploaded dataset (POST /v1/datasets) instead of random "
        "inputs; sample i of each array is one model call at that input's shape",
    )
    passes: Literal["all", "none"] | list[str] = Field(
        default="all", description='"all", "none", or pass names (GET /v1/passes lists them)'
    )
    ablation: bool = Field(
        default=False, description="also benchmark the fusion stages cumulatively"
    )
    quantization: QuantizationConfig | None = Field(
        default=None, description='precision "int8" only: how to quantize (default: "auto")')
    precision_search: bool = Field(
        default=False,
        description="keep the fewest extra nodes in fp32 that bring an fp16/bf16 model within "
        "accuracy_budget",
    )
    accuracy_budget: AccuracyBudget = AccuracyBudget()
    on_validation_failure: Literal["fail", "fallback"] = Field(
        default="fail",
        description='"fallback" keeps the largest set of rewrites that validates instead of failing',
    )
    ort_optimization_level: OrtLevel | None = Field(
        default=None,
        description=f"onnxruntime only: ONNX Runtime's own graph optimizations on the engine "
        f"(default {DEFAULT_ORT_LEVEL!r}); a TensorRT engine is optimized by TensorRT's builder",
    )
    ort_intra_op_threads: int | None = Field(
        default=None, ge=1, le=256,
        description="onnxruntime only: the engine's intra-op threads, kept in its manifest so "
        "it loads with them (unset: ONNX Runtime's default, one per core); the benchmark's "
        "original runs with the same, and int8 candidates are timed with them; "
        "intra_op_threads is the same option under the name every CPU backend takes")
    intra_op_threads: int | None = Field(
        default=None, ge=1, le=256,
        description="CPU backends (onnxruntime, openvino): the threads the engine runs a "
        "request on, kept in its manifest so it loads with them (unset: the runtime's "
        "default, one per core); the benchmark's original runs with the same")
    ort_flush_denormals: bool | None = Field(
        default=None,
        description="onnxruntime only: the engine flushes denormal floats to zero while it runs. "
        "Unset: when the engine softmaxes masked scores (a masked attention row, padding or "
        "causal, otherwise puts denormals through softmax and the MatMul after it, at a "
        "fraction of their speed); true: always; false: never (IEEE gradual underflow). The manifest's "
        "flush_denormals and flush_denormals_why say what the engine does",
    )
    validation: ValidationConfig = ValidationConfig()
    benchmark: BenchmarkConfig = BenchmarkConfig()
    search: SearchConfig | None = Field(
        default=None, description="search the configurations instead of running one: each "
        "candidate is built, validated against accuracy_budget and raced; the fastest ships "
        "(search_report: the Pareto table, why each other lost, the recipe that rebuilds it)")
    callback_url: str | None = Field(
        default=None,
        description="POSTed the job's JSON when it succeeds, fails or is cancelled, signed with "
        "the FuseForge-Signature header (README: Webhooks); http(s), a public address",
        examples=["https://hooks.example.com/fuseforge"],
    )

    @field_validator("callback_url")
    @classmethod
    def _callback_url(cls, value: str | None) -> str | None:
        return checked_callback_url(value)

    @field_validator("target_gpu")
    @classmethod
    def _gpu_target(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if not any(ch.isalnum() for ch in value):
            raise ValueError(f"{value!r} names no GPU; give a compute capability like '9.0' or a "
                             "GPU model like 'H200'")
        # "sm_90" and "9.0" are one target: store the canonical form the worker queues use.
        return normalize_compute_capability(value) or value

    @field_validator("profiles")
    @classmethod
    def _no_empty_profiles(
        cls, value: dict[str, OptimizationProfileRequest] | None
    ) -> dict[str, OptimizationProfileRequest] | None:
        return value or None  # {} asks for nothing: stored as no profiles

    @field_validator("passes")
    @classmethod
    def _known_passes(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, str):
            return value
        unknown = [name for name in value if name not in PASSES_BY_NAME]
        if unknown:
            raise ValueError(
                f"unknown pass(es) {', '.join(map(repr, unknown))}; available: "
                f"{', '.join(PASSES_BY_NAME)}"
            )
        return list(dict.fromkeys(value))  # drop repeats, keep the order given

    @model_validator(mode="after")
    def _options_fit_the_backend(self) -> "JobConfig":
        """The rules between fields; each message starts with the field at fault."""
        problem = _cross_field_problem(self)
        if problem is not None:
            # A custom error keeps the message as written (no "Value error, " prefix).
            raise PydanticCustomError(JOB_CONFIG_ERROR, "{problem}", {"problem": problem})
        if "ort_optimization_level" in BACKENDS[self.backend].options \
                and self.ort_optimization_level is None:
            self.ort_optimization_level = DEFAULT_ORT_LEVEL
        if PRECISIONS[self.precision].quantizes and self.search is None:
            self.accuracy_budget = _quantized_budget(self)
        return self

    @property
    def cpu_threads(self) -> int | None:
        """The threads a CPU backend's engine runs on: intra_op_threads, or ONNX Runtime's own
        name for it, ort_intra_op_threads (a job sets one at most); None: the default."""
        return self.intra_op_threads if self.intra_op_threads is not None \
            else self.ort_intra_op_threads

    def searched_backends(self, capabilities: HostCapabilities | None = None) -> list[Backend]:
        """The backends a search job tries: its own first (its workers run the search), then
        those `search.backends` names; where it names none, on a worker of `capabilities`,
        every other backend of the same queue kind (CPU) that the worker runs. GPU backends
        are only tried when named: each builds on its own devices."""
        assert self.search is not None, "only a search job searches backends"
        if self.search.backends is not None:
            return list(dict.fromkeys([self.backend, *self.search.backends]))
        own = BACKENDS[self.backend]
        if capabilities is None or own.queue is not QueueKind.CPU:
            return [self.backend]
        return [self.backend, *(name for name, spec in BACKENDS.items()
                                if name != self.backend and spec.queue is QueueKind.CPU
                                and spec.runs_on(capabilities))]

    def search_spaces(self, *, has_calibration: bool,
                      capabilities: HostCapabilities | None = None) -> list[SearchSpace]:
        """What this search job may vary, one space per backend it tries on a worker of
        `capabilities` (searched_backends), its own first (the model narrows each further:
        model_space.py)."""
        search = self.search
        assert search is not None, "only a search job has a search space"
        spaces = []
        for backend in self.searched_backends(capabilities):
            options = BACKENDS[backend].options
            spaces.append(SearchSpace(
                backend=backend,
                precisions=tuple(search.precisions) if search.precisions else None,
                pass_sets=search.pass_sets,
                ort_levels=tuple(search.ort_levels) if search.ort_levels
                and "ort_optimization_level" in options else None,
                threads=_searched_threads(search) if "intra_op_threads" in options
                else None,
                has_calibration=has_calibration,
                target_gpu=self.target_gpu if "target_gpu" in options else None,
                # bf16 and the like are refused where this worker's CPU lacks their kernels
                cpu_flags=None if capabilities is None else capabilities.cpu_flags))
        return spaces

    def candidate_config(self, overrides: dict[str, Any]) -> "JobConfig":
        """The one-configuration job a search candidate is: this search job's fields with the
        candidate's `overrides` (its recipe), no search. Checked by the same rules as any job;
        the accuracy budget, where the search job left the default, is each precision's own.

        Raises:
            pydantic.ValidationError: the candidate breaks a rule (a registry bug: candidates
                come from the same registries these rules read).
        """
        fields = self.model_dump(mode="json", exclude={"search", "ort_optimization_level"})
        if fields.get("ort_intra_op_threads") is not None:
            # Every CPU backend's name for it: an OpenVINO candidate runs at the job's threads too.
            fields["intra_op_threads"] = fields.pop("ort_intra_op_threads")
        quantization = {**(fields.pop("quantization") or {}), **overrides.get("quantization", {})}
        fields.update({k: v for k, v in overrides.items() if k != "quantization"})
        _drop_other_backends_options(fields, Backend(fields["backend"]))
        precision = PRECISIONS[Precision(fields["precision"])]
        if quantization.get("mode") == QuantizationMode.DYNAMIC:
            quantization.pop("calibration", None)  # scales at run time: none to read
        if precision.quantizes:
            fields["quantization"] = quantization
        if not precision.converts:
            fields.pop("precision_search")
        if self.accuracy_budget == AccuracyBudget():
            fields.pop("accuracy_budget")
        return JobConfig.model_validate(fields)

    def profile_shapes(self) -> dict[str, dict[str, list[int]]] | None:
        """The profiles as plain `{"min": [...], "opt": [...], "max": [...]}` per input, the form
        the optimizer takes; None without profiles."""
        if not self.profiles:
            return None
        return {name: profile.model_dump() for name, profile in self.profiles.items()}


def _searched_threads(search: SearchConfig) -> tuple[int, ...] | None:
    """The thread counts a search tries; a throughput search that names none also tries one
    thread (a request per core at once, optimizer/search/streams.py), often the most served."""
    if search.threads:
        return tuple(search.threads)
    return (1,) if search.strategy is Strategy.MAX_THROUGHPUT else None


def _drop_other_backends_options(fields: dict[str, Any], backend: Backend) -> None:
    """A search candidate on another backend than the job's keeps only the options its own
    backend takes; a TensorRT job's profiles become the ONNX Runtime candidate's shapes at
    their opt, the shape the search validates and times at."""
    options = BACKENDS[backend].options
    profiles = fields.get("profiles") if "profiles" not in options else None
    if profiles:
        shapes = dict(fields.get("input_shapes") or {})
        for name, profile in profiles.items():
            shapes.setdefault(name, profile["opt"])
        fields["input_shapes"] = shapes
    for option in _BACKEND_OPTIONS:
        if option not in options:
            fields.pop(option, None)


def _cross_field_problem(config: JobConfig) -> str | None:
    spec = BACKENDS[config.backend]
    if config.search is not None:
        return _search_problem(config, config.search)
    if config.precision_search and not spec.converts_graph(config.precision):
        choices = ", ".join(f"{p} ({_names(_converting(p))})" for p in reduced_precisions())
        how = (f"backend {str(config.backend)!r} computes {config.precision} from the fp32 "
               "graph itself, so there is no converted graph to search"
               if config.precision in spec.runtime_precisions
               else f"there is nothing to search at {config.precision}")
        return (f"precision_search: {how}; set precision to one it converts to: {choices}")
    for option in _BACKEND_OPTIONS:
        if getattr(config, option) is not None and option not in spec.options:
            allowed = _names(backends_for(option))
            return (f"{option}: applies to backend {allowed} only; "
                    f"{spec.why_not.get(option, f'backend {str(config.backend)!r} does not use it.')} "
                    f"Drop {option} or set backend to {allowed}.")
    if config.intra_op_threads is not None and config.ort_intra_op_threads is not None:
        return ("intra_op_threads: ort_intra_op_threads is the same option under ONNX "
                "Runtime's name; set one of them")
    if config.target_gpu is not None and normalize_compute_capability(config.target_gpu):
        refusal = PRECISIONS[config.precision].gpu_refusal(config.target_gpu)
        if refusal is not None:
            return f"target_gpu: {refusal}. Pick a newer GPU or another precision."
    if config.precision not in spec.precisions:
        allowed = _names(backends_for(config.precision))
        why = spec.why_not.get(config.precision, f"backend {str(config.backend)!r} does not run it.")
        return (f"precision: {config.precision} needs backend {allowed}; {why} Use "
                f"{' or '.join(spec.precisions)} with {config.backend}.")
    return _quantization_problem(config)


# What a search varies itself, at their defaults (a stored job holds every field, so the
# rule compares values, not the fields given): a job that also sets them asks for two things.
_SEARCHED_FIELDS = {"precision": (REFERENCE_PRECISION, "search.precisions"),
                    "passes": ("all", "search.pass_sets"),
                    "ort_optimization_level": (DEFAULT_ORT_LEVEL, "search.ort_levels"),
                    "on_validation_failure": ("fail", "a candidate out of budget loses")}


def _search_problem(config: JobConfig, search: SearchConfig) -> str | None:
    """The rules of a search job; each candidate's own config is checked when it is made."""
    for name, (default, instead) in _SEARCHED_FIELDS.items():
        if getattr(config, name) not in (None, default):
            return (f"{name}: a search job tries this itself ({instead}); drop {name}, or "
                    "drop search to run one configuration")
    if (search.strategy is Strategy.MIN_LATENCY_UNDER_BUDGET) != (search.latency_budget_ms
                                                                   is not None):
        return ("search.latency_budget_ms: set it with strategy 'min_latency_under_budget', "
                "and only then")
    backends = config.searched_backends()
    problem = _searched_backends_problem(config, search)
    if problem is not None:
        return problem
    options = {option for backend in backends for option in BACKENDS[backend].options}
    for field, option in (("ort_levels", "ort_optimization_level"),
                          ("threads", "intra_op_threads")):
        if getattr(search, field) is not None and option not in options:
            return f"search.{field}: applies to backend {_names(backends_for(option))} only"
    for option in _BACKEND_OPTIONS:
        if getattr(config, option) is not None and option not in options:
            allowed = _names(backends_for(option))
            return (f"{option}: applies to backend {allowed} only, and this search tries "
                    f"{_names(tuple(backends))}. Drop {option} or add {allowed} to "
                    "search.backends.")
    if search.threads is not None and config.cpu_threads is not None:
        named = ("ort_intra_op_threads" if config.ort_intra_op_threads is not None
                 else "intra_op_threads")
        return (f"{named}: a search with search.threads tries thread counts "
                "itself; drop one of them")
    built = [p for backend in backends for p in BACKENDS[backend].precisions]
    unsupported = [str(p) for p in search.precisions or () if p not in built]
    if unsupported:
        which = (f"backend {_names(tuple(backends))} does not" if len(backends) == 1
                 else f"none of backends {', '.join(map(repr, map(str, backends)))}")
        reasons = "; ".join(dict.fromkeys(
            BACKENDS[b].why_not[p].rstrip(".") for b in backends for p in unsupported
            if p in BACKENDS[b].why_not))
        return (f"search.precisions: {which} build {', '.join(unsupported)}; "
                f"{'it builds' if len(backends) == 1 else 'they build'} "
                f"{', '.join(dict.fromkeys(built))}" + (f" ({reasons})" if reasons else ""))
    if config.precision_search and not any(p in reduced_precisions()
                                           for p in search.precisions or built):
        return "precision_search: the search tries no fp16/bf16 candidate for it to apply to"
    quantization = config.quantization
    if quantization is None:
        return None
    if quantization.mode is not QuantizationMode.AUTO:
        return ("quantization.mode: a search job tries int8 static and dynamic itself; "
                "leave mode unset ('auto')")
    if quantization.calibration is not None and quantization.calibration == config.dataset_id:
        return (f"quantization.calibration: dataset {quantization.calibration} is also the "
                "job's dataset_id; the same samples cannot calibrate the model and judge it")
    return None


def _searched_backends_problem(config: JobConfig, search: SearchConfig) -> str | None:
    """search.backends must hold the job's backend (its workers run the search), each once,
    and only backends those workers can build as well."""
    if search.backends is None:
        return None
    if len(set(search.backends)) != len(search.backends):
        return "search.backends: name each backend once"
    spec = BACKENDS[config.backend]
    others = [BACKENDS[b] for b in search.backends if b != config.backend]
    cannot = [other for other in others
              if other.host_check is not None and other.host_check != spec.host_check]
    if cannot:
        other = cannot[0]
        return (f"search.backends: {str(other.name)!r} needs {other.host_needs}, which the workers "
                f"of backend {str(config.backend)!r} (which run this search) may lack; set backend "
                f"to {str(other.name)!r} so the search runs on a worker that builds every backend "
                "it tries")
    if config.backend not in search.backends:
        return (f"search.backends: the job's backend {str(config.backend)!r} must be one of them "
                f"(its workers run the search); add it, or set backend to one of "
                f"{_names(tuple(search.backends))}")
    return None


def _quantization_problem(config: JobConfig) -> str | None:
    quantizes = PRECISIONS[config.precision].quantizes
    quantized = " or ".join(repr(str(p)) for p, spec in PRECISIONS.items() if spec.quantizes)
    if config.quantization is not None and not quantizes:
        return (f"quantization: applies to precision {quantized} only; this job's precision is "
                f"{config.precision}. Drop quantization or set precision to {quantized}.")
    if config.accuracy_budget.max_accuracy_drop is not None and not quantizes:
        return (f"accuracy_budget.max_accuracy_drop: applies to precision {quantized} only "
                "(fp16/bf16 searches judge outputs, not labels)")
    if not quantizes:
        return None
    quantization = quantization_of(config)
    spec = PRECISIONS[config.precision]
    if spec.needs_calibration and quantization.calibration is None:
        return (f"quantization.calibration: {config.precision} needs a calibration dataset "
                "(POST /v1/datasets?role=calibration): it has no dynamic form, its scales come "
                "from calibration")
    if not spec.has_dynamic_form and quantization.mode is QuantizationMode.DYNAMIC:
        return (f"quantization.mode: {config.precision} has no dynamic form; use 'static' or "
                "'auto'")
    flavours = BACKENDS[config.backend].quant_flavours.get(config.precision, ())
    if not all(FLAVOURS[flavour].runs_dynamic_form for flavour in flavours):
        # Its flavours' runtime has no integer kernels for run-time scaled activations.
        if quantization.calibration is None:
            return (f"quantization.calibration: {config.precision} on backend "
                    f"'{config.backend}' needs a calibration dataset (POST "
                    "/v1/datasets?role=calibration): it has no dynamic form, its scales come "
                    "from calibration")
        if quantization.mode is QuantizationMode.DYNAMIC:
            return (f"quantization.mode: {config.precision} on backend '{config.backend}' has "
                    "no dynamic form; use 'static' or 'auto'")
    if config.quantization is None:
        return None
    if quantization.mode is QuantizationMode.STATIC and quantization.calibration is None:
        return ("quantization.calibration: static quantization needs a calibration dataset "
                "(POST /v1/datasets?role=calibration); FuseForge never quantizes with scales "
                "from random inputs. Name one, or use mode 'dynamic'.")
    if quantization.calibration is not None and quantization.calibration == config.dataset_id:
        return (f"quantization.calibration: dataset {quantization.calibration} is also the "
                "job's dataset_id; the same samples cannot calibrate the model and judge it. "
                "Name held-apart validation data as dataset_id, or leave dataset_id unset and "
                "part of the calibration dataset is held apart to judge it.")
    if quantization.calibration is not None and quantization.mode is QuantizationMode.DYNAMIC:
        return ("quantization.calibration: dynamic quantization computes activation scales "
                "at run time and reads no calibration dataset; drop it or use mode 'static' "
                "or 'auto'.")
    return None


def _quantized_budget(config: JobConfig) -> AccuracyBudget:
    """An int8 job's budget as stored: the limits it gave, the others its precision's defaults
    (not precision_search's cosine 0.999). Stored whole, so the worker holds it to exactly this."""
    budget = config.accuracy_budget
    given = budget.model_fields_set if "accuracy_budget" in config.model_fields_set else set()
    defaults = PRECISIONS[config.precision].tolerances
    limits: dict[str, float | None] = {
        "min_cosine": defaults.get("min_cosine"),
        "min_top1_agreement": defaults.get("min_top1_agreement"),
        "max_abs_err": None, "max_accuracy_drop": None}
    return AccuracyBudget(**{**limits, **{name: getattr(budget, name) for name in given}})


def quantization_of(config: JobConfig) -> QuantizationConfig:
    """An int8 job's quantization settings, the defaults when it gave none."""
    return config.quantization or QuantizationConfig()


# The fields only some backends take (each spec's `options`): the rule above covers them all.
_BACKEND_OPTIONS = tuple(sorted({option for spec in BACKENDS.values() for option in spec.options}))


def _converting(precision: Precision) -> tuple[Backend, ...]:
    """The backends that reach `precision` by converting the graph (what precision_search
    searches), not through their runtime."""
    return tuple(b for b in backends_for(precision) if BACKENDS[b].converts_graph(precision))


def _names(backends: tuple[Backend, ...]) -> str:
    return " or ".join(repr(str(b)) for b in backends) or "none"
