"""A stand-in for a backend runtime that computes one quantized node wrongly, as OpenVINO 2026.4
does the Conv after PP-OCRv4's head Concat: ONNX Runtime underneath, but the node named
`VICTIM` has its output negated whenever its weights come through a DequantizeLinear (its
int8 form). In float it is computed right."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner

__all__ = ["VICTIM", "mishandling_runner"]

VICTIM = "node_Conv_3"  # block1.a's Conv, its BatchNormalization folded in


def mishandling_runner(model_path: Path, threads: int | None) -> OnnxRuntimeRunner:
    """`model_path` run by ONNX Runtime, the victim's int8 form negated (a CandidateRunner)."""
    model = onnx.load(model_path)
    dequantized = {node.output[0] for node in model.graph.node
                   if node.op_type == "DequantizeLinear"}
    for index, node in enumerate(model.graph.node):
        if node.name == VICTIM and len(node.input) > 1 and node.input[1] in dequantized:
            wrong = node.output[0]
            node.output[0] = f"{wrong}/right"
            model.graph.node.insert(index + 1, helper.make_node(
                "Neg", [node.output[0]], [wrong], name=f"{VICTIM}/mishandled"))
            break
    # Beside the candidate, in the search's own temporary folder.
    wrong_path = model_path.with_name(f"{model_path.stem}.as-mishandled.onnx")
    onnx.save(model, wrong_path)
    return OnnxRuntimeRunner(wrong_path, intra_op_threads=threads)
