"""Reachability of the database and the broker, for /healthz."""

from sqlalchemy import text
from sqlalchemy.orm import Session

from core.dispatch import JobDispatcher

__all__ = ["check_broker", "check_database"]


def check_database(*, session: Session) -> str | None:
    """None when reachable, else the error."""
    try:
        session.execute(text("SELECT 1"))
    except Exception as err:  # any driver error means "unreachable" to a health check
        return f"{type(err).__name__}: {err}"
    return None


def check_broker(*, dispatcher: JobDispatcher) -> str | None:
    """None when the broker the API sends jobs to answers, else the error."""
    return dispatcher.broker_error()
