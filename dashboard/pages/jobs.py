"""The jobs page: the project's jobs, newest first, filtered and paged by a plain GET form; one
job's row as a fragment (what jobs.js swaps in when the stream says the job changed); and the
job page's cancel form.

The filters go to GET /v1/jobs as they are: the API validates them and its 422 is shown as the
error page, so the page keeps no second copy of the rules.
"""

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from api.deps import SettingsDep
from core.db.models import JobStatus
from core.job_config import Backend
from dashboard.signed_in import BrowserDep, checked_form
from dashboard.templating import render

__all__ = ["PAGE_SIZE", "router"]

router = APIRouter()

PAGE_SIZE = 50  # rows a page shows; the stream keeps the first page at this many
_MODEL_CHOICES = 500  # the most models the filter lists (the API's largest page)
_FILTERS = ("status", "backend", "model_id", "q")

FilterParam = Annotated[str, Query(max_length=200)]


@router.get("/ui/jobs")
async def jobs_page(request: Request, browser: BrowserDep, status: FilterParam = "",
                    backend: FilterParam = "", model_id: FilterParam = "", q: FilterParam = "",
                    offset: Annotated[int, Query(ge=0, le=10**9)] = 0) -> HTMLResponse:
    filters = {"status": status.strip(), "backend": backend.strip(),
               "model_id": model_id.strip(), "q": q.strip()}
    # jobs.js follows the stream from the moment the list was read: no change falls between
    read_at = datetime.now(UTC)
    page = await browser.api.get("/v1/jobs", {**filters, "limit": PAGE_SIZE, "offset": offset})
    models = await browser.api.get("/v1/models", {"limit": _MODEL_CHOICES})
    return render(
        request, browser, "jobs.html", active="jobs", page=page, filters=filters,
        filtered=any(filters.values()), statuses=[s.value for s in JobStatus],
        backends=list(Backend), models=_model_choices(models["items"], filters["model_id"]),
        prev_url=_page_url(filters, offset - PAGE_SIZE) if offset > 0 else None,
        next_url=(_page_url(filters, offset + PAGE_SIZE)
                  if offset + PAGE_SIZE < page["total"] else None),
        first_url=_page_url(filters, 0), stream_since=read_at.isoformat())


@router.get("/ui/jobs/{job_id}/row")
async def job_row(request: Request, browser: BrowserDep, job_id: uuid.UUID) -> HTMLResponse:
    """The job's `<tr>` as the jobs page renders it (jobs_row.html, the one rendering path)."""
    job = await browser.api.get(f"/v1/jobs/{job_id}")
    return render(request, browser, "jobs_row.html", job=job)


@router.post("/ui/jobs/{job_id}/cancel")
async def cancel_job(request: Request, browser: BrowserDep, settings: SettingsDep,
                     job_id: uuid.UUID) -> RedirectResponse:
    """The job page's cancel form: cancel through the API, then back to the job's page. A job
    that has already ended is the API's 409, shown as the error page."""
    await checked_form(request, browser, settings)
    await browser.api.post(f"/v1/jobs/{job_id}/cancel")
    return RedirectResponse(f"/ui/jobs/{job_id}", status_code=303)


def _page_url(filters: dict[str, str], offset: int) -> str:
    """/ui/jobs with the same filters at `offset` (the first page carries no offset)."""
    params = {name: filters[name] for name in _FILTERS if filters[name]}
    if offset > 0:
        params["offset"] = str(offset)
    return "/ui/jobs" + ("?" + urlencode(params) if params else "")


def _model_choices(models: list[dict[str, Any]], selected: str) -> list[dict[str, str]]:
    """The model filter's options: the project's models, and the one in the query even when
    it is past the first page of models (it is then named by its id)."""
    choices = [{"id": str(m["id"]), "label": f"{m['name']} · {str(m['id'])[:8]}"} for m in models]
    if selected and all(c["id"] != selected for c in choices):
        choices.insert(0, {"id": selected, "label": f"model {selected[:8]}"})
    return choices
