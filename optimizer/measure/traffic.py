"""The bytes one inference moves at least: a model's weights once, its inputs read and its
outputs written, at a given batch.

A lower bound of the memory traffic, not the traffic: activations between layers, weights
re-read when they do not stay in cache, workspace and padding all add to it. Dividing it by a
latency therefore gives a floor of the achieved bandwidth, and its fraction of the machine's
(optimizer/measure/memory_bandwidth.py) says how near a model is to being bound by memory: near 1, a
faster kernel cannot help much; far below, the time goes elsewhere (compute, overheads).

The batch is the leading dim of each input and output whose leading dim is the model's batch
or left symbolic; other symbolic dims count as 1 (a lower bound again). Weights come from the
initializers and Constant nodes' tensors by their dims and type, so external data files need
not be read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import helper

__all__ = ["ModelTraffic", "model_traffic", "tensor_bytes"]


@dataclass(frozen=True)
class ModelTraffic:
    """A model's weight bytes, and its input and output bytes per sample of a batch plus those
    that do not grow with the batch."""

    weight_bytes: int
    io_bytes_per_sample: int
    io_bytes_fixed: int = 0

    def bytes_per_inference(self, batch_size: int) -> int:
        """Weights once, plus inputs and outputs at `batch_size`.

        >>> ModelTraffic(1000, 12, 4).bytes_per_inference(8)
        1100
        """
        return self.weight_bytes + self.io_bytes_fixed + self.io_bytes_per_sample * batch_size


def model_traffic(path: Path) -> ModelTraffic:
    """The traffic of the ONNX model at `path` (its external data is not loaded)."""
    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    weights = sum(tensor_bytes(t) for t in graph.initializer)
    weights += sum(tensor_bytes(attribute.t) for node in graph.node if node.op_type == "Constant"
                   for attribute in node.attribute if attribute.name == "value")
    initializers = {t.name for t in graph.initializer}
    inputs = [value for value in graph.input if value.name not in initializers]
    batch = _model_batch(inputs)
    per_sample, fixed = _io_bytes([*inputs, *graph.output], batch)
    return ModelTraffic(weight_bytes=weights, io_bytes_per_sample=per_sample, io_bytes_fixed=fixed)


def tensor_bytes(tensor: onnx.TensorProto) -> int:
    """The bytes of `tensor`'s values by its dims and element type (strings: what is stored)."""
    if tensor.data_type == onnx.TensorProto.STRING:
        return sum(len(s) for s in tensor.string_data)
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count * _element_bytes(tensor.data_type)


def _element_bytes(elem_type: int) -> int:
    try:
        return int(helper.tensor_dtype_to_np_dtype(elem_type).itemsize)
    except (KeyError, TypeError, ValueError):
        return 0  # an element type numpy has no form for: counted as nothing (a lower bound)


def _model_batch(inputs: list[onnx.ValueInfoProto]) -> int | None:
    """The leading dim of the first input, when it is a number (the batch by convention)."""
    for value in inputs[:1]:
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_value"):
            return int(dims[0].dim_value)
    return None


def _io_bytes(values: Iterable[onnx.ValueInfoProto], batch: int | None) -> tuple[int, int]:
    """(bytes per sample, bytes fixed) of graph inputs and outputs: a tensor whose leading dim
    is symbolic or the model's batch scales with the batch."""
    per_sample = fixed = 0
    for value in values:
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            continue
        element = _element_bytes(tensor.elem_type)
        dims = list(tensor.shape.dim)
        rest = element
        for dim in dims[1:]:
            rest *= dim.dim_value if dim.HasField("dim_value") else 1
        if not dims:
            fixed += element
            continue
        leading = dims[0]
        if not leading.HasField("dim_value"):
            per_sample += rest
        elif batch and leading.dim_value == batch:
            per_sample += rest
        else:
            fixed += rest * leading.dim_value
    return per_sample, fixed
