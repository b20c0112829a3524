"""A worker's capabilities land in the `workers` table with a heartbeat: upserted per node,
expiring on their own, marked stopped on shutdown."""

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.models import Worker
from core.db.types import utc_now
from core.db.worker_registry import EXPIRY_INTERVALS, record_heartbeat, record_stopped
from optimizer.capabilities import GpuInfo, HostCapabilities

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
    assert (worker.gpu_name, worker.compute_capability, worker.gpu_memory_mib) == (
        "NVIDIA H200", "9.0", 143771)
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
