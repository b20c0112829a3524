"""GET /metrics: Prometheus text (or OpenMetrics, if the scraper asks) of the jobs, stages,
queues, uploads and workers (api/services/metrics.py).

Unauthenticated, like /healthz, and meant for an internal network: it tells no secrets, but
does tell how busy the service is. FUSEFORGE_METRICS__ENABLED=false leaves it out.
"""

from fastapi import APIRouter, Request, Response
from prometheus_client.exposition import choose_encoder
from starlette.concurrency import run_in_threadpool

from api.deps import DispatcherDep, ReadSessionsDep
from api.services.metrics import ServiceMetrics

router = APIRouter(tags=["operations"])


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text"}})
async def metrics(request: Request, sessions: ReadSessionsDep,
                  dispatcher: DispatcherDep) -> Response:
    """The service's metrics in Prometheus' text format, read at scrape time (reused for up to
    FUSEFORGE_METRICS__CACHE_S seconds)."""
    service: ServiceMetrics = request.app.state.metrics
    registry = await run_in_threadpool(service.registry, sessions, dispatcher)
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(registry), headers={"Content-Type": content_type})
