"""Optimize a model: choose the passes for a backend, run them, and return the model and report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import onnx
import onnx_ir as ir

from optimizer.errors import PassError
from optimizer.fusion_report import FusionReport
from optimizer.passes import DEFAULT_PASSES, FusionPass
from optimizer.passes.engine import run_passes
from optimizer.passes.origins import tag_origins
from optimizer.registries.backends import DEFAULT_BACKEND

__all__ = ["OptimizeOptions", "PassSelection", "optimize_model", "select_passes"]

PassSelection = Literal["all", "none"] | Sequence[str]


@dataclass(frozen=True)
class OptimizeOptions:
    """What to optimize for. Everything that optimizes a model again (bisection, localization,
    ablation, `fuseforge validate --bisect`) takes these options whole, so it runs the same
    passes as the first optimization did."""

    backend: str = DEFAULT_BACKEND
    passes: PassSelection = "all"
    excluded_rules: tuple[str, ...] = ()  # rule names never to apply (see passes.engine)
    # The passes `passes` selects from, in the order they run. A caller with passes of its own
    # (a test planting a wrong rule, an experiment) brings them here instead of patching
    # DEFAULT_PASSES.
    catalog: tuple[FusionPass, ...] = DEFAULT_PASSES
    # The fused model is then quantized to int8: passes that hide ops from the quantizer
    # (`FusionPass.hides_from_quantizer`) are left out, even when named.
    for_quantization: bool = False


def select_passes(options: OptimizeOptions) -> tuple[list[FusionPass], dict[str, str]]:
    """The passes of `options.catalog` to run, in its order, and those left out with the reason.

    "all" leaves out passes measured slower on `options.backend`; naming a pass runs it
    regardless. Raises PassError for a name the catalog does not hold.
    """
    chosen, skipped = _selected(options)
    if not options.for_quantization:
        return chosen, skipped
    hidden = {p.name: f"left out before int8 quantization: {p.hides_from_quantizer}"
              for p in chosen if p.hides_from_quantizer}
    return [p for p in chosen if p.name not in hidden], {**skipped, **hidden}


def _selected(options: OptimizeOptions) -> tuple[list[FusionPass], dict[str, str]]:
    selection, backend, catalog = options.passes, options.backend, options.catalog
    if selection == "none":
        return [], {}
    if selection == "all":
        chosen = [p for p in catalog if backend not in p.off_by_default]
        skipped = {p.name: f"off by default on {backend}: {p.off_by_default[backend]}"
                   for p in catalog if backend in p.off_by_default}
        return chosen, skipped
    known = [p.name for p in catalog]
    unknown = [name for name in selection if name not in known]
    if unknown:
        raise PassError(
            f"unknown pass(es) {', '.join(map(repr, unknown))}; available: {', '.join(known)}"
        )
    wanted = set(selection)
    return [p for p in catalog if p.name in wanted], {}


def optimize_model(model: onnx.ModelProto, options: OptimizeOptions, *,
                   data_folder: Path | None = None) -> tuple[onnx.ModelProto, FusionReport]:
    """Run the selected passes on a copy of `model`; the input model is not modified.

    Tensors stored as external data stay there: a pass that reads one maps it from
    `data_folder` (the model file's folder), and those no pass rewrites are still external in
    the model returned, so a model of any size is fused in about the memory of what the passes
    change. Save such a result with its data file (`save_model(..., data_location=...,
    source_folder=data_folder)`)."""
    passes, left_out = select_passes(options)
    ir_model = ir.from_proto(model)
    if data_folder is not None:
        ir.external_data.set_base_dir(ir_model.graph, data_folder)
    tag_origins(ir_model)  # each fused node then names the original nodes it came from
    report = run_passes(ir_model, passes, backend=options.backend,
                        excluded_rules=options.excluded_rules)
    report = replace(report, passes_skipped={**left_out, **report.passes_skipped})
    return ir.to_proto(ir_model), report
