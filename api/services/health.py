"""Reachability of the database and the broker, for /healthz."""

from sqlalchemy import text
from sqlalchemy.orm import Session

from worker.celery_app import celery_app

__all__ = ["check_broker", "check_database"]


def check_database(*, session: Session) -> str | None:
    """None when reachable, else the error."""
    try:
        session.execute(text("SELECT 1"))
    except Exception as err:  # any driver error means "unreachable" to a health check
        return f"{type(err).__name__}: {err}"
    return None


def check_broker() -> str | None:
    try:
        with celery_app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=3)
    except Exception as err:  # kombu raises transport-specific errors
        return f"{type(err).__name__}: {err}"
    return None
