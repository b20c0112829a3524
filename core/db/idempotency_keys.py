"""The `idempotency_keys` table's rules: claim a key, record or release the answer of the
request that claimed it, and purge the rows that expired.

The unique constraint on (project, route, key) is the lock: of several requests inserting the
same key at once, one inserts its row and the others find it held. A row past `expires_at`
holds nothing, whatever it says (the lease of a request whose process died, or an answer past
its replay window): the next claim replaces it, and the janitor purges it. The caller commits.
"""

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from core.db.models import IdempotencyKey
from core.db.types import utc_now

__all__ = ["claim", "held", "purge_expired", "record_answer", "release"]

_KEY_COLUMNS = [IdempotencyKey.project_id, IdempotencyKey.route, IdempotencyKey.key]


def claim(session: Session, *, project_id: uuid.UUID, route: str, key: str, fingerprint: str,
          lease: timedelta, now: datetime | None = None) -> uuid.UUID | None:
    """Claim `key` for a request whose body has `fingerprint`: the new row's id, held for
    `lease`; None while another row holds the key."""
    now = now or utc_now()
    session.execute(delete(IdempotencyKey).where(
        _same_key(project_id, route, key), IdempotencyKey.expires_at <= now))
    row = {"id": uuid.uuid4(), "project_id": project_id, "route": route, "key": key,
           "fingerprint": fingerprint, "created_at": now, "expires_at": now + lease}
    inserted: uuid.UUID | None = session.execute(_insert_unless_held(session, row)).scalar()
    return inserted


def held(session: Session, *, project_id: uuid.UUID, route: str,
         key: str) -> IdempotencyKey | None:
    """The row holding `key`, if any (answered or still running)."""
    return session.scalars(select(IdempotencyKey).where(
        _same_key(project_id, route, key))).one_or_none()


def record_answer(session: Session, row_id: uuid.UUID, *, status_code: int, body: str,
                  ttl: timedelta, now: datetime | None = None) -> bool:
    """Store the answer of the request that claimed row `row_id`, replayed for `ttl`; False
    when that row is gone (its lease lapsed and a repeat took the key over)."""
    now = now or utc_now()
    stored = session.execute(update(IdempotencyKey).where(IdempotencyKey.id == row_id).values(
        status_code=status_code, response_body=body, expires_at=now + ttl))
    return bool(stored.rowcount)  # type: ignore[attr-defined]


def release(session: Session, row_id: uuid.UUID) -> None:
    """Let the key go (its request failed), so that a repeat runs again."""
    session.execute(delete(IdempotencyKey).where(IdempotencyKey.id == row_id))


def purge_expired(session: Session, now: datetime | None = None) -> int:
    """Delete every row past its expiry; how many went."""
    purged = session.execute(delete(IdempotencyKey).where(
        IdempotencyKey.expires_at <= (now or utc_now())))
    return int(purged.rowcount)  # type: ignore[attr-defined]


def _same_key(project_id: uuid.UUID, route: str, key: str) -> ColumnElement[bool]:
    return ((IdempotencyKey.project_id == project_id) & (IdempotencyKey.route == route)
            & (IdempotencyKey.key == key))


def _insert_unless_held(session: Session, row: dict[str, Any]) -> Any:
    """INSERT ... ON CONFLICT DO NOTHING RETURNING id: the id when inserted, no row when the
    key is held (on PostgreSQL after waiting for a concurrent insert of it to commit)."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        pg = postgresql.insert(IdempotencyKey).values(**row)
        return pg.on_conflict_do_nothing(index_elements=_KEY_COLUMNS).returning(IdempotencyKey.id)
    if dialect == "sqlite":
        lite = sqlite.insert(IdempotencyKey).values(**row)
        return lite.on_conflict_do_nothing(index_elements=_KEY_COLUMNS).returning(IdempotencyKey.id)
    raise NotImplementedError(f"no idempotency key claim for database dialect {dialect!r}")
