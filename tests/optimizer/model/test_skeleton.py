"""The skeleton an upload is checked from (optimizer/model/skeleton.py): built from the bytes in
pieces of any size, it checks exactly as the whole file does (the same summary, the same
refusals with the same words, the same NaN warning) while holding none of the large tensors'
bytes; broken framing is refused naming the byte, and the skeleton's own size is bounded."""

from __future__ import annotations

import glob
import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from optimizer.errors import InvalidModelError, ModelLimitError, OptimizerError
from optimizer.model.graphs import iter_tensors
from optimizer.model.limits import ModelLimits
from optimizer.model.skeleton import STRIPPED_FROM_BYTES, ModelSkeleton, SkeletonBuilder
from optimizer.model_check import check_model_file
from optimizer.testing import models
from optimizer.testing.quantization_models import conv_stack
from optimizer.testing.real_models import bert_encoder, resnet50
from tests.support import corrupted_models, hostile_models

STAND_IN = "stand-in-for-this-test.bin"


def _skeleton(data: bytes, piece: int = 65536, max_bytes: int = 256 * 2**20) -> ModelSkeleton:
    builder = SkeletonBuilder("model.onnx", location=STAND_IN, max_bytes=max_bytes)
    for start in range(0, len(data), piece):
        builder.feed(data[start:start + piece])
    return builder.finish()


def _check_skeleton(tmp_path: Path, data: bytes, piece: int = 65536,
                    limits: ModelLimits | None = None):  # type: ignore[no-untyped-def]
    """check_model_file on the skeleton, as the API runs it: beside an empty stand-in."""
    skeleton = _skeleton(data, piece)
    folder = tmp_path / "skeleton"
    folder.mkdir(exist_ok=True)
    (folder / STAND_IN).touch()
    path = folder / "model.onnx"
    path.write_bytes(skeleton.data)
    return check_model_file(path, limits, name="model.onnx", stand_in=STAND_IN,
                            stripped=skeleton.weights)


def _check_whole(tmp_path: Path, data: bytes, limits: ModelLimits | None = None):  # type: ignore[no-untyped-def]
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    return check_model_file(path, limits)


def _packaged_models() -> list[str]:
    """The .onnx files installed packages ship (onnxruntime's samples, onnx's test data)."""
    found = []
    for package in ("onnxruntime", "onnx"):
        spec = importlib.util.find_spec(package)
        if spec and spec.submodule_search_locations:
            root = spec.submodule_search_locations[0]
            found += sorted(glob.glob(f"{root}/**/*.onnx", recursive=True))[:60]
    return found


_GENERATED = {
    "small_cnn": lambda: models.small_cnn(seed=3),
    "mlp": lambda: models.mlp(seed=4),
    "resnet50": resnet50,
    "bert_encoder": bert_encoder,
    "conv_stack": lambda: conv_stack(seed=5, channels=16, size=16, blocks=2),
    "nested_if": lambda: onnx.load_from_string(hostile_models.nested_if(3)),
}


@pytest.mark.parametrize("name", sorted(_GENERATED))
@pytest.mark.parametrize("piece", [1, 7, 65536])
def test_a_skeleton_checks_as_the_whole_model_does(tmp_path, name, piece):
    data = models.model_bytes(_GENERATED[name]())
    if piece < 1024 and len(data) > 2**20:
        pytest.skip("pieces of a few bytes are for the small models (seconds per megabyte)")

    assert _check_skeleton(tmp_path, data, piece) == _check_whole(tmp_path, data)


@pytest.mark.parametrize("path", _packaged_models(), ids=lambda p: p.split("site-packages/")[-1])
def test_a_packaged_models_skeleton_checks_as_the_model_does(tmp_path, path):
    data = Path(path).read_bytes()
    try:
        expected = _check_whole(tmp_path, data)
    except OptimizerError as err:
        with pytest.raises(type(err)) as caught:
            _check_skeleton(tmp_path, data, piece=4096)
        assert str(caught.value) == str(err)
        return
    assert _check_skeleton(tmp_path, data, piece=4096) == expected


def test_the_skeleton_holds_everything_but_the_large_tensors_bytes():
    model = resnet50()
    data = models.model_bytes(model)
    skeleton = _skeleton(data)
    rebuilt = onnx.load_from_string(skeleton.data)

    assert len(skeleton.data) < len(data) / 1000
    assert skeleton.stripped_bytes > 0.99 * len(data)
    original = {t.name: t for t in iter_tensors(model)}
    for tensor in iter_tensors(rebuilt):
        source = original.pop(tensor.name)
        assert (tensor.dims, tensor.data_type) == (source.dims, source.data_type)
        if len(source.raw_data) >= STRIPPED_FROM_BYTES:
            assert tensor.data_location == TensorProto.EXTERNAL
            assert [(e.key, e.value) for e in tensor.external_data] == [("location", STAND_IN)]
            assert not tensor.raw_data
        else:
            assert tensor == source
    assert original == {}
    assert [n.SerializeToString() for n in rebuilt.graph.node] == [
        n.SerializeToString() for n in model.graph.node]
    assert (rebuilt.graph.input, rebuilt.graph.output) == (model.graph.input, model.graph.output)


@pytest.mark.parametrize(("data", "expected"),
                         [pytest.param(data, expected, id=name)
                          for name, data, expected in hostile_models.HOSTILE_UPLOADS])
def test_each_hostile_upload_is_refused_from_its_skeleton_in_the_same_words(tmp_path, data,
                                                                           expected):
    with pytest.raises(OptimizerError) as whole:
        _check_whole(tmp_path, data)
    with pytest.raises(type(whole.value)) as caught:
        _check_skeleton(tmp_path, data, piece=1000)

    assert expected in str(caught.value)
    assert str(caught.value) == str(whole.value)


def _weights_model(tensors: list[TensorProto]) -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Identity", [t.name], [f"{t.name}_out"]) for t in tensors], "g", [],
        [helper.make_tensor_value_info(f"{t.name}_out", t.data_type, list(t.dims))
         for t in tensors], tensors)
    return models.model_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _with_non_finite(name: str, dtype: type, size: int, seed: int) -> TensorProto:
    values = np.random.default_rng(seed).standard_normal(size).astype(np.float32)
    values[::7] = np.nan
    values[3::11] = np.inf
    values[5::13] = -np.inf
    if dtype is ml_dtypes.bfloat16:
        tensor = helper.make_tensor(name, TensorProto.BFLOAT16, [size],
                                    values.astype(ml_dtypes.bfloat16).tobytes(), raw=True)
        return tensor
    return numpy_helper.from_array(values.astype(dtype), name)


def test_nan_and_infinity_in_stripped_tensors_are_counted_as_the_whole_check_counts_them(
        tmp_path):
    data = _weights_model([
        _with_non_finite("big_fp32", np.float32, 5000, 1),
        _with_non_finite("big_fp16", np.float16, 3000, 2),
        _with_non_finite("big_fp64", np.float64, 1000, 3),
        _with_non_finite("big_bf16", ml_dtypes.bfloat16, 3000, 4),
        _with_non_finite("small_fp32", np.float32, 20, 5),  # kept whole: counted by the check
        numpy_helper.from_array(np.ones(4000, np.float32), "clean"),
    ])
    whole = _check_whole(tmp_path, data).warnings
    from_skeleton = _check_skeleton(tmp_path, data, piece=333).warnings

    assert whole and from_skeleton
    for name in ("big_fp32", "big_fp16", "big_fp64", "small_fp32"):
        count = whole[0].split(f"'{name}': ")[1].split(";")[0].split(")")[0]
        assert f"'{name}': {count}" in from_skeleton[0]
    assert "'clean'" not in from_skeleton[0]
    assert "5 weight tensor(s)" in from_skeleton[0]  # big_bf16 too, which onnx reads as well


def test_float_data_stored_as_a_typed_field_is_stripped_and_counted(tmp_path):
    values = np.arange(1000, dtype=np.float32)
    values[10] = np.nan
    tensor = helper.make_tensor("typed", TensorProto.FLOAT, [1000], values.tolist())
    data = _weights_model([tensor])

    skeleton = _skeleton(data)

    assert skeleton.stripped_bytes >= 4000
    assert [(w.name, w.nan, w.inf, w.size) for w in skeleton.weights] == [("typed", 1, 0, 1000)]
    assert "'typed': 1 NaN of 1000" in _check_skeleton(tmp_path, data).warnings[0]


def test_data_too_small_for_its_shape_is_refused_in_the_checkers_words(tmp_path):
    raw = numpy_helper.from_array(np.zeros(500, np.float32), "short_raw")
    raw.dims[0] = 600
    typed = helper.make_tensor("short_typed", TensorProto.FLOAT, [300], [0.0] * 300)
    typed.dims[0] = 400
    for tensor in (raw, typed):
        data = _weights_model([tensor])
        with pytest.raises(InvalidModelError) as whole:
            _check_whole(tmp_path, data)
        with pytest.raises(InvalidModelError) as caught:
            _check_skeleton(tmp_path, data)
        assert str(caught.value) == str(whole.value)
        assert "is too small for the declared shape" in str(caught.value)


def test_a_models_own_external_data_is_still_refused(tmp_path):
    tensor = numpy_helper.from_array(np.zeros(8, np.float32), "w")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="weights.bin")
    data = _weights_model([tensor])
    (tmp_path / "skeleton").mkdir()
    (tmp_path / "skeleton" / "weights.bin").write_bytes(bytes(32))

    with pytest.raises(OptimizerError, match="stores its data in the external file "
                                             "'weights.bin'"):
        _check_skeleton(tmp_path, data)


def test_external_data_that_also_holds_its_bytes_is_refused():
    tensor = numpy_helper.from_array(np.zeros(1000, np.float32), "w")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="weights.bin")

    with pytest.raises(InvalidModelError, match="is stored externally and should not have "
                                                "data field"):
        _skeleton(_weights_model([tensor]))


@pytest.mark.parametrize(("data", "problem"), [
    (b"", "the file is empty"),
    (models.model_bytes(models.small_cnn())[:-100], "a field longer than the rest of the file"),
    (b"\x08\x07\x3a\x04\x0a\x10abcd", "a field runs past the end of the message holding it"),
    (b"\x08\x07\x0b", "a field of wire type 3, which a model never uses"),
    (b"\x08" + b"\xff" * 11, "a number longer than 10 bytes"),
    (b"\x00\x01", "a field numbered 0"),
])
def test_broken_framing_is_refused_naming_the_problem(data, problem):
    with pytest.raises(InvalidModelError, match=problem) as caught:
        _skeleton(data, piece=3)

    assert str(caught.value).startswith("Model file 'model.onnx'")


def test_the_skeleton_is_held_to_its_size_limit():
    data = models.model_bytes(models.small_cnn())

    with pytest.raises(ModelLimitError, match="without the weights' bytes is over 100 bytes") as caught:
        _skeleton(data, max_bytes=100)

    assert caught.value.limit == "max_skeleton_bytes"


def test_bytes_fed_after_a_framing_error_are_ignored_and_the_error_kept():
    builder = SkeletonBuilder("model.onnx", location=STAND_IN)
    builder.feed(b"\x08\x07\x0b")
    builder.feed(models.model_bytes(models.small_cnn()))

    with pytest.raises(InvalidModelError, match="wire type 3"):
        builder.finish()


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=corrupted_models.seeds, edits=corrupted_models.edits, piece=st.integers(1, 5000))
def test_corrupted_bytes_are_refused_only_with_model_errors(tmp_path, seed, edits, piece):
    # Whatever bytes arrive, the skeleton's check accepts them or raises an OptimizerError
    # (a 422 at the API), never another exception (a 500).
    try:
        _check_skeleton(tmp_path, corrupted_models.corrupted(seed, edits), piece)
    except OptimizerError as err:
        assert str(err)
