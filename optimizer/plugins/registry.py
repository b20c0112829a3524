"""The plugins FuseForge ships, by name, and their ONNX schemas' registration with onnx.defs.

Importing this module registers the schemas, so onnx.checker and onnx shape inference accept
fuseforge nodes wherever optimizer.plugins has been imported.
"""

from __future__ import annotations

from types import MappingProxyType

import onnx.defs

from optimizer.errors import PluginNotFoundError
from optimizer.plugins.base import DOMAIN, Plugin
from optimizer.plugins.bias_gelu import PLUGIN as BIAS_GELU
from optimizer.plugins.multi_head_attention import PLUGIN as MULTI_HEAD_ATTENTION
from optimizer.plugins.skip_layer_norm import PLUGIN as SKIP_LAYER_NORM

__all__ = ["PLUGINS", "plugin_for_op", "register_onnx_schemas"]

PLUGINS: MappingProxyType[str, Plugin] = MappingProxyType(
    {p.name: p for p in (SKIP_LAYER_NORM, BIAS_GELU, MULTI_HEAD_ATTENTION)})

_BY_OP_TYPE = {p.op_type: p for p in PLUGINS.values()}


def plugin_for_op(domain: str, op_type: str) -> Plugin:
    """The plugin implementing `domain`.`op_type`.

    Raises:
        PluginNotFoundError: no plugin implements it.
    """
    plugin = _BY_OP_TYPE.get(op_type) if domain == DOMAIN else None
    if plugin is None:
        known = ", ".join(sorted(_BY_OP_TYPE))
        raise PluginNotFoundError(f"no plugin implements op '{domain}.{op_type}'; the "
                                  f"{DOMAIN} plugins are: {known}")
    return plugin


def register_onnx_schemas() -> None:
    """Register every plugin's schema with onnx.defs (a schema already there is kept)."""
    for plugin in PLUGINS.values():
        if not onnx.defs.has(plugin.op_type, plugin.domain):
            onnx.defs.register_schema(plugin.schema())


register_onnx_schemas()
