"""Custom plugins: fused ops of the `fuseforge` domain, for backends that lack them.

Each plugin lives in optimizer/plugins/<name>/: its ONNX schema and shape inference, a numpy
reference (the ground truth), its decomposition into standard ONNX ops (so ONNX Runtime can
validate a model that holds it), its TensorRT registration (tensorrt.plugin, AOT Triton kernel),
the Triton kernel, and a README with the I/O contract. Importing this package registers the
schemas with onnx.defs.
"""

from optimizer.plugins.base import AOT, DOMAIN, OPSET_VERSION, TRT_NAMESPACE, Plugin
from optimizer.plugins.decompose import (
    decompose_for_onnxruntime,
    has_plugin_nodes,
    runnable_in_onnxruntime,
)
from optimizer.plugins.registry import PLUGINS, plugin_for_op, register_onnx_schemas
from optimizer.plugins.trt_registry import plugins_used, register_with_tensorrt

__all__ = [
    "AOT",
    "DOMAIN",
    "OPSET_VERSION",
    "PLUGINS",
    "TRT_NAMESPACE",
    "Plugin",
    "has_plugin_nodes",
    "decompose_for_onnxruntime",
    "plugin_for_op",
    "plugins_used",
    "register_onnx_schemas",
    "register_with_tensorrt",
    "runnable_in_onnxruntime",
]
