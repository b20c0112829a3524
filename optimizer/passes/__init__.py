"""Fusion passes, one family per module, and the order they run in."""

from optimizer.passes.base import BACKENDS, FusionPass, PassStage
from optimizer.passes.cleanup import CLEANUP
from optimizer.passes.fold_batch_norm import FOLD_BATCH_NORM
from optimizer.passes.fuse_attention import FUSE_ATTENTION
from optimizer.passes.fuse_conv_activation import FUSE_CONV_ACTIVATION
from optimizer.passes.fuse_conv_add_relu import FUSE_CONV_ADD_RELU
from optimizer.passes.fuse_gelu import FUSE_GELU
from optimizer.passes.fuse_layer_norm import FUSE_LAYER_NORM
from optimizer.passes.fuse_matmul_add import FUSE_MATMUL_ADD
from optimizer.passes.fuse_residual_gemm import FUSE_RESIDUAL_GEMM
from optimizer.passes.fuse_skip_layer_norm import FUSE_SKIP_LAYER_NORM
from optimizer.passes.fuse_to_plugins import FUSE_TO_PLUGINS
from optimizer.passes.pack_attention_projections import PACK_ATTENTION_PROJECTIONS
from optimizer.passes.sink_reshapes import SINK_RESHAPES
from optimizer.passes.upgrade_opset_for_layer_norm import UPGRADE_OPSET_FOR_LAYER_NORM

__all__ = ["BACKENDS", "DEFAULT_PASSES", "FusionPass", "PASSES_BY_NAME", "PassStage"]

# Order matters (the engine repeats the whole sequence until nothing changes, but a pass that
# runs first can hide another's pattern):
# - clean-up folds constants and infers the shapes later rules check;
# - BN folds before Conv+activation sees the Conv; Conv+Add+Relu claims its Relu before
#   Conv+Relu would fuse the other branch's;
# - the opset upgrade right before LayerNorm, which needs opset 17 (it converts only when a
#   LayerNorm would then fuse); LayerNorm before Add+LayerNorm; LayerNorm, GELU (with its bias
#   Add) and attention (with its head split/merge Reshapes) before MatMul+Add lowering rewrites
#   the Adds and projections; packing attention's projections after both made its Gemms;
#   sinking the rows views last, once every Gemm that makes them is there;
# - for TensorRT, the plugin fusions take Add+LayerNorm, bias+GELU and attention first.
DEFAULT_PASSES: tuple[FusionPass, ...] = (
    CLEANUP,
    FOLD_BATCH_NORM,
    FUSE_CONV_ADD_RELU,
    FUSE_CONV_ACTIVATION,
    UPGRADE_OPSET_FOR_LAYER_NORM,
    FUSE_LAYER_NORM,
    FUSE_TO_PLUGINS,
    FUSE_SKIP_LAYER_NORM,
    FUSE_GELU,
    FUSE_ATTENTION,
    FUSE_RESIDUAL_GEMM,
    FUSE_MATMUL_ADD,
    PACK_ATTENTION_PROJECTIONS,
    SINK_RESHAPES,
)

PASSES_BY_NAME = {p.name: p for p in DEFAULT_PASSES}
