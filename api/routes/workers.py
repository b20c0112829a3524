"""/v1/workers: the workers recorded by their heartbeats, and what each can build on.

Workers serve every project, and show no project's models, datasets or jobs: any valid key
sees them all (a job's own `worker` field names the one that ran it)."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from api.deps import SessionDep, get_current_project
from api.schemas.workers import WorkerRead
from api.services import workers
from core.db.worker_registry import is_online

router = APIRouter(prefix="/v1/workers", tags=["workers"],
                   dependencies=[Depends(get_current_project)])


@router.get("", response_model=list[WorkerRead])
def list_workers(
    session: SessionDep,
    online: Annotated[bool, Query(description="only workers online now")] = False,
) -> list[WorkerRead]:
    """Workers with their queues, GPU, compute capability and TensorRT version; latest
    heartbeat first. A TensorRT job waits until an online worker consumes its queue."""
    return [WorkerRead.model_validate({**_columns(w), "online": is_online(w)})
            for w in workers.list_workers(session=session, online_only=online)]


def _columns(worker: object) -> dict[str, object]:
    return {name: getattr(worker, name) for name in WorkerRead.model_fields if name != "online"}
