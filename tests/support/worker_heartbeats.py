"""Workers recorded as their heartbeats record them, with the hosts tests need: an H200 and a
CPU-only machine."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

from core.db.types import utc_now
from core.db.worker_registry import record_heartbeat
from optimizer.capabilities import GpuInfo, HostCapabilities

__all__ = ["CPU_ONLY", "H200", "beat"]

H200 = HostCapabilities(gpus=(GpuInfo(0, "NVIDIA H200", "9.0", 143771),), tensorrt_version="11.4.0")
CPU_ONLY = HostCapabilities(notes=("nvidia-smi not found",))


def beat(session: Session, name: str, capabilities: HostCapabilities, queues: list[str],
         minutes_ago: float = 0) -> None:
    """Record (and commit) worker `name`'s heartbeat `minutes_ago`, consuming `queues`."""
    now = utc_now() - timedelta(minutes=minutes_ago)
    record_heartbeat(session, name=name, queues=queues, capabilities=capabilities,
                     started_at=now, interval_s=30, now=now, hostname="host-1", pid=42)
    session.commit()
