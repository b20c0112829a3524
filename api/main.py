"""The FastAPI application: routers, request ids, the request body deadline, and the one place
errors become JSON."""

import logging
import uuid
from collections.abc import Mapping
from typing import Any

import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from api.http.body_deadline import BodyDeadline
from api.http.docs import serve_docs
from api.http.json_depth import MAX_JSON_DEPTH, too_deep_path
from api.http.lazy_app import app_on_first_use
from api.http.openapi_errors import document_errors
from api.http.openapi_examples import keep_example_nulls
from api.http.request_ids import REQUEST_ID_HEADER, RequestIds
from api.routes import (
    backends,
    datasets,
    health,
    jobs,
    metrics,
    models,
    passes,
    plugins,
    projects,
    uploads,
    workers,
)
from api.services.errors import (
    ArtifactStoreDown,
    DatabaseUnavailable,
    MalformedRequest,
    ServiceError,
)
from api.services.health import HealthCache
from api.services.jobs.documents import JobDocumentCache
from api.services.metrics import ServiceMetrics
from api.services.uploads.model_checks import ModelChecker
from api.services.verified_keys import VerifiedKeys
from core.artifact_refs import ArtifactStoreUnavailable
from core.db.outage import is_database_outage
from core.job_config import JOB_CONFIG_ERROR
from core.logging_setup import request_id_var
from core.plugins import load_plugins
from core.settings import Settings, get_settings

__all__ = ["app", "create_app"]

logger = logging.getLogger(__name__)


def _field_path(location: tuple[object, ...]) -> str:
    # ("body", "validation", "samples") → "validation.samples"; the request part is noise.
    parts = [str(p) for p in location if p not in ("body", "query", "path")]
    return ".".join(parts) or "request"


async def _service_error(_: Request, err: Exception) -> JSONResponse:
    assert isinstance(err, ServiceError)
    return JSONResponse({"error": type(err).__name__, "detail": str(err)}, err.status_code,
                        headers=dict(err.headers))


async def _internal_error(request: Request, err: Exception) -> JSONResponse:
    """Any other exception: a bug or a fault we did not foresee. The client gets the API's JSON
    shape and a reference to quote; the log gets the traceback under that reference. The
    exception's own text stays in the log, since it may carry internals (URLs, paths, SQL)."""
    reference = uuid.uuid4().hex[:12]
    logger.error("internal error %s on %s %s", reference, request.method, request.url.path,
                 exc_info=err)
    detail = (f"FuseForge failed on {request.method} {request.url.path} with an internal error "
              f"({type(err).__name__}); the server log has its traceback under reference "
              f"{reference}. Please report it with that reference.")
    # Starlette answers a 500 outside the middleware that adds the request id: say it here.
    request_id = request_id_var.get()
    headers = {REQUEST_ID_HEADER: request_id} if request_id else None
    return JSONResponse({"error": "InternalError", "detail": detail}, 500, headers=headers)


async def _database_error(request: Request, err: Exception) -> JSONResponse:
    """503 with Retry-After when the database is unreachable (or out of connections); any
    other database error is a fault of ours (500)."""
    if not is_database_outage(err):
        return await _internal_error(request, err)
    logger.warning("database unavailable on %s %s: %s", request.method, request.url.path, err)
    return await _service_error(request, DatabaseUnavailable(
        f"{request.method} {request.url.path} needs the database, which is unavailable right "
        f"now; retry in {DatabaseUnavailable.retry_after_s} s (GET /healthz says when it is "
        "reachable again)"))


async def _store_error(request: Request, err: Exception) -> JSONResponse:
    """503 with Retry-After: the artifact store did not answer. What the request stored so far
    is gone with it (a multipart upload the store never completed is not an object)."""
    logger.warning("artifact store unavailable on %s %s: %s", request.method, request.url.path,
                   err)
    return await _service_error(request, ArtifactStoreDown(
        f"{request.method} {request.url.path} needs the artifact store, which is unavailable "
        f"right now ({err}); nothing was stored: retry in {ArtifactStoreDown.retry_after_s} s "
        "(GET /healthz says when it is reachable again)"))


def _problem(error: Mapping[str, Any]) -> str:
    if error["type"] == JOB_CONFIG_ERROR:  # a rule between fields: its message names the field
        return str(error["msg"])
    if error["type"] == "json_invalid":  # its loc is ("body", character offset)
        return (f"the body is not valid JSON: {error.get('ctx', {}).get('error', error['msg'])} "
                f"at character {error['loc'][-1]}")
    return f"{_field_path(tuple(error['loc']))}: {error['msg']}"


async def _validation_error(_: Request, err: Exception) -> JSONResponse:
    assert isinstance(err, RequestValidationError)
    problems = [_problem(e) for e in err.errors()]
    return JSONResponse({"error": "ValidationError", "detail": "; ".join(problems)}, 422)


async def _http_error(request: Request, err: Exception) -> JSONResponse:
    assert isinstance(err, HTTPException)
    cause = err.__cause__
    if isinstance(cause, ServiceError):  # raised while FastAPI read the body, which wraps it
        return await _service_error(request, cause)
    if err.status_code == 400 and isinstance(cause, RecursionError):  # valid, but too deep
        return await _too_deep(request)
    if err.status_code == 400 and cause is not None:  # FastAPI could not parse the JSON body
        return await _service_error(request, MalformedRequest(_unparsable_body(cause)))
    name = {404: "NotFound", 405: "MethodNotAllowed"}.get(err.status_code, "HTTPError")
    return JSONResponse({"error": name, "detail": str(err.detail)}, err.status_code)


async def _too_deep(request: Request) -> JSONResponse:
    """A JSON body nested deeper than the parser follows: well-formed, with an invalid value,
    so a 422 naming the field where it nests too deep (json_depth.py finds it)."""
    path = too_deep_path(await request.body())
    field = _field_path(tuple(path)) if path else "request"
    return JSONResponse({"error": "ValidationError", "detail": (
        f"{field}: nested more than {MAX_JSON_DEPTH} levels deep; a job body nests a few "
        "levels (GET /docs has its schema)")}, 422)


def _unparsable_body(cause: BaseException) -> str:
    return f"the request body could not be parsed ({type(cause).__name__}: {cause})"


def create_app(settings: Settings | None = None) -> FastAPI:
    """The app. `settings` (default: get_settings()) fix what is set up once, at start: the
    request body deadline, the job, health and verified-key caches, the upload model checker
    and whether GET /metrics is served. Requests read their settings through SettingsDep."""
    settings = settings or get_settings()
    load_plugins(settings.plugins)  # before the first job config is read
    app = FastAPI(
        title="FuseForge",
        summary="Upload ONNX models; get fused, validated and benchmarked inference engines.",
        version="0.1.0",
        docs_url=None,  # served by api/http/docs.py with local assets
        redoc_url=None,
    )
    serve_docs(app)
    document_errors(app)
    keep_example_nulls(app)
    app.state.job_cache = JobDocumentCache(fresh_s=settings.http.read_cache_s)
    app.state.health_cache = HealthCache(fresh_s=settings.http.health_cache_s)
    app.state.verified_keys = VerifiedKeys(fresh_s=settings.auth.key_cache_s)
    app.state.model_checker = ModelChecker(settings.model_check)
    app.state.metrics = ServiceMetrics(settings.metrics)
    app.add_middleware(BodyDeadline, idle_timeout_s=settings.http.body_idle_timeout_s,
                       min_rate_bytes_s=settings.http.body_min_rate_bytes_s)
    app.add_middleware(RequestIds)  # added last: outermost, so the body deadline's lines carry it
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(sqlalchemy.exc.SQLAlchemyError, _database_error)
    app.add_exception_handler(ArtifactStoreUnavailable, _store_error)
    app.add_exception_handler(Exception, _internal_error)  # Starlette's last resort: 500
    for router in (
        models.router, datasets.router, jobs.router, projects.router, passes.router,
        backends.router, plugins.router, workers.router, health.router, uploads.router,
    ):
        app.include_router(router)
    if settings.metrics.enabled:
        app.include_router(metrics.router)
    return app


app: FastAPI  # built on first use (uvicorn's "api.main:app"), so importing create_app builds none
__getattr__ = app_on_first_use(__name__, create_app)
