"""The per-node precision report every backend's reader returns ("was my layer quantized?"):
each compute node of the fused model with the precision it runs at in the engine.

Its own module, under the backends, so that a backend's reader (its own package) and ONNX
Runtime's and TensorRT's (optimizer/quantization/node_precision.py) share it one way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["NodePrecision", "NodePrecisionReport"]


@dataclass(frozen=True)
class NodePrecision:
    name: str
    op_type: str
    precision: str  # "int8" or "float"
    kernel: str | None  # the engine's kernel for it, when one was found
    reason: str | None  # why it stayed in float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NodePrecisionReport:
    """Each compute node of the fused model with its precision in the engine, and the engine's
    kernels counted by precision."""

    nodes: tuple[NodePrecision, ...]
    kernels: Mapping[str, int]  # "int8" / "float" / "conversion" -> kernel count in the engine

    @property
    def int8_nodes(self) -> int:
        return sum(node.precision == "int8" for node in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        by_precision = Counter(node.precision for node in self.nodes)
        return {"nodes": [node.to_dict() for node in self.nodes],
                "node_counts": dict(by_precision), "kernel_counts": dict(self.kernels)}
