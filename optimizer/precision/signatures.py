"""An op's type constraints: which of its inputs and outputs change float type together.

A precision conversion may retype a node only as its schema allows: every input and output
bound to one type parameter ("T") changes together, and only to a type the parameter admits.
Inputs with a fixed type (Resize's `scales` is always "tensor(float)") never change. Default-domain
schemas come from `onnx.defs` at the model's opset; com.microsoft schemas (the contrib ops our
onnxruntime fusion passes emit) from onnxruntime's registry, because onnx does not know them;
fuseforge schemas (the plugin ops our tensorrt passes emit) from `onnx.defs`, where importing
optimizer.plugins registers them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import onnx
import onnx.defs
import onnx_ir as ir

from optimizer.passes.matching import MS_DOMAIN, ONNX_DOMAINS
from optimizer.plugins.base import DOMAIN as PLUGIN_DOMAIN
from optimizer.plugins.registry import register_onnx_schemas

__all__ = [
    "OpSignature",
    "infer_output_dtypes",
    "model_opsets",
    "node_signature",
    "op_signature",
    "with_inferred_types",
]

# Shape inference and `op_signature` read the fuseforge schemas from onnx.defs (idempotent).
register_onnx_schemas()


@dataclass(frozen=True)
class OpSignature:
    """The typing rules of one op version, read from its schema.

    `inputs` and `outputs` hold each formal parameter's type string: a type parameter name ("T")
    or a fixed type ("tensor(float)"). When the last formal parameter is variadic it covers every
    later index too.
    """

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    variadic_input: bool
    variadic_output: bool
    allowed: Mapping[str, frozenset[ir.DataType]]  # type parameter -> data types it admits

    def input_type(self, index: int) -> str | None:
        return _formal(self.inputs, self.variadic_input, index)

    def output_type(self, index: int) -> str | None:
        return _formal(self.outputs, self.variadic_output, index)

    def is_parameter(self, type_str: str | None) -> bool:
        return type_str is not None and type_str in self.allowed

    def admits(self, type_str: str, dtype: ir.DataType) -> bool:
        """Whether a value of formal type `type_str` may have `dtype`."""
        if type_str in self.allowed:
            return dtype in self.allowed[type_str]
        return _parse_type(type_str) == dtype


def op_signature(domain: str, op_type: str, opset: int) -> OpSignature | None:
    """The signature of `op_type` as a model importing `opset` of `domain` sees it.

    None when no schema is known (a custom domain, or an op onnxruntime does not register).
    """
    if domain in ONNX_DOMAINS or domain == PLUGIN_DOMAIN:
        try:
            schema = onnx.defs.get_schema(op_type, opset, "" if domain in ONNX_DOMAINS else domain)
        except onnx.defs.SchemaError:
            return None
        return _signature(schema)
    if domain == MS_DOMAIN:
        versions = _onnxruntime_schemas().get(op_type, ())
        fitting = [s for s in versions if s.since_version <= max(opset, 1)]
        return _signature(fitting[-1]) if fitting else None
    return None


def model_opsets(model: ir.Model) -> dict[str, int]:
    """Domain -> imported version, the default domain under "" (com.microsoft defaults to 1)."""
    imports = dict(model.opset_imports)
    default = imports.pop("ai.onnx", 1)
    return {MS_DOMAIN: 1, **imports, "": imports.get("", default)}


def node_signature(node: ir.Node, opsets: Mapping[str, int]) -> OpSignature | None:
    """`op_signature` for `node` at the versions `opsets` (from `model_opsets`) import."""
    domain = "" if node.domain in ONNX_DOMAINS else node.domain
    return op_signature(domain, node.op_type, opsets.get(domain, 1))


def infer_output_dtypes(node: ir.Node, signature: OpSignature) -> None:
    """Fill in output dtypes that shape inference left unknown (e.g. of contrib ops).

    An output whose type parameter also binds an input of known dtype takes that dtype; an
    output of fixed type takes it. Others stay unknown.
    """
    bound: dict[str, ir.DataType] = {}
    for index, value in enumerate(node.inputs):
        type_str = signature.input_type(index)
        if value is not None and value.dtype is not None and signature.is_parameter(type_str):
            assert type_str is not None
            bound.setdefault(type_str, value.dtype)
    for index, value in enumerate(node.outputs):
        if value.dtype is not None:
            continue
        type_str = signature.output_type(index)
        if type_str is None:
            continue
        dtype = bound.get(type_str) if signature.is_parameter(type_str) else _parse_type(type_str)
        if dtype is not None:
            value.dtype = dtype


def with_inferred_types(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with the value types ONNX shape inference can work out recorded.

    Inference that fails leaves the declared types; values it cannot type (outputs of contrib
    ops) are left for `infer_output_dtypes`.
    """
    try:
        inferred: onnx.ModelProto = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        return inferred
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy


def _formal(types: tuple[str, ...], variadic: bool, index: int) -> str | None:
    if index < len(types):
        return types[index]
    return types[-1] if variadic and types else None


def _signature(schema: Any) -> OpSignature:
    # onnx's OpSchema and onnxruntime's pybind schema differ only in the type string's name.
    def type_str(formal: Any) -> str:
        return str(getattr(formal, "type_str", None) or formal.typeStr)

    def variadic(formals: Sequence[Any]) -> bool:
        return bool(formals) and "Variadic" in str(formals[-1].option)

    allowed = {
        constraint.type_param_str: frozenset(
            dtype for dtype in map(_parse_type, constraint.allowed_type_strs) if dtype is not None)
        for constraint in schema.type_constraints
    }
    return OpSignature(
        inputs=tuple(type_str(f) for f in schema.inputs),
        outputs=tuple(type_str(f) for f in schema.outputs),
        variadic_input=variadic(schema.inputs),
        variadic_output=variadic(schema.outputs),
        allowed=allowed,
    )


def _parse_type(type_str: str) -> ir.DataType | None:
    """ "tensor(float16)" -> FLOAT16; None for sequences, maps, optionals and parameters."""
    if not (type_str.startswith("tensor(") and type_str.endswith(")")):
        return None
    name = type_str[len("tensor("):-1].upper()
    try:
        return ir.DataType(onnx.TensorProto.DataType.Value(name))
    except ValueError:
        return None


@functools.cache
def _onnxruntime_schemas() -> dict[str, tuple[Any, ...]]:
    """com.microsoft op name -> its registered schema versions, oldest first."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_state
    except ImportError:  # without onnxruntime every contrib op stays float32
        return {}
    by_name: dict[str, list[Any]] = {}
    for schema in ort_state.get_all_operator_schema():
        if schema.domain == MS_DOMAIN:
            by_name.setdefault(schema.name, []).append(schema)
    return {name: tuple(sorted(found, key=lambda s: s.since_version))
            for name, found in by_name.items()}
