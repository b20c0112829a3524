"""One job: its stages, fusion report, validation, benchmarks, artifacts and events."""

import uuid

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from dashboard.signed_in import BrowserDep
from dashboard.templating import render

__all__ = ["router"]

router = APIRouter()


@router.get("/ui/jobs/{job_id}")
async def job_page(request: Request, browser: BrowserDep, job_id: uuid.UUID) -> HTMLResponse:
    job = await browser.api.get(f"/v1/jobs/{job_id}")
    return render(request, browser, "job_detail.html", active="jobs", job=job)
