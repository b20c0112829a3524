"""The models pages: every uploaded model with its signature and jobs (and the upload drop zone),
and one model with its signature tables and its jobs."""

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from dashboard.signed_in import BrowserDep
from dashboard.templating import render

__all__ = ["PAGE_SIZE", "pager_of", "router"]

router = APIRouter()

PAGE_SIZE = 50  # rows per page


@router.get("/ui/models")
async def models_page(request: Request, browser: BrowserDep,
                      offset: Annotated[int, Query(ge=0, le=10**9)] = 0) -> HTMLResponse:
    page = await browser.api.get("/v1/models", {"limit": PAGE_SIZE, "offset": offset})
    counts = {model["id"]: model.get("job_count") or 0 for model in page["items"]}
    return render(request, browser, "models.html", active="models", page=page,
                  job_counts=counts, pager=pager_of(page))


@router.get("/ui/models/{model_id}")
async def model_page(request: Request, browser: BrowserDep, model_id: uuid.UUID) -> HTMLResponse:
    model = await browser.api.get(f"/v1/models/{model_id}")  # 404 page for another project's
    jobs = await browser.api.get("/v1/jobs", {"model_id": str(model_id), "limit": PAGE_SIZE})
    history = await browser.api.get(f"/v1/models/{model_id}/benchmarks", {"limit": 10})
    return render(request, browser, "model.html", active="models", model=model, jobs=jobs,
                  history=history)


def pager_of(page: dict[str, Any]) -> dict[str, int | None]:
    """Offsets of the previous and next pages (None at either end)."""
    offset, limit, total = page["offset"], page["limit"], page["total"]
    return {"prev": max(offset - limit, 0) if offset > 0 else None,
            "next": offset + limit if offset + limit < total else None,
            "first": offset + 1 if total else 0, "last": min(offset + limit, total)}
