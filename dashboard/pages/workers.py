"""Workers: who is online, what each can run, and the TensorRT jobs waiting for a capable one."""

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from dashboard.signed_in import BrowserDep
from dashboard.templating import render

__all__ = ["router"]

router = APIRouter()


@router.get("/ui/workers")
async def workers_page(request: Request, browser: BrowserDep) -> HTMLResponse:
    workers = await browser.api.get("/v1/workers")
    return render(request, browser, "workers.html", active="workers", workers=workers)
