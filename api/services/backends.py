"""Whether an online worker takes each backend's jobs, and if not, why (for /v1/backends)."""

from sqlalchemy.orm import Session

from core.db.worker_registry import online_workers
from optimizer.registries.backends import BACKENDS, Backend, BackendSpec

__all__ = ["why_no_worker"]


def why_no_worker(session: Session) -> dict[Backend, str | None]:
    """Each backend: None when an online worker consumes its queue, else why none does, in the
    words of what a host needs to run it (a worker drops the queue of a backend its host cannot
    run: core/queues.py)."""
    consumed = {queue for worker in online_workers(session) for queue in worker.queues}
    return {name: None if spec.queue_name in consumed else _why(spec)
            for name, spec in BACKENDS.items()}


def _why(spec: BackendSpec) -> str:
    needs = (f"; a worker takes it only where its host has {spec.host_needs}"
             if spec.host_needs else "")
    return (f"no online worker consumes queue {spec.queue_name!r}{needs}. Its jobs stay queued "
            f"until one starts (`fuseforge worker --queues {spec.queue_name}`).")
