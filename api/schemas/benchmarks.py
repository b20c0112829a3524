"""Bodies of GET /v1/models/{id}/benchmarks: a model's benchmark records over time, grouped by
the configuration they measured."""

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from api.schemas import examples
from api.schemas.common import Page

__all__ = ["BenchmarkConfigSummary", "BenchmarkHistory", "BenchmarkHistoryEntry",
           "ConfigurationHistory"]


class BenchmarkConfigSummary(BaseModel):
    """What a configuration measured: what its latest job shipped (its config, corrected by its
    reports: core/shipped_configuration.py)."""

    backend: str
    precision: str  # the precision that shipped (an int8 job that shipped fp32 says fp32)
    quantization_mode: str | None = None  # a quantized engine's mode ("static", "dynamic")
    target_gpu: str | None
    passes: str | list[str]  # the passes that ran (from the fusion report), else as asked
    input_shapes: dict[str, list[int]] | None
    profiles: dict[str, Any] | None
    batch_size: int  # the benchmark's


class BenchmarkHistoryEntry(BaseModel):
    """One job's record of the configuration."""

    job_id: uuid.UUID
    created_at: datetime  # when the record was stored
    suite: str
    variant: str
    batch_size: int
    latency_ms_p50: float
    latency_ms_p50_ci_low: float | None
    latency_ms_p50_ci_high: float | None
    throughput_per_s: float
    speedup_vs_reference: float | None
    speedup_ci_low: float | None
    speedup_ci_high: float | None
    speedup_verdict: str | None
    environment_key: str | None
    environment: dict[str, Any] | None  # where it was measured, as the worker captured it
    # where its environment differs from the configuration's latest entry, field by field
    # ("onnxruntime 1.22.0 vs 1.23.2": this entry's value first); empty when it does not
    environment_differences: list[str]
    # a speed-up over the original below the best earlier engine's of the same shipped
    # configuration and environment, beyond both intervals: the figures (BenchmarkRead.regression)
    regression: dict[str, Any] | None


class ConfigurationHistory(BaseModel):
    config_key: str
    config: BenchmarkConfigSummary
    entries: list[BenchmarkHistoryEntry]  # newest first


class BenchmarkHistory(Page[ConfigurationHistory]):
    """A page of the model's configurations, the most recently measured first; `total` counts
    configurations, and each holds every entry it has."""

    model_config = ConfigDict(json_schema_extra={"examples": [examples.BENCHMARK_HISTORY]})
