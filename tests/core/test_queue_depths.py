"""JobDispatcher.queue_depths: messages waiting per queue, on Redis and on the embedded SQL
broker `make run` uses."""

import uuid
from pathlib import Path

import redis

from core.dispatch import JobDispatcher
from core.job_config import JobConfig
from tests.support.broker import TEST_REDIS_URL


def _send(dispatcher: JobDispatcher, backend: str, times: int, **config: object) -> None:
    for _ in range(times):
        dispatcher.send_job(uuid.uuid4(), JobConfig(backend=backend, **config))  # type: ignore[arg-type]


def test_redis_depths_count_waiting_messages_per_queue(broker: redis.Redis) -> None:
    dispatcher = JobDispatcher(TEST_REDIS_URL)
    _send(dispatcher, "onnxruntime", 3)
    _send(dispatcher, "tensorrt", 1, target_gpu="H200")

    depths = dispatcher.queue_depths(["cpu", "gpu", "gpu.h200", "gpu.sm90"])

    assert depths == {"cpu": 3, "gpu": 0, "gpu.h200": 1, "gpu.sm90": 0}


def test_sql_broker_depths_count_visible_messages(tmp_path: Path) -> None:
    dispatcher = JobDispatcher(f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}")
    assert dispatcher.queue_depths(["cpu"]) == {"cpu": 0}  # no broker tables yet
    dispatcher.declare_queues()
    _send(dispatcher, "onnxruntime", 2)

    assert dispatcher.queue_depths(["cpu", "gpu"]) == {"cpu": 2, "gpu": 0}
