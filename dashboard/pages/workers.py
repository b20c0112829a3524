"""Workers: who is online, what each can run, and the TensorRT jobs waiting for a capable one.

Workers serve every project, but a page shows only this project's jobs: a worker's current job
is named when it is one of ours, and the waiting list holds our queued TensorRT jobs with the
reason the API recorded (`status_detail`: the GPU a job needs that no online worker has).
"""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from dashboard.rest import RestApi, RestError
from dashboard.signed_in import BrowserDep
from dashboard.templating import render
from optimizer.registries.backends import Backend

__all__ = ["router"]

router = APIRouter()

_WAITING_SHOWN = 50
# Running jobs are about as many as busy workers; past this many the page stops naming them
# rather than read every one.
_RUNNING_LOOKED_UP = 50


@router.get("/ui/workers")
async def workers_page(request: Request, browser: BrowserDep) -> HTMLResponse:
    workers = await browser.api.get("/v1/workers")
    waiting = await browser.api.get("/v1/jobs", {"status": "queued", "backend": Backend.TENSORRT,
                                                 "limit": _WAITING_SHOWN})
    return render(
        request, browser, "workers.html", active="workers",
        online=[w for w in workers if w["online"]], offline=[w for w in workers if not w["online"]],
        current=await _current_jobs(browser.api),
        waiting=waiting["items"], waiting_total=waiting["total"])


async def _current_jobs(api: RestApi) -> dict[str, dict[str, Any]]:
    """Worker name → the project's job it is running now."""
    running = await api.get("/v1/jobs", {"status": "running", "limit": _RUNNING_LOOKED_UP})
    current: dict[str, dict[str, Any]] = {}
    for job in running["items"]:
        worker = job["worker"] if "worker" in job else await _worker_of(api, job["id"])
        if worker:
            current[worker] = job
    return current


async def _worker_of(api: RestApi, job_id: str) -> str | None:
    """The worker named in the job's full document (the summary has none); None if the job
    ended and was deleted since the list was read."""
    try:
        job = await api.get(f"/v1/jobs/{job_id}")
    except RestError as err:
        if err.status_code != 404:
            raise
        return None
    worker = job.get("worker")
    return str(worker) if worker else None
