"""A tiny BERT-style model with the three integer inputs a transformers export takes, for tests
of the random inputs drawn for it and of the shapes it is validated at."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optimizer.testing.models import IR_VERSION, OPSET

__all__ = ["MaskFlaw", "masked_token_attention"]

# The planted attention bugs that make no difference at sequence length 1 (softmax over one key).
MaskFlaw = Literal["none", "mask_ignored", "softmax_over_queries"]


def masked_token_attention(seed: int = 0, *, vocab: int = 30, type_vocab: int = 2,
                           hidden: int = 8, flaw: MaskFlaw = "none",
                           dims: tuple[int | str, int | str] = ("batch", "sequence")
                           ) -> onnx.ModelProto:
    """"input_ids", "token_type_ids" and "attention_mask" (int64, `dims`) -> "context" float32
    [*dims, hidden]: word + token-type embedding (`vocab` and `type_vocab` rows), one attention
    head whose scores get the BERT mask bias (1 - float(mask)) * -10000, softmax over the keys.

    `flaw` plants a bug a check at sequence length 1 cannot see: "mask_ignored" drops the mask
    bias, "softmax_over_queries" normalises over the wrong axis.
    """
    rng = np.random.default_rng(seed)

    def init(name: str, shape: tuple[int, ...], scale: float = 1.0) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.normal(0.0, scale, shape).astype(np.float32), name)

    inits = [
        init("embeddings.word_embeddings.weight", (vocab, hidden)),
        init("embeddings.token_type_embeddings.weight", (type_vocab, hidden)),
        *(init(f"attention.{w}.weight", (hidden, hidden), 1 / math.sqrt(hidden))
          for w in ("query", "key", "value")),
        init("attention.query.bias", (hidden,), 0.1),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(-10000.0, np.float32), "mask_fill"),
        numpy_helper.from_array(np.array(math.sqrt(hidden), np.float32), "scale"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
    ]
    node = helper.make_node
    nodes = [
        node("Gather", ["embeddings.word_embeddings.weight", "input_ids"], ["words"], axis=0),
        node("Gather", ["embeddings.token_type_embeddings.weight", "token_type_ids"], ["types"],
             axis=0),
        node("Add", ["words", "types"], ["embedded"]),
        node("MatMul", ["embedded", "attention.query.weight"], ["q0"]),
        node("Add", ["q0", "attention.query.bias"], ["q"]),
        node("MatMul", ["embedded", "attention.key.weight"], ["k"]),
        node("MatMul", ["embedded", "attention.value.weight"], ["v"]),
        node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        node("MatMul", ["q", "kt"], ["qk"]),
        node("Div", ["qk", "scale"], ["scores"]),
        # transformers' get_extended_attention_mask: [b, s] -> [b, 1, s], 0 keeps, -10000 masks.
        node("Unsqueeze", ["attention_mask", "axis1"], ["mask3"]),
        node("Cast", ["mask3"], ["mask_float"], to=TensorProto.FLOAT),
        node("Sub", ["one", "mask_float"], ["inverted"]),
        node("Mul", ["inverted", "mask_fill"], ["mask_bias"]),
    ]
    if flaw == "mask_ignored":
        nodes.append(node("Identity", ["scores"], ["biased"]))
    else:
        nodes.append(node("Add", ["scores", "mask_bias"], ["biased"]))
    axis = 1 if flaw == "softmax_over_queries" else -1
    nodes += [node("Softmax", ["biased"], ["probs"], axis=axis),
              node("MatMul", ["probs", "v"], ["context"])]
    ints = [helper.make_tensor_value_info(name, TensorProto.INT64, list(dims))
            for name in ("input_ids", "token_type_ids", "attention_mask")]
    graph = helper.make_graph(
        nodes, "masked_token_attention", ints,
        [helper.make_tensor_value_info("context", TensorProto.FLOAT, [*dims, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model
