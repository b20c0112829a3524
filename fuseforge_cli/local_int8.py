"""`fuseforge optimize --precision int8`: the int8 step of a job, on a local file.

The same library calls as a job's (optimizer/quantization/search.py) on ONNX Runtime's
flavours: calibrated on --calibration (an .npz, one array per input with a leading sample
axis), judged on --validation or, without one, on the last fifth of the calibration samples,
timed against the fused fp32 model, which is written instead when int8 is out of budget or not
faster.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from fuseforge_cli.failures import EXIT_USAGE, CliFailure, readable_file
from optimizer.model.inputs import random_feeds
from optimizer.model.tensor_specs import summarize_model
from optimizer.precision import run_outputs
from optimizer.quantization.calibration import calibrate
from optimizer.quantization.samples import hold_apart
from optimizer.quantization.search import (
    QuantizationRequest,
    QuantizationResult,
    quantize_within_budget,
)
from optimizer.registries.quantization import CalibrationMethod, QuantizationMode
from optimizer.validation.datasets import load_dataset
from optimizer.validation.tolerances import default_tolerances

__all__ = ["quantize_locally"]

Feeds = list[dict[str, np.ndarray]]
_RANDOM_SAMPLES = 8  # dynamic quantization without data is judged on seeded random inputs


def quantize_locally(model: onnx.ModelProto, fused: onnx.ModelProto,
                     args: argparse.Namespace) -> QuantizationResult:
    """`fused` (the fp32 fusion of `model`, at the job's shapes) quantized as args ask.

    Raises:
        CliFailure: static quantization without --calibration.
        DatasetError: a dataset does not fit the model's inputs.
    """
    mode = QuantizationMode(args.quantization_mode or QuantizationMode.AUTO)
    if mode is QuantizationMode.STATIC and args.calibration is None:
        raise CliFailure("UsageError", "--quantization-mode static needs --calibration DATA.npz: "
                         "FuseForge never sets scales from random inputs.", EXIT_USAGE)
    inputs = summarize_model(model).inputs
    calibration, validation, labels = _samples(args, inputs)
    result = quantize_within_budget(
        fused, request=QuantizationRequest(
            mode=mode, method=CalibrationMethod(args.calibration_method or "auto")),
        tolerances=default_tolerances("int8"), validation_feeds=validation,
        reference=run_outputs(model, validation), calibration_feeds=calibration,
        tables=lambda method, graph: calibrate(graph, calibration or [], method), labels=labels)
    return result


def _samples(args: argparse.Namespace, inputs: Any
             ) -> tuple[Feeds | None, Feeds, np.ndarray | None]:
    """(calibration samples, validation samples, validation labels)."""
    calibration = (load_dataset(readable_file(args.calibration), inputs)
                   if args.calibration is not None else None)
    if args.validation is not None:
        validation = load_dataset(readable_file(args.validation), inputs)
        return (calibration.feeds if calibration else None), validation.feeds, validation.labels
    if calibration is not None:
        split = hold_apart(calibration.feeds, calibration.labels, field="--calibration")
        return split.calibration, split.validation, split.labels
    return None, random_feeds(inputs, count=_RANDOM_SAMPLES, seed=0), None


def summary_lines(result: QuantizationResult, output: Path) -> list[str]:
    """What the int8 step decided, for the terminal."""
    lines = [f"  int8: {result.shipped} written to {output}: {result.why}"]
    if result.opset_note:
        lines.append(f"  int8: {result.opset_note}")
    lines += [f"  int8: kept in float: {node.name} ({node.op_type}), worst cosine "
              f"{node.worst_cosine_after:.5f} once kept" for node in result.kept_nodes]
    return lines
