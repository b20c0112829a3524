"""Idempotency-Key on the POSTs that create something: the first request with a key runs, a
repeat gets its answer again instead of a second model, dataset or job.

A key belongs to the caller's project and to the route ("POST /v1/jobs"): another project's
identical key, or the same key on another route, is another key. A repeat must carry the same
body (by its fingerprint, a SHA-256 made as the body arrives, see below), else it is refused
(409 IdempotencyKeyReused); one that arrives while the first still runs is refused too (409
IdempotencyKeyInProgress, with Retry-After), so of concurrent identical requests exactly one
runs.

Only a success is stored and replayed (as Stripe does for server errors, and here for client
errors too). A request that fails with any 4xx or 5xx created nothing usable: every service
here commits all or nothing, and the one exception, a job the broker refused, stays marked
failed. So its key is released and a repeat runs again, and may succeed where the first did
not (a model uploaded meanwhile, the broker back up). A request whose answer was lost on the
way (a network failure after it succeeded) is replayed. Requests the API refuses before they
run (a body that does not fit the schema, a bad key) never claim the key.
"""

import hashlib
import json
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.orm import Session

from api.services.errors import (
    IdempotencyKeyInProgress,
    IdempotencyKeyReused,
    InvalidIdempotencyKey,
)
from api.services.uploads.receive import ReceivedFile
from core.db import idempotency_keys
from core.settings import IdempotencySettings

__all__ = [
    "MAX_KEY_LENGTH",
    "Answer",
    "IdempotentRequest",
    "answer_once",
    "checked_key",
    "json_fingerprint",
    "upload_fingerprint",
]

logger = logging.getLogger(__name__)

MAX_KEY_LENGTH = 255
# A claim that loses the race to a row which is gone by the time it is read (released by a
# failed request, or purged) tries again; more than this many such losses in a row is traffic
# on the key that a later retry sorts out.
_CLAIM_TRIES = 3


@dataclass(frozen=True)
class IdempotentRequest:
    """Whose key it is: the caller's project, the route ("POST /v1/jobs") and the key itself."""

    project_id: uuid.UUID
    route: str
    key: str


@dataclass(frozen=True)
class Answer:
    """A route's successful answer: its status and JSON body, exactly as sent."""

    status_code: int
    body: bytes
    replayed: bool = False  # the first request's answer, given again


def checked_key(value: str) -> str:
    """`value` if it is a usable Idempotency-Key: 1 to 255 printable ASCII characters.

    Raises:
        InvalidIdempotencyKey: naming the header and what is wrong with the value.
    """
    if not 1 <= len(value) <= MAX_KEY_LENGTH:
        found = "is empty" if not value else f"has {len(value)} characters"
        raise InvalidIdempotencyKey(
            f"the Idempotency-Key header {found}; send 1 to {MAX_KEY_LENGTH} printable ASCII "
            "characters, e.g. a uuid4 per logical request")
    for position, char in enumerate(value):
        if not " " <= char <= "~":
            raise InvalidIdempotencyKey(
                f"the Idempotency-Key header holds {char!r} at position {position}, which is not "
                f"printable ASCII; send 1 to {MAX_KEY_LENGTH} printable ASCII characters, e.g. a "
                "uuid4 per logical request")
    return value


def json_fingerprint(body: bytes) -> str:
    """SHA-256 of a JSON body in canonical form (keys sorted, no spaces), so that a client
    re-serializing the same body differently is the same request; of the bytes themselves when
    they are not JSON (the route refuses such a body before the key is claimed)."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":"),
                               ensure_ascii=False).encode()
    except (ValueError, RecursionError):
        canonical = body
    return hashlib.sha256(canonical).hexdigest()


def upload_fingerprint(received: ReceivedFile, query: Mapping[str, str] | None = None) -> str:
    """SHA-256 of what an upload sends: the file (by its SHA-256, made while it streamed to
    disk), its filename, `name` and the query parameters that change the answer (a dataset's
    `role`). Not the raw multipart body: its boundary is random, and clients (httpx, curl)
    draw a new one on every try of the same upload."""
    described = json.dumps({"file_sha256": received.sha256, "size_bytes": received.size_bytes,
                            "filename": received.filename, "name": received.name,
                            **({"query": dict(query)} if query else {})},
                           sort_keys=True)
    return hashlib.sha256(described.encode()).hexdigest()


def answer_once(*, session: Session, request: IdempotentRequest | None, fingerprint: str,
                settings: IdempotencySettings, produce: Callable[[], Answer]) -> Answer:
    """`produce()` once per key: the first request with `request`'s key runs it and stores its
    answer; a repeat with the same `fingerprint` gets that answer back (`replayed`). Without a
    key (`request` None), `produce()` simply runs.

    Raises:
        IdempotencyKeyReused: the key was first used with a body of another fingerprint.
        IdempotencyKeyInProgress: the first request with the key has not answered yet.
        Whatever `produce` raises; the key is released first, so a repeat runs again.
    """
    if request is None:
        return produce()
    claimed = _claim_or_replay(session, request, fingerprint, settings)
    if isinstance(claimed, Answer):
        return claimed
    try:
        answer = produce()
    except BaseException:
        _release(session, claimed, request)
        raise
    if not idempotency_keys.record_answer(session, claimed, status_code=answer.status_code,
                                          body=answer.body.decode(),
                                          ttl=timedelta(seconds=settings.ttl_s)):
        logger.warning("the answer to %s with Idempotency-Key %r was not stored: the request "
                       "outlasted its lease of %g s (FUSEFORGE_IDEMPOTENCY__LEASE_S) and a "
                       "repeat took the key over", request.route, request.key, settings.lease_s)
    session.commit()
    return answer


def _claim_or_replay(session: Session, request: IdempotentRequest, fingerprint: str,
                     settings: IdempotencySettings) -> uuid.UUID | Answer:
    """The id of the row this request claimed, or the stored answer to replay."""
    for _ in range(_CLAIM_TRIES):
        claimed = idempotency_keys.claim(
            session, project_id=request.project_id, route=request.route, key=request.key,
            fingerprint=fingerprint, lease=timedelta(seconds=settings.lease_s))
        session.commit()  # the claim must be seen by concurrent requests before this one runs
        if claimed is not None:
            return claimed
        row = idempotency_keys.held(session, project_id=request.project_id,
                                    route=request.route, key=request.key)
        if row is None:
            continue  # released (its request failed) or purged since the claim: try again
        if row.fingerprint != fingerprint:
            raise IdempotencyKeyReused(
                f"Idempotency-Key {request.key!r} was first sent to {request.route} with another "
                "request body (for an upload: another file, filename or name); a key stands for "
                "one request: send a new key for a new request")
        if row.status_code is None or row.response_body is None:
            break
        return Answer(row.status_code, row.response_body.encode(), replayed=True)
    raise IdempotencyKeyInProgress(
        f"a request with this Idempotency-Key ({request.key!r}) is still being processed; "
        f"retry later (in {IdempotencyKeyInProgress.retry_after_s} s): once it has answered, "
        "a repeat gets its answer")


def _release(session: Session, row_id: uuid.UUID, request: IdempotentRequest) -> None:
    """Let the key go after its request failed; the request's own error is what the client
    must see, so a failure here is logged (the key's lease frees it later)."""
    try:
        session.rollback()  # whatever the failed request left unfinished
        idempotency_keys.release(session, row_id)
        session.commit()
    except Exception:
        session.rollback()
        logger.exception("could not release Idempotency-Key %r of %s after its request failed; "
                         "repeats are refused until its lease ends", request.key, request.route)
