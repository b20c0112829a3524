"""What a model itself decides of its search space: the fusion families that rewrite it (only
those get an "off" candidate) and whether int8 dynamic has anything to quantize.

One fusion with every default pass tells both; its report also says which rules fired and
which refused, with the reasons, for a plan shown before any candidate is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import onnx

from optimizer.fusion_report import FusionReport
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.passes import DEFAULT_PASSES
from optimizer.quantization.quantize import DYNAMIC_OP_TYPES
from optimizer.search.candidates import SearchSpace

__all__ = ["firing_families", "has_matrix_products", "space_for_model", "spaces_for_model"]


def firing_families(report: FusionReport) -> tuple[str, ...]:
    """The passes with a rule that fired at least once, in the order they run."""
    fired = {stats.pass_name for stats in report.rules if stats.applied}
    return tuple(p.name for p in DEFAULT_PASSES if p.name in fired)


def has_matrix_products(model: onnx.ModelProto) -> bool:
    """Whether the main graph has an op int8 dynamic quantization rewrites."""
    return any(node.op_type in DYNAMIC_OP_TYPES for node in model.graph.node)


def space_for_model(model: onnx.ModelProto, space: SearchSpace) -> tuple[SearchSpace, FusionReport]:
    """`space` narrowed to what `model` makes of it, and the fusion report that said so.

    Raises:
        PassError: a pass cannot run on the model (the job would fail the same way).
    """
    _, report = optimize_model(model, OptimizeOptions(backend=str(space.backend)))
    narrowed = replace(space, firing_passes=firing_families(report),
                       has_matrix_products=has_matrix_products(model))
    return narrowed, report


def spaces_for_model(model: onnx.ModelProto, spaces: Sequence[SearchSpace]
                     ) -> list[tuple[SearchSpace, FusionReport]]:
    """space_for_model() of each backend's space (each backend fuses the model its own way).

    Raises:
        PassError: a pass cannot run on the model.
    """
    return [space_for_model(model, space) for space in spaces]
