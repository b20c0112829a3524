"""The worker's heartbeat thread keeps its row fresh and marks it stopped on shutdown."""

import time
from datetime import datetime
from pathlib import Path

from sqlalchemy.orm import Session

from core.db.models import Worker
from optimizer.capabilities import HostCapabilities
from tests.support.databases import migrated_engine
from worker.registration import WorkerHeartbeat

CPU_HOST = HostCapabilities(notes=("nvidia-smi not found",))


def test_heartbeat_thread_writes_the_row_until_stopped(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'workers.sqlite'}"
    engine = migrated_engine(url)
    beat = WorkerHeartbeat("celery@t", ["cpu"], CPU_HOST, database_url=url, interval_s=0.05)
    beat.start()
    try:
        deadline = time.monotonic() + 10
        beats: list[datetime] = []
        while len(set(beats)) < 2 and time.monotonic() < deadline:
            with Session(engine) as session:
                row = session.get(Worker, "celery@t")
                if row is not None:
                    beats.append(row.heartbeat_at)
            time.sleep(0.02)
        assert len(set(beats)) >= 2, "the heartbeat did not refresh the row"
    finally:
        beat.stop()
    with Session(engine) as session:
        row = session.get(Worker, "celery@t")
        assert row is not None and row.stopped_at is not None
    engine.dispose()
