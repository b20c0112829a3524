"""Check that an uploaded file is a self-contained ONNX model FuseForge can work on.

The checks run cheapest and most defensive first: its protobuf framing holds (without loading
it, optimizer/model/scan.py), the file parses, it has a model's fields, it
stays within the structural `ModelLimits` and holds storable names, its opsets and operator
domains are ones the installed runtimes load, it refers to no external data, and only then
does the ONNX checker (which trusts the structure) see it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from optimizer.errors import InternalError, InvalidModelError, UnsupportedModelError
from optimizer.model.endless_loops import endless_loops
from optimizer.model.external_data import (
    check_external_data,
    escapes_folder,
    external_tensors,
    location_of,
)
from optimizer.model.graphs import iter_tensors
from optimizer.model.limits import ModelLimits, check_limits
from optimizer.model.non_finite import non_finite_weights
from optimizer.model.scan import scan_model_file
from optimizer.model.skeleton import WeightCount
from optimizer.model.tensor_specs import ModelSummary, summarize_model
from optimizer.op_support import check_op_support

__all__ = ["check_model_file", "load_checked_model"]

_KNOWN_TYPES = frozenset(onnx.TensorProto.DataType.values())
_CHECK_BYTES_UP_TO = 256 * 2**20
_SAVE_INLINE_HINT = (
    "Save the model with every tensor inside the .onnx file, e.g. "
    "onnx.save(model, path, save_as_external_data=False), and upload that file."
)


def check_model_file(path: Path, limits: ModelLimits | None = None, *,
                     name: str | None = None, stand_in: str | None = None,
                     stripped: Sequence[WeightCount] = (),
                     external_data: bool = False) -> ModelSummary:
    """Parse and check the uploaded model at `path`, and summarize its inputs and outputs.
    Messages call the file `name` (the name the user knows it by), else its own name. Raises
    as `load_checked_model`."""
    return load_checked_model(path, limits, name=name, stand_in=stand_in,
                              stripped=stripped, external_data=external_data)[1]


def load_checked_model(path: Path, limits: ModelLimits | None = None, *,
                       name: str | None = None, stand_in: str | None = None,
                       stripped: Sequence[WeightCount] = (), external_data: bool = False
                       ) -> tuple[onnx.ModelProto, ModelSummary]:
    """The model at `path`, parsed and checked, and the summary of its inputs and outputs (for
    a caller that goes on to work on the model: it is read once).

    Without `external_data`, reads no file other than `path`: tensors stored as external data
    are refused before the ONNX checker runs, since the checker would open the files they
    name. With it, their data files must lie in `path`'s folder and hold their bytes
    (optimizer/model/external_data.py checks that first); the tensors stay external in the
    model returned (none is read) and the summary sums up their files. The one other
    exception is a skeleton's (optimizer/model/skeleton.py): `path` is then the skeleton,
    `stand_in` the external file its stripped tensors name (an empty file beside it, which
    the checker only looks for), and `stripped` their NaN and infinity counts. (A skeleton of
    an archive's model has both: its data files are then stand-ins of their sizes.)

    Raises:
        InvalidModelError: the file is empty, is not an ONNX protobuf, parses but is not a model,
            has a name with a NUL character or invalid UTF-8, has a Loop that provably never
            ends (endless_loops.py), or fails the ONNX checker (whose message is included).
        ModelLimitError: the model is over one of `limits` (default `ModelLimits()`:
            control-flow depth, rank, a dim, a name's length); its `limit` names the field.
        UnsupportedModelError: an opset newer than the installed onnx or ONNX Runtime knows, a
            node of a domain nothing implements, a tensor referring to external data
            without `external_data` (the upload is a single file), or an input or output that
            is not a tensor.
        InvalidModelError: with `external_data`, a location outside the folder or a range
            outside its file (external_data.py).
        InternalError: `path` does not exist, which means the upload was not stored.
    """
    path = Path(path)
    file_name = name or path.name
    try:
        size = path.stat().st_size
    except FileNotFoundError as err:
        raise InternalError(f"Uploaded model file {str(path)!r} does not exist.") from err
    scan_model_file(path, file_name)  # garbage is refused before anything is loaded
    # A model up to _CHECK_BYTES_UP_TO is read once, and its bytes go to the ONNX checker as
    # they are (faster than the checker reading and parsing the file again); a larger one is
    # not held twice: the checker reads the file itself (a model check's memory is limited).
    # (A skeleton is checked from its path: the checker looks for the stand-in beside it.)
    data = path.read_bytes() if size <= _CHECK_BYTES_UP_TO and stand_in is None else None
    try:
        # format="protobuf": without it onnx picks a parser from the file's extension.
        model = (onnx.load(path, format="protobuf", load_external_data=False) if data is None
                 else onnx.load_model_from_string(data, format="protobuf"))
    except DecodeError as err:
        if "alloc failed" in str(err):  # protobuf's way of saying it ran out of memory
            raise MemoryError(f"parsing model file {file_name!r} ran out of memory") from err
        raise InvalidModelError(
            f"Model file {file_name!r} ({size} bytes) is not an ONNX protobuf: {err}. "
            "Upload the binary .onnx file written by onnx.save or torch.onnx.export."
        ) from err
    _require_model_fields(model, file_name)
    check_limits(model, limits or ModelLimits(), file_name)
    for endless in endless_loops(model):
        raise InvalidModelError(f"Model file {file_name!r}: {endless}.")
    check_op_support(model, file_name)
    external = None
    if external_data and any(location_of(t) != stand_in for t in external_tensors(model)):
        external = check_external_data(model, path.parent, file_name, skip=stand_in)
        data = None  # the checker finds the data files from the model's path
    else:
        _refuse_external_data(model, file_name, stand_in)
    _require_known_tensor_types(model, file_name)
    edited: Path | None = None
    if _constants_outside_inputs_at_ir3(model):
        # What older converters wrote (onnxruntime's own sample mul_1.onnx is one): IR 3 wanted
        # every initializer listed as a graph input, and runtimes never cared. IR 4 dropped
        # that rule without changing what such a model computes, so say IR 4 and check that.
        model.ir_version = 4
        checked: str | bytes | onnx.ModelProto = model
        if stand_in is not None or external is not None:
            # Checked from a file beside the stand-in or the data files, likewise.
            edited = path.with_name(f".{path.stem}.{os.getpid()}.ir4.onnx")
            edited.write_bytes(model.SerializeToString())
            checked = str(edited)
    else:
        checked = str(path) if data is None else data
    del data  # the IR 3 case checks the edited model: its bytes can go first
    try:
        _run_checker(checked, file_name)
    finally:
        if edited is not None:
            edited.unlink(missing_ok=True)
    _require_tensor_io(model, file_name)
    warning = non_finite_weights(model, also=stripped)
    summary = replace(summarize_model(model), external_data=external)
    return model, replace(summary, warnings=(warning,)) if warning else summary


def _constants_outside_inputs_at_ir3(model: onnx.ModelProto) -> bool:
    if model.ir_version >= 4:
        return False
    inputs = {value.name for value in model.graph.input}
    return any(tensor.name not in inputs for tensor in model.graph.initializer)


def _require_model_fields(model: onnx.ModelProto, file_name: str) -> None:
    # Arbitrary bytes often parse as a ModelProto with nothing in it; say so plainly rather
    # than let the checker report a confusing detail.
    missing = []
    if model.ir_version <= 0:
        missing.append("no ir_version")
    if not model.opset_import:
        missing.append("no opset_import")
    if not model.HasField("graph"):
        missing.append("no graph")
    if missing:
        raise InvalidModelError(
            f"Model file {file_name!r} parses as protobuf but is not an ONNX model: it has "
            f"{', '.join(missing)}. Upload the binary .onnx file written by onnx.save or "
            "torch.onnx.export.")


def _refuse_external_data(model: onnx.ModelProto, file_name: str,
                          stand_in: str | None) -> None:
    for tensor in external_tensors(model):
        location = location_of(tensor)
        if stand_in is not None and location == stand_in:
            continue  # a skeleton's stripped tensor: its data came with the upload
        if escapes_folder(location):
            raise UnsupportedModelError(
                f"Model file {file_name!r}: tensor {tensor.name!r} stores its data at "
                f"{location!r}, which refers outside the upload. {_SAVE_INLINE_HINT}")
        raise UnsupportedModelError(
            f"Model file {file_name!r}: tensor {tensor.name!r} stores its data in the external "
            f"file {location!r}, but an upload is a single file, so external data files are "
            f"not available. {_SAVE_INLINE_HINT}")


def _require_known_tensor_types(model: onnx.ModelProto, file_name: str) -> None:
    # The ONNX checker lets a stored tensor of data type 9999 through; every runtime refuses it.
    for tensor in iter_tensors(model):
        if not _is_known_type(tensor.data_type):
            raise InvalidModelError(
                f"Model file {file_name!r}: tensor {tensor.name!r} has element type "
                f"{tensor.data_type}, which is not an ONNX TensorProto.DataType. Re-export "
                "the model.")


def _is_known_type(elem_type: int) -> bool:
    return elem_type != onnx.TensorProto.UNDEFINED and elem_type in _KNOWN_TYPES


def _run_checker(model: str | bytes | onnx.ModelProto, file_name: str) -> None:
    try:
        # The file's bytes or path where it can, instead of this process serializing the model
        # again to hand it over. External data was refused above, so it reads only the file.
        onnx.checker.check_model(model, full_check=False)
    except onnx.checker.ValidationError as err:
        raise InvalidModelError(
            f"Model file {file_name!r} fails the ONNX checker: {err}") from err


def _require_tensor_io(model: onnx.ModelProto, file_name: str) -> None:
    if not model.graph.output:
        raise InvalidModelError(
            f"Model file {file_name!r}: the graph declares no outputs, so there is nothing to "
            "compute. Export the model with its outputs.")
    initializer_names = {tensor.name for tensor in model.graph.initializer}
    values = [("input", value) for value in model.graph.input
              if value.name not in initializer_names]
    values += [("output", value) for value in model.graph.output]
    for role, value in values:
        kind = value.type.WhichOneof("value") or "untyped"
        if kind != "tensor_type":
            raise UnsupportedModelError(
                f"Model file {file_name!r}: {role} {value.name!r} is a "
                f"{kind.removesuffix('_type')} value, not a tensor; only tensor inputs and "
                "outputs are supported. Export the model so that it takes and returns plain "
                "tensors.")
        if not _is_known_type(value.type.tensor_type.elem_type):
            raise InvalidModelError(
                f"Model file {file_name!r}: {role} {value.name!r} has element type "
                f"{value.type.tensor_type.elem_type}, which is not an ONNX "
                "TensorProto.DataType. Re-export the model.")
