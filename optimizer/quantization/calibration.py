"""Calibration: the range of every activation over the calibration samples, computed once.

`calibrate` runs ONNX Runtime's calibrator (the fp32 graph with every quantizable tensor made an
output) over the samples in the order given, which the caller fixes and records, so a rerun
gives the same ranges. The result, a `CalibrationTable`, is ONNX Runtime's own calibration
cache (JSON: tensor name -> range), tied to the exact graph it was computed on by
`graph_sha256`: the ranges name that graph's tensors. The table holds ranges, not scales, so
one calibration serves every flavour (uint8 or int8 activations, symmetric or not) and every
GPU; callers store it per (model, dataset, method, graph) and reuse it.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from optimizer.errors import QuantizationError
from optimizer.plugins.decompose import runnable_in_onnxruntime
from optimizer.registries.quantization import CalibrationMethod

__all__ = ["CalibrationTable", "calibrate", "graph_sha256", "ort_method"]

Feed = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class CalibrationTable:
    """The activation ranges of one graph over one set of samples, by one method."""

    method: CalibrationMethod
    graph_sha256: str
    samples: int
    data: bytes  # ONNX Runtime's calibration cache (onnxruntime.quantization.save_tensors_data)

    def tensor_count(self) -> int:
        return len(json.loads(self.data).get("data", {}))

    def write(self, path: Path) -> Path:
        path.write_bytes(self.data)
        return path


def graph_sha256(model: onnx.ModelProto) -> str:
    """The hash of the graph a table's ranges name (its nodes, weights and opsets)."""
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def calibrate(model: onnx.ModelProto, feeds: Sequence[Feed],
              method: CalibrationMethod) -> CalibrationTable:
    """The ranges of `model`'s quantizable activations over `feeds`, in their order.

    `model` is the fp32 graph that is then quantized (already at its Q/DQ opset); fuseforge
    plugin nodes run decomposed (their outputs keep their names).

    Raises:
        QuantizationError: no feeds, a concrete method was not given, or ONNX Runtime could not
            run the calibration graph.
    """
    if method is CalibrationMethod.AUTO:
        raise QuantizationError("calibrate needs a concrete method (minmax, entropy or "
                                "percentile); 'auto' is resolved by the caller")
    if not feeds:
        raise QuantizationError("calibration needs at least one sample; the dataset has none")
    from onnxruntime.quantization import (  # noqa: PLC0415  # heavy: only where quantizing
        CalibrationDataReader,
        TensorsData,
        create_calibrator,
        save_tensors_data,
    )

    class _Samples(CalibrationDataReader):  # type: ignore[misc]  # onnxruntime has no stubs
        def __init__(self) -> None:
            self._samples: Iterator[Feed] = iter(feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            sample = next(self._samples, None)
            return None if sample is None else dict(sample)

    with tempfile.TemporaryDirectory(prefix="fuseforge-calibration-") as tmp:
        source = Path(tmp) / "model.onnx"
        runnable = onnx.ModelProto()
        runnable.CopyFrom(runnable_in_onnxruntime(model))  # saving as external data rewrites it
        onnx.save(runnable, source, save_as_external_data=True)
        try:
            calibrator = create_calibrator(
                source, [], augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                calibrate_method=ort_method(method),
                extra_options=_CALIBRATOR_OPTIONS.get(method, {}))
            calibrator.collect_data(_Samples())
            ranges = calibrator.compute_data()
        except QuantizationError:
            raise
        except Exception as err:  # ONNX Runtime's errors share no base class below Exception
            raise QuantizationError(f"calibration ({method}) failed on {len(feeds)} samples: "
                                    f"{err}") from err
        if not isinstance(ranges, TensorsData):
            raise QuantizationError(f"calibration ({method}) returned {type(ranges).__name__}, "
                                    "not tensor ranges")
        cache = Path(tmp) / "calibration.json"
        save_tensors_data(ranges, cache)
        data = cache.read_bytes()
    return CalibrationTable(method=method, graph_sha256=graph_sha256(model), samples=len(feeds),
                            data=data)


# ONNX Runtime's CalibrationMethod member for each method.
_ORT_METHOD = {CalibrationMethod.MINMAX: "MinMax", CalibrationMethod.ENTROPY: "Entropy",
               CalibrationMethod.PERCENTILE: "Percentile"}
# Percentile keeps 99.999% of |x|: the default 99.999 in ONNX Runtime, stated so it is recorded.
_CALIBRATOR_OPTIONS = {CalibrationMethod.PERCENTILE: {"percentile": 99.999}}


def ort_method(method: CalibrationMethod) -> object:
    """ONNX Runtime's CalibrationMethod for `method` (what its quantizer checks a cache by)."""
    from onnxruntime.quantization import CalibrationMethod as OrtMethod  # noqa: PLC0415
    return getattr(OrtMethod, _ORT_METHOD[method])
