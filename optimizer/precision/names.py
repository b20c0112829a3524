"""Fresh value and node names for what a precision pass adds to a graph."""

from __future__ import annotations

import onnx_ir as ir

__all__ = ["NameAllocator"]


class NameAllocator:
    """Hands out names no value or node of `graph` has yet: `base`, else `base_1`, `base_2`..."""

    def __init__(self, graph: ir.Graph) -> None:
        self._taken = ({v.name for v in graph.inputs if v.name}
                       | set(graph.initializers)
                       | {v.name for node in graph for v in node.outputs if v.name}
                       | {node.name for node in graph if node.name})

    def fresh(self, base: str) -> str:
        name, n = base, 0
        while name in self._taken:
            n += 1
            name = f"{base}_{n}"
        self._taken.add(name)
        return name
