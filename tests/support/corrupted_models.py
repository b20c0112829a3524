"""Model bytes corrupted at random (hypothesis): a few bytes inserted and deleted at places of a
few real models, for the tests that hold a check to refusing whatever arrives with a model
error (a 422), never another exception (a 500)."""

from __future__ import annotations

from hypothesis import strategies as st

from optimizer.testing import models
from tests.support.hostile_models import nested_if

__all__ = ["corrupted", "edits", "seeds"]

seeds = st.sampled_from([models.model_bytes(models.small_cnn()),
                         models.model_bytes(models.mlp()), nested_if(3)])
# Each edit: where (a fraction of the length), the bytes put there, how many bytes they replace.
edits = st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.binary(max_size=4),
                           st.integers(0, 4)), min_size=1, max_size=4)


def corrupted(seed: bytes, changes: list[tuple[float, bytes, int]]) -> bytes:
    data = bytearray(seed)
    for where, insert, delete in changes:
        position = int(where * len(data))
        data[position:position + delete] = insert
    return bytes(data)
