"""The datasets page: every uploaded dataset with its role and arrays, the upload drop zone with
its role, and a filter by role."""

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from dashboard.pages.models import PAGE_SIZE, pager_of
from dashboard.signed_in import BrowserDep
from dashboard.templating import render

__all__ = ["ROLES", "router"]

router = APIRouter()

# The API's DatasetRole values; the REST API refuses any other, so the page offers these only.
ROLES = ("validation", "calibration")


@router.get("/ui/datasets")
async def datasets_page(request: Request, browser: BrowserDep,
                        offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
                        role: Literal["calibration", "validation"] | None = None,
                        ) -> HTMLResponse:
    params: dict[str, str | int] = {"limit": PAGE_SIZE, "offset": offset}
    if role is not None:
        params["role"] = role
    page = await browser.api.get("/v1/datasets", params)
    return render(request, browser, "datasets.html", active="datasets", page=page,
                  pager=pager_of(page), roles=ROLES, role=role)
