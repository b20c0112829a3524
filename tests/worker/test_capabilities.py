"""The worker's capabilities land in the `workers` table with a heartbeat: upserted per node,
expiring on their own, marked stopped on shutdown; a job this host cannot build is refused."""

import time
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.db.models import Worker
from api.db.types import utc_now
from optimizer.capabilities import GpuInfo, HostCapabilities
from tests.support.databases import migrated_engine
from worker.capabilities import (
    EXPIRY_INTERVALS,
    WorkerHeartbeat,
    record_heartbeat,
    record_stopped,
    refusal_for,
)

H200 = GpuInfo(0, "NVIDIA H200", "9.0", 143771, "GPU-6f3d", "570.124.06")
GPU_HOST = HostCapabilities(gpus=(H200,), tensorrt_version="11.4.0")
CPU_HOST = HostCapabilities(notes=("nvidia-smi not found",))


def test_heartbeat_records_the_workers_capabilities(db_session: Session) -> None:
    now = utc_now()
    record_heartbeat(
        db_session, name="celery@gpu-1", queues=["gpu", "gpu.sm90", "gpu.h200"],
        capabilities=GPU_HOST, started_at=now, interval_s=30, now=now, hostname="gpu-1", pid=42,
    )
    db_session.commit()
    worker = db_session.scalars(select(Worker)).one()
    assert (worker.name, worker.hostname, worker.pid) == ("celery@gpu-1", "gpu-1", 42)
    assert worker.queues == ["gpu", "gpu.sm90", "gpu.h200"]
    assert (worker.gpu_name, worker.compute_capability, worker.gpu_memory_mib) == ("NVIDIA H200", "9.0", 143771)
    assert worker.tensorrt_version == "11.4.0"
    assert worker.capabilities["gpus"][0]["uuid"] == "GPU-6f3d"
    assert worker.heartbeat_at == now and worker.started_at == now
    assert worker.expires_at == now + timedelta(seconds=30 * EXPIRY_INTERVALS)
    assert worker.stopped_at is None


def test_a_later_heartbeat_updates_the_same_row(db_session: Session) -> None:
    started = utc_now()
    for offset in (0, 30):
        record_heartbeat(
            db_session, name="celery@cpu-1", queues=["cpu"], capabilities=CPU_HOST,
            started_at=started, interval_s=30, now=started + timedelta(seconds=offset),
        )
    db_session.commit()
    worker = db_session.scalars(select(Worker)).one()
    assert worker.heartbeat_at == started + timedelta(seconds=30)
    assert worker.gpu_name is None and worker.tensorrt_version is None
    assert worker.capabilities["notes"] == ["nvidia-smi not found"]


def test_stopped_worker_is_offline_at_once_and_a_restart_revives_it(db_session: Session) -> None:
    started = utc_now()
    record_heartbeat(db_session, name="celery@gpu-1", queues=["gpu"], capabilities=GPU_HOST,
                     started_at=started, interval_s=30)
    stop = utc_now()
    record_stopped(db_session, "celery@gpu-1", now=stop)
    db_session.commit()
    worker = db_session.scalars(select(Worker)).one()
    assert worker.stopped_at == stop and worker.expires_at == stop

    record_heartbeat(db_session, name="celery@gpu-1", queues=["gpu"], capabilities=GPU_HOST,
                     started_at=utc_now(), interval_s=30)
    db_session.commit()
    db_session.refresh(worker)
    assert worker.stopped_at is None and worker.expires_at > stop


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


def test_tensorrt_job_on_a_host_without_gpu_is_refused_saying_what_is_missing() -> None:
    assert refusal_for({"backend": "onnxruntime"}, CPU_HOST) is None
    assert refusal_for({"backend": "tensorrt"}, GPU_HOST) is None
    message = refusal_for({"backend": "tensorrt"}, CPU_HOST)
    assert message is not None
    assert "needs a worker with an NVIDIA GPU and TensorRT" in message
    assert "none (no NVIDIA GPU: nvidia-smi not found; TensorRT: not installed)" in message
    no_trt = HostCapabilities(gpus=(H200,))
    assert "TensorRT: not installed" in (refusal_for({"backend": "tensorrt"}, no_trt) or "")
