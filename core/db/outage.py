"""A database outage, told apart from a bug: the API answers it 503, a job's process hands it
to its supervisor as `DatabaseOutage`, which waits the outage out and queues the job again."""

from __future__ import annotations

import sqlalchemy.exc

__all__ = ["DatabaseOutage", "is_database_outage", "outage_text"]


class DatabaseOutage(Exception):
    """A job's process could not reach the database within its retry window: the job did not
    fail, it was interrupted (a plain exception, so it pickles to the supervisor)."""


def is_database_outage(err: BaseException) -> bool:
    """Whether `err` is the database being away: no pooled connection to give, a connection
    refused, reset, timed out or already lost (and SQLite's "database is locked")."""
    if isinstance(err, sqlalchemy.exc.TimeoutError):  # the pool had no connection to give
        return True
    return isinstance(err, sqlalchemy.exc.DBAPIError) and (
        err.connection_invalidated
        or isinstance(err, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError))


def outage_text(err: BaseException) -> str:
    """The outage in a few words for a job's event: the error's class and the driver's first
    line ("OperationalError: connection ... refused"), without SQL or parameters."""
    first = str(getattr(err, "orig", None) or err).strip().splitlines()
    return f"{type(err).__name__}: {first[0] if first else 'the database did not answer'}"
