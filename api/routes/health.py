"""/healthz: are the database, the broker and the artifact store reachable, is there room on the
disk."""

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from api.deps import DispatcherDep, ReadSessionsDep, Sessions, SettingsDep, StoreDep
from api.schemas import examples
from api.services.health import (
    HealthCache,
    check_broker,
    check_database,
    check_disk,
    check_store,
)
from core.dispatch import JobDispatcher
from core.settings import Settings
from core.storage import ArtifactStore

router = APIRouter(tags=["health"])


class ComponentHealth(BaseModel):
    ok: bool
    error: str | None = None


class DiskHealth(ComponentHealth):
    path: str  # the data dir (or its nearest existing parent)
    free_bytes: int | None
    min_free_bytes: int  # FUSEFORGE_MIN_FREE_DISK_BYTES


class StorageHealth(ComponentHealth):
    store: str  # which: the artifact folder, or the bucket and its endpoint


class Health(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [examples.HEALTH]})

    status: str  # "ok" or "degraded"
    database: ComponentHealth
    broker: ComponentHealth
    disk: DiskHealth
    storage: StorageHealth


@router.get("/healthz", response_model=Health)
async def healthz(
    request: Request, sessions: ReadSessionsDep, dispatcher: DispatcherDep, settings: SettingsDep,
    store: StoreDep, response: Response,
) -> Health:
    """200 when all is well; 503 when the database, the broker or the artifact store is
    unreachable or the data dir's disk has less free space than FUSEFORGE_MIN_FREE_DISK_BYTES.
    The probes' results are reused for FUSEFORGE_HTTP__HEALTH_CACHE_S seconds."""
    cache: HealthCache[Health] = request.app.state.health_cache
    health = cache.get()
    if health is None:
        health = await run_in_threadpool(
            cache.refresh, lambda: _probe(sessions, dispatcher, settings, store))
    response.status_code = 200 if health.status == "ok" else 503
    return health


def _probe(sessions: Sessions, dispatcher: JobDispatcher, settings: Settings,
           store: ArtifactStore) -> Health:
    with sessions() as session:
        db_error = check_database(session=session)
    broker_error = check_broker(dispatcher=dispatcher)
    disk = check_disk(data_dir=settings.data_dir, min_free_bytes=settings.min_free_disk_bytes)
    store_error = check_store(store=store)
    healthy = (db_error is None and broker_error is None and disk.error is None
               and store_error is None)
    return Health(
        status="ok" if healthy else "degraded",
        database=ComponentHealth(ok=db_error is None, error=db_error),
        broker=ComponentHealth(ok=broker_error is None, error=broker_error),
        disk=DiskHealth(ok=disk.error is None, error=disk.error, path=str(disk.path),
                        free_bytes=disk.free_bytes, min_free_bytes=disk.min_free_bytes),
        storage=StorageHealth(ok=store_error is None, error=store_error, store=store.describe),
    )
