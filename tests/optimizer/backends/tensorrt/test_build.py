"""Building TensorRT engines: the pure steps on the CPU (flags, parser messages, refusals that
come before TensorRT), and the whole build on a GPU with TensorRT (marked; skips elsewhere)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.backends.tensorrt.build import (
    ENGINE_FILE,
    METADATA_FILE,
    REPORT_FILE,
    build_trt_engine,
    plugin_ops,
)
from optimizer.backends.tensorrt.builder_config import TrtBuildOptions
from optimizer.backends.tensorrt.metadata import EngineMetadata
from optimizer.backends.tensorrt.network import (
    ParserIssue,
    describe_parser_issues,
    network_creation_flags,
)
from optimizer.backends.tensorrt.runner import runner_for_trt_engine
from optimizer.errors import EngineBuildError, InferenceError, InputShapeError, InternalError
from optimizer.model.inputs import random_feeds
from optimizer.model.tensor_specs import TensorSpec
from optimizer.precision.convert import convert_precision
from optimizer.testing import models
from optimizer.validation import default_tolerances, validate

# NetworkDefinitionCreationFlag.__members__ as introspected from the real wheels
# (../shared/tensorrt-stubs/API-NOTES.md §1): the values moved between 10.x and 11.x.
FLAGS_10_16 = {"EXPLICIT_BATCH": 0, "STRONGLY_TYPED": 1, "PREFER_JIT_PYTHON_PLUGINS": 2,
               "PREFER_AOT_PYTHON_PLUGINS": 3}
FLAGS_11_4 = {"STRONGLY_TYPED": 0, "PREFER_JIT_PYTHON_PLUGINS": 1, "PREFER_AOT_PYTHON_PLUGINS": 2}
PROFILE = {"input": {"min": [1, 3, 32, 32], "opt": [4, 3, 32, 32], "max": [8, 3, 32, 32]}}
HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None


# --- CPU: the steps that need no TensorRT ----------------------------------------------------

def test_10x_network_is_made_strongly_typed_by_the_enum_value_not_a_fixed_bit():
    assert network_creation_flags("10.16.1.11", FLAGS_10_16) == 1 << 1
    assert network_creation_flags("10.16.1.11", {"STRONGLY_TYPED": 5}) == 1 << 5


def test_11x_network_needs_no_flag_because_it_is_always_strongly_typed():
    # 1 << STRONGLY_TYPED would be harmless (ignored); 1 << 1 would ask for JIT plugins.
    assert network_creation_flags("11.4.0.106", FLAGS_11_4) == 0


def test_tensorrt_without_strong_typing_is_refused():
    with pytest.raises(EngineBuildError, match="TensorRT 8.6.1 cannot build strongly typed"):
        network_creation_flags("8.6.1", {"EXPLICIT_BATCH": 0})


def test_parser_errors_are_reported_per_node():
    issues = [
        ParserIssue(3, "/blocks.0/attn/Foo", "Foo", "No importer registered for op: Foo. "
                    "Attempting to import as plugin.", "UNSUPPORTED_NODE"),
        ParserIssue(9, "/head/Resize", "Resize", "Unsupported resize mode: cubic_antialias",
                    "UNSUPPORTED_NODE_ATTR"),
        ParserIssue(-1, "", "", "Model has no opset for domain 'custom'", "INVALID_GRAPH"),
    ]

    message = describe_parser_issues(issues, "vit.onnx")

    assert message.splitlines() == [
        "TensorRT's ONNX parser rejected model 'vit.onnx' at 2 nodes:",
        "- node '/blocks.0/attn/Foo' (#3, op 'Foo'): No importer registered for op: Foo. "
        "Attempting to import as plugin. [UNSUPPORTED_NODE]",
        "- node '/head/Resize' (#9, op 'Resize'): Unsupported resize mode: cubic_antialias "
        "[UNSUPPORTED_NODE_ATTR]",
        "- model: Model has no opset for domain 'custom' [INVALID_GRAPH]",
        "Op 'Foo' has no TensorRT importer and no plugin registered under that name: enable "
        "the FuseForge plugin for it, or drop the pass that emitted it.",
    ]


def test_unnamed_nodes_are_reported_by_index_and_long_lists_are_cut():
    issues = [ParserIssue(i, "", "Gelu", "bad", "UNSUPPORTED_NODE") for i in range(25)]

    lines = describe_parser_issues(issues, "m.onnx").splitlines()

    assert lines[0] == "TensorRT's ONNX parser rejected model 'm.onnx' at 25 nodes:"
    assert lines[1] == "- node #0 (op 'Gelu'): bad [UNSUPPORTED_NODE]"
    assert "... and 5 more." in lines


def test_parser_failure_without_errors_still_says_what_happened():
    assert "without saying why" in describe_parser_issues([], "m.onnx")


def test_plugin_ops_lists_fuseforge_domain_ops():
    model = models.small_cnn()
    model.graph.node.append(helper.make_node("SkipLayerNorm", ["a", "b"], ["c"],
                                             domain="fuseforge"))
    model.graph.node.append(helper.make_node("BiasGelu", ["c", "d"], ["e"], domain="fuseforge"))

    assert plugin_ops(model) == ("BiasGelu", "SkipLayerNorm")
    assert plugin_ops(models.small_cnn()) == ()


def test_build_refuses_a_precision_the_model_lacks_before_needing_tensorrt(cnn_path, tmp_path):
    with pytest.raises(EngineBuildError, match="no float16 tensors"):
        build_trt_engine(cnn_path, tmp_path / "engine", options=TrtBuildOptions(precision="fp16"))


def test_build_refuses_a_bad_profile_before_needing_tensorrt(cnn_path, tmp_path):
    bad = {"input": {"min": [8, 3, 32, 32], "opt": [4, 3, 32, 32], "max": [8, 3, 32, 32]}}

    with pytest.raises(InputShapeError, match="min 8, opt 4, max 8"):
        build_trt_engine(cnn_path, tmp_path / "engine", options=TrtBuildOptions(), profiles=bad)


def test_build_of_an_unreadable_model_is_refused(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\x08\x07garbage")

    with pytest.raises(EngineBuildError, match="Could not read model"):
        build_trt_engine(path, tmp_path / "engine", options=TrtBuildOptions())


@pytest.mark.skipif(HAS_TENSORRT, reason="tensorrt is installed here")
def test_build_without_tensorrt_is_an_internal_error_naming_it(cnn_path, tmp_path):
    with pytest.raises(InternalError, match="tensorrt Python package"):
        build_trt_engine(cnn_path, tmp_path / "engine", options=TrtBuildOptions(),
                         profiles=PROFILE)
    assert not (tmp_path / "engine").exists()


# --- GPU + TensorRT --------------------------------------------------------------------------

def _feeds(batch: int, count: int = 2) -> list[dict[str, np.ndarray]]:
    return random_feeds([TensorSpec("input", "float32", (batch, 3, 32, 32))], count=count,
                        seed=0)


@pytest.mark.tensorrt
@pytest.mark.gpu
def test_fp32_engine_matches_onnxruntime_across_its_profile(trt_gpu, cnn_path, tmp_path):
    engine = build_trt_engine(cnn_path, tmp_path / "engine", options=TrtBuildOptions(),
                              profiles=PROFILE)

    assert engine.engine_path.name == ENGINE_FILE and engine.engine_path.stat().st_size > 0
    with OnnxRuntimeRunner(cnn_path) as original, runner_for_trt_engine(tmp_path / "engine") \
            as candidate:
        for batch in (1, 4, 8):
            report = validate(original, candidate, _feeds(batch), default_tolerances("fp32"))
            assert report.passed, report.to_dict()
        with pytest.raises(InferenceError, match="outside the engine's optimization profile"):
            candidate.infer(_feeds(16, count=1)[0])
        latencies = candidate.time_inference(_feeds(4, count=1)[0], warmup=3, iterations=10)
        assert len(latencies) == 10 and all(ms > 0 for ms in latencies)
        assert candidate.activation_bytes >= 0 and candidate.io_buffer_bytes > 0


@pytest.mark.tensorrt
@pytest.mark.gpu
def test_engine_records_metadata_report_and_a_reusable_timing_cache(trt_gpu, cnn_path,
                                                                    tmp_path):
    lines, fractions = [], []
    cold = build_trt_engine(cnn_path, tmp_path / "cold", options=TrtBuildOptions(),
                            profiles=PROFILE, on_log=lines.append,
                            on_progress=lambda fraction, phase: fractions.append(fraction))
    warm = build_trt_engine(cnn_path, tmp_path / "warm", options=TrtBuildOptions(),
                            profiles=PROFILE, timing_cache=cold.timing_cache)

    metadata = EngineMetadata.from_json((tmp_path / "cold" / METADATA_FILE).read_text())
    assert metadata == cold.metadata
    assert metadata.precision == "fp32" and metadata.engine_bytes > 0
    assert metadata.profiles[0]["input"].max == (8, 3, 32, 32)
    assert not cold.metadata.timing_cache_warm and warm.metadata.timing_cache_warm
    assert len(cold.timing_cache) > 0
    assert fractions and fractions[-1] == 1.0 and fractions == sorted(fractions)
    assert lines  # the builder logged at INFO
    report = json.loads((tmp_path / "cold" / REPORT_FILE).read_text())
    assert report["summary"]["schema"] in ("10.x", "11.x")
    fused = {tuple(f["onnx_nodes"]) for f in report["summary"]["fusions"]}
    assert any("conv1" in nodes and "relu1" in nodes for nodes in fused), fused


@pytest.mark.tensorrt
@pytest.mark.gpu
def test_fp16_engine_from_the_converted_model_computes_in_fp16(trt_gpu, tmp_path):
    converted, _ = convert_precision(models.small_cnn(), "fp16")
    path = tmp_path / "cnn_fp16.onnx"
    onnx.save(converted, path)
    original = tmp_path / "cnn.onnx"
    onnx.save(models.small_cnn(), original)

    engine = build_trt_engine(path, tmp_path / "engine",
                              options=TrtBuildOptions(precision="fp16"), profiles=PROFILE)

    assert "fp16" in engine.report["precisions"]
    with OnnxRuntimeRunner(original) as reference, runner_for_trt_engine(tmp_path / "engine") \
            as candidate:
        report = validate(reference, candidate, _feeds(4), default_tolerances("fp16"))
    assert report.passed, report.to_dict()


@pytest.mark.tensorrt
@pytest.mark.gpu
def test_unsupported_op_fails_the_build_naming_the_node(trt_gpu, tmp_path):
    model = models.small_cnn()
    model.graph.node.append(helper.make_node("NoSuchOp", ["logits"], ["odd"], name="mystery",
                                             domain="acme"))
    model.graph.output.append(helper.make_tensor_value_info("odd", TensorProto.FLOAT, None))
    model.opset_import.append(helper.make_opsetid("acme", 1))
    path = tmp_path / "odd.onnx"
    onnx.save(model, path)

    with pytest.raises(EngineBuildError, match=r"node 'mystery' \(#-?\d+, op 'NoSuchOp'\)"):
        build_trt_engine(path, tmp_path / "engine", options=TrtBuildOptions(), profiles=PROFILE)


@pytest.mark.tensorrt
@pytest.mark.gpu
def test_engine_for_another_gpu_is_refused_before_loading(trt_gpu, cnn_path, tmp_path):
    build_trt_engine(cnn_path, tmp_path / "engine", options=TrtBuildOptions(), profiles=PROFILE)
    metadata_path = tmp_path / "engine" / METADATA_FILE
    data = json.loads(metadata_path.read_text())
    data["compute_capability"] = "1.0"
    metadata_path.write_text(json.dumps(data))

    with pytest.raises(EngineBuildError, match=r"built for compute capability 1\.0"):
        runner_for_trt_engine(Path(tmp_path / "engine"))


@pytest.mark.parametrize("options", [
    TrtBuildOptions(workspace_bytes=0), TrtBuildOptions(builder_optimization_level=6),
    TrtBuildOptions(log_severity="LOUD"),
])
def test_invalid_build_options_are_internal_errors(cnn_path, tmp_path, options):
    with pytest.raises(InternalError):
        build_trt_engine(cnn_path, tmp_path / "engine", options=options)


@pytest.mark.tensorrt
@pytest.mark.gpu
def test_unreadable_timing_cache_starts_the_build_cold_with_a_note(trt_gpu, cnn_path, tmp_path):
    engine = build_trt_engine(cnn_path, tmp_path / "engine", options=TrtBuildOptions(),
                              profiles=PROFILE, timing_cache=b"not a timing cache")

    assert not engine.metadata.timing_cache_warm
    assert engine.metadata.extra["timing_cache_note"]
    assert len(engine.timing_cache) > 0
