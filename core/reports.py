"""The reports a job run stores on its job, declared once: `JobReports`.

The worker fills it, the jobs table keeps each section in the JSON column of the same name
(`REPORT_COLUMNS`), and `JobRead` inherits it, so the API reads and shows every section
without listing them. A new section is one field on `JobReports` (and a migration adding its
JSON column), plus its template on the job page.

Sections other than the fusion report hold what the optimizer's own reports give as JSON
(`to_dict()`); their fields say which exist. A column stores only the fields the run set; the
API shows every field, null where that step did not run.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from optimizer.jsonable import json_safe

__all__ = [
    "REPORT_COLUMNS",
    "AccuracyReport",
    "EngineReport",
    "FusionReportRead",
    "JobReports",
    "ProfileReport",
    "ReportSection",
    "RuleStatsRead",
    "SearchReport",
    "StageMemory",
]

JsonObject = dict[str, Any]


class ReportSection(BaseModel):
    """A report filled stage by stage: each field is set by the step that produced it."""

    # A report stored by an older worker may carry a key this one no longer writes: keep it.
    model_config = ConfigDict(extra="allow")

    def update(self, other: "ReportSection") -> None:
        """Take every field `other` set (a later stage's word replaces an earlier one's)."""
        for name in other.model_fields_set:
            setattr(self, name, getattr(other, name))

    def is_empty(self) -> bool:
        return not self.model_fields_set


class AccuracyReport(ReportSection):
    """How the engine was judged beyond the per-output rows: the precision conversion,
    bisection and blame when validation failed, the fallback taken, the extra shape checks."""

    # stage optimize (precision other than fp32): optimizer.precision's conversion report, and
    # the search for the fewest fp32 nodes when the job asked for precision_search
    precision: JsonObject | None = None
    precision_search: JsonObject | None = None
    # stage optimize, int8: the calibration, the candidates tried and timed, the nodes kept in
    # float and why, what shipped (int8 or fp32, and why), each node's precision in the engine
    quantization: JsonObject | None = None
    # stage validate (precision other than fp32): how it was judged ({"method", "backend"})
    precision_evaluation: JsonObject | None = None
    passed_first_time: bool | None = None  # fp32 jobs: the job's own attempt validated
    # validation failed: the rule bisection, who is to blame, the first divergent node
    bisection: JsonObject | None = None
    blame: str | None = None
    localization: JsonObject | None = None
    fallback: JsonObject | None = None  # the attempt kept and the first verdict
    # why the user's model ships unchanged instead of an engine (every attempt failed
    # validation, or the engine measured slower than it); None: an engine ships
    original_shipped: str | None = None
    larger_shape_check: JsonObject | None = None  # dims left dynamic: the rewrites at a larger shape
    profile_checks: dict[str, JsonObject] | None = None  # by profile end ("min", "max")
    # what the verdict was reached on: tolerances, failures, input shapes, random inputs' ranges
    tolerances: JsonObject | None = None
    failures: list[JsonObject] | None = None
    input_shapes: list[JsonObject] | None = None
    input_ranges: dict[str, JsonObject] | None = None


class EngineReport(ReportSection):
    """A tensorrt engine: its metadata (TensorRT version, GPU, precision, profiles, plugins,
    build time, size...), the inspector's summary of its layers and which ONNX nodes each
    fused, and the unfused reference engine's metadata. An onnxruntime engine has one only when
    its inputs were left dynamic, saying why."""

    metadata: JsonObject | None = None
    layers: Any = None
    reference_engine: JsonObject | None = None
    inputs_left_dynamic: str | None = None


class ProfileReport(ReportSection):
    """Where the engine's time goes (optimizer/measure/hot_spots.py): per-node times of the
    benchmark's original and of the engine at the job's shapes, corrected for the profiler's
    overhead; time by op type before and after; the engine's top nodes with the original
    nodes each came from; original nodes left unfused (with the refusal the fusion report
    holds) or in float; the share of time in memory-bound nodes. `skipped` says why a job has
    none."""

    profiler: str | None = None
    input_shapes: dict[str, list[int]] | None = None
    original: JsonObject | None = None
    engine: JsonObject | None = None
    by_op_type: list[JsonObject] | None = None
    top_nodes: list[JsonObject] | None = None
    unfused: list[JsonObject] | None = None
    in_float: list[JsonObject] | None = None
    memory_bound: JsonObject | None = None
    mapping: JsonObject | None = None
    hot_spot: str | None = None
    skipped: str | None = None


class SearchReport(ReportSection):
    """A search job's decision (optimizer/search/decision.py): the candidate that shipped and
    why, every candidate's row (the Pareto table: latency p50/p99 with 95% intervals,
    throughput, speed-up, accuracy, engine size, build time, its outcome and the reason it
    lost), the recipe that rebuilds the winner, and how the race ended. Where no candidate
    beat the original, `winner` is null and `original` says why the original shipped; a
    search of several backends lists each one's fastest candidate in `backends`."""

    strategy: str | None = None
    winner: str | None = None
    why: str | None = None
    original: str | None = None  # why the user's original shipped: no candidate beat it
    # Each backend's fastest raced candidate, the winner's first:
    # [{"backend", "label", "best", "precision", "speedup"}]; null for one backend.
    backends: list[JsonObject] | None = None
    recipe: JsonObject | None = None  # the job config that rebuilds the winner, no search
    rows: list[JsonObject] | None = None
    race: JsonObject | None = None  # rounds run, why it stopped
    resumed: list[str] | None = None  # candidates a resumed search did not judge again
    time_budget_s: float | None = None
    elapsed_s: float | None = None


class RuleStatsRead(BaseModel):
    pass_name: str
    rule: str
    applied: int
    refusals: list[dict[str, str]]  # [{"node": ..., "reason": ...}] near-misses the check refused


class FusionReportRead(BaseModel):
    """What the fusion passes did to the model: `optimizer.fusion_report.FusionReport`."""

    backend: str
    passes_run: list[str]
    passes_skipped: dict[str, str]
    nodes_before: int
    nodes_after: int
    ops_before: dict[str, int]
    ops_after: dict[str, int]
    rules: list[RuleStatsRead]
    iterations: int
    duration_s: float
    notes: list[str]
    excluded_rules: list[str] = []  # rules kept off (e.g. named by bisection as unsafe)


class StageMemory(ReportSection):
    """The job process's peak resident memory in each stage (worker/pipeline/stage_memory.py)."""

    peak_rss_mb: dict[str, float] = Field(
        default_factory=dict, description="per stage, in MiB: the highest resident memory of "
        "the job's process while the stage ran (a stage entered twice: the higher); child "
        "processes it starts are their own")
    method: str | None = None  # how it was read, e.g. "VmHWM, reset as each stage starts"


class JobReports(BaseModel):
    """Every report a job run stores: each field is a JSON column of `jobs`, named alike."""

    fusion_report: FusionReportRead | None = None
    accuracy_report: AccuracyReport | None = Field(
        default=None, description="bisection of the rewrite rules when validation failed, who "
        "is to blame, the fallback taken, the precision conversion, the extra shape checks")
    engine_report: EngineReport | None = Field(
        default=None, description="tensorrt jobs: the engine's metadata, the summary of "
        "TensorRT's layers, the unfused reference engine's metadata")
    profile_report: ProfileReport | None = Field(
        default=None, description="per-node times of the original and the engine, mapped back "
        "to the original's nodes: the hot spots, time by op type, nodes left unfused or in float")
    search_report: SearchReport | None = Field(
        default=None, description="search jobs: the Pareto table of the candidates, the winner "
        "and why, why each other lost, the recipe that rebuilds the winner")
    stage_memory: StageMemory | None = Field(
        default=None, description="the job process's peak resident memory in each stage it "
        "ran (Linux; absent where the process cannot read its own)")

    def accuracy(self) -> AccuracyReport:
        """The accuracy section, started on first use."""
        if self.accuracy_report is None:
            self.accuracy_report = AccuracyReport()
        return self.accuracy_report

    def columns(self) -> dict[str, Any]:
        """Every section as strict JSON, by column: the fields the run set (None for a section
        it produced none of, which clears what an earlier attempt stored)."""
        columns: dict[str, Any] = {}
        for name in REPORT_COLUMNS:
            section = getattr(self, name)
            empty = section is None or (isinstance(section, ReportSection) and section.is_empty())
            columns[name] = None if empty else json_safe(section.model_dump(exclude_unset=True))
        return columns


REPORT_COLUMNS: tuple[str, ...] = tuple(JobReports.model_fields)
