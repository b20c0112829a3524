"""/v1/plugins: the fused ops FuseForge implements as TensorRT plugins (domain `fuseforge`)."""

from typing import Any

from fastapi import APIRouter, Depends

from api.deps import get_current_project
from optimizer.plugins import PLUGINS

router = APIRouter(prefix="/v1/plugins", tags=["plugins"],
                   dependencies=[Depends(get_current_project)])

# The example is this server's own first plugin, as the route describes it.
_EXAMPLE = [plugin.describe() for plugin in PLUGINS.values()][:1]


@router.get("", responses={200: {"content": {"application/json": {"example": _EXAMPLE}}}})
def list_plugins() -> list[dict[str, Any]]:
    """Each plugin's I/O contract: inputs, outputs, attributes, dtypes, limits, what it replaces."""
    return [plugin.describe() for plugin in PLUGINS.values()]
