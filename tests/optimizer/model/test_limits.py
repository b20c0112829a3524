"""check_limits: each structural limit refuses just past its value and admits its value."""

from __future__ import annotations

import dataclasses

import onnx
import pytest
from onnx import TensorProto, helper

from optimizer.errors import InvalidModelError, ModelLimitError
from optimizer.model.limits import ModelLimits, check_limits
from optimizer.testing import models
from tests.support import hostile_models

LIMITS = ModelLimits(max_dim=1000, max_rank=6, max_subgraph_depth=3, max_name_length=64)


def _check(data: bytes | onnx.ModelProto, limits: ModelLimits = LIMITS) -> None:
    model = data if isinstance(data, onnx.ModelProto) else onnx.load_from_string(data)
    check_limits(model, limits, "model.onnx")


def test_defaults_admit_the_models_the_tests_use() -> None:
    for model in (models.small_cnn(), models.mlp()):
        check_limits(model, ModelLimits(), "model.onnx")


def test_model_limits_is_a_frozen_plain_value() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        LIMITS.max_dim = 1  # type: ignore[misc]


def test_if_nested_at_the_depth_limit_passes_and_one_deeper_is_refused() -> None:
    _check(hostile_models.nested_if(3))
    with pytest.raises(ModelLimitError, match="nested 4 deep .*the limit is 3") as caught:
        _check(hostile_models.nested_if(4))
    assert caught.value.limit == "max_subgraph_depth"


def test_if_nested_20_deep_is_refused_by_the_default_limit() -> None:
    with pytest.raises(ModelLimitError, match="node 0 \\('If' named 'if8'\\)"):
        _check(hostile_models.nested_if(20), ModelLimits())


def test_declared_dim_at_the_limit_passes_and_one_more_is_refused() -> None:
    _check(hostile_models.declared_dim(1000))
    with pytest.raises(ModelLimitError, match="input 0 of the main graph \\('x'\\) declares "
                                              "dim 1 = 1001; the limit is 1000") as caught:
        _check(hostile_models.declared_dim(1001))
    assert caught.value.limit == "max_dim"


def test_rank_at_the_limit_passes_and_one_more_is_refused() -> None:
    _check(hostile_models.rank_bomb(6))
    with pytest.raises(ModelLimitError, match="has rank 7; the limit is 6") as caught:
        _check(hostile_models.rank_bomb(7))
    assert caught.value.limit == "max_rank"


def test_a_rank_bomb_in_a_stored_tensor_is_refused() -> None:
    model = models.mlp()
    bomb = helper.make_tensor("bomb", TensorProto.FLOAT, [1] * 10_000, [0.0])
    model.graph.node.append(helper.make_node("Constant", [], ["unused"], value=bomb))
    with pytest.raises(ModelLimitError, match="tensor attribute of node 5 .*rank 10000"):
        _check(model, ModelLimits())


def test_a_dim_inside_a_sequence_type_is_checked() -> None:
    model = models.mlp()
    model.graph.value_info.append(helper.make_value_info(
        "seq", helper.make_sequence_type_proto(
            helper.make_tensor_type_proto(TensorProto.FLOAT, [2**40]))))
    with pytest.raises(ModelLimitError, match="value_info 0 of the main graph \\('seq'\\)"):
        _check(model, ModelLimits())


@pytest.mark.parametrize("field", hostile_models.NAME_FIELDS)
def test_name_at_the_length_limit_passes_and_one_longer_is_refused(field: str) -> None:
    _check(hostile_models.long_name(field, 64))
    with pytest.raises(ModelLimitError, match="65 characters long .*the limit is 64") as caught:
        _check(hostile_models.long_name(field, 65))
    assert caught.value.limit == "max_name_length"


@pytest.mark.parametrize("field", hostile_models.NAME_FIELDS)
@pytest.mark.parametrize(("raw", "expected"), [(b"a\0b", "NUL character"),
                                               (b"\xff\xfe", "not valid UTF-8"),
                                               (b"\xc3", "not valid UTF-8")])
def test_name_with_nul_or_invalid_utf8_is_refused(field: str, raw: bytes, expected: str) -> None:
    with pytest.raises(InvalidModelError, match=expected):
        _check(hostile_models.name_bytes(field, raw))


def test_a_message_repeats_only_the_start_of_a_long_name() -> None:
    with pytest.raises(ModelLimitError) as caught:
        _check(hostile_models.long_name("node", 100_000), ModelLimits())
    assert len(str(caught.value)) < 400


@pytest.mark.parametrize("where", ["producer_name", "dim_param", "function"])
def test_text_the_database_stores_is_checked(where: str) -> None:
    model = models.mlp()
    if where == "producer_name":
        model.producer_name = "x\0"
    elif where == "dim_param":
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N\0"
    else:
        model.functions.append(helper.make_function(
            "local", "f\0", ["a"], ["b"], [helper.make_node("Identity", ["a"], ["b"])],
            [helper.make_opsetid("", models.OPSET)]))
    with pytest.raises(InvalidModelError, match="NUL character"):
        _check(model)
