"""What a finished job shipped, as the settings that shape its engine's speed: the job's config
corrected by what its run decided, so two jobs that asked alike but shipped differently are not
compared, and two that asked differently but shipped alike are.

The run's word replaces the request where it decided otherwise: a search job ships its winner's
recipe (`search_report.recipe`); a quantizing precision may ship a float engine instead
(`accuracy_report.quantization.shipped`, e.g. int8 asked, fp32 shipped when the quantizer found
nothing to quantize or int8 was not faster), and the quantization mode is the one chosen
(`quantization.chosen.mode`: "auto" resolves to static or dynamic); the passes are those the
fusion report says ran, with the rules kept off; a fallback ships its own ONNX Runtime level.
A job without reports (queued, or from before them) is described by its request alone.
"""

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from core.job_config import JobConfig
from optimizer.optimize import OptimizeOptions, select_passes
from optimizer.registries.precisions import PRECISIONS, Precision

__all__ = ["named_passes", "resolved_passes", "shipped_configuration", "shipped_job_config"]


def resolved_passes(config: JobConfig) -> list[str]:
    """The names of the passes `config.passes` selects for its backend ("all" resolved)."""
    selected, _ = select_passes(OptimizeOptions(backend=config.backend, passes=config.passes))
    return [p.name for p in selected]


def named_passes(config: JobConfig, passes: list[str]) -> str | list[str]:
    """`passes` as a reader would name them: the job's own selection ("all", "none") when that
    is what it resolves to, else the list."""
    return config.passes if resolved_passes(config) == passes else passes


def shipped_job_config(config: JobConfig, search_report: Mapping[str, Any] | None) -> JobConfig:
    """`config`, or for a search job the config of its winner (the search report's recipe)."""
    recipe = (search_report or {}).get("recipe")
    if config.search is None or not isinstance(recipe, Mapping):
        return config
    asked = config.model_dump(mode="json", exclude={"search"})
    try:
        return JobConfig.model_validate({**asked, **recipe})
    except ValidationError:  # a recipe from an older worker this config no longer reads
        return config


def shipped_configuration(config: JobConfig, reports: Mapping[str, Any | None]) -> dict[str, Any]:
    """The settings of what the job shipped that shape what its benchmarks time, as plain JSON
    values; `reports` holds the job's report columns by name (core.reports.REPORT_COLUMNS: the
    fusion, accuracy and search reports are read), any of them None or missing."""
    config = shipped_job_config(config, reports.get("search_report"))
    accuracy = reports.get("accuracy_report") or {}
    quantization = accuracy.get("quantization") or {}
    fallback = accuracy.get("fallback") or {}
    fusion = reports.get("fusion_report") or {}
    precision = str(quantization.get("shipped") or config.precision)
    mode = None
    if precision in PRECISIONS and PRECISIONS[Precision(precision)].quantizes:
        chosen = quantization.get("chosen") or {}
        mode = chosen.get("mode") or (str(config.quantization.mode)
                                      if config.quantization is not None else None)
    passes = list(fusion["passes_run"]) if "passes_run" in fusion else resolved_passes(config)
    ort_level = fallback.get("ort_optimization_level", config.ort_optimization_level) \
        if fallback else config.ort_optimization_level
    return {
        "backend": str(config.backend),
        "precision": precision,
        "quantization_mode": mode,
        "precision_search": config.precision_search,
        "target_gpu": config.target_gpu,
        "passes": passes,
        "excluded_rules": sorted(fusion.get("excluded_rules") or ()),
        "input_shapes": config.input_shapes,
        "profiles": config.profile_shapes(),
        "ort_optimization_level": ort_level,
        # Any CPU backend's threads (intra_op_threads, or ONNX Runtime's own name for it),
        # under the key stored benchmark keys were made with, so they still compare.
        "ort_intra_op_threads": config.cpu_threads,
        "ort_flush_denormals": config.ort_flush_denormals,
    }
