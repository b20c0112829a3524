"""The new-job form of a model: every option of the job configuration (core/job_config.py), with
the passes the API lists and the project's datasets, and the search a job may run instead;
`?from_job=` fills it from a job's stored config ("Run again with…"). The browser's script
(static/new_job.js) posts it to /v1/jobs."""

import math
import uuid
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from core.job_config import JobConfig, SearchConfig
from dashboard.rest import RestError
from dashboard.signed_in import BrowserDep
from dashboard.templating import render
from optimizer.registries.precisions import PRECISIONS
from optimizer.registries.quantization import CalibrationMethod, QuantizationMode
from optimizer.search.decision import Strategy
from optimizer.validation.tolerances import default_tolerances

__all__ = ["router"]

router = APIRouter()

_DATASETS_SHOWN = 500  # the API's largest page: the select lists at most this many


@router.get("/ui/models/{model_id}/new-job")
async def new_job_page(request: Request, browser: BrowserDep, model_id: uuid.UUID,
                       from_job: Annotated[str | None, Query(max_length=100)] = None) -> HTMLResponse:
    model = await browser.api.get(f"/v1/models/{model_id}")  # 404 page for another project's
    passes = await browser.api.get("/v1/passes")
    backends = await browser.api.get("/v1/backends")
    datasets = (await browser.api.get("/v1/datasets", {"limit": _DATASETS_SHOWN}))["items"]
    config: dict[str, Any] = JobConfig().model_dump(mode="json")
    source_job, source_problem = None, None
    if from_job:
        try:
            source_job = await browser.api.get(f"/v1/jobs/{from_job}")
        except RestError as err:
            if err.status_code not in (404, 422):
                raise
            source_problem = f"The form starts from the defaults: {err.detail}"
        else:
            config = _merged(config, source_job.get("config") or {})
    return render(
        request, browser, "new_job.html", active="models", model=model, passes=passes,
        backends=backends, precisions=_precision_choices(backends), taking=_taking(backends),
        datasets=datasets, config=config, source_job=source_job, source_problem=source_problem,
        quantization_modes=list(QuantizationMode), calibration_methods=list(CalibrationMethod),
        quantized_precisions=[str(p) for p, spec in PRECISIONS.items() if spec.quantizes],
        checked_passes=_checked_passes(config, passes),
        custom_passes=isinstance(config.get("passes"), list),
        dynamic_inputs=[t for t in model.get("inputs") or [] if _is_dynamic(t)],
        shapes={name: _dims(dims) for name, dims in (config.get("input_shapes") or {}).items()},
        profiles={name: {bound: _dims(profile.get(bound)) for bound in ("min", "opt", "max")}
                  for name, profile in (config.get("profiles") or {}).items()},
        ranges=config.get("input_ranges") or {},
        tolerance_defaults={p: _finite(default_tolerances(p).to_dict()) for p in PRECISIONS},
        strategies=list(Strategy), searching=config.get("search") is not None,
        search=_search_fields(config.get("search")),
    )


def _finite(limits: Mapping[str, float]) -> dict[str, float]:
    """The limits a field can show: an infinite one (int8's atol: elementwise error is not
    checked) is left out, so the field reads "not checked" and the page's JSON stays JSON."""
    return {name: value for name, value in limits.items() if math.isfinite(value)}


def _taking(backends: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The backends that take each backend-only option (/v1/backends' `options`): the form
    shows an option's fields only while one of them is chosen."""
    taking: dict[str, list[str]] = {}
    for described in backends:
        for option in described["options"]:
            taking.setdefault(option, []).append(described["name"])
    return taking


def _precision_choices(backends: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(value, text) per precision: "bf16 (TensorRT only)" where some backends lack it."""
    choices = []
    for precision in PRECISIONS:
        on = [b["label"] for b in backends if precision in b["precisions"]]
        only = f" ({', '.join(on)} only)" if len(on) < len(backends) else ""
        choices.append((str(precision), f"{precision}{only}"))
    return choices


def _merged(defaults: Mapping[str, Any], stored: Mapping[str, Any]) -> dict[str, Any]:
    """A job's stored config over the defaults, one level deep into the option groups
    (validation, benchmark, accuracy_budget), so a config stored before an option existed
    still fills every field."""
    merged = dict(defaults)
    for key, value in stored.items():
        if isinstance(value, Mapping) and isinstance(defaults.get(key), Mapping):
            merged[key] = {**defaults[key], **value}
        else:
            merged[key] = value
    return merged


def _search_fields(stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """The search fieldset's values: a search job's stored `search` over SearchConfig's
    defaults, whole seconds and milliseconds shown without ".0" (600, not 600.0)."""
    fields = {**SearchConfig().model_dump(mode="json"), **(stored or {})}
    for name in ("time_budget_s", "latency_budget_ms"):
        value = fields.get(name)
        if isinstance(value, float) and value.is_integer():
            fields[name] = int(value)
    return fields


def _checked_passes(config: Mapping[str, Any], passes: list[dict[str, Any]]) -> set[str]:
    """The passes the config runs: "all" is every pass not measured slower on its backend (the
    optimizer's own reading of "all"), "none" none, a list those it names."""
    selection, backend = config.get("passes", "all"), config.get("backend", JobConfig().backend)
    if selection == "all":
        return {p["name"] for p in passes if backend not in (p.get("off_by_default") or {})}
    if isinstance(selection, list):
        return {str(name) for name in selection}
    return set()


def _is_dynamic(tensor: Mapping[str, Any]) -> bool:
    return any(not isinstance(dim, int) for dim in tensor.get("shape") or [])


def _dims(dims: Any) -> str:
    """A shape as the form's text fields hold it: "1, 3, 224, 224"."""
    if not isinstance(dims, list):
        return ""
    return ", ".join(str(d) for d in dims)
