"""Bodies of /v1/workers: the workers that ran or can run jobs, and what they build on."""

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from api.schemas import examples

__all__ = ["WorkerRead"]


class WorkerRead(BaseModel):
    model_config = ConfigDict(from_attributes=True,
                              json_schema_extra={"examples": [examples.WORKER]})

    name: str  # the Celery node, e.g. "celery@gpu-host-1"
    hostname: str
    pid: int
    queues: list[str]  # "cpu", "gpu", "gpu.sm90", "gpu.nvidia-h200"...
    online: bool  # heartbeat recent and no clean shutdown
    gpu_name: str | None  # the GPU its builds run on; null on a CPU worker
    compute_capability: str | None
    gpu_memory_mib: int | None
    tensorrt_version: str | None
    capabilities: dict[str, Any]  # every visible GPU, TensorRT, and detection notes
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None
