"""The tar archives models with external data are uploaded in, as the client sends them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fuseforge_client.model_archive import archive_chunks
from optimizer.testing.external_data_models import DATA_FILE

__all__ = ["archived"]


def archived(folder: Path, names: Sequence[str] = ("model.onnx", DATA_FILE)) -> bytes:
    """The tar of `names` in `folder`, as `fuseforge submit` sends it."""
    return b"".join(archive_chunks(folder, names))
