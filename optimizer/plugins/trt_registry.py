"""Register every fuseforge plugin with TensorRT before an engine that uses them is built.

TensorRT's ONNX parser imports a fuseforge node as the plugin registered under its op_type in
namespace "fuseforge" (the node's plugin_namespace attribute); the creators exist only once
register() has run in the building process. Engines carry the AOT-compiled kernels, so loading
an engine needs no registration.
"""

from __future__ import annotations

import importlib

import onnx_ir as ir

from optimizer.plugins.base import DOMAIN
from optimizer.plugins.registry import PLUGINS, plugin_for_op

__all__ = ["plugins_used", "register_with_tensorrt"]


def register_with_tensorrt() -> tuple[str, ...]:
    """Register every plugin (idempotent); returns their TensorRT ids ("fuseforge::Op").

    Raises:
        ImportError: TensorRT (or, when a kernel is compiled, Triton) is not installed.
    """
    ids = []
    for plugin in PLUGINS.values():
        module = importlib.import_module(plugin.trt_registration)
        ids.append(str(module.register()))
    return tuple(ids)


def plugins_used(model: ir.Model) -> tuple[str, ...]:
    """The names of the plugins `model`'s fuseforge nodes use, sorted (for engine metadata).

    Raises:
        PluginNotFoundError: a fuseforge node has an op no plugin implements.
    """
    names = {plugin_for_op(node.domain, node.op_type).name
             for node in ir.traversal.RecursiveGraphIterator(model.graph)
             if node.domain == DOMAIN}
    return tuple(sorted(names))
