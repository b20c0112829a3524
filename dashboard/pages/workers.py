"""Workers: who is online, what each can run, and the jobs waiting for a capable one.

Workers serve every project, but a page shows only this project's jobs: a worker's current job
is named when it is one of ours, and the waiting list holds our queued jobs on the backends only
some hosts run (a spec with a `host_check`: TensorRT's need a GPU) with the reason the API
recorded (`status_detail`: e.g. the GPU a job needs that no online worker has).
"""

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from dashboard.rest import RestApi, RestError
from dashboard.signed_in import BrowserDep
from dashboard.templating import render
from optimizer.registries.backends import BACKENDS, BackendSpec

__all__ = ["router"]

router = APIRouter()

_WAITING_SHOWN = 50
# Running jobs are about as many as busy workers; past this many the page stops naming them
# rather than read every one.
_RUNNING_LOOKED_UP = 50


@router.get("/ui/workers")
async def workers_page(request: Request, browser: BrowserDep) -> HTMLResponse:
    workers = await browser.api.get("/v1/workers")
    waiting, more = await _waiting_jobs(browser.api)
    return render(
        request, browser, "workers.html", active="workers",
        online=[w for w in workers if w["online"]], offline=[w for w in workers if not w["online"]],
        current=await _current_jobs(browser.api), waiting=waiting, waiting_more=more,
        waiting_label=" or ".join(spec.label for spec in _host_bound()))


def _host_bound() -> list[BackendSpec]:
    """The backends whose jobs wait for a host that can run them (not every worker can)."""
    return [spec for spec in BACKENDS.values() if spec.host_check is not None]


async def _waiting_jobs(api: RestApi) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Our queued jobs on host-bound backends, oldest first (at most _WAITING_SHOWN), and for
    each backend with more queued than shown: its name, label and total."""
    pages = [(spec, await api.get("/v1/jobs", {"status": "queued", "backend": str(spec.name),
                                                "limit": _WAITING_SHOWN}))
             for spec in _host_bound()]
    jobs = sorted((job for _, page in pages for job in page["items"]),
                  key=lambda job: str(job["created_at"]))[:_WAITING_SHOWN]
    more = [{"backend": str(spec.name), "label": spec.label, "total": page["total"]}
            for spec, page in pages
            if page["total"] > sum(job["backend"] == spec.name for job in jobs)]
    return jobs, more


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
