"""Fusion passes, one family per module, and the order they run in."""

from optimizer.passes.base import BACKENDS, FusionPass
from optimizer.passes.fuse_conv_bn import FOLD_BATCH_NORM

__all__ = ["BACKENDS", "DEFAULT_PASSES", "FusionPass", "PASSES_BY_NAME"]

# Order matters: clean-ups expose patterns, BN folds before Conv+activation sees the Conv.
DEFAULT_PASSES: tuple[FusionPass, ...] = (FOLD_BATCH_NORM,)

PASSES_BY_NAME = {p.name: p for p in DEFAULT_PASSES}
