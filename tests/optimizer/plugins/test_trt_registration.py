"""The plugins with real TensorRT (and a GPU with Triton): registration and an engine build.

These skip here: TensorRT, Triton and a GPU are not installed on the CPU test machines.
"""

from __future__ import annotations

import numpy as np
import pytest

from optimizer.plugins import PLUGINS, TRT_NAMESPACE, register_with_tensorrt
from tests.optimizer.plugins.support import plugin_model

pytestmark = pytest.mark.tensorrt

SAMPLES = {
    "skip_layer_norm": ({"input": (2, 16, 64), "skip": (2, 16, 64), "gamma": (64,),
                         "beta": (64,), "bias": (64,)}, {"epsilon": 1e-5}),
    "bias_gelu": ({"input": (2, 16, 256), "bias": (256,)}, {"approximate": "none"}),
    "multi_head_attention": ({"query": (2, 16, 64), "key": (2, 16, 64), "value": (2, 16, 64),
                              "attention_bias": (2, 1, 1, 16)}, {"num_heads": 4, "scale": 0.25}),
}


def test_register_with_tensorrt_creates_every_creator() -> None:
    trt = pytest.importorskip("tensorrt", reason="TensorRT is not installed here; plugin "
                              "registration tests skip")
    ids = register_with_tensorrt()
    assert register_with_tensorrt() == ids  # idempotent
    registry = trt.get_plugin_registry()
    for plugin in PLUGINS.values():
        assert registry.get_creator(plugin.op_type, "1", TRT_NAMESPACE) is not None


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(SAMPLES))
def test_tensorrt_builds_an_engine_from_a_plugin_node(name: str) -> None:
    trt = pytest.importorskip("tensorrt", reason="TensorRT is not installed here; engine-"
                              "building tests skip")
    pytest.importorskip("triton", reason="Triton is not installed here; the AOT kernels "
                        "cannot be compiled")
    shapes, attributes = SAMPLES[name]
    rng = np.random.default_rng(0)
    values = {k: rng.standard_normal(s).astype(np.float16) for k, s in shapes.items()}
    model = plugin_model(PLUGINS[name], values, attributes)
    register_with_tensorrt()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(model.SerializeToString()):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        pytest.fail(f"TensorRT could not parse the {name} node: {errors}")
    engine = builder.build_serialized_network(network, builder.create_builder_config())
    assert engine is not None, f"TensorRT could not build an engine with the {name} plugin"
