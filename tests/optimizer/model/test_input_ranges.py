"""Integer inputs get the range their use in the graph allows: token ids below the embedding's
rows, a mask in {0, 1}; given ranges win; the feeds drawn in them run the model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.errors import InferenceError
from optimizer.model.input_ranges import InputRange, effective_ranges, infer_input_ranges
from optimizer.model.inputs import random_feeds
from optimizer.model.tensor_specs import TensorSpec
from optimizer.testing.models import IR_VERSION, OPSET
from optimizer.testing.real_models import bert_encoder
from optimizer.testing.token_models import masked_token_attention

_TOKEN_INPUTS = [TensorSpec(name, "int64", (2, 8))
                 for name in ("input_ids", "token_type_ids", "attention_mask")]


def _graph_model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
                 tables: dict[str, np.ndarray], output: str = "out") -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "uses", inputs, [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
        [numpy_helper.from_array(array, name) for name, array in tables.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def _table(rows: int) -> np.ndarray:
    return np.random.default_rng(rows).standard_normal((rows, 4)).astype(np.float32)


def _ints(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])


def test_token_ids_token_types_and_mask_of_a_bert_style_model_are_inferred() -> None:
    ranges = infer_input_ranges(masked_token_attention(vocab=30))

    assert ranges["input_ids"] == InputRange(
        0, 30, "inferred", "from Gather on 'embeddings.word_embeddings.weight' (30 rows)")
    assert (ranges["token_type_ids"].low, ranges["token_type_ids"].high) == (0, 2)
    assert ranges["token_type_ids"].describe("token_type_ids") == (
        "token_type_ids: [0, 2) from Gather on 'embeddings.token_type_embeddings.weight' (2 rows)")
    assert ranges["attention_mask"] == InputRange(0, 2, "inferred",
                                                  "as a mask (cast to float, then Sub)")


@pytest.mark.parametrize("form", ["dynamo", "torchscript"])
def test_the_real_model_encoders_token_ids_stay_below_the_vocabulary(form: str) -> None:
    model = bert_encoder(layers=1, hidden=32, heads=2, seq=8, form=form, vocab=77)

    ranges = infer_input_ranges(model)

    assert (ranges["input_ids"].low, ranges["input_ids"].high) == (0, 77)
    assert "attention_mask" not in ranges  # a float additive mask: not an integer input


def test_the_default_integers_crash_the_model_and_the_inferred_ranges_run_it(
        tmp_path: Path) -> None:
    model = masked_token_attention()
    onnx.save(model, tmp_path / "bert.onnx")
    with OnnxRuntimeRunner(tmp_path / "bert.onnx", optimization_level="disabled") as runner:
        # The old default, integers in [0, 10): past the 2-row token-type embedding.
        with pytest.raises(InferenceError, match="out of data bounds"):
            for feed in random_feeds(_TOKEN_INPUTS, count=4, seed=0):
                runner.infer(feed)
        ranges = infer_input_ranges(model)
        for feed in random_feeds(_TOKEN_INPUTS, count=4, seed=0, ranges=ranges):
            runner.infer(feed)
            assert set(np.unique(feed["attention_mask"])) <= {0, 1}
            assert feed["token_type_ids"].max() <= 1 and feed["input_ids"].max() < 30


def test_a_range_follows_casts_and_reshapes_to_the_table() -> None:
    model = _graph_model(
        [helper.make_node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
         helper.make_node("Unsqueeze", ["ids32", "axes"], ["ids3"]),
         helper.make_node("Squeeze", ["ids3", "axes"], ["ids2"]),
         helper.make_node("Identity", ["ids2"], ["ids_again"]),
         helper.make_node("Gather", ["table", "ids_again"], ["out"], axis=0)],
        [_ints("ids")], {"table": _table(12), "axes": np.array([-1], np.int64)})

    assert (infer_input_ranges(model)["ids"].high) == 12


def test_ids_indexing_several_tables_take_the_smallest() -> None:
    model = _graph_model(
        [helper.make_node("Gather", ["big", "ids"], ["a"]),
         helper.make_node("Gather", ["small", "ids"], ["b"]),
         helper.make_node("Add", ["a", "b"], ["out"])],
        [_ints("ids")], {"big": _table(100), "small": _table(7)})

    found = infer_input_ranges(model)["ids"]

    assert (found.low, found.high) == (0, 7)
    assert found.reason == "from Gather on 'small' (7 rows)"


def test_a_table_held_by_a_constant_node_limits_too() -> None:
    constant = helper.make_node("Constant", [], ["table"],
                                value=numpy_helper.from_array(_table(5), "table"))
    model = _graph_model([constant, helper.make_node("Gather", ["table", "ids"], ["out"])],
                         [_ints("ids")], {})

    assert infer_input_ranges(model)["ids"].high == 5


@pytest.mark.parametrize(
    ("nodes", "reason"),
    [
        ([helper.make_node("Cast", ["mask"], ["flag"], to=TensorProto.BOOL),
          helper.make_node("Where", ["flag", "x", "fill"], ["out"])],
         "as a mask (cast to bool, then Where)"),
        ([helper.make_node("Equal", ["mask", "zero"], ["flag"]),
          helper.make_node("Where", ["flag", "fill", "x"], ["out"])],
         "as a mask (Equal with 0)"),
        ([helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT),
          helper.make_node("Mul", ["x", "m"], ["out"])],
         "as a mask (cast to float, then Mul)"),
    ],
)
def test_a_value_used_as_a_mask_is_zero_or_one(nodes: list[onnx.NodeProto], reason: str) -> None:
    tables = {"x": np.ones((1, 1), np.float32), "fill": np.array(-1e4, np.float32),
              "zero": np.array(0, np.int64)}
    model = _graph_model(nodes, [_ints("mask")], tables)

    assert infer_input_ranges(model)["mask"] == InputRange(0, 2, "inferred", reason)


def test_an_integer_no_use_limits_is_left_to_the_default() -> None:
    model = _graph_model(
        [helper.make_node("Add", ["count", "one"], ["more"]),
         helper.make_node("Cast", ["more"], ["out"], to=TensorProto.FLOAT)],
        [_ints("count")], {"one": np.array(1, np.int64)})

    assert infer_input_ranges(model) == {}


def test_a_given_range_wins_over_the_inferred_one() -> None:
    inferred = infer_input_ranges(masked_token_attention(vocab=30))

    ranges = effective_ranges(inferred, {"input_ids": (5, 9)})

    assert ranges["input_ids"] == InputRange(5, 9, "given", "as given")
    assert ranges["token_type_ids"] == inferred["token_type_ids"]
