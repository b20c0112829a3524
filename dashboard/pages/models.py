"""The models page: uploaded models with their signature and jobs; upload; start a job."""

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from dashboard.signed_in import BrowserDep
from dashboard.templating import render

__all__ = ["router"]

router = APIRouter()


@router.get("/ui/models")
async def models_page(request: Request, browser: BrowserDep) -> HTMLResponse:
    page = await browser.api.get("/v1/models", {"limit": 50})
    return render(request, browser, "models.html", active="models", page=page)
