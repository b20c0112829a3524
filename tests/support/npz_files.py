"""The bytes of an .npz file, as a dataset upload carries them."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

__all__ = ["npz_bytes"]


def npz_bytes(compressed: bool = False, **arrays: Any) -> bytes:
    """`arrays` saved by numpy under their keyword names (zip-deflated when `compressed`)."""
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, **arrays)
    return buffer.getvalue()
