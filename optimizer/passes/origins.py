"""Each node of a fused model says which original nodes it came from: the origin tag.

Before the passes run, every node is tagged with its own id (its name, or "<op_type>_<index>"
for one without: optimizer/measure/provenance.py's `node_ids`). onnxscript's rewriter copies the
matched nodes' metadata onto the nodes that replace them; the merger registered here makes it
join the tags (a set, in order) instead of keeping the first, so a node fused twice names all
it swallowed. The tag travels in the fused model's `metadata_props` and ONNX Runtime ignores it.
"""

from __future__ import annotations

import json

import onnx_ir as ir
from onnxscript.rewriter import _rewrite_rule

__all__ = ["ORIGIN_KEY", "merge_origins", "origins_of", "tag_origins"]

ORIGIN_KEY = "fuseforge.origin"


def origins_of(tag: str) -> list[str]:
    """The ids in a tag (a JSON list: node names may hold any character); none if malformed."""
    try:
        ids = json.loads(tag)
    except ValueError:
        return []
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []


def merge_origins(first: str, second: str) -> str:
    """Both tags' ids, each once, first's first.

    >>> merge_origins('["conv1", "bn1"]', '["bn1", "relu1"]')
    '["conv1", "bn1", "relu1"]'
    """
    return json.dumps(list(dict.fromkeys((*origins_of(first), *origins_of(second)))))


def tag_origins(model: ir.Model) -> None:
    """Tag each node of `model`'s main graph with its id (nodes of subgraphs are left as they
    are: their time is their parent's)."""
    for index, node in enumerate(model.graph):
        node.metadata_props[ORIGIN_KEY] = json.dumps([node.name or f"{node.op_type}_{index}"])


# The rewriter's module-level merger: without this entry it keeps the first tag of a match.
_rewrite_rule._default_metadata_merger.mergers.setdefault(ORIGIN_KEY, merge_origins)
