"""/v1/passes: the fusion passes a job can select, with what each does."""

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict

from api.deps import get_current_project
from optimizer.passes import BACKENDS, DEFAULT_PASSES, FusionPass

router = APIRouter(prefix="/v1/passes", tags=["passes"],
                   dependencies=[Depends(get_current_project)])


def _described(fusion_pass: FusionPass) -> dict[str, Any]:
    return {
        "name": fusion_pass.name,
        "summary": fusion_pass.summary,
        "stage": fusion_pass.stage,
        "backends": [b for b in BACKENDS if fusion_pass.supports(b)],
        "off_by_default": dict(fusion_pass.off_by_default),
    }


# The examples are this server's own: the first pass, and the first one some backend turns off.
_EXAMPLES = [DEFAULT_PASSES[0], *[p for p in DEFAULT_PASSES if p.off_by_default][:1]]


class PassRead(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [_described(p) for p in _EXAMPLES]})

    name: str
    summary: str
    stage: str
    backends: list[str]  # backends it rewrites for; elsewhere it is skipped
    off_by_default: dict[str, str]  # backend -> the measurement that turned it off there


@router.get("", response_model=list[PassRead])
def list_passes() -> list[PassRead]:
    """Every pass in the order `"passes": "all"` runs them."""
    return [PassRead.model_validate(_described(p)) for p in DEFAULT_PASSES]
