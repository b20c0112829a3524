"""The dashboard's pages, one module each, under /ui; `/` leads to the jobs page."""

from fastapi import APIRouter
from fastapi.responses import RedirectResponse

from dashboard.pages import (
    compare,
    datasets,
    job_detail,
    jobs,
    models,
    new_job,
    sign_in,
    workers,
)

__all__ = ["router"]

router = APIRouter(include_in_schema=False)  # pages, not API: kept out of /openapi.json


@router.get("/")
async def home() -> RedirectResponse:
    return RedirectResponse("/ui/jobs", status_code=303)


for page in (sign_in, jobs, job_detail, models, datasets, new_job, compare, workers):
    router.include_router(page.router)
