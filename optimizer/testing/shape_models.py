"""Tiny models built in code that reproduce how real exports declare and use shapes: a dynamic
dim written as dim_value -1 (Paddle2ONNX), a strided convnet with dynamic spatial dims, and a
recurrent model whose LSTM sits in nested `If` branches (silero-vad), and one whose unused LSTM
sits in a Loop body."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optimizer.testing.models import IR_VERSION

__all__ = ["lstm_in_a_loop", "lstm_in_nested_ifs", "strided_convnet"]


def strided_convnet(dims: list[int | str | None], seed: int = 0) -> onnx.ModelProto:
    """Input "x" of `dims` (e.g. [-1, 3, 48, 192]: dim_value -1, or ["N", 3, "H", "W"]) ->
    two 3x3 stride-2 unpadded Convs with Relu -> GlobalAveragePool -> "y" [N, 8, 1, 1].

    Below 7x7 the second Conv has no room: ONNX Runtime refuses the run, so the model cannot
    run with its spatial dims at 1.
    """
    rng = np.random.default_rng(seed)
    initializers = [_tensor("w1", rng.normal(0, 0.3, (8, 3, 3, 3))),
                    _tensor("b1", rng.normal(0, 0.1, 8)),
                    _tensor("w2", rng.normal(0, 0.2, (8, 8, 3, 3))),
                    _tensor("b2", rng.normal(0, 0.1, 8))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", strides=[2, 2],
                         kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", strides=[2, 2],
                         kernel_shape=[3, 3]),
        helper.make_node("GlobalAveragePool", ["c2"], ["y"], name="pool"),
    ]
    graph = helper.make_graph(
        nodes, "strided_convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 8, 1, 1])],
        initializers)
    return _model(graph, opset=13)


def lstm_in_nested_ifs(seed: int = 0, hidden: int = 16) -> onnx.ModelProto:
    """A voice-activity-style model: inputs "input" [N, hidden] float, "state" [2, N, hidden]
    float, "sr" int64 scalar -> "output" [N, hidden], "stateN" [2, N, hidden].

    `If(sr == 16000)` picks a branch; each holds another `If` on the input's rank (as torch's
    RNN exports its unbatched-input check) that builds the LSTM's rank-3 input from the outer
    "input" with Unsqueeze, then an LSTM whose initial states come from the outer "state". The
    16 kHz branch is right for a rank-2 input; the 8 kHz one only type-checks for a rank-3 one
    (its inner If adds two axes to a rank-2 input). Dynamic, ONNX Runtime cannot tell which
    inner branch runs and loads the model; with static input shapes its load-time constant
    folding inlines the inner branches and finds the 8 kHz LSTM fed rank 4, although that
    branch never runs.
    """
    rng = np.random.default_rng(seed)
    branches = [_lstm_branch(name, rng, hidden, unsqueeze_axes)
                for name, unsqueeze_axes in (("sr16k", [[0], [0, 1]]), ("sr8k", [[0, 1], [0]]))]
    nodes = [
        helper.make_node("Constant", [], ["sr16k_value"],
                         value=helper.make_tensor("sr16k_value", TensorProto.INT64, [], [16000])),
        helper.make_node("Equal", ["sr", "sr16k_value"], ["is16k"], name="is16k"),
        helper.make_node("If", ["is16k"], ["output", "stateN"], name="by_rate",
                         then_branch=branches[0], else_branch=branches[1]),
    ]
    return _model(helper.make_graph(nodes, "lstm_in_nested_ifs", *_vad_signature(hidden)),
                  opset=16)


def lstm_in_a_loop(seed: int = 0, hidden: int = 16) -> onnx.ModelProto:
    """`lstm_in_nested_ifs` with its rate choice made by a Loop instead of an If: the 16 kHz
    network runs in the main graph, and a Loop that runs once when sr != 16000 (else not at
    all) replaces its result with the 8 kHz network's, its body. Same inputs and outputs.

    Fixed at rank-2 shapes, the body's LSTM is fed rank 4 once ONNX Runtime folds the body's rank
    check, so the model fails to load above level "disabled" (it loads dynamic); unlike an If
    branch (optimizer/model/dead_branches.py), a Loop body is left as it is.
    """
    rng = np.random.default_rng(seed)
    main, body = (_lstm_branch(name, rng, hidden, axes)
                  for name, axes in (("sr16k", [[0], [0, 1]]), ("sr8k", [[0, 1], [0]])))
    carried = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
               for name in ("carried_output", "carried_state")]
    body.input.extend([helper.make_tensor_value_info("iteration", TensorProto.INT64, []),
                       helper.make_tensor_value_info("keep_going", TensorProto.BOOL, []),
                       *carried])
    body.node.append(helper.make_node("Identity", ["keep_going"], ["keep_going_out"]))
    body.output.insert(0, helper.make_tensor_value_info("keep_going_out", TensorProto.BOOL, []))
    nodes = [
        *main.node,
        helper.make_node("Constant", [], ["sr16k_value"],
                         value=helper.make_tensor("sr16k_value", TensorProto.INT64, [], [16000])),
        helper.make_node("Equal", ["sr", "sr16k_value"], ["is16k"], name="is16k"),
        helper.make_node("Not", ["is16k"], ["is8k"]),
        helper.make_node("Cast", ["is8k"], ["trips"], to=TensorProto.INT64),
        helper.make_node("Constant", [], ["always"],
                         value=helper.make_tensor("always", TensorProto.BOOL, [], [True])),
        helper.make_node("Loop", ["trips", "always", "sr16k_out", "sr16k_state"],
                         ["output", "stateN"], name="at_8k", body=body),
    ]
    graph = helper.make_graph(nodes, "lstm_in_a_loop", *_vad_signature(hidden),
                              list(main.initializer))
    return _model(graph, opset=16)


def _vad_signature(hidden: int) -> tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]]:
    """The recurrent models' inputs ("input", "state", "sr") and outputs ("output", "stateN")."""
    return (
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", hidden]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "N", hidden]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", hidden]),
         helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, "N", hidden])])


def _lstm_branch(name: str, rng: np.random.Generator, hidden: int,
                 unsqueeze_axes: list[list[int]]) -> onnx.GraphProto:
    # Inner If: rank 2 -> first axes list, else the second (torch's `if input.dim() == 2`).
    def _unsqueezed(branch: str, axes: list[int]) -> onnx.GraphProto:
        out = f"{name}_{branch}_x"
        return helper.make_graph(
            [helper.make_node("Constant", [], [f"{out}_axes"], value=helper.make_tensor(
                f"{out}_axes", TensorProto.INT64, [len(axes)], axes)),
             helper.make_node("Unsqueeze", ["input", f"{out}_axes"], [out])],
            f"{name}_{branch}", [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)])

    p = name
    weights = [_tensor(f"{p}_W", rng.normal(0, 0.3, (1, 4 * hidden, hidden))),
               _tensor(f"{p}_R", rng.normal(0, 0.3, (1, 4 * hidden, hidden))),
               _tensor(f"{p}_B", rng.normal(0, 0.1, (1, 8 * hidden)))]
    nodes = [
        helper.make_node("Shape", ["input"], [f"{p}_shape"]),
        helper.make_node("Size", [f"{p}_shape"], [f"{p}_rank"]),
        helper.make_node("Constant", [], [f"{p}_two"],
                         value=helper.make_tensor(f"{p}_two", TensorProto.INT64, [], [2])),
        helper.make_node("Equal", [f"{p}_rank", f"{p}_two"], [f"{p}_is_rank2"]),
        helper.make_node("If", [f"{p}_is_rank2"], [f"{p}_x"],
                         then_branch=_unsqueezed("then", unsqueeze_axes[0]),
                         else_branch=_unsqueezed("else", unsqueeze_axes[1])),
        *[helper.make_node("Constant", [], [f"{p}_index{i}"], value=helper.make_tensor(
            f"{p}_index{i}", TensorProto.INT64, [1], [i])) for i in (0, 1)],
        helper.make_node("Gather", ["state", f"{p}_index0"], [f"{p}_h0"], axis=0),
        helper.make_node("Gather", ["state", f"{p}_index1"], [f"{p}_c0"], axis=0),
        helper.make_node("LSTM", [f"{p}_x", f"{p}_W", f"{p}_R", f"{p}_B", "", f"{p}_h0", f"{p}_c0"],
                         [f"{p}_y", f"{p}_yh", f"{p}_yc"], name=f"{p}_lstm", hidden_size=hidden),
        helper.make_node("Constant", [], [f"{p}_axis0"],
                         value=helper.make_tensor(f"{p}_axis0", TensorProto.INT64, [1], [0])),
        helper.make_node("Squeeze", [f"{p}_yh", f"{p}_axis0"], [f"{p}_out"]),
        helper.make_node("Concat", [f"{p}_yh", f"{p}_yc"], [f"{p}_state"], axis=0),
    ]
    return helper.make_graph(
        nodes, name, [],
        [helper.make_tensor_value_info(f"{p}_out", TensorProto.FLOAT, None),
         helper.make_tensor_value_info(f"{p}_state", TensorProto.FLOAT, None)], weights)


def _model(graph: onnx.GraphProto, *, opset: int) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    return model


def _tensor(name: str, values: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(values.astype(np.float32), name)
