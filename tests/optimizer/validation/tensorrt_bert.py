"""The BERT encoder fused for TensorRT (fuseforge plugin nodes), with feeds, for the CPU tools."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx

from optimizer.fusion_report import FusionReport
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.plugins import DOMAIN
from optimizer.testing.real_models import BertForm, bert_encoder

__all__ = ["SEQ", "VOCAB", "bert_feeds", "plugin_counts", "small_bert", "tensorrt_fused"]

SEQ, VOCAB = 16, 100
TENSORRT = OptimizeOptions(backend="tensorrt")
Feeds = list[dict[str, np.ndarray]]


def small_bert(seed: int, form: BertForm = "dynamo") -> onnx.ModelProto:
    """Two layers, hidden 32, two heads of 16, sequence 16; random weights, biases and norms."""
    return bert_encoder(layers=2, hidden=32, heads=2, seq=SEQ, seed=seed, form=form, vocab=VOCAB)


def tensorrt_fused(model: onnx.ModelProto) -> tuple[onnx.ModelProto, FusionReport]:
    return optimize_model(model, TENSORRT)


def plugin_counts(model: onnx.ModelProto) -> Counter[str]:
    return Counter(node.op_type for node in model.graph.node if node.domain == DOMAIN)


def bert_feeds(seed: int, count: int = 3) -> Feeds:
    """Token ids and an additive mask that hides a random tail of each sequence."""
    rng = np.random.default_rng(seed)
    feeds: Feeds = []
    for _ in range(count):
        mask = np.zeros((1, 1, 1, SEQ), np.float32)
        mask[..., rng.integers(SEQ // 2, SEQ):] = -10000.0
        feeds.append({"input_ids": rng.integers(0, VOCAB, (1, SEQ)).astype(np.int64),
                      "attention_mask": mask})
    return feeds
