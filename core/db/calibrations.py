"""The `calibrations` table's rules: find the stored ranges of a (model, dataset, method,
graph, samples), and record new ones once, whoever writes them first.

The unique constraint on (model_id, dataset_id, method, graph_sha256, samples) decides between
two workers that calibrated the same graph at once: the first insert wins, and the other's
`record_calibration` returns the winner's row (its own file, identical in content, is the
caller's to remove if its URI differs). The caller commits.
"""

import uuid

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from core.db.models import Calibration

__all__ = ["find_calibration", "record_calibration"]


def find_calibration(session: Session, *, model_id: uuid.UUID, dataset_id: uuid.UUID,
                     method: str, graph_sha256: str, samples: int) -> Calibration | None:
    """The stored calibration of `model_id`'s graph `graph_sha256` on `dataset_id` by `method`
    (minmax, entropy or percentile), or None when none was recorded."""
    return session.scalars(select(Calibration).where(
        Calibration.model_id == model_id, Calibration.dataset_id == dataset_id,
        Calibration.method == method, Calibration.graph_sha256 == graph_sha256,
        Calibration.samples == samples)).one_or_none()


def record_calibration(session: Session, *, project_id: uuid.UUID, model_id: uuid.UUID,
                       dataset_id: uuid.UUID, method: str, graph_sha256: str, storage_uri: str,
                       sha256: str, size_bytes: int, samples: int) -> Calibration:
    """Insert the calibration, or return the row a concurrent writer recorded first for the
    same (model, dataset, method, graph); compare its `storage_uri` with yours to tell.

    The insert runs in a SAVEPOINT, so losing the race rolls back only that, not the caller's
    transaction. On PostgreSQL a concurrent uncommitted insert of the same key makes this wait
    for it to commit (or roll back, and then this one inserts).

    >>> row = record_calibration(session, project_id=p, model_id=m, dataset_id=d,
    ...     method="minmax", graph_sha256=h, storage_uri=uri, sha256=s, size_bytes=n,
    ...     samples=128)                                              # doctest: +SKIP
    >>> session.commit()                                              # doctest: +SKIP
    """
    row = Calibration(project_id=project_id, model_id=model_id, dataset_id=dataset_id,
                      method=method, graph_sha256=graph_sha256, storage_uri=storage_uri,
                      sha256=sha256, size_bytes=size_bytes, samples=samples)
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        winner = find_calibration(session, model_id=model_id, dataset_id=dataset_id,
                                  method=method, graph_sha256=graph_sha256, samples=samples)
        if winner is None:  # the IntegrityError was another constraint (a missing model...)
            raise
        return winner
    return row
