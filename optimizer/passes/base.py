"""What a fusion pass is: a named family of rewrite rules, lowered per backend.

A pass holds onnxscript rewrite rules (pattern, check with a reason, rewrite) for each backend it
supports, or a plain function for whole-graph clean-ups. The engine (passes/engine.py) applies
them to a fixed point and records how often each rule fired and why near-misses were refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import onnx_ir as ir
from onnxscript.rewriter.pattern import RewriteRule

from optimizer.backends import BACKENDS

__all__ = ["BACKENDS", "FusionPass", "GraphFunction", "LazyRules", "PassStage", "on_every_backend"]


class PassStage(StrEnum):
    """The fusion family a pass belongs to, in the order the ablation adds them
    (optimizer/measure/ablation.py): each stage's variant times every stage up to it."""

    CLEANUP = "cleanup"  # constants and shape arithmetic folded, no-ops and dead code dropped
    CONV_BN_ACT = "conv_bn_act"  # BN folded into Conv, Conv+activation
    ADD_RELU = "add_relu"  # Conv+Add+Relu (residual blocks)
    MATMUL_GEMM = "matmul_gemm"  # MatMul+Add into Gemm and its reshapes
    OTHER = "other"  # LayerNorm, GELU, attention and the plugin fusions


# A whole-graph transformation that returns how many changes it made.
GraphFunction = Callable[[ir.Model], int]


class LazyRules(Mapping[str, Sequence[RewriteRule]]):
    """A pass's rules per backend, each backend's built the first time they are asked for.

    Building a rule compiles its pattern (milliseconds each, ~100 rules): `fuseforge optimize`
    for one backend need not pay for the other's, nor for passes off by default.

    >>> rules = LazyRules({Backend.ONNXRUNTIME: lambda: [FuseX.rule()]})  # doctest: +SKIP
    """

    def __init__(self, builders: Mapping[str, Callable[[], Sequence[RewriteRule]]]) -> None:
        self._builders = dict(builders)
        self._built: dict[str, Sequence[RewriteRule]] = {}

    def __getitem__(self, backend: str) -> Sequence[RewriteRule]:
        if backend not in self._built:
            self._built[backend] = tuple(self._builders[backend]())
        return self._built[backend]

    def __iter__(self) -> Iterator[str]:
        return iter(self._builders)

    def __len__(self) -> int:
        return len(self._builders)


def on_every_backend(builder: Callable[[], Sequence[RewriteRule]]) -> LazyRules:
    """The same rules for every backend: a fusion written in standard ONNX ops that each
    backend runs natively. Only a pass that lowers differently per backend names backends."""
    return LazyRules(dict.fromkeys(BACKENDS, builder))


@dataclass(frozen=True)
class FusionPass:
    """One fusion family.

    `rules` maps a backend to the rules that lower the fusion for it; a backend that is absent
    does not get this pass (the pattern is left for the backend itself, or it has no fused form).
    `off_by_default` maps a backend to the measurement that showed the fused form to be slower
    there: the pass then runs only when a job names it explicitly.
    """

    name: str
    summary: str
    stage: PassStage
    rules: Mapping[str, Sequence[RewriteRule]] = field(default_factory=dict)
    graph_function: GraphFunction | None = None  # for clean-ups that are not pattern rules
    off_by_default: Mapping[str, str] = field(default_factory=dict)
    # Why the pass is left out of a model that is then quantized (None: it runs): its fused op
    # has no integer kernel, so the quantizer would leave the ops it swallowed in float.
    hides_from_quantizer: str | None = None

    def supports(self, backend: str) -> bool:
        return self.graph_function is not None or backend in self.rules

    def rules_for(self, backend: str) -> Sequence[RewriteRule]:
        return self.rules.get(backend, ())
