"""The HTTP side of Idempotency-Key (api/services/idempotency.py) on POST /v1/models,
/v1/datasets and /v1/jobs: the header, read before the body; the JSON body's fingerprint; the
answer as a response, marked `Idempotent-Replayed: true` when it is a replay; and what the
three operations declare in OpenAPI.

No middleware: a route knows its body best. An upload is fingerprinted from what it streamed
to disk (never held in memory); a job body is small and already read by FastAPI.
"""

from collections.abc import Callable, Mapping
from typing import Annotated, Any

from fastapi import Depends, Header, Request, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.deps import CurrentProject
from api.schemas.common import ErrorBody
from api.services.idempotency import (
    MAX_KEY_LENGTH,
    Answer,
    IdempotentRequest,
    answer_once,
    checked_key,
    json_fingerprint,
    upload_fingerprint,
)
from api.services.uploads.receive import ReceivedFile
from core.settings import IdempotencySettings

__all__ = [
    "IDEMPOTENCY_KEY_HEADER",
    "REPLAYED_HEADER",
    "IdempotentRequestDep",
    "JsonFingerprintDep",
    "answer_response",
    "answer_upload",
    "idempotent_responses",
]

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"


async def get_idempotent_request(
    request: Request,
    project: CurrentProject,
    key: Annotated[str | None, Header(
        alias=IDEMPOTENCY_KEY_HEADER,
        description="Send the same value on every retry of one logical request (e.g. a uuid4): "
                    "a repeat with the same body gets the first success's answer again, with "
                    f"`{REPLAYED_HEADER}: true`, for 24 h by default, and creates nothing. Scoped to the "
                    "project and the route.",
        # Documented, not enforced by FastAPI: checked_key's 422 names the header.
        json_schema_extra={"minLength": 1, "maxLength": MAX_KEY_LENGTH, "pattern": "^[ -~]+$"},
    )] = None,
) -> IdempotentRequest | None:
    """The request's key in the caller's project and on its route; None without the header.

    Raises:
        InvalidIdempotencyKey: 422, a key that is empty, too long or not printable ASCII.
    """
    if key is None:
        return None
    route = request.scope.get("route")
    path = getattr(route, "path", None) or request.url.path
    return IdempotentRequest(project_id=project, route=f"{request.method} {path}",
                             key=checked_key(key))


IdempotentRequestDep = Annotated[IdempotentRequest | None, Depends(get_idempotent_request)]


async def get_json_fingerprint(request: Request) -> str:
    """The fingerprint of the JSON body (FastAPI has read it already: no second read)."""
    return json_fingerprint(await request.body())


JsonFingerprintDep = Annotated[str, Depends(get_json_fingerprint)]


def answer_response(answer: Answer) -> Response:
    headers = {REPLAYED_HEADER: "true"} if answer.replayed else None
    return Response(answer.body, answer.status_code, media_type="application/json",
                    headers=headers)


async def answer_upload(*, session: Session, request: IdempotentRequest | None,
                        received: ReceivedFile, settings: IdempotencySettings,
                        produce: Callable[[], Answer],
                        query: Mapping[str, str] | None = None) -> Response:
    """`produce` (which consumes `received`) once per key, on a worker thread; a replay or a
    refusal drops the received bytes instead, so a repeated upload keeps no second copy.
    `query`: the request's parameters that change the answer, part of its fingerprint."""
    try:
        answer = await run_in_threadpool(
            lambda: answer_once(session=session, request=request,
                                fingerprint=upload_fingerprint(received, query),
                                settings=settings,
                                produce=produce))
    finally:
        await run_in_threadpool(received.discard)
    return answer_response(answer)


_REPLAYED = {REPLAYED_HEADER: {
    "description": "`true` when this is the stored answer to an earlier request with the same "
                   "Idempotency-Key and body",
    "schema": {"type": "string", "enum": ["true"]},
}}


def idempotent_responses(successes: Mapping[int, str]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI responses of an idempotent POST: each success (status code: description) with
    the replay header, and the 409 of a key reused or still in progress."""
    responses: dict[int | str, dict[str, Any]] = {
        code: {"description": text, "headers": _REPLAYED} for code, text in successes.items()}
    responses[409] = {
        "model": ErrorBody,
        "description": "Idempotency-Key conflict: `IdempotencyKeyReused` (the key was first "
                       "sent with another body) or `IdempotencyKeyInProgress` (its first request "
                       "has not answered yet; retry after Retry-After)",
        "headers": {"Retry-After": {"description": "seconds to wait (IdempotencyKeyInProgress)",
                                    "schema": {"type": "integer"}}},
    }
    return responses
