"""An int8 job's calibration tables, stored once per (model, dataset, method, graph, samples).

Calibration is the slow part of an int8 job and depends only on the fp32 graph and the samples,
so a table is kept in the artifact store and the `calibrations` table (core/db/calibrations.py)
and found there by the next job on the same model and dataset, on this worker or any other (the
ranges hold for every GPU and flavour). A file whose hash no longer matches its row is not
trusted: the table is computed again.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import uuid
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from core.db.calibrations import find_calibration, record_calibration
from core.storage import ArtifactStore
from optimizer.quantization.calibration import CalibrationTable
from optimizer.registries.quantization import CalibrationMethod

__all__ = ["StoredCalibrations"]

logger = logging.getLogger(__name__)


class StoredCalibrations:
    """The stored tables of one model on one calibration dataset (`CalibrationStore`)."""

    def __init__(self, sessions: sessionmaker[Session], store: ArtifactStore, *,
                 project_id: uuid.UUID, model_id: uuid.UUID, dataset_id: uuid.UUID) -> None:
        self._sessions, self._store = sessions, store
        self._project_id, self._model_id, self._dataset_id = project_id, model_id, dataset_id

    def find(self, method: CalibrationMethod, graph_sha256: str,
             samples: int) -> CalibrationTable | None:
        """The stored table of this graph by `method` on the dataset's first `samples`."""
        with self._sessions() as session:
            row = find_calibration(session, model_id=self._model_id, dataset_id=self._dataset_id,
                                   method=method, graph_sha256=graph_sha256, samples=samples)
        if row is None:
            return None
        try:
            with self._store.open(row.storage_uri) as stored:
                data = stored.read()
        except OSError as err:
            logger.warning("calibration %s: its file %s cannot be read (%s); calibrating again",
                           row.id, row.storage_uri, err)
            return None
        if hashlib.sha256(data).hexdigest() != row.sha256:
            logger.warning("calibration %s: %s does not match its recorded hash; calibrating "
                           "again", row.id, row.storage_uri)
            return None
        return CalibrationTable(method=method, graph_sha256=graph_sha256, samples=samples,
                                data=data)

    def record(self, table: CalibrationTable) -> None:
        """Store `table` (a concurrent job that stored the same one first keeps its file)."""
        key = (f"calibrations/{self._model_id}/{self._dataset_id}/"
               f"{table.method}-{table.samples}-{table.graph_sha256}.json")
        with tempfile.TemporaryDirectory(prefix="fuseforge-calibration-") as tmp:
            stored = self._store.put_file(table.write(Path(tmp) / "table.json"), key)
        with self._sessions() as session, session.begin():
            record_calibration(session, project_id=self._project_id, model_id=self._model_id,
                               dataset_id=self._dataset_id, method=table.method,
                               graph_sha256=table.graph_sha256, storage_uri=stored.uri,
                               sha256=stored.sha256, size_bytes=stored.size_bytes,
                               samples=table.samples)
