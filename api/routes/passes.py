"""/v1/passes: the fusion passes a job can select, with what each does."""

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from api.deps import get_current_project
from optimizer.passes import BACKENDS, DEFAULT_PASSES

router = APIRouter(prefix="/v1/passes", tags=["passes"],
                   dependencies=[Depends(get_current_project)])


class PassRead(BaseModel):
    name: str
    summary: str
    stage: str
    backends: list[str]  # backends it rewrites for; elsewhere it is skipped
    off_by_default: dict[str, str]  # backend -> the measurement that turned it off there


@router.get("", response_model=list[PassRead])
def list_passes() -> list[PassRead]:
    """Every pass in the order `"passes": "all"` runs them."""
    return [
        PassRead(
            name=p.name,
            summary=p.summary,
            stage=p.stage,
            backends=[b for b in BACKENDS if p.supports(b)],
            off_by_default=dict(p.off_by_default),
        )
        for p in DEFAULT_PASSES
    ]
