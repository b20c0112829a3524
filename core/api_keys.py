"""API keys: made, stored as an HMAC of the key (never the key), checked, listed and revoked.

A key reads `ff_<43 url-safe characters>` (32 random bytes). Its first characters (`prefix`)
are kept to find the candidate rows and to name the key in listings; the rest is only in the
HMAC-SHA256 keyed by the server secret (FUSEFORGE_AUTH__SECRET, else data_dir/secret), which a
presented key's HMAC is compared with in constant time. A key that is unknown, revoked or
expired is told apart nowhere outside this module: `active_key` and `project_for_key` answer
None for all three.
"""

import hashlib
import hmac
import os
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.models import ApiKey, Project
from core.db.types import utc_now
from core.settings import Settings

__all__ = [
    "KEY_PREFIX",
    "CreatedKey",
    "active_key",
    "create_key",
    "get_or_create_project",
    "key_digest",
    "list_keys",
    "project_for_key",
    "revoke_key",
    "server_secret",
]

KEY_PREFIX = "ff_"
_SHOWN_CHARS = len(KEY_PREFIX) + 8  # "ff_AbCdEfGh": enough to tell keys apart, useless alone
_MAX_KEY_CHARS = 256  # a longer bearer token is no key of ours; not worth hashing


@dataclass(frozen=True)
class CreatedKey:
    """A new key: `key` is shown once and is not stored."""

    row: ApiKey
    key: str


def server_secret(settings: Settings) -> bytes:
    """The HMAC secret: FUSEFORGE_AUTH__SECRET, else the one generated into data_dir/secret
    (prod refuses the latter at start-up, see core/settings.py)."""
    if settings.auth.secret is not None:
        return settings.auth.secret.get_secret_value().encode()
    return _generated_secret(settings.auth_secret_file.resolve())


@lru_cache
def _generated_secret(path: Path) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        # Written aside, then linked into place: the API, the CLI and a worker starting
        # together agree on whichever secret lands first, and none reads a half-written one.
        draft = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(secrets.token_urlsafe(48).encode())
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return path.read_bytes().strip()


def key_digest(secret: bytes, key: str) -> str:
    """What a key is stored as: its HMAC-SHA256 under the server secret, in hex."""
    return hmac.new(secret, key.encode(), hashlib.sha256).hexdigest()


def get_or_create_project(*, session: Session, name: str) -> tuple[Project, bool]:
    """The project called `name`, made when missing; (project, created). Does not commit."""
    project = session.scalars(select(Project).where(Project.name == name)).one_or_none()
    if project is not None:
        return project, False
    project = Project(name=name)
    session.add(project)
    session.flush()
    return project, True


def create_key(*, session: Session, secret: bytes, project: Project, name: str,
               expires_in: timedelta | None = None) -> CreatedKey:
    """A new key of `project`, stored as its HMAC. Does not commit."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(project_id=project.id, name=name, prefix=key[:_SHOWN_CHARS],
                 key_hash=key_digest(secret, key),
                 expires_at=utc_now() + expires_in if expires_in is not None else None)
    session.add(row)
    session.flush()
    return CreatedKey(row=row, key=key)


def project_for_key(*, session: Session, secret: bytes, key: str,
                    now: datetime | None = None) -> uuid.UUID | None:
    """The project of `key` when the key is known, unrevoked and unexpired; else None."""
    row = active_key(session=session, secret=secret, key=key, now=now)
    return row.project_id if row is not None else None


def active_key(*, session: Session, secret: bytes, key: str,
               now: datetime | None = None) -> ApiKey | None:
    """The row of `key` when the key is known, unrevoked and unexpired; else None."""
    if not key.startswith(KEY_PREFIX) or len(key) > _MAX_KEY_CHARS:
        return None
    digest = key_digest(secret, key)
    now = now or utc_now()
    found = None
    for row in session.scalars(select(ApiKey).where(ApiKey.prefix == key[:_SHOWN_CHARS])):
        # Every candidate is compared, so the time taken says nothing about which matched.
        if hmac.compare_digest(row.key_hash, digest):
            found = row
    if found is None or found.revoked_at is not None:
        return None
    if found.expires_at is not None and found.expires_at <= now:
        return None
    return found


def list_keys(*, session: Session, project: str | None = None) -> list[tuple[ApiKey, str]]:
    """Keys with their project's name, oldest first; only `project`'s when given."""
    query = (select(ApiKey, Project.name).join(Project, ApiKey.project_id == Project.id)
             .order_by(ApiKey.created_at, ApiKey.id))
    if project is not None:
        query = query.where(Project.name == project)
    return [(key, name) for key, name in session.execute(query).tuples()]


def revoke_key(*, session: Session, key_id: uuid.UUID) -> ApiKey | None:
    """Mark the key revoked (kept, so listings show it); None when there is no such key. A key
    revoked before keeps its first revocation time. Does not commit."""
    row = session.get(ApiKey, key_id)
    if row is not None and row.revoked_at is None:
        row.revoked_at = utc_now()
    return row
