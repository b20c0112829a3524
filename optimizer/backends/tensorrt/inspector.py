"""Read TensorRT's engine inspector JSON: the layers it built and the ONNX nodes each one fused.

`EngineInspector.get_engine_information(LayerInformationFormat.JSON)` describes the built
engine as ``{"Layers": [...], <I/O>}``. With `ProfilingVerbosity.DETAILED` each layer is an
object (Name, LayerType, Inputs, Outputs, ParameterType, TacticName, Metadata, ...); with the
default LAYER_NAMES_ONLY it is just the layer's name. The schema changed in 11.x
(https://docs.nvidia.com/deeplearning/tensorrt/11.3.0/api/migration/tensorrt-10x-to-11x-IEngineInspector.html):

- 10.x: ``"Bindings": ["input", ...]`` (names only); a layer tensor has one combined
  ``"Format/Datatype"`` text, e.g. "Row major linear FP32" or "Channel major FP16 format where
  channel % 8 == 0";
- 11.x: ``"I/O Tensors": [{"Name", "IOMode", "DataType", "Dimensions", "Location",
  "IsShapeInferenceIO", "ProfileInfo": [{"MinShape", "OptShape", "MaxShape", "Format"}]}]``,
  and a tensor's data type and format are separate fields ("DataType": "Half", "Format": ...).

Which ONNX nodes a layer fused comes from its Metadata: the ONNX parser tags each layer it
creates with "[ONNX Layer: <node name>]" (plus " | ..." for local functions), and a fused
layer joins its parts' tags with the ASCII unit or record separator (onnx-tensorrt
processMetadata; TensorRT's trex tool reads both separators). Without Metadata (an engine
built without DETAILED verbosity) the nodes are read from the layer name, which TensorRT forms
as "a + b + c", "PWN(a, b)" or "{ForeignNode[first...last]}": exact for the first two, only the
ends of a Myelin region for the last. Layers of optimization profile N > 0 are named
"... [profile N]"; profile 0's carry no suffix.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import onnx
import onnx_ir as ir

from optimizer.backends.tensorrt.profiles import OptimizationProfileSpec
from optimizer.errors import InternalError
from optimizer.model.graphs import iter_nodes

__all__ = [
    "EngineLayer",
    "EngineReport",
    "IOTensor",
    "LayerFusion",
    "LayerTensor",
    "dtype_of",
    "node_op_types",
    "nodes_from_metadata",
    "nodes_from_name",
    "parse_engine_information",
    "parse_layer",
]

Schema = Literal["10.x", "11.x", "names-only", "unknown"]
NodesSource = Literal["metadata", "name", "none"]

_SEPARATORS = re.compile("[\x1e\x1f]")
_METADATA_PREFIX = "[ONNX Layer: "
_PROFILE_SUFFIX = re.compile(r"\s*\[profile (\d+)\]\s*$")
# Pieces of a layer name that are not node names: "a + b", "PWN(a, b)", "{ForeignNode[a...b]}".
_NAME_DELIMITERS = re.compile(r"\s\+\s|\.\.\.|[(){}\[\],]")
_NAME_NOISE = frozenset({"PWN", "ForeignNode", ""})
# Words in TensorRT's type/format texts -> FuseForge dtype names. First match in a text wins,
# and "BFloat16" is one word, so it never reads as "Float".
_DTYPE_WORDS = {
    "float": "fp32", "fp32": "fp32", "half": "fp16", "fp16": "fp16", "bfloat16": "bf16",
    "bf16": "bf16", "int8": "int8", "fp8": "fp8", "int32": "int32", "int64": "int64",
    "bool": "bool", "uint8": "uint8", "int4": "int4", "fp4": "fp4", "e8m0": "e8m0",
    "double": "fp64", "int16": "int16",
}
# FuseForge dtype names -> ONNX element types, whose bit widths onnx-ir knows.
_DATA_TYPES = {
    "fp32": ir.DataType.FLOAT, "fp16": ir.DataType.FLOAT16, "bf16": ir.DataType.BFLOAT16,
    "int8": ir.DataType.INT8, "fp8": ir.DataType.FLOAT8E4M3FN, "int32": ir.DataType.INT32,
    "int64": ir.DataType.INT64, "bool": ir.DataType.BOOL, "uint8": ir.DataType.UINT8,
    "int4": ir.DataType.INT4, "fp4": ir.DataType.FLOAT4E2M1, "e8m0": ir.DataType.FLOAT8E8M0,
    "fp64": ir.DataType.DOUBLE, "int16": ir.DataType.INT16,
}
# Types a layer computes in, preferred over indices and masks when naming its precision.
_COMPUTE_DTYPES = ("fp32", "fp16", "bf16", "int8", "fp8", "int4", "fp4", "fp64")
_PATTERN_MAX_OPS = 8  # longer fusions (Myelin regions) are summarized by op counts


@dataclass(frozen=True)
class LayerTensor:
    """One input or output of a built layer."""

    name: str
    dtype: str | None  # "fp32", "fp16", "bf16", "int8", "fp8", "int32", "int64", "bool", ...
    format: str | None  # TensorRT's layout text, e.g. "Channel major FP16 format where ..."
    shape: tuple[int, ...] | None

    @property
    def data_type(self) -> ir.DataType | None:
        """The ONNX element type of `dtype`; None where TensorRT named none we know."""
        return _DATA_TYPES.get(self.dtype) if self.dtype else None

    @property
    def size_bytes(self) -> int | None:
        """Bytes the tensor holds (sub-byte types packed, rounded up); None where its shape or
        type is unknown."""
        data_type = self.data_type
        if self.shape is None or data_type is None:
            return None
        elements = math.prod(max(d, 0) for d in self.shape)
        return -(-elements * data_type.bitwidth // 8)


@dataclass(frozen=True)
class EngineLayer:
    """A layer of the built engine and the ONNX nodes it computes.

    `layer_type` is TensorRT's implementation kind ("CaskConvolution", "Reformat", "Myelin");
    `parameter_type` the operation ("Convolution", "Pooling"), when DETAILED. `precision` is
    the type of its first computing input (else output): what its kernel reads.
    """

    name: str
    layer_type: str
    fused_onnx_nodes: tuple[str, ...]
    precision: str | None
    inputs: tuple[LayerTensor, ...] = ()
    outputs: tuple[LayerTensor, ...] = ()
    parameter_type: str | None = None
    tactic: str | None = None
    profile: int = 0
    nodes_source: NodesSource = "none"


@dataclass(frozen=True)
class IOTensor:
    """An engine input or output. On 10.x only the name is known ("Bindings")."""

    name: str
    mode: str | None = None  # "input" or "output" (11.x IOMode)
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    profiles: tuple[OptimizationProfileSpec, ...] = ()


@dataclass(frozen=True)
class LayerFusion:
    """One built layer that computes several ONNX nodes: the "Conv + BN + ReLU" view."""

    layer: str
    layer_type: str
    onnx_nodes: tuple[str, ...]
    onnx_ops: tuple[str, ...]  # op type per node, "?" where the model was not given
    pattern: str  # e.g. "Conv + BatchNormalization + Relu"

    def to_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "layer_type": self.layer_type,
                "onnx_nodes": list(self.onnx_nodes), "onnx_ops": list(self.onnx_ops),
                "pattern": self.pattern}


@dataclass(frozen=True)
class EngineReport:
    """The parsed engine inspector JSON."""

    schema: Schema
    layers: tuple[EngineLayer, ...]
    io_tensors: tuple[IOTensor, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def profile_layers(self, profile: int = 0) -> tuple[EngineLayer, ...]:
        """The layers of one optimization profile (each profile has its own copy)."""
        return tuple(layer for layer in self.layers if layer.profile == profile)

    def fusions(self, node_ops: Mapping[str, str] | None = None, *,
                profile: int = 0) -> tuple[LayerFusion, ...]:
        """The layers of `profile` that compute two or more ONNX nodes, in engine order.

        `node_ops` (from `node_op_types(model)`) names each node's op type in the patterns.
        """
        node_ops = node_ops or {}
        fused = []
        for layer in self.profile_layers(profile):
            if len(layer.fused_onnx_nodes) < 2:
                continue
            ops = tuple(node_ops.get(node, "?") for node in layer.fused_onnx_nodes)
            fused.append(LayerFusion(layer.name, layer.layer_type, layer.fused_onnx_nodes, ops,
                                     _pattern(ops)))
        return tuple(fused)

    def summary(self, node_ops: Mapping[str, str] | None = None, *,
                profile: int = 0, max_listed: int = 200) -> dict[str, Any]:
        """What the job shows next to FuseForge's own fusion report (JSON values only).

        Counts layers by kind and precision, lists the fusions (at most `max_listed`) and
        counts their patterns; given `node_ops`, also the ONNX nodes no layer names (folded
        into constants or removed by TensorRT, or inside a Myelin region read from its name).
        """
        layers = self.profile_layers(profile)
        fusions = self.fusions(node_ops, profile=profile)
        seen = {node for layer in layers for node in layer.fused_onnx_nodes}
        summary: dict[str, Any] = {
            "schema": self.schema,
            "profile": profile,
            "profiles": len({layer.profile for layer in self.layers}) or 1,
            "layers": len(layers),
            "layer_types": _histogram(layer.layer_type or "?" for layer in layers),
            "precisions": _histogram(layer.precision or "?" for layer in layers),
            "reformat_layers": sum(layer.layer_type == "Reformat" for layer in layers),
            "fused_layers": len(fusions),
            "patterns": _histogram(fusion.pattern for fusion in fusions),
            "fusions": [fusion.to_dict() for fusion in fusions[:max_listed]],
            "fusions_not_listed": max(len(fusions) - max_listed, 0),
            "onnx_nodes_in_layers": len(seen),
            "notes": list(self.notes),
        }
        if node_ops:
            missing = [node for node in node_ops if node not in seen]
            summary["onnx_nodes_not_in_layers"] = len(missing)
            summary["onnx_nodes_not_in_layers_sample"] = missing[:max_listed]
        return summary

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_engine_information(text: str, *,
                             onnx_nodes: Collection[str] | None = None) -> EngineReport:
    """Parse `get_engine_information(LayerInformationFormat.JSON)` from TensorRT 10.x or 11.x.

    `onnx_nodes` (the model's node names) filters node names read from layer names, for layers
    without Metadata. Unknown fields are ignored and missing optional ones left None, so a
    newer TensorRT's additions do not break the report.

    Raises:
        InternalError: `text` is not JSON, or not an object with a "Layers" list (TensorRT's
            output, never the user's).
    """
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as err:
        raise InternalError(f"TensorRT's engine information is not JSON: {err}") from err
    if not isinstance(data, Mapping):
        raise InternalError(
            f"TensorRT's engine information is a JSON {type(data).__name__}, not an object.")
    raw_layers = data.get("Layers", [])
    if not isinstance(raw_layers, list):
        raise InternalError("TensorRT's engine information has a 'Layers' that is not a list.")
    layers = tuple(parse_layer(raw, onnx_nodes=onnx_nodes) for raw in raw_layers)
    notes: list[str] = []
    if "I/O Tensors" in data:
        schema: Schema = "11.x"
        io_tensors = tuple(_io_tensor(raw) for raw in _objects(data["I/O Tensors"]))
    elif "Bindings" in data:
        schema = "10.x"
        io_tensors = tuple(IOTensor(name=str(name)) for name in _list(data["Bindings"]))
    else:
        schema = _schema_from_layers(raw_layers)
        io_tensors = ()
    if raw_layers and all(isinstance(raw, str) for raw in raw_layers):
        schema = "names-only"
        notes.append("The engine was built without DETAILED profiling verbosity: layer kinds "
                     "and precisions are unknown and ONNX nodes were read from layer names.")
    elif any(layer.nodes_source == "name" for layer in layers):
        notes.append("Some layers carry no ONNX metadata; their ONNX nodes were read from the "
                     "layer names (a Myelin region's name gives only its first and last node).")
    if not raw_layers:
        notes.append("The engine information lists no layers (profiling verbosity NONE?).")
    return EngineReport(schema=schema, layers=layers, io_tensors=io_tensors, notes=tuple(notes))


def parse_layer(raw: Mapping[str, Any] | str, *,
                onnx_nodes: Collection[str] | None = None) -> EngineLayer:
    """One layer: an object (DETAILED verbosity) or a bare name (LAYER_NAMES_ONLY).

    Also takes a `get_layer_information(i, JSON)` result once decoded; `onnx_nodes` as in
    `parse_engine_information`.
    """
    if isinstance(raw, str):
        name, profile = _split_profile(raw)
        nodes = nodes_from_name(name, onnx_nodes)
        return EngineLayer(name=raw, layer_type="", fused_onnx_nodes=nodes, precision=None,
                           profile=profile, nodes_source="name" if nodes else "none")
    if not isinstance(raw, Mapping):
        raise InternalError(f"A layer in TensorRT's engine information is a "
                            f"{type(raw).__name__}, not an object or a name.")
    full_name = str(raw.get("Name", ""))
    name, profile = _split_profile(full_name)
    inputs = tuple(_layer_tensor(tensor) for tensor in _objects(raw.get("Inputs", [])))
    outputs = tuple(_layer_tensor(tensor) for tensor in _objects(raw.get("Outputs", [])))
    nodes = nodes_from_metadata(str(raw.get("Metadata") or ""))
    source: NodesSource = "metadata"
    if not nodes:
        is_reformat = str(raw.get("LayerType", "")) == "Reformat"
        nodes = () if is_reformat else nodes_from_name(name, onnx_nodes)
        source = "name" if nodes else "none"
    return EngineLayer(
        name=full_name,
        layer_type=str(raw.get("LayerType", "")),
        fused_onnx_nodes=nodes,
        precision=_layer_precision(inputs, outputs),
        inputs=inputs,
        outputs=outputs,
        parameter_type=_optional_text(raw.get("ParameterType")),
        tactic=_optional_text(raw.get("TacticName")),
        profile=profile,
        nodes_source=source,
    )


def nodes_from_metadata(metadata: str) -> tuple[str, ...]:
    """ONNX node names in a layer's Metadata, in order, without repeats.

    >>> nodes_from_metadata("[ONNX Layer: /conv/Conv]\\x1f[ONNX Layer: /relu/Relu]")
    ('/conv/Conv', '/relu/Relu')
    >>> nodes_from_metadata("[ONNX Layer: /attn/MatMul | /attn (Attention)]")
    ('/attn/MatMul',)
    """
    names: dict[str, None] = {}
    for part in _SEPARATORS.split(metadata):
        part = part.strip()
        # A part cut by TensorRT's 4000-character metadata limit lacks the prefix or the "]".
        if part.startswith(_METADATA_PREFIX) and part.endswith("]"):
            name = part[len(_METADATA_PREFIX):-1].split(" | ")[0]
            if name:
                names.setdefault(name, None)
    return tuple(names)


def nodes_from_name(name: str, known: Collection[str] | None = None) -> tuple[str, ...]:
    """ONNX node names read from a layer name such as "a + b", "PWN(PWN(a), b)" or
    "{ForeignNode[a...b]}"; given `known` node names, only those.

    TensorRT-made layers ("Reformatting CopyNode for ...", "... cast", shuffles it adds) are
    not nodes; without `known` such words may slip through, so pass the model's names.

    >>> nodes_from_name("/conv1/Conv + /bn1/BatchNormalization + /relu/Relu")
    ('/conv1/Conv', '/bn1/BatchNormalization', '/relu/Relu')
    >>> nodes_from_name("PWN(PWN(/act/Sigmoid), /act/Mul)")
    ('/act/Sigmoid', '/act/Mul')
    """
    name, _ = _split_profile(name)
    if name.startswith("Reformatting CopyNode"):
        return ()
    names: dict[str, None] = {}
    for token in _NAME_DELIMITERS.split(name):
        token = token.strip()
        if token in _NAME_NOISE or (known is not None and token not in known):
            continue
        names.setdefault(token, None)
    return tuple(names)


def dtype_of(text: str | None) -> str | None:
    """A FuseForge dtype name from TensorRT's type or format text; None if none is named.

    >>> dtype_of("Channel major FP16 format where channel % 8 == 0"), dtype_of("BFloat16")
    ('fp16', 'bf16')
    """
    if not text:
        return None
    for word in re.findall(r"[A-Za-z0-9]+", text):
        found = _DTYPE_WORDS.get(word.lower())
        if found:
            return found
    return None


def node_op_types(model: onnx.ModelProto) -> dict[str, str]:
    """Node name -> op type ("domain.Op" outside the default domain) for the fusion patterns."""
    ops: dict[str, str] = {}
    for node in iter_nodes(model):
        if node.name:
            ops.setdefault(node.name, node.op_type if node.domain in ("", "ai.onnx")
                           else f"{node.domain}.{node.op_type}")
    return ops


def _layer_tensor(raw: Mapping[str, Any]) -> LayerTensor:
    # 10.x: one "Format/Datatype" text; 11.x: "DataType" plus "Format".
    combined = _optional_text(raw.get("Format/Datatype") or raw.get("Format/DataType"))
    data_type = _optional_text(raw.get("DataType"))
    layout = _optional_text(raw.get("Format"))
    return LayerTensor(
        name=str(raw.get("Name", "")),
        dtype=dtype_of(data_type) or dtype_of(combined) or dtype_of(layout),
        format=layout or combined,
        shape=_dims(raw.get("Dimensions")),
    )


def _io_tensor(raw: Mapping[str, Any]) -> IOTensor:
    profiles = []
    for info in _objects(raw.get("ProfileInfo", [])):
        low, opt, high = (_dims(info.get(key)) for key in ("MinShape", "OptShape", "MaxShape"))
        if low is not None and opt is not None and high is not None:
            profiles.append(OptimizationProfileSpec(min=low, opt=opt, max=high))
    mode = _optional_text(raw.get("IOMode"))
    return IOTensor(
        name=str(raw.get("Name", "")),
        mode=mode.lower() if mode else None,
        dtype=dtype_of(_optional_text(raw.get("DataType"))),
        shape=_dims(raw.get("Dimensions")),
        profiles=tuple(profiles),
    )


def _layer_precision(inputs: Sequence[LayerTensor],
                     outputs: Sequence[LayerTensor]) -> str | None:
    for tensors in (inputs, outputs):
        for tensor in tensors:
            if tensor.dtype in _COMPUTE_DTYPES:
                return tensor.dtype
    for tensor in (*inputs, *outputs):
        if tensor.dtype:
            return tensor.dtype
    return None


def _schema_from_layers(raw_layers: Sequence[Any]) -> Schema:
    for raw in raw_layers:
        if isinstance(raw, Mapping):
            for tensor in _objects([*_list(raw.get("Inputs")), *_list(raw.get("Outputs"))]):
                if "Format/Datatype" in tensor or "Format/DataType" in tensor:
                    return "10.x"
                if "DataType" in tensor:
                    return "11.x"
    return "unknown"


def _split_profile(name: str) -> tuple[str, int]:
    match = _PROFILE_SUFFIX.search(name)
    if match is None:
        return name, 0
    return name[:match.start()], int(match.group(1))


def _pattern(ops: Sequence[str]) -> str:
    if len(ops) <= _PATTERN_MAX_OPS:
        return " + ".join(ops)
    counts = Counter(ops).most_common()
    shown = ", ".join(f"{op} x{count}" for op, count in counts[:6])
    more = f", {len(counts) - 6} more op types" if len(counts) > 6 else ""
    return f"{len(ops)} nodes ({shown}{more})"


def _histogram(values: Iterable[str]) -> dict[str, int]:
    return dict(sorted(Counter(values).items()))


def _dims(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, list):
        return None
    try:
        return tuple(int(dim) for dim in value)
    except (TypeError, ValueError):
        return None


def _objects(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in _list(value) if isinstance(item, Mapping)]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _optional_text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value)
