"""/v1/backends: the inference backends a job can name, with what each runs and where."""

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict

from api.deps import SessionDep, get_current_project
from api.services.backends import why_no_worker
from optimizer.registries.backends import BACKENDS, Backend, BackendSpec, QueueKind
from optimizer.registries.precisions import Precision

router = APIRouter(prefix="/v1/backends", tags=["backends"],
                   dependencies=[Depends(get_current_project)])


def _described(spec: BackendSpec, unavailable: str | None = None) -> dict[str, Any]:
    return {"name": spec.name.value, "label": spec.label,
            "precisions": [p.value for p in spec.precisions], "queue": spec.queue.value,
            "queue_name": spec.queue_name, "needs_gpu": spec.needs_gpu,
            "options": sorted(spec.options), "host_needs": spec.host_needs,
            "unavailable": unavailable}


_EXAMPLES: list[Any] = [_described(spec) for spec in BACKENDS.values()][:1]


class BackendRead(BaseModel):
    # The example is this server's own first backend, as the route lists it.
    model_config = ConfigDict(json_schema_extra={"examples": _EXAMPLES})

    name: Backend
    label: str
    precisions: list[Precision]  # the precisions a job on it may ask for
    queue: QueueKind  # the kind of worker that runs its jobs
    needs_gpu: bool
    options: list[str]  # the job fields only backends listing them take
    queue_name: str  # the broker queue its jobs wait in
    host_needs: str | None  # what a worker's host needs to take its jobs; None: any host
    # Why no online worker takes its jobs now (they wait queued); None: one does.
    unavailable: str | None


@router.get("", response_model=list[BackendRead])
def list_backends(session: SessionDep) -> list[BackendRead]:
    """Every backend a job can name, in the order the optimizer declares them, and whether a
    worker takes its jobs now."""
    why = why_no_worker(session)
    return [BackendRead.model_validate(_described(spec, why[name]))
            for name, spec in BACKENDS.items()]
