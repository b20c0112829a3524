"""Models saved with external data: the .onnx file and a data file beside it."""

from __future__ import annotations

from pathlib import Path

import onnx

from optimizer.model.data_file import MIN_EXTERNAL_BYTES
from optimizer.testing.block_stack import block_stack

__all__ = ["DATA_FILE", "saved_with_external_data"]

DATA_FILE = "model.onnx.data"


def saved_with_external_data(folder: Path, model: onnx.ModelProto | None = None, *,
                             location: str = DATA_FILE) -> Path:
    """`model` (default: two MatMul+Add+LayerNorm blocks, random weights) saved as
    folder/model.onnx with its weights in folder/`location`."""
    (folder / location).parent.mkdir(parents=True, exist_ok=True)  # onnx.save makes no folder
    path = folder / "model.onnx"
    onnx.save(model or block_stack(2, hidden=32, seed=1), path, save_as_external_data=True,
              location=location, size_threshold=MIN_EXTERNAL_BYTES)
    return path
