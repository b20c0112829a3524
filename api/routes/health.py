"""/healthz: is the database reachable, is the broker reachable."""

from fastapi import APIRouter, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from api.deps import DispatcherDep, SessionDep
from api.services.health import check_broker, check_database

router = APIRouter(tags=["health"])


class ComponentHealth(BaseModel):
    ok: bool
    error: str | None = None


class Health(BaseModel):
    status: str  # "ok" or "degraded"
    database: ComponentHealth
    broker: ComponentHealth


@router.get("/healthz", response_model=Health)
async def healthz(session: SessionDep, dispatcher: DispatcherDep, response: Response) -> Health:
    db_error = await run_in_threadpool(check_database, session=session)
    broker_error = await run_in_threadpool(check_broker, dispatcher=dispatcher)
    healthy = db_error is None and broker_error is None
    response.status_code = 200 if healthy else 503
    return Health(
        status="ok" if healthy else "degraded",
        database=ComponentHealth(ok=db_error is None, error=db_error),
        broker=ComponentHealth(ok=broker_error is None, error=broker_error),
    )
