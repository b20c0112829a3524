"""Describe an ONNX model's inputs and outputs as plain values that survive a trip through JSON."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np
import onnx
from onnx import TensorProto, helper

from optimizer.model.external_data import ExternalData

__all__ = [
    "Dim",
    "ModelSummary",
    "SharedDimConflict",
    "TensorSpec",
    "dtype_name",
    "numpy_dtype",
    "shared_dim_conflict",
    "summarize_model",
    "unknown_input_message",
]

Dim = int | str | None  # fixed size, symbolic name, or unknown


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output.

    `dtype` is a numpy dtype name ("float32", "int64", "bool", "bfloat16"...), or the ONNX type
    name in lower case ("string") where numpy has no matching dtype. In `shape` an int is a fixed
    dim (always >= 1), a str a symbolic dim (e.g. "batch") and None an unknown dim.

    A declared dim of 0 or less is dynamic (None): Paddle2ONNX writes dim_value -1 for a dynamic
    batch, and specs stored before this rule may still hold such ints, so `from_dict` maps them
    too. (A fixed dim of 0, an empty input, is not a shape FuseForge can build for.)
    """

    name: str
    dtype: str
    shape: tuple[Dim, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TensorSpec:
        """Rebuild a spec from `to_dict()` output (e.g. JSON stored in a database)."""
        return cls(name=data["name"], dtype=data["dtype"],
                   shape=tuple(_dynamic_if_not_positive(dim) for dim in data["shape"]))


@dataclass(frozen=True)
class ModelSummary:
    """What a caller needs to know about a model without loading it again."""

    ir_version: int
    opset: int  # version of the default ("" / "ai.onnx") domain; 0 when not imported
    producer: str  # "name version", stripped
    inputs: tuple[TensorSpec, ...]  # graph inputs that are not initializers
    outputs: tuple[TensorSpec, ...]
    warnings: tuple[str, ...] = ()  # what is valid but suspect (NaN weights: model_check.py)
    external_data: ExternalData | None = None  # the data files its tensors read, if any

    def to_dict(self) -> dict[str, Any]:
        return {
            "ir_version": self.ir_version,
            "opset": self.opset,
            "producer": self.producer,
            "inputs": [spec.to_dict() for spec in self.inputs],
            "outputs": [spec.to_dict() for spec in self.outputs],
            "warnings": list(self.warnings),
            **({"external_data": self.external_data.to_dict()} if self.external_data else {}),
        }


def summarize_model(model: onnx.ModelProto) -> ModelSummary:
    """Summarize a loaded model; never raises on odd but parseable models.

    A value whose type is not a tensor (sequence, map, optional) gets that kind as its dtype and
    an empty shape, as does a tensor of unknown rank: `check_model_file` refuses both for inputs.
    """
    graph = model.graph
    initializer_names = {tensor.name for tensor in graph.initializer}
    return ModelSummary(
        ir_version=model.ir_version,
        opset=default_opset(model),
        producer=f"{model.producer_name} {model.producer_version}".strip(),
        inputs=tuple(_spec(value) for value in graph.input
                     if value.name not in initializer_names),
        outputs=tuple(_spec(value) for value in graph.output),
    )


def default_opset(model: onnx.ModelProto) -> int:
    """The imported version of the default operator set ("" or "ai.onnx"), or 0 if none is."""
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return int(opset.version)
    return 0


def unknown_input_message(inputs: Sequence[TensorSpec], given: str) -> str:
    """The refusal of `given` (e.g. "A shape was requested for input 'x'") for a name none of
    `inputs` has, listing the names they have.

    >>> unknown_input_message([TensorSpec("ids", "int64", (1, 8))], "A shape was requested for input 'x'")
    "A shape was requested for input 'x', but the model has no input of that name; its inputs are: 'ids'."
    """
    known = ", ".join(repr(spec.name) for spec in inputs) or "none"
    return f"{given}, but the model has no input of that name; its inputs are: {known}."


def dtype_name(elem_type: int) -> str:
    """The numpy dtype name for an ONNX `TensorProto.DataType`, e.g. FLOAT -> "float32".

    Types numpy cannot hold (STRING) or that this onnx does not know give a lower-case name
    ("string", "undefined", "elem_type_99") instead of raising, so summaries never crash.
    """
    if elem_type == TensorProto.STRING:
        return "string"  # numpy would say "object", which hides what the model wants
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        try:
            return str(TensorProto.DataType.Name(elem_type)).lower()
        except ValueError:
            return f"elem_type_{elem_type}"


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The numpy dtype for a `TensorSpec.dtype`; raises TypeError for names numpy cannot hold.

    Extended float types ("bfloat16", "float8_e4m3fn") resolve because onnx imports ml_dtypes,
    which registers them with numpy.
    """
    return np.dtype(name)


def _spec(value: onnx.ValueInfoProto) -> TensorSpec:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        return TensorSpec(name=value.name, dtype=str(kind or "undefined").removesuffix("_type"),
                          shape=())
    tensor_type = value.type.tensor_type
    shape = tuple(_dim(dim) for dim in tensor_type.shape.dim)
    return TensorSpec(name=value.name, dtype=dtype_name(tensor_type.elem_type), shape=shape)


def _dim(dim: onnx.TensorShapeProto.Dimension) -> Dim:
    if dim.HasField("dim_value"):
        return _dynamic_if_not_positive(int(dim.dim_value))
    if dim.HasField("dim_param") and dim.dim_param:
        return dim.dim_param
    return None


def _dynamic_if_not_positive(dim: Dim) -> Dim:
    # -1 (Paddle2ONNX) and 0 mean "dynamic" in exported models; see TensorSpec.
    return None if isinstance(dim, int) and not isinstance(dim, bool) and dim < 1 else dim


V = TypeVar("V")


@dataclass(frozen=True)
class SharedDimConflict(Generic[V]):
    """Symbolic dim `dim` takes `first_value` in input `first_input`, `value` in `input`."""

    dim: str
    first_input: str
    first_value: V
    input: str
    value: V


def shared_dim_conflict(
    inputs: Sequence[TensorSpec], value_of: Callable[[TensorSpec, int], V],
) -> SharedDimConflict[V] | None:
    """The first symbolic dim two inputs give different values, or None.

    ONNX gives one dim_param name one size in a model (e.g. "batch" of input_ids and
    attention_mask), so whatever a job sets for it (a size, a profile's range) must agree in
    every input. `value_of(spec, axis)` is what is set for axis `axis` of input `spec`.
    """
    seen: dict[str, tuple[str, V]] = {}
    for spec in inputs:
        for axis, dim in enumerate(spec.shape):
            if not isinstance(dim, str):
                continue
            value = value_of(spec, axis)
            first_input, first_value = seen.setdefault(dim, (spec.name, value))
            if first_value != value:
                return SharedDimConflict(dim, first_input, first_value, spec.name, value)
    return None
