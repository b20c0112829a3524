"""The fallback: the more conservative rewrites a job tries, in order, when its engine fails
validation and the job says `"on_validation_failure": "fallback"`.

The pipeline (worker/pipeline/engine_attempts.py) loops optimize → build → validate over these
until one validates, and keeps that one:
1. the job's passes without the rules bisection blamed (when it blamed some);
2. no fusion passes, at the job's ONNX Runtime level.
When both fail, a backend that can ship the original (`JobBackend.original_backend`: ONNX
Runtime) ships the user's model unchanged at ONNX Runtime's default level: what they already
run, never slower than it. (The last resort used to be the unfused model with ONNX Runtime's
optimizations off: valid by construction, but 0.82x the original's speed on PP-OCRv5's
detector.) TensorRT has no such last resort: its engine of the unfused model is attempt 2, and
if that fails the difference is TensorRT's own.
"""

from typing import Any

from core.job_config import JobConfig
from worker.pipeline.results import Attempt, Validation

__all__ = ["fallback_record", "onnxruntime_fallbacks", "tensorrt_fallbacks", "unfused_fallbacks"]


def _without_blamed(config: JobConfig, blamed: tuple[str, ...]) -> list[Attempt]:
    if not blamed:
        return []
    return [Attempt(kept=f"the job's passes without rule(s) {', '.join(blamed)}",
                    passes=config.passes, excluded_rules=blamed,
                    ort_level=config.ort_optimization_level)]


def onnxruntime_fallbacks(config: JobConfig, blamed: tuple[str, ...]) -> list[Attempt]:
    return [
        *_without_blamed(config, blamed),
        Attempt(kept=f"no fusion passes, ONNX Runtime level '{config.ort_optimization_level}'",
                passes="none", ort_level=config.ort_optimization_level),
    ]


def tensorrt_fallbacks(config: JobConfig, blamed: tuple[str, ...]) -> list[Attempt]:
    return [
        *_without_blamed(config, blamed),
        Attempt(kept="no fusion passes: TensorRT's engine of the unfused model", passes="none"),
    ]


def fallback_record(kept: Attempt, first_failure: Validation, *,
                    original_shipped: str | None = None) -> dict[str, Any]:
    """The accuracy report's `fallback` entry: what was kept, and the first verdict;
    `original_shipped` (why, when the original ships: no attempt validated) too."""
    return {
        "kept": kept.kept,
        "excluded_rules": list(kept.excluded_rules),
        "passes": kept.passes,
        "ort_optimization_level": kept.ort_level,
        "original_shipped": original_shipped,
        "first_failure": first_failure.report.to_dict(),
    }


def unfused_fallbacks(config: JobConfig, blamed: tuple[str, ...], *, unfused: str
                      ) -> list[Attempt]:
    """A backend whose engine is its own build of the graph (OpenVINO's IR): the job's passes
    without the blamed rules, then `unfused` (what the attempt without passes keeps, in words)."""
    return [*_without_blamed(config, blamed), Attempt(kept=unfused, passes="none")]
