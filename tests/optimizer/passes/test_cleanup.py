"""cleanup: constants lifted and folded, no-ops and dead code removed, in subgraphs too."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from optimizer.passes.cleanup import CLEANUP, cleanup_graph
from optimizer.passes.engine import run_passes
from optimizer.passes.fold_batch_norm import FOLD_BATCH_NORM
from optimizer.testing.graph_writer import constant, make_model, tensor
from optimizer.testing.passes import apply_pass, assert_outputs_close, op_types, run_model

NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}
F = TensorProto.FLOAT


def cleaned(model: onnx.ModelProto) -> onnx.ModelProto:
    fused, report = apply_pass(model, CLEANUP)
    assert report.applied("cleanup") > 0
    return fused


def conv_bn_with_constant_nodes(dtype: type, seed: int = 0) -> onnx.ModelProto:
    """Conv + BatchNormalization whose weights and statistics are Constant nodes."""
    rng = np.random.default_rng(seed)
    params = {
        "w": rng.standard_normal((8, 4, 3, 3)) * 0.3, "b": rng.standard_normal(8),
        "gamma": rng.uniform(0.5, 1.5, 8), "beta": rng.standard_normal(8),
        "mean": rng.standard_normal(8), "var": rng.uniform(0.5, 2.0, 8),
    }
    nodes = [constant(name, value.astype(dtype)) for name, value in params.items()]
    nodes += [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["y"]),
    ]
    elem = NP_TO_ONNX[dtype]
    return make_model(nodes, [tensor("x", [1, 4, 6, 6], elem)], [tensor("y", [1, 8, 6, 6], elem)])


@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 1e-5), (np.float16, 2e-2)])
def test_constant_node_weights_fold_like_initializers(dtype: type, atol: float) -> None:
    model = conv_bn_with_constant_nodes(dtype)
    ir_model = ir.from_proto(model)
    report = run_passes(ir_model, [CLEANUP, FOLD_BATCH_NORM], backend="onnxruntime")
    fused = ir.to_proto(ir_model)
    onnx.checker.check_model(fused, full_check=True)
    assert report.applied("fold_batch_norm") == 1, report
    assert op_types(fused) == ["Conv"]
    assert {t.name for t in fused.graph.initializer} == {"w_bnfold", "w_bnfold_bias"}
    assert_outputs_close(model, fused, atol=atol, rtol=1e-3)


def if_model_with_identities() -> onnx.ModelProto:
    """y = If(cond) with branches Relu(x) → Identity and Identity(x) of the outer value x."""
    then_branch = helper.make_graph(
        [constant("k", np.full((2, 3), 0.5, np.float32)),
         helper.make_node("Mul", ["x", "k"], ["m"]),
         helper.make_node("Relu", ["m"], ["t"]),
         helper.make_node("Identity", ["t"], ["then_out"])],
        "then", [], [tensor("then_out", [2, 3])])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["else_out"])],  # an outer value: must stay
        "else", [], [tensor("else_out", [2, 3])])
    nodes = [
        helper.make_node("Identity", ["x_in"], ["x"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch),
    ]
    return make_model(nodes, [tensor("cond", [], TensorProto.BOOL), tensor("x_in", [2, 3])],
                      [tensor("y", [2, 3])])


def subgraph(model: onnx.ModelProto, node_op: str, attr: str) -> onnx.GraphProto:
    [node] = [n for n in model.graph.node if n.op_type == node_op]
    return next(a.g for a in node.attribute if a.name == attr)


def test_identity_in_if_branch_is_removed_and_branches_still_run() -> None:
    model = if_model_with_identities()
    fused = cleaned(model)
    assert op_types(fused) == ["If"]  # the main graph's Identity of the input went too
    then_branch = subgraph(fused, "If", "then_branch")
    assert [n.op_type for n in then_branch.node] == ["Mul", "Relu"]
    assert [o.name for o in then_branch.output] == ["then_out"]
    assert [n.op_type for n in subgraph(fused, "If", "else_branch").node] == ["Identity"]
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    for cond in (True, False):
        feeds = {"cond": np.array(cond), "x_in": x}
        np.testing.assert_array_equal(run_model(fused, feeds)[0], run_model(model, feeds)[0])


def test_identity_producing_a_graph_output_keeps_the_output_name() -> None:
    model = make_model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y"])],
        [tensor("x", [2, 3])], [tensor("y", [2, 3])])
    fused = cleaned(model)
    assert op_types(fused) == ["Relu"]
    assert fused.graph.node[0].output[0] == "y"
    assert [o.name for o in fused.graph.output] == ["y"]
    assert_outputs_close(model, fused, atol=0, rtol=0)


@pytest.mark.parametrize(
    "outputs",
    [["y", "r"], ["y"]],
    ids=["source-is-also-an-output", "source-is-a-graph-input"],
)
def test_identity_between_named_outputs_stays(outputs: list[str]) -> None:
    source = "r" if "r" in outputs else "x"
    model = make_model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", [source], ["y"])],
        [tensor("x", [2, 3])], [tensor(name, [2, 3]) for name in outputs])
    fused, _ = apply_pass(model, CLEANUP)
    assert "Identity" in op_types(fused)
    assert [o.name for o in fused.graph.output] == outputs
    assert_outputs_close(model, fused, atol=0, rtol=0)


def test_constant_that_is_a_graph_output_stays_a_node() -> None:
    model = make_model([constant("k", np.arange(6, dtype=np.float32).reshape(2, 3)),
                        helper.make_node("Add", ["x", "k"], ["y"])],
                       [tensor("x", [2, 3])], [tensor("y", [2, 3]), tensor("k", [2, 3])])
    fused, _ = apply_pass(model, CLEANUP)
    assert op_types(fused) == ["Constant", "Add"] and not fused.graph.initializer
    assert_outputs_close(model, fused, atol=0, rtol=0)


def shape_subgraph_model(batch: int | str) -> onnx.ModelProto:
    """Flatten with a target shape computed at run time: Shape → Gather → Unsqueeze → Concat."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        constant("zero", np.array(0, np.int64)),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        constant("axes", np.array([0], np.int64)),
        helper.make_node("Unsqueeze", ["b", "axes"], ["bu"]),
        constant("minus_one", np.array([-1], np.int64)),
        helper.make_node("Concat", ["bu", "minus_one"], ["shape"], axis=0),
        helper.make_node("Reshape", ["r", "shape"], ["y"]),
    ]
    return make_model(nodes, [tensor("x", [batch, 3, 4])], [tensor("y", [batch, 12])])


def test_shape_subgraph_folds_away_once_input_shapes_are_static() -> None:
    model = shape_subgraph_model(batch=2)
    fused = cleaned(model)
    assert op_types(fused) == ["Relu", "Reshape"]
    [shape] = fused.graph.initializer
    assert numpy_helper.to_array(shape).tolist() == [2, -1]
    assert_outputs_close(model, fused, atol=0, rtol=0)


def test_shape_subgraph_stays_while_the_batch_is_dynamic() -> None:
    fused, _ = apply_pass(shape_subgraph_model(batch="N"), CLEANUP)
    assert "Shape" in op_types(fused)


@pytest.mark.parametrize(("dtype", "atol"), [(np.float32, 0.0), (np.float16, 0.0)])
def test_no_op_chain_is_removed(dtype: type, atol: float) -> None:
    """Cast to own type, Reshape to own shape, two Reshapes, cancelling Transposes, Dropout."""
    elem = NP_TO_ONNX[dtype]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("same", [2, 3, 4]), ("flat", [6, 4]), ("back", [2, 12]))]
    nodes = [
        helper.make_node("Cast", ["x"], ["c"], to=elem),
        helper.make_node("Reshape", ["c", "same"], ["r0"]),
        helper.make_node("Transpose", ["r0"], ["t1"], perm=[2, 0, 1]),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 2, 0]),
        helper.make_node("Dropout", ["t2"], ["d"]),
        helper.make_node("Reshape", ["d", "flat"], ["r1"]),
        helper.make_node("Reshape", ["r1", "back"], ["r2"]),
        helper.make_node("Relu", ["r2"], ["y"]),
    ]
    model = make_model(nodes, [tensor("x", [2, 3, 4], elem)], [tensor("y", [2, 12], elem)],
                       inits)
    fused = cleaned(model)
    assert op_types(fused) == ["Reshape", "Relu"]
    assert {t.name for t in fused.graph.initializer} == {"back"}
    assert_outputs_close(model, fused, atol=atol, rtol=0)
    assert cleanup_graph(ir.from_proto(fused)) == 0  # already clean


def test_transposes_that_do_not_cancel_merge_into_one() -> None:
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 2, 0]),
             helper.make_node("Transpose", ["t1"], ["y"], perm=[1, 2, 0])]
    model = make_model(nodes, [tensor("x", [2, 3, 4])], [tensor("y", [4, 2, 3])])
    fused = cleaned(model)
    assert op_types(fused) == ["Transpose"]
    assert_outputs_close(model, fused, atol=0, rtol=0)


@pytest.mark.parametrize(
    ("dropout_inputs", "dropout_outputs", "graph_outputs"),
    [
        (["x", "ratio", "train"], ["y"], ["y"]),
        (["x"], ["y", "mask"], ["y", "mask"]),
    ],
    ids=["training-mode-true", "mask-is-read"],
)
def test_dropout_that_may_drop_stays(dropout_inputs: list[str], dropout_outputs: list[str],
                                     graph_outputs: list[str]) -> None:
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
             numpy_helper.from_array(np.array(True), "train")]
    model = make_model(
        [helper.make_node("Dropout", dropout_inputs, dropout_outputs)], [tensor("x", [2, 3])],
        [tensor(n, [2, 3], F if n == "y" else TensorProto.BOOL) for n in graph_outputs], inits)
    fused, _ = apply_pass(model, CLEANUP)
    assert op_types(fused) == ["Dropout"]


def test_dropout_with_constant_false_training_mode_is_removed() -> None:
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "ratio"),
             numpy_helper.from_array(np.array(False), "train")]
    model = make_model([helper.make_node("Dropout", ["x", "ratio", "train"], ["d"]),
                        helper.make_node("Relu", ["d"], ["y"])],
                       [tensor("x", [2, 3])], [tensor("y", [2, 3])], inits)
    fused = cleaned(model)
    assert op_types(fused) == ["Relu"] and not fused.graph.initializer
    assert_outputs_close(model, fused, atol=0, rtol=0)


def test_dead_nodes_and_unused_initializers_are_removed() -> None:
    inits = [numpy_helper.from_array(np.ones((2, 3), np.float32), "unused"),
             numpy_helper.from_array(np.ones((2, 3), np.float32), "dead_input")]
    nodes = [helper.make_node("Relu", ["x"], ["y"]),
             helper.make_node("Add", ["x", "dead_input"], ["dead"]),
             helper.make_node("Exp", ["dead"], ["dead2"])]
    model = make_model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])], inits)
    fused = cleaned(model)
    assert op_types(fused) == ["Relu"] and not fused.graph.initializer


def test_unknown_domain_and_quantization_nodes_are_left_alone() -> None:
    """A custom op with no reader stays; QuantizeLinear/DequantizeLinear of constants are kept."""
    inits = [numpy_helper.from_array(np.random.default_rng(0).standard_normal((3, 3))
                                     .astype(np.float32), "w"),
             numpy_helper.from_array(np.array(0.05, np.float32), "scale"),
             numpy_helper.from_array(np.array(0, np.int8), "zero_point")]
    nodes = [
        helper.make_node("QuantizeLinear", ["w", "scale", "zero_point"], ["wq"]),
        helper.make_node("DequantizeLinear", ["wq", "scale", "zero_point"], ["wd"]),
        helper.make_node("Identity", ["wd"], ["wi"]),
        helper.make_node("MatMul", ["x", "wi"], ["y"]),
        helper.make_node("Probe", ["y"], ["probe"], domain="custom.domain"),
    ]
    model = make_model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])], inits,
                       extra_opsets=[helper.make_opsetid("custom.domain", 1)])
    ir_model = ir.from_proto(model)
    assert cleanup_graph(ir_model) == 1  # only the Identity
    assert op_types(ir.to_proto(ir_model)) == [
        "QuantizeLinear", "DequantizeLinear", "MatMul", "custom.domain.Probe"]


def test_loop_body_is_cleaned_and_still_runs() -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         constant("step", np.full((2,), 1.5, np.float32)),
         helper.make_node("Add", ["acc_in", "step"], ["sum"]),
         helper.make_node("Identity", ["sum"], ["acc_out"])],
        "body",
        [tensor("i", [], TensorProto.INT64), tensor("cond_in", [], TensorProto.BOOL),
         tensor("acc_in", [2])],
        [tensor("cond_out", [], TensorProto.BOOL), tensor("acc_out", [2])])
    inits = [numpy_helper.from_array(np.array(3, np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "keep_going")]
    model = make_model([helper.make_node("Loop", ["trips", "keep_going", "x"], ["y"], body=body)],
                       [tensor("x", [2])], [tensor("y", [2])], inits)
    fused = cleaned(model)
    body_ops = [n.op_type for n in subgraph(fused, "Loop", "body").node]
    assert body_ops == ["Identity", "Add"]  # cond_in is a body input, so its Identity stays
    assert_outputs_close(model, fused, atol=0, rtol=0)


# A random chain of ops that cleanup should reduce; each entry builds one node from `prev`.
_STEPS = ["identity", "cast", "reshape_same", "reshape_pair", "transpose_pair", "dropout", "relu"]


def _random_chain(steps: list[str], shape: tuple[int, ...], tap: list[bool], seed: int,
                  ) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), "bias")]
    outputs = [tensor("y", list(shape))]
    prev = "x0"
    nodes.append(helper.make_node("Add", ["x", "bias"], [prev]))
    for i, step in enumerate(steps):
        out = f"v{i}"
        if step == "identity":
            nodes.append(helper.make_node("Identity", [prev], [out]))
        elif step == "cast":
            nodes.append(helper.make_node("Cast", [prev], [out], to=F))
        elif step == "reshape_same":
            inits.append(numpy_helper.from_array(np.array(shape, np.int64), f"s{i}"))
            nodes.append(helper.make_node("Reshape", [prev, f"s{i}"], [out]))
        elif step == "reshape_pair":
            inits.append(numpy_helper.from_array(np.array([-1], np.int64), f"flat{i}"))
            inits.append(numpy_helper.from_array(np.array(shape, np.int64), f"s{i}"))
            nodes.append(helper.make_node("Reshape", [prev, f"flat{i}"], [f"{out}_flat"]))
            nodes.append(helper.make_node("Reshape", [f"{out}_flat", f"s{i}"], [out]))
        elif step == "transpose_pair":
            perm = [int(p) for p in rng.permutation(len(shape))]
            inverse = [int(p) for p in np.argsort(perm)]
            nodes.append(helper.make_node("Transpose", [prev], [f"{out}_t"], perm=perm))
            nodes.append(helper.make_node("Transpose", [f"{out}_t"], [out], perm=inverse))
        elif step == "dropout":
            nodes.append(helper.make_node("Dropout", [prev], [out]))
        else:
            nodes.append(helper.make_node("Relu", [prev], [out]))
        if tap[i]:  # an extra reader: the intermediate is also a graph output
            outputs.append(tensor(out, list(shape)))
        prev = out
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    return make_model(nodes, [tensor("x", list(shape))], outputs, inits)


@settings(max_examples=30, deadline=None)
@given(
    steps=st.lists(st.sampled_from(_STEPS), min_size=1, max_size=6),
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
    taps=st.lists(st.booleans(), min_size=6, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_cleanup_is_equivalent_on_random_chains(steps: list[str], shape: tuple[int, ...],
                                                taps: list[bool], seed: int) -> None:
    model = _random_chain(steps, shape, taps, seed)
    fused, _ = apply_pass(model, CLEANUP)
    assert [o.name for o in fused.graph.output] == [o.name for o in model.graph.output]
    assert len(fused.graph.node) <= len(model.graph.node)
    outputs = {o.name for o in fused.graph.output}
    for node in fused.graph.node:  # a no-op survives only to give a second output its name
        assert node.op_type in ("Add", "Relu") or node.output[0] in outputs, node
    assert_outputs_close(model, fused, atol=0, rtol=0, seed=seed)
    assert cleanup_graph(ir.from_proto(fused)) == 0


def _expand_with_minus_one(fill_shape: list[int]) -> onnx.ModelProto:
    """torch's "expand with -1" (TorchScript exports of transformers' masks): the target shape
    is Where(Equal(s, ConstantOfShape(len(s)) * -1), ConstantOfShape(len(s)), s); and a
    ConstantOfShape of `fill_shape` added to the result."""
    nodes = [
        constant("s", np.array([2, -1, 32], np.int64)),
        constant("n", np.array([3], np.int64)),
        constant("minus_one", np.array(-1, np.int64)),
        constant("fill_shape", np.array(fill_shape, np.int64)),
        helper.make_node("ConstantOfShape", ["n"], ["ones"],
                         value=numpy_helper.from_array(np.array([1], np.int64))),
        helper.make_node("Mul", ["ones", "minus_one"], ["minus_ones"]),
        helper.make_node("Equal", ["s", "minus_ones"], ["is_minus_one"]),
        helper.make_node("Where", ["is_minus_one", "ones", "s"], ["target"]),
        helper.make_node("Expand", ["x", "target"], ["expanded"]),
        helper.make_node("ConstantOfShape", ["fill_shape"], ["fill"],
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Add", ["expanded", "fill"], ["y"]),
    ]
    return make_model(nodes, [tensor("x", [1, 3, 32])], [tensor("y", [2, 3, 32])])


def test_a_shape_sized_constant_of_shape_folds_so_an_expand_target_becomes_known() -> None:
    model = _expand_with_minus_one([1, 1, 32])

    fused = cleaned(model)

    assert "ConstantOfShape" not in op_types(fused) and "Where" not in op_types(fused)
    assert_outputs_close(model, fused, atol=0, rtol=0)


def test_a_big_constant_of_shape_stays_a_node() -> None:
    model = _expand_with_minus_one([2, 3, 32])  # 192 elements: a fill, not shape arithmetic

    fused = cleaned(model)

    assert op_types(fused).count("ConstantOfShape") == 1
