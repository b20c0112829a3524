"""Compare: two or more jobs of one model side by side, to pick the engine to ship."""

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from dashboard.signed_in import BrowserDep
from dashboard.templating import render

__all__ = ["router"]

router = APIRouter()


@router.get("/ui/compare")
async def compare_page(request: Request, browser: BrowserDep,
                       job: Annotated[list[str] | None, Query(max_length=20)] = None) -> HTMLResponse:
    jobs = [await browser.api.get(f"/v1/jobs/{job_id}") for job_id in (job or [])]
    return render(request, browser, "compare.html", active="compare", jobs=jobs)
