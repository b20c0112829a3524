"""The idempotency_keys table's rules on real databases: the unique insert is the lock (of
concurrent claims exactly one wins), an expired row holds nothing, and a lost lease is noticed."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from core.db import idempotency_keys
from core.db.models import DEFAULT_PROJECT_ID
from core.db.types import utc_now
from tests.support.databases import fresh_database

LEASE = timedelta(minutes=15)
TTL = timedelta(hours=24)


@pytest.fixture(params=["sqlite", "postgresql"])
def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    with fresh_database(request.param, tmp_path, name="fuseforge_idempotency_keys") as engine:
        yield sessionmaker(bind=engine, expire_on_commit=False)


def _claim(sessions: sessionmaker[Session], key: str = "k", fingerprint: str = "f" * 64,
           now: datetime | None = None) -> uuid.UUID | None:
    with sessions() as session, session.begin():
        return idempotency_keys.claim(session, project_id=DEFAULT_PROJECT_ID,
                                      route="POST /v1/jobs", key=key, fingerprint=fingerprint,
                                      lease=LEASE, now=now)


def _held(sessions: sessionmaker[Session], key: str = "k") -> tuple[int | None, str] | None:
    with sessions() as session:
        row = idempotency_keys.held(session, project_id=DEFAULT_PROJECT_ID,
                                    route="POST /v1/jobs", key=key)
        return None if row is None else (row.status_code, row.fingerprint)


def test_a_held_key_cannot_be_claimed_again_until_it_is_released(
        sessions: sessionmaker[Session]) -> None:
    first = _claim(sessions)
    assert first is not None
    assert _claim(sessions) is None
    assert _claim(sessions, key="other") is not None  # another key is free

    with sessions() as session, session.begin():
        idempotency_keys.release(session, first)
    assert _held(sessions) is None
    assert _claim(sessions) is not None


def test_an_answered_key_keeps_its_answer(sessions: sessionmaker[Session]) -> None:
    row_id = _claim(sessions)
    assert row_id is not None
    with sessions() as session, session.begin():
        assert idempotency_keys.record_answer(session, row_id, status_code=202, body="{}",
                                              ttl=TTL)
    assert _held(sessions) == (202, "f" * 64)
    assert _claim(sessions) is None


def test_a_lapsed_lease_frees_the_key_and_its_late_answer_is_not_stored(
        sessions: sessionmaker[Session]) -> None:
    # The request that claimed it died (or ran past its lease): a repeat takes the key over.
    lapsed = _claim(sessions, now=utc_now() - LEASE - timedelta(seconds=1))
    assert lapsed is not None
    taken_over = _claim(sessions, fingerprint="g" * 64)
    assert taken_over is not None and taken_over != lapsed

    with sessions() as session, session.begin():
        assert not idempotency_keys.record_answer(session, lapsed, status_code=202, body="{}",
                                                  ttl=TTL)
    assert _held(sessions) == (None, "g" * 64)  # the new claim, untouched


def test_purge_removes_only_expired_rows(sessions: sessionmaker[Session]) -> None:
    old = _claim(sessions, key="old", now=utc_now() - timedelta(hours=25))
    _claim(sessions, key="running")
    assert old is not None
    with sessions() as session, session.begin():
        idempotency_keys.record_answer(session, old, status_code=201, body="{}", ttl=TTL,
                                       now=utc_now() - timedelta(hours=25))
        assert idempotency_keys.purge_expired(session) == 1
    assert _held(sessions, "old") is None
    assert _held(sessions, "running") is not None


def test_of_concurrent_claims_of_one_key_exactly_one_wins(
        sessions: sessionmaker[Session]) -> None:
    claimants = 8
    start = threading.Barrier(claimants)

    def claim() -> uuid.UUID | None:
        start.wait(timeout=30)
        return _claim(sessions)

    with ThreadPoolExecutor(claimants) as pool:
        won = [f.result(timeout=60) for f in [pool.submit(claim) for _ in range(claimants)]]
    assert len([w for w in won if w is not None]) == 1, won
