"""Fusion passes, one family per module, and the order they run in."""

from optimizer.passes.base import BACKENDS, FusionPass
from optimizer.passes.cleanup import CLEANUP
from optimizer.passes.fuse_attention import FUSE_ATTENTION
from optimizer.passes.fuse_conv_bn import FOLD_BATCH_NORM
from optimizer.passes.fuse_matmul_add import FUSE_MATMUL_ADD

__all__ = ["BACKENDS", "DEFAULT_PASSES", "FusionPass", "PASSES_BY_NAME"]

# Order matters: clean-up folds constants and infers shapes that later rules check; BN folds
# before Conv+activation sees the Conv; attention matches the head split/merge Reshapes before
# MatMul+Add lowering rewrites the projections around them.
DEFAULT_PASSES: tuple[FusionPass, ...] = (CLEANUP, FOLD_BATCH_NORM, FUSE_ATTENTION, FUSE_MATMUL_ADD)

PASSES_BY_NAME = {p.name: p for p in DEFAULT_PASSES}
