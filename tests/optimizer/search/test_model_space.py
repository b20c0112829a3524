"""The model narrows the search: only the families that rewrite it are switched off one by one,
and int8 dynamic runs only where there are matrix products."""

import numpy as np
import onnx
from onnx import TensorProto, helper

from optimizer.registries.backends import Backend
from optimizer.search.candidates import SearchSpace, plan_candidates
from optimizer.search.model_space import space_for_model
from optimizer.testing.models import small_cnn


def test_a_residual_cnn_gets_an_off_candidate_for_each_family_that_fuses_it() -> None:
    space, report = space_for_model(small_cnn(seed=1, batch=1), SearchSpace(Backend.ONNXRUNTIME))
    assert space.firing_passes is not None
    assert "fold_batch_norm" in space.firing_passes
    assert "fuse_layer_norm" not in space.firing_passes  # nothing of the kind in a CNN
    assert space.has_matrix_products  # its classifier is a Gemm
    names = [c.name for c in plan_candidates(space).candidates]
    assert "fp32/without-fold_batch_norm" in names
    assert "fp32/without-fuse_layer_norm" not in names
    assert report.applied("fold_batch_norm") >= 1


def test_a_model_without_matrix_products_refuses_int8_dynamic() -> None:
    weight = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [onnx.numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    space, _ = space_for_model(model, SearchSpace(Backend.ONNXRUNTIME))
    assert not space.has_matrix_products
    refused = {r.name for r in plan_candidates(space).refused}
    assert "int8-dynamic" in refused
