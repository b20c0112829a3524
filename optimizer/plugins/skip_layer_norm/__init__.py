"""fuseforge.SkipLayerNorm: residual Add (+ bias Add) and LayerNormalization in one op."""

from pathlib import Path

from optimizer.plugins.base import Attribute, Parameter, Plugin
from optimizer.plugins.skip_layer_norm.decompose import decompose
from optimizer.plugins.skip_layer_norm.geometry import MAX_HIDDEN
from optimizer.plugins.skip_layer_norm.reference import skip_layer_norm
from optimizer.plugins.skip_layer_norm.schema import infer_shapes

__all__ = ["MAX_HIDDEN", "PLUGIN"]


PLUGIN = Plugin(
    name="skip_layer_norm",
    op_type="SkipLayerNorm",
    summary="LayerNormalization over the last axis of input + skip + bias, in one pass over "
            "memory; optionally also returns the sum (for the next residual Add).",
    replaces="LayerNormalization(Add(Add(input, skip), bias), gamma, beta, axis=-1, "
             "stash_type=1), the bias Add optional (either operand order, bias first or last)",
    inputs=(
        Parameter("input", "[..., H] activations"),
        Parameter("skip", "the residual, same shape as input"),
        Parameter("gamma", "[H] scale"),
        Parameter("beta", "[H] shift (zeros when the model has none)"),
        Parameter("bias", "[H] bias added to the sum (zeros when the model has none)"),
    ),
    outputs=(
        Parameter("output", "the normalized sum, shape of input"),
        Parameter("input_skip_bias_sum", "input + skip + bias, shape of input", optional=True),
    ),
    attributes=(Attribute("epsilon", "float", "added to the variance (LayerNormalization's)"),),
    type_constraint=("tensor(float)", "tensor(float16)", "tensor(bfloat16)"),
    limits=(
        "input and skip have the same shape (no broadcasting); rank >= 1",
        "the hidden size is static at engine build time (the kernel is compiled for it); "
        f"one row must fit one program: H <= {MAX_HIDDEN}",
        "sums, mean and variance are float32 whatever the input type",
        "TensorRT always writes the sum output, even when the node omits it (one extra write)",
    ),
    reference=skip_layer_norm,
    decompose=decompose,
    infer_shapes=infer_shapes,
    readme=Path(__file__).with_name("README.md"),
    trt_registration="optimizer.plugins.skip_layer_norm.trt_registration",
)
