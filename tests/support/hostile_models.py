"""Hostile ONNX uploads, built in code: each is valid protobuf that a careless loader accepts.

Some need bytes onnx.helper would never write (a name that is not UTF-8), so they are built
with a marker name and the serialized bytes patched; a same-length patch keeps every protobuf
length prefix right.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optimizer.testing.models import IR_VERSION, OPSET, mlp

__all__ = [
    "HOSTILE_UPLOADS",
    "NAME_FIELDS",
    "data_dependent_endless_loop",
    "declared_dim",
    "long_name",
    "loop_model",
    "loop_of_input_trips",
    "name_bytes",
    "nested_if",
    "provably_endless_loop",
    "rank_bomb",
    "unknown_domain",
    "with_opset",
]

# Fields holding names, each set by `_with_name(field, name)` on an otherwise fine model.
NAME_FIELDS = ("graph", "node", "value", "initializer", "input", "output")


def with_opset(version: int) -> bytes:
    """mlp() stamped with default-domain opset `version`."""
    model = mlp()
    model.opset_import[0].version = version
    return model.SerializeToString()


def unknown_domain(domain: str = "evil.example", op_type: str = "Exfiltrate") -> bytes:
    """One node of an op in `domain`, which the model imports (so the checker lets it pass)."""
    graph = helper.make_graph(
        [helper.make_node(op_type, ["x"], ["y"], name="custom", domain=domain)], "custom_op",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return _model(graph, extra_opsets=[helper.make_opsetid(domain, 1)]).SerializeToString()


def nested_if(depth: int) -> bytes:
    """`depth` If nodes, each the then-branch of the one outside it (else: an Identity)."""
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])

    def leaf(output: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node("Identity", ["x"], [output])], f"leaf_{output}", [],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, [1])])

    inner = leaf(f"y{depth}")
    for level in range(depth - 1, -1, -1):
        node = helper.make_node("If", ["cond"], [f"y{level}"], name=f"if{level}",
                                then_branch=inner, else_branch=leaf(f"e{level}"))
        inner = helper.make_graph(
            [node], f"level{level}", [],
            [helper.make_tensor_value_info(f"y{level}", TensorProto.FLOAT, [1])])
    main = helper.make_graph(
        list(inner.node), "main",
        [cond, helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        list(inner.output))
    return _model(main).SerializeToString()


def declared_dim(dim: int) -> bytes:
    """An Identity whose input and output declare dim 1 = `dim`."""
    return _identity([1, dim]).SerializeToString()


def rank_bomb(rank: int) -> bytes:
    """An Identity whose input and output have `rank` dims of size 1."""
    return _identity([1] * rank).SerializeToString()


def long_name(field: str, length: int) -> bytes:
    """An Identity with a name of `length` characters in `field` (one of NAME_FIELDS)."""
    return _with_name(field, "n" * length).SerializeToString()


def name_bytes(field: str, raw: bytes) -> bytes:
    """An Identity whose `field` name is exactly the bytes `raw` (NUL, invalid UTF-8...)."""
    marker = "Q" * len(raw)  # no other byte run of the model spells it
    data = _with_name(field, marker).SerializeToString()
    assert data.count(marker.encode()) >= 1
    return data.replace(marker.encode(), raw)


def _with_name(field: str, name: str) -> onnx.ModelProto:
    names = {key: key for key in NAME_FIELDS} | {field: name}
    weight = numpy_helper.from_array(np.zeros(4, np.float32), names["initializer"])
    graph = helper.make_graph(
        [helper.make_node("Add", [names["input"], names["initializer"]], [names["value"]],
                          name=names["node"]),
         helper.make_node("Identity", [names["value"]], [names["output"]])],
        names["graph"],
        [helper.make_tensor_value_info(names["input"], TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(names["output"], TensorProto.FLOAT, [1, 4])],
        initializer=[weight],
    )
    return _model(graph)


def _identity(dims: list[int]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
    return _model(graph)


def _model(graph: onnx.GraphProto,
           extra_opsets: list[onnx.OperatorSetIdProto] | None = None) -> onnx.ModelProto:
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET), *(extra_opsets or [])])
    model.ir_version = IR_VERSION
    return model


def loop_model(body_nodes: list[onnx.NodeProto], body_constants: list[onnx.TensorProto], *,
               trips: int | None) -> onnx.ModelProto:
    """y = Loop(trips, true, x): a body of `body_nodes` from (i, cond_in, acc_in) to
    (cond_out, acc_out), over a [1] float; `trips` None: no trip count."""
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1])],
        initializer=body_constants)
    initializers = [helper.make_tensor("keep_going", TensorProto.BOOL, [], [True])]
    if trips is not None:
        initializers.append(helper.make_tensor("trips", TensorProto.INT64, [], [trips]))
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips" if trips is not None else "", "keep_going", "x"],
                          ["y"], name="forever", body=body)],
        "endless",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        initializer=initializers)
    return _model(graph)


def provably_endless_loop(trips: int | None = 2**62) -> bytes:
    """y = x + 1 while a condition the body passes through unchanged, `trips` times (None: no
    trip count): valid ONNX that no runtime finishes."""
    return loop_model(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "one"], ["acc_out"])],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])], trips=trips
    ).SerializeToString()


def data_dependent_endless_loop() -> onnx.ModelProto:
    """acc += 1 while acc < 1e30: in float32 acc stops growing at 2^24, so it never ends; its
    condition is computed from data, so no check can tell before running it (a loop whose
    condition provably stays true is refused at upload: tests/optimizer/model)."""
    model = loop_model(
        [helper.make_node("Add", ["acc_in", "one"], ["acc_out"]),
         helper.make_node("ReduceMax", ["acc_out"], ["largest"], keepdims=0),
         helper.make_node("Less", ["largest", "never"], ["cond_out"])],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0]),
         helper.make_tensor("never", TensorProto.FLOAT, [], [1e30])], trips=None)
    onnx.checker.check_model(model, full_check=True)
    return model


def loop_of_input_trips() -> onnx.ModelProto:
    """y = x + trips: a Loop adding 1 `trips` times, its trip count the int64 input "trips"."""
    model = loop_model(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "one"], ["acc_out"])],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])], trips=1)
    graph = model.graph
    graph.initializer.remove(next(t for t in graph.initializer if t.name == "trips"))
    graph.input.append(helper.make_tensor_value_info("trips", TensorProto.INT64, []))
    onnx.checker.check_model(model, full_check=True)
    return model


# (id, upload bytes, text the refusal must contain): the API and the library tests share these.
HOSTILE_UPLOADS: list[tuple[str, bytes, str]] = [
    ("opset-newer-than-installed", with_opset(10_000), "imports opset 10000"),
    ("unknown-domain", unknown_domain(), "'evil.example'"),
    ("if-nested-20-deep", nested_if(20), "nested 9 deep in If/Loop/Scan bodies"),
    ("dim-2-to-the-40", declared_dim(2**40), f"dim 1 = {2**40}"),
    ("rank-10000", rank_bomb(10_000), "rank 10000"),
    ("loop-2-to-the-62-trips", provably_endless_loop(2**62),
     "Loop node 'forever' in the main graph never ends"),
    ("loop-without-trip-count", provably_endless_loop(None), "it has no trip count"),
    *[(f"{field}-name-100k-chars", long_name(field, 100_000), "100000 characters")
      for field in NAME_FIELDS],
    *[(f"{field}-name-with-nul", name_bytes(field, b"a\0b"), "NUL") for field in NAME_FIELDS],
    *[(f"{field}-name-not-utf8", name_bytes(field, b"\xff\xfe"), "not valid UTF-8")
      for field in NAME_FIELDS],
]
