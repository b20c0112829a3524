"""fuseforge.BiasGelu: a bias Add and GELU (erf form, or its tanh approximation) in one op."""

from pathlib import Path

from optimizer.plugins.base import Attribute, Parameter, Plugin
from optimizer.plugins.bias_gelu.decompose import decompose
from optimizer.plugins.bias_gelu.reference import bias_gelu
from optimizer.plugins.bias_gelu.schema import infer_shapes

__all__ = ["PLUGIN"]

PLUGIN = Plugin(
    name="bias_gelu",
    op_type="BiasGelu",
    summary="GELU of input + bias, element-wise in one pass over memory.",
    replaces="0.5 * x * (1 + Erf(x / √2)) with x = Add(input, bias) (any operand order and "
             "bracketing), the tanh approximation of it, or Gelu-20(Add(input, bias))",
    inputs=(
        Parameter("input", "[..., H] activations"),
        Parameter("bias", "[H] bias added before the GELU"),
    ),
    outputs=(Parameter("output", "GELU(input + bias), shape of input"),),
    attributes=(Attribute("approximate", "string",
                          "'none' (erf form) or 'tanh' (approximation), as Gelu-20's"),),
    type_constraint=("tensor(float)", "tensor(float16)", "tensor(bfloat16)"),
    limits=(
        "bias is 1-D and matches the input's last size",
        "the input has fewer than 2**31 elements (int32 indexing)",
        "computed in float32 whatever the input type",
    ),
    reference=bias_gelu,
    decompose=decompose,
    infer_shapes=infer_shapes,
    readme=Path(__file__).with_name("README.md"),
    trt_registration="optimizer.plugins.bias_gelu.trt_registration",
)
