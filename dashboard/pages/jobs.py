"""The jobs page: every job of the project, newest first (filled out by the jobs-page work)."""

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from dashboard.signed_in import BrowserDep
from dashboard.templating import render

__all__ = ["router"]

router = APIRouter()


@router.get("/ui/jobs")
async def jobs_page(request: Request, browser: BrowserDep) -> HTMLResponse:
    page = await browser.api.get("/v1/jobs", {"limit": 50})
    return render(request, browser, "jobs.html", active="jobs", page=page)
