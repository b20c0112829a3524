"""save_model writes a model only once ONNX Runtime has loaded it and run it: a recurrent model
whose fixed shapes ONNX Runtime refuses is a clear error, never a file that cannot be loaded."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from optimizer.errors import InferenceError, UnsupportedModelError
from optimizer.model.shapes import fix_input_shapes
from optimizer.model_writer import save_model
from optimizer.testing.models import IR_VERSION, small_cnn
from optimizer.testing.passes import run_model
from optimizer.testing.shape_models import lstm_in_a_loop, lstm_in_nested_ifs, strided_convnet

_VAD_SHAPES = {"input": [1, 16], "state": [2, 1, 16]}


def _vad_feeds(sr: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    return {"input": rng.standard_normal((1, 16)).astype(np.float32),
            "state": rng.standard_normal((2, 1, 16)).astype(np.float32),
            "sr": np.array(sr, np.int64)}


def test_the_recurrent_model_loads_and_runs_with_dynamic_inputs(tmp_path: Path) -> None:
    model = lstm_in_nested_ifs()

    save_model(model, tmp_path / "vad.onnx", what="the model")

    output, state = run_model(onnx.load(tmp_path / "vad.onnx"), _vad_feeds(16000))
    assert output.shape == (1, 16) and state.shape == (2, 1, 16)


def test_fixed_shapes_onnx_runtime_cannot_load_are_refused_and_nothing_is_written(
        tmp_path: Path) -> None:
    # The unused 8 kHz network in a Loop body (an If branch's is relaxed: tests below).
    model = lstm_in_a_loop()
    fixed = fix_input_shapes(model, _VAD_SHAPES)
    path = tmp_path / "vad.static.onnx"

    with pytest.raises(UnsupportedModelError,
                       match=r"ONNX Runtime cannot load the static model \(input shapes "
                             r"input=\[1, 16\], state=\[2, 1, 16\], sr=\[\], ONNX Runtime "
                             r"optimization level 'all'\): .*LSTM.*"
                             r"First input tensor must have rank 3.*leave the inputs dynamic"):
        save_model(fixed, path, what="the static model")

    assert list(tmp_path.iterdir()) == []  # neither the file nor the copy ONNX Runtime loaded
    with pytest.raises(Exception, match="rank 3"):  # what the file would have done to its user
        ort.InferenceSession(fixed.SerializeToString())
    # Without graph optimizations ONNX Runtime folds nothing in the body, and the model runs.
    # (Random rates run the 8 kHz body, which fails on a 16 kHz input in the original too.)
    save_model(fixed, path, what="the static model", reference=model,
               optimization_level="disabled")
    assert run_model(onnx.load(path), _vad_feeds(16000))[0].shape == (1, 16)


def test_fixed_shapes_relax_only_the_if_branch_that_cannot_run_so_the_model_loads(
        tmp_path: Path) -> None:
    # At rank-2 shapes the 8 kHz branch would feed its LSTM rank 4 once ONNX Runtime folds its
    # rank check; it reads its inputs through a Reshape whose shape is known only at run time.
    model = lstm_in_nested_ifs()
    fixed = fix_input_shapes(model, _VAD_SHAPES)

    save_model(fixed, tmp_path / "vad.static.onnx", what="the static model", reference=model,
               feeds=_vad_feeds(16000))

    by_rate = next(node for node in fixed.graph.node if node.name == "by_rate")
    branches = {attribute.name: attribute.g for attribute in by_rate.attribute}
    assert "Reshape" not in _op_types(branches["then_branch"])
    assert [node.op_type for node in branches["else_branch"].node[:3]] == [
        "Shape", "Where", "Reshape"]
    assert "input" in _reads(branches["then_branch"].node)  # at [1, 16]: optimized there
    relaxed_reads = _reads(branches["else_branch"].node[3:])
    assert "input" not in relaxed_reads and "input__dead_branch_x" in relaxed_reads
    assert _declared(branches["else_branch"], "input__dead_branch_x") == [0, 0]  # rank 2, dims ?
    loaded = run_model(onnx.load(tmp_path / "vad.static.onnx"), _vad_feeds(16000))
    for got, want in zip(loaded, run_model(model, _vad_feeds(16000)), strict=True):
        np.testing.assert_array_equal(got, want)
    for failing in (model, fixed):  # the 8 kHz branch still fails as it does in the original
        with pytest.raises(Exception, match="Input X must have 3 dimensions"):
            run_model(failing, _vad_feeds(8000))


def test_a_model_that_loads_but_cannot_run_at_its_shapes_is_refused(tmp_path: Path) -> None:
    at_one = fix_input_shapes(strided_convnet(["N", 3, "H", "W"]), {"x": [1, 3, 1, 1]})
    path = tmp_path / "convnet.onnx"

    with pytest.raises(InferenceError, match=r"loads the convnet but cannot run it at input "
                                             r"shapes x=\[1, 3, 1, 1\]: .*Conv"):
        save_model(at_one, path, what="the convnet")

    assert not path.exists()


def test_a_working_model_is_written_as_it_is(tmp_path: Path) -> None:
    model = fix_input_shapes(small_cnn(seed=5), {"input": [2, 3, 32, 32]})
    path = tmp_path / "cnn.onnx"

    save_model(model, path, what="the cnn")

    assert path.read_bytes() == model.SerializeToString()


def _two_row_embedding() -> onnx.ModelProto:
    table = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["out"])], "token_types",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 4])],
        initializer=[numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    return model


def test_random_integers_are_drawn_where_the_graph_can_take_them(tmp_path: Path) -> None:
    save_model(_two_row_embedding(), tmp_path / "types.onnx", what="the embedding")

    assert (tmp_path / "types.onnx").exists()


def test_integers_the_reference_fails_on_too_do_not_refuse_a_model(tmp_path: Path) -> None:
    model = _two_row_embedding()
    past_the_table = {"ids": np.full((1, 8), 5, np.int64)}  # the inputs' fault, not the model's

    with pytest.raises(InferenceError, match="indices element out of data bounds"):
        save_model(model, tmp_path / "types.onnx", what="the embedding", feeds=past_the_table)
    save_model(model, tmp_path / "types.onnx", what="the embedding", reference=model,
               feeds=past_the_table)

    assert (tmp_path / "types.onnx").exists()


def _op_types(graph: onnx.GraphProto) -> set[str]:
    return {node.op_type for node in graph.node}


def _reads(nodes: Iterable[onnx.NodeProto]) -> set[str]:
    """What `nodes` read, in their subgraphs too."""
    read = set()
    for node in nodes:
        read.update(node.input)
        for attribute in node.attribute:
            if attribute.HasField("g"):
                read |= _reads(attribute.g.node)
    return read


def _declared(graph: onnx.GraphProto, name: str) -> list[int] | None:
    """The dims shape inference recorded for `name` in `graph` (None: unknown, rank included)."""
    for value in graph.value_info:
        if value.name == name:
            shape = value.type.tensor_type
            return [d.dim_value for d in shape.shape.dim] if shape.HasField("shape") else None
    return None
