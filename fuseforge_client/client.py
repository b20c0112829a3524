"""FuseForgeClient: upload a model, start a job, wait for it, download what it made, cancel it,
delete what is no longer needed.

    from fuseforge_client import FuseForgeClient

    with FuseForgeClient("http://fuseforge:8000", api_key="...") as client:
        model = client.upload_model("model.onnx")
        job = client.submit_job(model.id, backend="onnxruntime", precision="fp16")
        job = client.wait(job.id, timeout_s=1800, on_progress=lambda j: print(j.stage, j.progress))
        client.download_artifacts(job, "engine/")
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import httpx

from fuseforge_client.errors import (
    ConnectionFailedError,
    DownloadError,
    JobCancelledError,
    JobFailedError,
    JobTimeoutError,
    NotFoundError,
    ServiceUnavailableError,
    ValidationFailedError,
)
from fuseforge_client.model_archive import ArchiveBody
from fuseforge_client.resources import Dataset, Job, JobPage, Model
from fuseforge_client.resumable import RESUMABLE_FROM_BYTES, send_resumable
from fuseforge_client.retry import RetryPolicy
from fuseforge_client.session import ApiSession
from fuseforge_client.uploads import ProgressReader, UploadProgress

__all__ = ["DEFAULT_URL", "FuseForgeClient", "JobProgress"]

DEFAULT_URL = "http://127.0.0.1:8000"
JobProgress = Callable[[Job], None]
_POLL_FIRST_S, _POLL_MAX_S = 0.25, 2.0
_CHUNK = 1 << 20
_PAGE = 500  # the most jobs GET /v1/jobs answers at once
_HEX = frozenset("0123456789abcdef")


class FuseForgeClient:
    """A synchronous client of one FuseForge server.

    `base_url` defaults to FUSEFORGE_URL (else http://127.0.0.1:8000) and `api_key` to
    FUSEFORGE_API_KEY; a key is sent as `Authorization: Bearer <key>`. `timeout_s` bounds each
    HTTP read (not `wait`). Failed requests are retried per `retry` (see retry.py). Each
    upload and job submission sends one Idempotency-Key on all its tries, which FuseForge
    honours (a repeat gets the first answer, nothing is made twice), so `idempotent_posts=True`
    (the default) retries them like GETs; `idempotent_posts=False` retries a POST only when it
    cannot have been processed, for a server older than Idempotency-Key. Every error is a
    `FuseForgeError` (errors.py); a conflict on the key is an `IdempotencyConflictError`.
    """

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *,
                 timeout_s: float = 60.0, retry: RetryPolicy | None = None,
                 idempotent_posts: bool = True, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        url = base_url or os.environ.get("FUSEFORGE_URL") or DEFAULT_URL
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"FuseForge URL {url!r} needs a scheme, e.g. http://{url}")
        key = api_key if api_key is not None else os.environ.get("FUSEFORGE_API_KEY")
        self._sleep = sleep
        self._retry = retry or RetryPolicy()
        self._session = ApiSession(url, api_key=key, timeout_s=timeout_s, retry=self._retry,
                                   idempotent_posts=idempotent_posts, transport=transport,
                                   sleep=sleep)

    @property
    def base_url(self) -> str:
        return self._session.base_url

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> FuseForgeClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def check_access(self) -> None:
        """Make one small authenticated read (GET /v1/models?limit=1), so that a server that is
        down or a key it refuses shows before a long upload.

        Raises:
            ConnectionFailedError: no server answers at the URL.
            AuthenticationError: the server refused the key (or its absence).
        """
        self._session.request("GET", "/v1/models", params={"limit": 1})

    def upload_model(self, path: str | os.PathLike[str], *,
                     data_files: Sequence[str] = (),
                     on_progress: UploadProgress | None = None,
                     resumable: bool | None = None) -> Model:
        """Upload the .onnx file at `path`, streamed from disk; `on_progress(sent, total)` is
        called as bytes go out. The same bytes uploaded before return that model. A retry
        (after a lost answer) sends the whole file again with the same Idempotency-Key.

        `data_files`: the external data files the model's tensors name (their `location`s,
        relative to the .onnx file's folder); the model and those files are then sent as one
        tar, made as it is sent (model_archive.py), and the same set of files again returns
        that model. A .tar of them made beforehand may be given as `path` instead.

        `resumable` (default: for files over 64 MiB): send it in pieces over tus 1.0
        (resumable.py), resuming where the server got after a lost connection or an API
        restart, then make the model of it.

        Raises:
            ValueError: a data file's path is absolute or climbs out of the model's folder.
            OSError: a file cannot be opened.
            InvalidRequestError: the server refused the model (422: not ONNX, over a limit...).
            IdempotencyConflictError: the file changed between tries, or an earlier try is
                still being checked on the server after the retries.
        """
        model = Path(path)
        names = [model.name, *(_inside_folder(location) for location in data_files)]
        with contextlib.ExitStack() as opened:
            body: BinaryIO | ArchiveBody = (ArchiveBody(model.parent, names) if data_files
                                            else opened.enter_context(model.open("rb")))
            filename = f"{model.stem}.tar" if data_files else model.name
            reader = ProgressReader(body, on_progress)
            if resumable or (resumable is None and reader.total > RESUMABLE_FROM_BYTES):
                upload = send_resumable(self._session, reader, filename, sleep=self._sleep)
                return Model.from_json(self._session.request(
                    "POST", "/v1/models", params={"upload_id": upload},
                    idempotency_key=True).json())
            return Model.from_json(self._send("/v1/models", filename, body, on_progress))

    def upload_dataset(self, path: str | os.PathLike[str], *,
                       on_progress: UploadProgress | None = None,
                       role: str = "validation") -> Dataset:
        """Upload an .npz dataset (one array per model input) as a `role` ("validation" judges
        engines, "calibration" sets an int8 job's scales); see upload_model."""
        return Dataset.from_json(self._upload("/v1/datasets", Path(path), on_progress,
                                              params={"role": role}))

    def submit_job(self, model_id: str, config: Mapping[str, Any] | None = None,
                   **fields: Any) -> Job:
        """Start a job on `model_id`: `config` (a job body without model_id, as in a
        job.json) updated by `fields` (e.g. backend="tensorrt", precision="fp16"). Its retries
        carry one Idempotency-Key, so a lost answer never starts a second job.

        Raises:
            InvalidRequestError: 422, the config is invalid; its detail names the field.
            NotFoundError: no such model.
            IdempotencyConflictError: an earlier try is still being processed on the server
                after the retries (look for the job before submitting again).
        """
        body = {**(config or {}), **fields, "model_id": str(model_id)}
        response = self._session.request("POST", "/v1/jobs", json=body, idempotency_key=True)
        return Job.from_json(response.json())

    def job_fields(self) -> frozenset[str] | None:
        """The top-level fields a job body may have on this server (its OpenAPI schema's
        JobCreate), so a caller can refuse a misspelt option before a long upload; None when
        the server publishes no schema."""
        try:
            schema = self._session.request("GET", "/openapi.json").json()
            properties = schema["components"]["schemas"]["JobCreate"]["properties"]
        except (NotFoundError, KeyError, TypeError, ValueError):
            return None
        return frozenset(properties)

    def get_job(self, job_id: str) -> Job:
        """The job as it is now. Raises NotFoundError for an unknown id."""
        return Job.from_json(self._session.request("GET", f"/v1/jobs/{job_id}").json())

    def list_jobs(self, *, status: str | None = None, model_name: str | None = None,
                  model_id: str | None = None, backend: str | None = None, limit: int = 50,
                  offset: int = 0) -> JobPage:
        """A page of the project's jobs, newest first: those with `status`, on the model
        `model_id`, on `backend`, or whose model's name contains `model_name`
        (case-insensitive). `limit` is at most 500.

        Raises:
            InvalidRequestError: 422, a filter's value is not one the server knows.
        """
        params: dict[str, str | int] = {"limit": limit, "offset": offset}
        for key, value in (("status", status), ("q", model_name), ("model_id", model_id),
                           ("backend", backend)):
            if value is not None:
                params[key] = value
        return JobPage.from_json(self._session.request("GET", "/v1/jobs", params=params).json())

    def find_job(self, id_or_prefix: str) -> Job:
        """The job whose id is `id_or_prefix`, or the one job whose id starts with it (at
        least 4 characters, as `fuseforge jobs list` shows them, dashes optional).

        Raises:
            NotFoundError: no job's id starts with it (error "JobNotFound").
            ValueError: it is no id prefix, or several jobs' ids start with it (the message
                names them).
        """
        text = id_or_prefix.strip().lower()
        if _is_uuid(text):
            return self.get_job(text)
        prefix = text.replace("-", "")
        if len(prefix) < 4 or not set(prefix) <= _HEX or len(prefix) > 32:
            raise ValueError(
                f"{id_or_prefix!r} is not a job id: give the id, or its first characters (at "
                "least 4 hex digits) as `fuseforge jobs list` shows them")
        matches: list[Job] = []
        offset = 0
        while True:
            page = self.list_jobs(limit=_PAGE, offset=offset)
            matches += [job for job in page.items if job.id.replace("-", "").startswith(prefix)]
            offset += len(page.items)
            if len(matches) > 1 or not page.items or offset >= page.total:
                break
        if not matches:
            raise NotFoundError(f"no job's id starts with {id_or_prefix!r} in this project; "
                                "`fuseforge jobs list` shows its jobs", error="JobNotFound",
                                status_code=404, method="GET", path="/v1/jobs")
        if len(matches) > 1:
            raise ValueError(
                f"several jobs' ids start with {id_or_prefix!r} ({', '.join(j.id for j in matches)}"
                f"{', ...' if offset < page.total else ''}); give more of the id")
        return self.get_job(matches[0].id)

    def cancel(self, job_id: str) -> Job:
        """Cancel a queued or running job. Raises ConflictError once it has finished."""
        return Job.from_json(self._session.request("POST", f"/v1/jobs/{job_id}/cancel").json())

    def delete_job(self, job_id: str) -> None:
        """Delete a finished job with its artifacts, records and events.

        Raises:
            ConflictError: it is queued or running; `cancel` it first.
            NotFoundError: no such job.
        """
        self._session.request("DELETE", f"/v1/jobs/{job_id}")

    def delete_model(self, model_id: str) -> None:
        """Delete a model with all its jobs and everything they made.

        Raises:
            ConflictError: some of its jobs are queued or running (the detail names them).
            NotFoundError: no such model.
        """
        self._session.request("DELETE", f"/v1/models/{model_id}")

    def delete_dataset(self, dataset_id: str) -> None:
        """Delete a dataset; finished jobs that used it keep their results.

        Raises:
            ConflictError: queued or running jobs validate on it (the detail names them).
            NotFoundError: no such dataset.
        """
        self._session.request("DELETE", f"/v1/datasets/{dataset_id}")

    def wait(self, job_id: str, *, timeout_s: float | None = 3600.0,
             on_progress: JobProgress | None = None, outage_s: float = 60.0) -> Job:
        """Poll the job until it finishes (every 0.25 s, backing off to 2 s while nothing
        changes) and return it once it has succeeded. `on_progress(job)` is called with the
        first reading and whenever its status, stage or progress changes. The server may be
        unreachable or unavailable for up to `outage_s` at a time (an API restart) while the
        job runs on; a longer outage raises ConnectionFailedError or ServiceUnavailableError.

        Raises:
            ValidationFailedError: it failed validation (its outputs were outside tolerance).
            JobFailedError: it failed otherwise (`.error` is the job's error code).
            JobCancelledError: it was cancelled.
            JobTimeoutError: `timeout_s` passed first (the job goes on; None waits forever).
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        seen: tuple[str, str | None, float] | None = None
        interval = _POLL_FIRST_S
        last_answer = time.monotonic()
        while True:
            try:
                job = self.get_job(job_id)
            except (ConnectionFailedError, ServiceUnavailableError):
                now = time.monotonic()
                if now - last_answer > outage_s or (deadline is not None and now >= deadline):
                    raise
                self._sleep(_POLL_MAX_S)
                continue
            last_answer = time.monotonic()
            state = (job.status, job.stage, job.progress)
            if state != seen:
                seen, interval = state, _POLL_FIRST_S
                if on_progress is not None:
                    on_progress(job)
            if job.finished:
                return _succeeded(job)
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise JobTimeoutError(
                    f"job {job.id} is still {job.status} (stage {job.stage or 'none'}, "
                    f"{job.progress:.0%}) after {timeout_s:g} s; it goes on: wait again or "
                    f"cancel it (POST /v1/jobs/{job.id}/cancel)", job=job)
            self._sleep(interval if remaining is None else min(interval, remaining))
            interval = min(interval * 2, _POLL_MAX_S)

    def download_artifacts(self, job: Job | str, directory: str | os.PathLike[str], *,
                           names: Iterable[str] | None = None) -> list[Path]:
        """Download the job's artifacts (those in `names`, default all) into `directory`
        (created if missing), each checked against its sha256; returns their paths.

        Raises:
            NotFoundError: an artifact in `names` that the job does not have.
            DownloadError: a file's bytes do not match the sha256 the server recorded.
        """
        if isinstance(job, str):
            job = self.get_job(job)
        wanted = None if names is None else set(names)
        artifacts = [a for a in job.artifacts if wanted is None or a.name in wanted]
        missing = (wanted or set()) - {a.name for a in artifacts}
        if missing:
            raise NotFoundError(
                f"job {job.id} has no artifact {', '.join(sorted(missing))}; it has "
                f"{', '.join(a.name for a in job.artifacts) or 'none'}", error="ArtifactNotFound",
                status_code=404)
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        return [self._download(job.id, a.name, a.url, a.sha256, target) for a in artifacts]

    def download_archive(self, job_id: str, path: str | os.PathLike[str]) -> Path:
        """Download every kept artifact of the job as one tar (GET /v1/jobs/{id}/artifacts.tar)
        to the file `path`. The bytes go to a temporary file beside it, renamed over `path`
        only once the whole tar has arrived: an error answer never replaces a good file.

        Raises:
            NotFoundError: no such job, or it has no artifacts (it has not succeeded).
            ConnectionFailedError: the connection broke during the download.
        """
        final = Path(path)
        partial = final.with_name(f".{final.name}.part")
        response = self._session.request("GET", f"/v1/jobs/{job_id}/artifacts.tar", stream=True)
        try:
            with partial.open("wb") as out:
                for chunk in response.iter_bytes(_CHUNK):
                    out.write(chunk)
        except httpx.TransportError as err:
            partial.unlink(missing_ok=True)
            raise ConnectionFailedError(
                f"the artifacts of job {job_id}: the connection broke during the download "
                f"({type(err).__name__}); try again", error="ConnectionFailed") from err
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        finally:
            response.close()
        partial.replace(final)
        return final

    def _upload(self, path: str, file: Path, on_progress: UploadProgress | None,
                params: Mapping[str, str] | None = None) -> Any:
        with file.open("rb") as raw:
            return self._send(path, file.name, raw, on_progress, params)

    def _send(self, path: str, filename: str, body: BinaryIO | ArchiveBody,
              on_progress: UploadProgress | None,
              params: Mapping[str, str] | None = None) -> Any:
        reader = ProgressReader(body, on_progress)
        response = self._session.request(
            "POST", path, files={"file": (filename, reader, "application/octet-stream")},
            idempotency_key=True, params=dict(params or {}))
        return response.json()

    def _download(self, job_id: str, name: str, url: str, sha256: str, target: Path) -> Path:
        if Path(name).name != name or name in ("", ".", ".."):  # a name, never a path
            raise DownloadError(f"job {job_id} lists an artifact named {name!r}, which is not a "
                                "plain file name; refusing to write it", error="BadArtifactName")
        final = target / name
        partial = target / f".{name}.part"
        attempt = 0
        while True:  # a connection lost mid-body starts the file again (a GET is safe to repeat)
            attempt += 1
            digest = hashlib.sha256()
            response = self._session.request("GET", url, stream=True, to_store=True)
            try:
                with partial.open("wb") as out:
                    for chunk in response.iter_bytes(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                break
            except httpx.TransportError as err:
                if attempt >= self._retry.attempts:
                    partial.unlink(missing_ok=True)
                    raise ConnectionFailedError(
                        f"artifact {name} of job {job_id}: the connection broke during the "
                        f"download ({type(err).__name__}) {attempt} times; try again later",
                        error="ConnectionFailed") from err
                self._sleep(self._retry.delay_s(attempt))
            finally:
                response.close()
        if digest.hexdigest() != sha256:
            partial.unlink(missing_ok=True)
            raise DownloadError(f"artifact {name} of job {job_id} arrived with sha256 "
                                f"{digest.hexdigest()}, not the recorded {sha256}; download it "
                                "again", error="ChecksumMismatch")
        partial.replace(final)  # the file appears only whole
        return final


def _inside_folder(location: str) -> str:
    """`location` as a path inside the model's folder ("/" between folders)."""
    unified = location.replace("\\", "/")
    normalized = posixpath.normpath(unified) if unified else ""
    if (not normalized or unified.startswith("/") or (len(unified) > 1 and unified[1] == ":")
            or normalized == ".." or normalized.startswith("../")):
        raise ValueError(f"data file {location!r} is not a path inside the model's folder; "
                         "an external data location is relative, without '..'")
    return normalized


def _is_uuid(text: str) -> bool:
    parts = text.split("-")
    return ([len(part) for part in parts] == [8, 4, 4, 4, 12]
            and set("".join(parts)) <= _HEX)


def _succeeded(job: Job) -> Job:
    """`job` if it succeeded; the JobError for how it ended otherwise."""
    if job.status == "succeeded":
        return job
    if job.status == "cancelled":
        raise JobCancelledError(f"job {job.id} was cancelled", job=job)
    cls = ValidationFailedError if job.failed_validation else JobFailedError
    raise cls(job.error_message or f"job {job.id} failed without an error message", job=job,
              error=job.error_code)
