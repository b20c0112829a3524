"""cleanup inlines an If whose condition is constant: the branch taken replaces it, exactly."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optimizer.passes.cleanup import CLEANUP
from optimizer.testing.graph_writer import constant, make_model, tensor
from optimizer.testing.passes import apply_pass, op_types, run_model
from optimizer.testing.shape_models import lstm_in_a_loop, lstm_in_nested_ifs

F = TensorProto.FLOAT


def all_op_types(graph: onnx.GraphProto) -> list[str]:
    """Ops of `graph` and of every subgraph in it."""
    ops = []
    for node in graph.node:
        ops.append(node.op_type)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                ops += all_op_types(attr.g)
    return ops


def branch(name: str, nodes: list[onnx.NodeProto], outputs: list[str],
           inits: list[onnx.TensorProto] | None = None) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [tensor(o, None) for o in outputs],
                             initializer=inits or [])


def rank_check(x: str, rank: int, out: str) -> list[onnx.NodeProto]:
    """out = (rank of x == rank), as torch exports `if x.dim() == rank`."""
    return [helper.make_node("Shape", [x], [f"{out}_shape"]),
            helper.make_node("Size", [f"{out}_shape"], [f"{out}_rank"]),
            constant(f"{out}_want", np.array(rank, np.int64)),
            helper.make_node("Equal", [f"{out}_rank", f"{out}_want"], [out])]


def rank_dispatch_model(x_shape: list[int | str], seed: int = 0) -> onnx.ModelProto:
    """y = If(rank(x) == 2, Relu(x * k_then + b), Sigmoid(x * k_else)): weights in the branches."""
    rng = np.random.default_rng(seed)
    k_then, k_else, b = (rng.standard_normal(4).astype(np.float32) for _ in range(3))
    then_branch = branch("then", [helper.make_node("Mul", ["x", "k"], ["m"]),
                                  helper.make_node("Add", ["m", "b"], ["a"]),
                                  helper.make_node("Relu", ["a"], ["then_out"])], ["then_out"],
                         [numpy_helper.from_array(k_then, "k"), numpy_helper.from_array(b, "b")])
    else_branch = branch("else", [helper.make_node("Mul", ["x", "k"], ["m"]),
                                  helper.make_node("Sigmoid", ["m"], ["else_out"])], ["else_out"],
                         [numpy_helper.from_array(k_else, "k")])
    nodes = [*rank_check("x", 2, "is_rank2"),
             helper.make_node("If", ["is_rank2"], ["y"], then_branch=then_branch,
                              else_branch=else_branch)]
    return make_model(nodes, [tensor("x", x_shape)], [tensor("y", None)])


def random_feeds(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value or 3 for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def assert_same_outputs(model: onnx.ModelProto, fused: onnx.ModelProto) -> None:
    feeds = random_feeds(model)
    for got, want in zip(run_model(fused, feeds), run_model(model, feeds), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("x_shape", "taken"), [([3, 4], ["Mul", "Add", "Relu"]),
                                                (["N", 3, 4], ["Mul", "Sigmoid"])],
                         ids=["then", "else"])
def test_if_on_a_folded_rank_check_becomes_the_branch_it_takes(
        x_shape: list[int | str], taken: list[str]) -> None:
    model = rank_dispatch_model(x_shape)
    fused, report = apply_pass(model, CLEANUP)  # checks the model with full_check=True
    assert op_types(fused) == taken, report
    assert [o.name for o in fused.graph.output] == ["y"]
    assert {t.name for t in fused.graph.initializer} == ({"k", "b"} if "Add" in taken else {"k"})
    assert_same_outputs(model, fused)


def test_if_with_a_condition_known_only_at_run_time_stays() -> None:
    model = make_model(
        [helper.make_node("If", ["cond"], ["y"],
                          then_branch=branch("then", [helper.make_node("Relu", ["x"], ["t"])],
                                             ["t"]),
                          else_branch=branch("else", [helper.make_node("Neg", ["x"], ["e"])],
                                             ["e"]))],
        [tensor("cond", [], TensorProto.BOOL), tensor("x", [2, 3])], [tensor("y", [2, 3])])
    fused, _ = apply_pass(model, CLEANUP)
    assert op_types(fused) == ["If"]
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    for cond in (True, False):
        feeds = {"cond": np.array(cond), "x": x}
        np.testing.assert_array_equal(run_model(fused, feeds)[0], run_model(model, feeds)[0])


def test_if_on_an_initializer_that_is_also_a_graph_input_stays() -> None:
    # A caller may feed "cond" and override the initializer, so it is no constant.
    model = make_model(
        [helper.make_node("If", ["cond"], ["y"],
                          then_branch=branch("then", [helper.make_node("Relu", ["x"], ["t"])],
                                             ["t"]),
                          else_branch=branch("else", [helper.make_node("Neg", ["x"], ["e"])],
                                             ["e"]))],
        [tensor("cond", [], TensorProto.BOOL), tensor("x", [2, 3])], [tensor("y", [2, 3])],
        inits=[numpy_helper.from_array(np.array(True), "cond")])
    fused, _ = apply_pass(model, CLEANUP)
    assert op_types(fused) == ["If"]


def test_moved_values_are_renamed_where_the_model_already_uses_their_names() -> None:
    # The taken branch defines "t" and "k"; the main graph computes its own "t" after the If,
    # and a second If (condition unknown) has a branch that defines "k" too.
    rng = np.random.default_rng(3)
    taken = branch("then", [constant("k", rng.standard_normal(3).astype(np.float32)),
                            helper.make_node("Mul", ["x", "k"], ["t"]),
                            helper.make_node("Relu", ["t"], ["then_out"])], ["then_out"])
    other = branch("else", [helper.make_node("Neg", ["x"], ["else_out"])], ["else_out"])
    sibling = branch("s_then", [constant("k", rng.standard_normal(3).astype(np.float32)),
                                helper.make_node("Add", ["x", "k"], ["s_out"])], ["s_out"])
    nodes = [constant("yes", np.array(True)),
             helper.make_node("If", ["yes"], ["b"], then_branch=taken, else_branch=other),
             helper.make_node("Add", ["b", "x"], ["t_main"]),
             helper.make_node("Identity", ["t_main"], ["t"]),
             helper.make_node("Mul", ["t", "b"], ["y"]),
             helper.make_node("If", ["cond"], ["z"], then_branch=sibling,
                              else_branch=branch("s_else", [helper.make_node(
                                  "Neg", ["x"], ["s_neg"])], ["s_neg"]))]
    model = make_model(nodes, [tensor("x", [2, 3]), tensor("cond", [], TensorProto.BOOL)],
                       [tensor("y", [2, 3]), tensor("z", [2, 3])])
    onnx.checker.check_model(model, full_check=True)

    fused, _ = apply_pass(model, CLEANUP)

    assert op_types(fused)[:3] == ["Mul", "Relu", "Add"] and op_types(fused).count("If") == 1
    names = [o for n in fused.graph.node for o in n.output] + [
        t.name for t in fused.graph.initializer]
    assert len(names) == len(set(names))
    assert "k" not in names  # the sibling branch's k is visible from here
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        for got, want in zip(run_model(fused, feeds), run_model(model, feeds), strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("outer", "if_output_is_graph_output", "ops"), [
    ("computed", True, ["Relu"]),  # an Identity keeps the name "b", then x takes it
    ("input", True, ["Identity"]),  # a graph input cannot be renamed: the Identity stays
    ("computed", False, ["Relu", "Sigmoid"]),  # readers of "b" read x directly
])
def test_branch_output_that_is_an_outer_value_takes_over_the_if_output(
        outer: str, if_output_is_graph_output: bool, ops: list[str]) -> None:
    # The branch returns the outer x itself: valid ONNX, which ONNX Runtime refuses to load
    # (it wants an Identity there), so the expected outputs are computed in numpy.
    taken = branch("then", [], ["x"])
    other = branch("else", [helper.make_node("Neg", ["x"], ["e"])], ["e"])
    nodes = [constant("yes", np.array([True])),
             helper.make_node("If", ["yes"], ["b"], then_branch=taken, else_branch=other)]
    if outer == "computed":
        nodes.insert(0, helper.make_node("Relu", ["x_in"], ["x"]))
    if if_output_is_graph_output:
        outputs = [tensor("b", [2, 3])]
    else:
        nodes.append(helper.make_node("Sigmoid", ["b"], ["y"]))
        outputs = [tensor("y", [2, 3])]
    model = make_model(nodes, [tensor("x_in" if outer == "computed" else "x", [2, 3])], outputs)

    fused, _ = apply_pass(model, CLEANUP)

    assert op_types(fused) == ops
    assert [o.name for o in fused.graph.output] == [outputs[0].name]
    feeds = random_feeds(model)
    x = np.maximum(next(iter(feeds.values())), 0) if outer == "computed" else feeds["x"]
    expected = x if if_output_is_graph_output else 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(run_model(fused, feeds)[0], expected, rtol=1e-6, atol=1e-7)


def test_nested_ifs_with_constant_conditions_are_inlined_to_the_end() -> None:
    # Outer If on the rank of x; its branch holds an If on the rank of x again (as the VAD model
    # does), whose branch holds a third on a constant: all three conditions fold.
    innermost = branch("inner_then", [constant("two", np.float32(2.0)),
                                      helper.make_node("Mul", ["x", "two"], ["r"])], ["r"])
    inner = branch("mid_then", [
        constant("always", np.array(True)),
        helper.make_node("If", ["always"], ["m"], then_branch=innermost,
                         else_branch=branch("inner_else", [
                             helper.make_node("Neg", ["x"], ["n"])], ["n"])),
        helper.make_node("Relu", ["m"], ["mid_out"])], ["mid_out"])
    outer_then = branch("outer_then", [
        *rank_check("x", 2, "again_rank2"),
        helper.make_node("If", ["again_rank2"], ["o"], then_branch=inner,
                         else_branch=branch("mid_else", [
                             helper.make_node("Abs", ["x"], ["a"])], ["a"])),
        helper.make_node("Sigmoid", ["o"], ["outer_out"])], ["outer_out"])
    nodes = [*rank_check("x", 2, "is_rank2"),
             helper.make_node("If", ["is_rank2"], ["y"], then_branch=outer_then,
                              else_branch=branch("outer_else", [
                                  helper.make_node("Tanh", ["x"], ["t"])], ["t"]))]
    model = make_model(nodes, [tensor("x", [2, 3])], [tensor("y", None)])

    fused, _ = apply_pass(model, CLEANUP)

    assert op_types(fused) == ["Mul", "Relu", "Sigmoid"]
    assert_same_outputs(model, fused)


def test_if_with_a_constant_condition_in_a_loop_body_is_inlined() -> None:
    body = helper.make_graph(
        [constant("yes", np.array(True)),
         helper.make_node("If", ["yes"], ["step"],
                          then_branch=branch("then", [
                              helper.make_node("Add", ["acc_in", "x"], ["sum"])], ["sum"]),
                          else_branch=branch("else", [
                              helper.make_node("Sub", ["acc_in", "x"], ["diff"])], ["diff"])),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [tensor("i", [], TensorProto.INT64), tensor("cond_in", [], TensorProto.BOOL),
                 tensor("acc_in", [2, 3])],
        [tensor("cond_out", [], TensorProto.BOOL), tensor("step", [2, 3])])
    nodes = [constant("trips", np.array(3, np.int64)),
             helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body)]
    model = make_model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])])

    fused, _ = apply_pass(model, CLEANUP)

    assert "If" not in all_op_types(fused.graph) and op_types(fused) == ["Loop"]
    loop_body = fused.graph.node[0].attribute[0].g
    assert [o.name for o in loop_body.output] == ["cond_out", "step"]
    assert_same_outputs(model, fused)


def test_ifs_inside_a_branch_picked_at_run_time_are_left_alone() -> None:
    # The rank checks fold, but the Ifs sit in the branches of If(sr == 16000); inlining them
    # would show ONNX Runtime's type inference the 8 kHz LSTM fed rank 4 even at level disabled.
    model = lstm_in_nested_ifs()
    for value, dims in zip(model.graph.input[:2], ([1, 16], [2, 1, 16]), strict=True):
        for dim, size in zip(value.type.tensor_type.shape.dim, dims, strict=True):
            dim.Clear()
            dim.dim_value = size

    fused, _ = apply_pass(model, CLEANUP)

    assert all_op_types(fused.graph).count("If") == 3
    feeds = {"input": np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32),
             "state": np.zeros((2, 1, 16), np.float32), "sr": np.array(16000, np.int64)}
    for got, want in zip(run_model(fused, feeds), run_model(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_ifs_inside_a_loop_body_that_may_not_run_are_left_alone() -> None:
    # The 8 kHz network is a Loop body that runs only when sr != 16000: its rank check folds
    # (the rank is declared), and inlining it would feed that LSTM rank 4, so ONNX Runtime
    # would refuse the model at load although the body never runs at 16 kHz.
    model = lstm_in_a_loop()

    fused, _ = apply_pass(model, CLEANUP)

    assert all_op_types(fused.graph).count("If") == 1  # the main graph's rank check went
    assert all_op_types(_loop_body(fused.graph)).count("If") == 1
    feeds = {"input": np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32),
             "state": np.zeros((2, 1, 16), np.float32), "sr": np.array(16000, np.int64)}
    for got, want in zip(run_model(fused, feeds), run_model(model, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def _loop_body(graph: onnx.GraphProto) -> onnx.GraphProto:
    loop = next(node for node in graph.node if node.op_type == "Loop")
    return loop.attribute[0].g
