"""Run corpus models as real FuseForge jobs: `fuseforge run` (API + worker + janitor, embedded
defaults, a fresh data folder), then per model an HTTP upload, a job, its end, its engine.

A user meets a failure at one of three points, and JobOutcome says which: the upload is refused
(422 with the reason), the job is refused (422: a bad configuration), or the job fails in a
stage (`error.code`, `error.message`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from bench.corpus.catalog import CorpusModel
from bench.service.stack import free_port, fuseforge_env, start_fuseforge, stop, wait_healthy

__all__ = ["FuseForgeService", "JobOutcome"]

_FINAL = ("succeeded", "failed", "cancelled")


@dataclass
class JobOutcome:
    """How a model's job ended, and what it left to read."""

    status: str  # succeeded, failed, cancelled, upload refused, job refused, timed out
    error_code: str | None = None
    error_message: str | None = None
    job: dict[str, Any] = field(default_factory=dict)  # GET /v1/jobs/{id}
    engine_dir: Path | None = None  # engine.onnx + manifest.json, downloaded
    seconds: float = 0.0

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"


class FuseForgeService:
    """`fuseforge run` on a fresh data folder under `work_dir`, stopped on exit."""

    def __init__(self, work_dir: Path, job_timeout_s: float) -> None:
        self.work_dir = work_dir
        self.job_timeout_s = job_timeout_s
        port = free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        work_dir.mkdir(parents=True, exist_ok=True)
        self.log = work_dir / "fuseforge-run.log"
        self._process = start_fuseforge("run", fuseforge_env(work_dir / "data", port), self.log)
        self._client = httpx.Client(base_url=self.base_url, timeout=120)

    def __enter__(self) -> Self:
        try:
            wait_healthy(f"{self.base_url}/healthz", self._process)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()
        stop(self._process)

    def run_job(self, model: CorpusModel, path: Path) -> JobOutcome:
        """Upload `path`, submit `model`'s job, wait for its end and download its engine."""
        started = time.monotonic()
        outcome = self._run_job(model, path)
        outcome.seconds = time.monotonic() - started
        return outcome

    def _run_job(self, model: CorpusModel, path: Path) -> JobOutcome:
        with path.open("rb") as file:
            upload = self._client.post("/v1/models", files={"file": (path.name, file)},
                                       data={"name": model.name})
        if upload.status_code >= 400:
            return _refused("upload refused", upload)
        body = {"model_id": upload.json()["id"], **model.job_body()}
        submitted = self._client.post("/v1/jobs", json=body)
        if submitted.status_code >= 400:
            return _refused("job refused", submitted)
        job_id = submitted.json()["id"]
        job = self._wait(job_id)
        if job["status"] not in _FINAL:
            self._client.post(f"/v1/jobs/{job_id}/cancel")
            return JobOutcome("timed out", "Timeout",
                              f"still {job['status']} in stage {job['stage']} after "
                              f"{self.job_timeout_s:g} s; cancelled", job)
        error = job.get("error") or {}
        outcome = JobOutcome(job["status"], error.get("code"), error.get("message"), job)
        if outcome.succeeded:
            outcome.engine_dir = self._download_engine(job, model.name)
        return outcome

    def _wait(self, job_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.job_timeout_s
        while True:
            job: dict[str, Any] = self._client.get(f"/v1/jobs/{job_id}").json()
            if job["status"] in _FINAL or time.monotonic() > deadline:
                return job
            time.sleep(1.0)

    def _download_engine(self, job: dict[str, Any], name: str) -> Path | None:
        folder = self.work_dir / "engines" / name
        folder.mkdir(parents=True, exist_ok=True)
        wanted = {"engine.onnx", "manifest.json"}
        for artifact in job["artifacts"]:
            if artifact["name"] in wanted:
                response = self._client.get(artifact["url"])
                response.raise_for_status()
                (folder / artifact["name"]).write_bytes(response.content)
        have = {p.name for p in folder.iterdir()}
        return folder if wanted <= have else None


def _refused(status: str, response: httpx.Response) -> JobOutcome:
    try:
        body = response.json()
        code, detail = body.get("error", str(response.status_code)), body.get("detail", "")
    except ValueError:
        code, detail = str(response.status_code), response.text
    return JobOutcome(status, f"{response.status_code} {code}", str(detail))
