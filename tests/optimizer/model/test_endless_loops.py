"""A Loop whose condition provably stays true and whose trip count is missing or astronomical
is refused by the model check, naming the node; a loop that can end is left alone."""

import onnx
import pytest

from optimizer.errors import InvalidModelError
from optimizer.model.endless_loops import ENDLESS_TRIPS, endless_loops
from optimizer.model_check import check_model_file
from tests.support.hostile_models import provably_endless_loop


def test_a_loop_passing_its_condition_through_with_2_to_the_62_trips_never_ends() -> None:
    [why] = endless_loops(onnx.load_from_string(provably_endless_loop(2**62)))
    assert why.startswith("Loop node 'forever' in the main graph never ends")
    assert "its trip count is 4611686018427387904" in why


def test_a_real_trip_count_or_no_trip_count_with_a_computed_condition_can_end() -> None:
    assert list(endless_loops(onnx.load_from_string(provably_endless_loop(1000)))) == []
    assert list(endless_loops(onnx.load_from_string(
        provably_endless_loop(ENDLESS_TRIPS - 1)))) == []
    model = onnx.load_from_string(provably_endless_loop(None))
    assert len(list(endless_loops(model))) == 1
    # the body now computes its condition (cond_out = Not(cond_in)): it can turn false
    body = model.graph.node[0].attribute[0].g
    body.node[0].op_type = "Not"
    assert list(endless_loops(model)) == []


def test_the_model_check_refuses_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "loop.onnx"
    path.write_bytes(provably_endless_loop(None))
    with pytest.raises(InvalidModelError, match="'forever' in the main graph never ends"):
        check_model_file(path)
