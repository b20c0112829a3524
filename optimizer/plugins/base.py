"""What a plugin is: one fused op of the `fuseforge` domain, described once for every consumer.

A `Plugin` ties together the op's ONNX schema (inputs, outputs, attributes, types, shape
inference), its numpy reference (the ground truth), its decomposition into standard ONNX ops (so
ONNX Runtime can run a model that contains it), and the module that registers it with TensorRT.

Every fuseforge node also carries the two attributes TensorRT's ONNX parser reads to import a
node as a plugin: `plugin_namespace` ("fuseforge", where the creators are registered) and `aot`
(1: use the ahead-of-time compiled kernel, so the engine runs without Python). The parser takes
plugin name = op_type and version "1" (onnx-tensorrt's FallbackPluginImporter) and passes the
node's other attributes to the plugin, which takes no defaults: so every attribute is required.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import onnx
import onnx.defs
import onnx_ir as ir
from onnx.shape_inference import InferenceContext

__all__ = [
    "AOT",
    "DOMAIN",
    "OPSET_VERSION",
    "TENSOR_TYPES",
    "TRT_NAMESPACE",
    "Attribute",
    "Decomposition",
    "Parameter",
    "Plugin",
    "SubgraphBuilder",
]

DOMAIN = "fuseforge"
OPSET_VERSION = 1
TRT_NAMESPACE = "fuseforge"  # the plugin_namespace the TensorRT creators are registered under
AOT = 1  # "aot" attribute: TensorRT's parser then asks for the ahead-of-time implementation

# ONNX type strings, and how TensorRT's autotune grammar names the same types.
TENSOR_TYPES = {"tensor(float)": "FP32", "tensor(float16)": "FP16", "tensor(bfloat16)": "BF16"}

_REPO_ROOT = Path(__file__).resolve().parents[2]  # README paths are given relative to it

AttributeType = Literal["float", "int", "string"]
_ATTRIBUTE_TYPES = {
    "float": onnx.defs.OpSchema.AttrType.FLOAT,
    "int": onnx.defs.OpSchema.AttrType.INT,
    "string": onnx.defs.OpSchema.AttrType.STRING,
}


@dataclass(frozen=True)
class Parameter:
    """An input or output: its name, what it holds (with its shape), and whether it may be
    omitted (only trailing outputs may)."""

    name: str
    description: str
    optional: bool = False


@dataclass(frozen=True)
class Attribute:
    name: str
    type: AttributeType
    description: str


# The attributes TensorRT's parser reads; every fuseforge op declares them.
TRT_ATTRIBUTES = (
    Attribute("plugin_namespace", "string",
              f"TensorRT plugin namespace; must be '{TRT_NAMESPACE}'"),
    Attribute("aot", "int", f"must be {AOT}: TensorRT uses the ahead-of-time compiled kernel"),
)


class SubgraphBuilder(Protocol):
    """What a decomposition writes its standard-op subgraph with (see decompose.py)."""

    @property
    def opset(self) -> int:
        """The model's version of the default ONNX domain."""
        ...

    def op(self, op_type: str, inputs: Sequence[ir.Value | None],
           attributes: Mapping[str, float | int | str | Sequence[int]] | None = None,
           ) -> ir.Value:
        ...

    def constant(self, array: np.ndarray) -> ir.Value:
        ...


# Replaces one fuseforge node: returns a value per output of the op (the node may declare
# fewer); None for an output the decomposition cannot give.
Decomposition = Callable[[SubgraphBuilder, ir.Node], Sequence[ir.Value | None]]


@dataclass(frozen=True)
class Plugin:
    """One fused op. `reference(*inputs, **attributes)` returns every output, optional ones
    included, as numpy arrays of the inputs' type (computed in float32)."""

    name: str  # the registry key and the folder name under optimizer/plugins/
    op_type: str
    summary: str
    replaces: str  # the standard-op subgraph the op stands for
    inputs: tuple[Parameter, ...]
    outputs: tuple[Parameter, ...]
    attributes: tuple[Attribute, ...]
    type_constraint: tuple[str, ...]  # the ONNX types T may take (all inputs/outputs are T)
    limits: tuple[str, ...]
    reference: Callable[..., tuple[np.ndarray, ...]]
    decompose: Decomposition
    infer_shapes: Callable[[InferenceContext], None]
    readme: Path
    trt_registration: str  # module whose register() registers the TensorRT plugin
    domain: str = DOMAIN
    version: int = OPSET_VERSION

    @property
    def trt_plugin_id(self) -> str:
        """The id TensorRT knows the plugin by: "<namespace>::<op_type>"."""
        return f"{TRT_NAMESPACE}::{self.op_type}"

    @property
    def all_attributes(self) -> tuple[Attribute, ...]:
        return (*self.attributes, *TRT_ATTRIBUTES)

    def node_attributes(self, **values: float | int | str) -> dict[str, float | int | str]:
        """Every attribute a node of this op must carry: `values` plus the TensorRT ones.

        Raises:
            ValueError: `values` misses one of the op's attributes or names an unknown one.
        """
        expected = {a.name for a in self.attributes}
        if set(values) != expected:
            raise ValueError(f"{self.op_type} takes attributes {sorted(expected)}, "
                             f"got {sorted(values)}")
        return {**values, "plugin_namespace": TRT_NAMESPACE, "aot": AOT}

    def schema(self) -> onnx.defs.OpSchema:
        """The ONNX schema (all attributes required: TensorRT plugins take no defaults)."""
        schema_cls = onnx.defs.OpSchema
        optional = schema_cls.FormalParameterOption.Optional
        single = schema_cls.FormalParameterOption.Single

        def formal(p: Parameter) -> onnx.defs.OpSchema.FormalParameter:
            return schema_cls.FormalParameter(p.name, "T", p.description,
                                              param_option=optional if p.optional else single)

        schema = schema_cls(
            self.op_type, self.domain, self.version, f"{self.summary}\n\nReplaces: {self.replaces}",
            inputs=[formal(p) for p in self.inputs],
            outputs=[formal(p) for p in self.outputs],
            type_constraints=[("T", list(self.type_constraint), "the op's element type")],
            attributes=[schema_cls.Attribute(a.name, _ATTRIBUTE_TYPES[a.type], a.description,
                                             required=True)
                        for a in self.all_attributes],
        )
        schema.set_type_and_shape_inference_function(self.infer_shapes)
        return schema

    def describe(self) -> dict[str, object]:
        """A JSON-ready description (what GET /v1/plugins lists)."""

        def params(items: tuple[Parameter, ...]) -> list[dict[str, object]]:
            return [{"name": p.name, "description": p.description, "optional": p.optional}
                    for p in items]

        return {
            "name": self.name,
            "domain": self.domain,
            "op_type": self.op_type,
            "version": self.version,
            "summary": self.summary,
            "replaces": self.replaces,
            "inputs": params(self.inputs),
            "outputs": params(self.outputs),
            "attributes": [{"name": a.name, "type": a.type, "description": a.description}
                           for a in self.attributes],
            "dtypes": [t.removeprefix("tensor(").removesuffix(")") for t in self.type_constraint],
            "limits": list(self.limits),
            "tensorrt": {"plugin": self.trt_plugin_id,
                         "node_attributes": {"plugin_namespace": TRT_NAMESPACE, "aot": AOT}},
            "readme": self.readme.relative_to(_REPO_ROOT).as_posix(),
        }
