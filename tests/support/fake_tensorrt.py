"""FakeTensorRT: a stand-in for TensorRT and an NVIDIA GPU, for machines that can have neither.

TensorRT cannot be installed where this suite runs, yet the GPU worker's pipeline around it
(routing, isolated builds, timing caches, progress and log relay, engine reports, validation and
benchmarking of the engine, fallback) must be tested for real. This fake implements the
project's own `optimizer.backends.tensorrt.toolkit.TensorRTToolkit` interface and passes the same contract
tests as TensorRT (tests/optimizer/backends/tensorrt/test_toolkit_contract.py). Select it with
FUSEFORGE_TENSORRT_TOOLKIT=tests.support.fake_tensorrt:FAKE_TENSORRT.

What it does instead of TensorRT:
- the GPU is "FakeGPU (no hardware)", compute capability 9.0, TensorRT "10.16.1.11+fake";
- a build runs every check the real build runs before TensorRT (precision, profiles, plugin
  ops), then writes as the "plan" the ONNX model with plugin nodes decomposed into standard ops
  (and, for fp16/bf16 graphs, the CPU precision emulation), an inspector report in TensorRT
  10.x's documented JSON layout (a Conv/Gemm/MatMul and its only-consumer activation become one
  "A + B" layer), real metadata, and a timing cache listing the op signatures it "timed";
- the runner is ONNX Runtime on the CPU reading that plan, behind the real metadata check.

Test hooks: FAKE_TENSORRT_CONTROL names a JSON file (read at each build, so a test can change
it while a worker runs) with optional keys "fault": "abort" (the build process dies from
SIGABRT, as a native crash would), "hang" (never returns) or "error" (TensorRT returns no
engine), "build_seconds": extra seconds a build takes (progress keeps flowing), and
"corrupt_batches_above": N, which makes the runner add 1 to every float output for a first
input batch above N (a shape-dependent kernel bug), and "crash_inference": true, which makes
the runner's process die from SIGSEGV at its first inference (a native crash at run time),
and "infer_delay_s": {precision: seconds}, added to every inference of an engine built at that
precision (a GPU on which, say, the int8 kernels lose to fp16).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Unpack

import numpy as np
import onnx

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.backends.runner import RunnerSpec
from optimizer.backends.tensorrt import (
    ENGINE_FILE,
    METADATA_FILE,
    REPORT_FILE,
    EngineMetadata,
    GpuIdentity,
    LogLine,
    TrtBuildOptions,
    TrtEngine,
    check_compatible,
    check_model_precision,
    node_op_types,
    parse_engine_information,
    plugin_ops,
    resolve_profiles,
    save_engine,
)
from optimizer.backends.tensorrt.build import TrtBuildArguments
from optimizer.backends.tensorrt.toolkit import TensorRTToolkit
from optimizer.capabilities import GpuInfo, HostCapabilities, cpu_capabilities
from optimizer.errors import EngineBuildError
from optimizer.measure.node_profile import profile_onnxruntime
from optimizer.model.tensor_specs import summarize_model
from optimizer.plugins import decompose_for_onnxruntime
from optimizer.precision import emulate_precision

__all__ = ["FAKE_GPU", "FAKE_TENSORRT", "FAKE_TENSORRT_VERSION", "FakeTensorRTRunner"]

FAKE_TENSORRT_VERSION = "10.16.1.11+fake"
FAKE_GPU = GpuInfo(index=0, name="FakeGPU (no hardware)", compute_capability="9.0",
                   memory_total_mib=143771, uuid="GPU-fake-0000", driver_version="fake")
_FUSABLE_PRODUCERS = {"Conv", "Gemm", "MatMul", "ConvTranspose"}
_FUSABLE_ACTIVATIONS = {"Relu", "Sigmoid", "Clip", "LeakyRelu", "Tanh"}
_PHASES = ("Building the network", "Timing tactics", "Serializing the engine")


def fake_capabilities() -> HostCapabilities:
    """A fake GPU with TensorRT, beside this host's real CPU side (OpenVINO, its flags)."""
    cpu = cpu_capabilities()
    return HostCapabilities(gpus=(FAKE_GPU,), tensorrt_version=FAKE_TENSORRT_VERSION,
                            notes=("FakeTensorRT: no GPU, no TensorRT (tests only)",
                                   *cpu.pop("notes")), **cpu)


def fake_build_engine(
    model_path: Path,
    out_dir: Path,
    *,
    options: TrtBuildOptions,
    **given: Unpack[TrtBuildArguments],
) -> TrtEngine:
    """`build_trt_engine`'s contract, with ONNX Runtime standing in for the engine."""
    model_path, out_dir = Path(model_path), Path(out_dir)
    input_shapes, profiles = given.get("input_shapes"), given.get("profiles")
    timing_cache, on_progress = given.get("timing_cache"), given.get("on_progress")
    gpu = given.get("gpu") or FAKE_GPU
    log = _Log(given.get("on_log"))
    model = onnx.load(model_path)
    check_model_precision(model, options.precision, model_name=model_path.name)
    resolved = resolve_profiles(summarize_model(model).inputs, profiles, input_shapes=input_shapes)
    plugins = plugin_ops(model)
    node_ops = node_op_types(model)
    log.add("INFO", f"[FakeTensorRT] parsing {model_path.name}: {len(node_ops)} nodes, "
                    f"plugins: {', '.join(plugins) or 'none'}")
    log.add("WARNING", "[FakeTensorRT] no kernels are timed: this engine is ONNX Runtime on the "
                       "CPU (tests only)")
    started = time.perf_counter()
    control = _control()
    _fault_if_asked(str(control.get("fault", "")), log)
    extra_seconds = float(control.get("build_seconds", 0))
    steps = len(_PHASES) * 10
    for step in range(steps):
        if on_progress is not None:
            on_progress(step / steps, _PHASES[step * len(_PHASES) // steps])
        time.sleep(extra_seconds / steps)
    known = _cache_entries(timing_cache)
    timed = {f"{op}:{options.precision}" for op in node_ops.values()}
    log.add("INFO", f"[FakeTensorRT] timing cache: {len(timed & known)} of {len(timed)} op "
                    "signatures already timed")
    plan_model = decompose_for_onnxruntime(model)
    if options.precision != "fp32":
        plan_model = emulate_precision(plan_model)
    plan = plan_model.SerializeToString()
    out_dir.mkdir(parents=True, exist_ok=True)
    engine_path = save_engine(plan, out_dir / ENGINE_FILE)
    inspector_json = json.dumps(_inspector_layers(model, options.precision))
    report = parse_engine_information(inspector_json, onnx_nodes=node_ops.keys())
    summary = report.summary(node_ops)
    report_path = out_dir / REPORT_FILE
    report_path.write_text(json.dumps({"report_version": 1, "summary": summary,
                                       "inspector": json.loads(inspector_json)}, indent=2))
    metadata = EngineMetadata(
        tensorrt_version=FAKE_TENSORRT_VERSION, gpu_name=gpu.name,
        compute_capability=gpu.compute_capability or "9.0", precision=options.precision,
        profiles=(resolved,), plugins=plugins, build_seconds=time.perf_counter() - started,
        engine_bytes=len(plan), engine_file=ENGINE_FILE, timing_cache_warm=bool(known),
        extra={"options": options.to_dict(), "fake": "FakeTensorRT: ONNX Runtime on the CPU",
               "timing_cache_loaded_bytes": len(timing_cache or b"")},
    )
    metadata_path = out_dir / METADATA_FILE
    metadata_path.write_text(metadata.to_json())
    if on_progress is not None:
        on_progress(1.0, _PHASES[-1])
    return TrtEngine(engine_path=engine_path, metadata_path=metadata_path, metadata=metadata,
                     report_path=report_path, report=summary,
                     timing_cache=json.dumps({"entries": sorted(known | timed)}).encode(),
                     log=tuple(log.lines))


class FakeTensorRTRunner(OnnxRuntimeRunner):
    """ONNX Runtime on the CPU running a FakeTensorRT plan (an ONNX model). Like TensorRT's
    runner it is a DeviceTimedRunner: its "device clock" is the host's around each run, and its
    "device memory" the plan's size."""

    precision = "fp32"  # the engine's, from its metadata (open_fake_runner)

    @property
    def timing_clock(self) -> str:
        return "fake_device_clock"

    @property
    def device_bytes_in_use(self) -> int:
        return self.model_path.stat().st_size

    def time_inference(self, feeds: Mapping[str, np.ndarray], *, warmup: int = 10,
                       iterations: int = 100) -> tuple[float, ...]:
        for _ in range(warmup):
            self.infer(feeds)
        latencies = []
        for _ in range(iterations):
            start = time.perf_counter()
            self.infer(feeds)
            latencies.append((time.perf_counter() - start) * 1e3)
        return tuple(latencies)

    def infer(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        control = _control()
        if control.get("crash_inference"):
            os.kill(os.getpid(), signal.SIGSEGV)
        # a test's stand-in for a GPU on which one precision's kernels are slow
        time.sleep(float(control.get("infer_delay_s", {}).get(self.precision, 0)))
        outputs = super().infer(feeds)
        limit = control.get("corrupt_batches_above")
        first = next(iter(feeds.values()))
        if limit is not None and first.ndim and first.shape[0] > int(limit):
            return {name: value + 1 if np.issubdtype(value.dtype, np.floating) else value
                    for name, value in outputs.items()}
        return outputs

    def profile_layers(self, feeds: Mapping[str, np.ndarray], *, runs: int = 10,
                       warmup: int = 2) -> dict[str, float]:
        """TensorRTRunner's contract: ONNX Runtime's profiler on the plan, each node's time
        added to the layer the fake inspector report put it in (a node in no layer keeps its
        own name, as TensorRT's reformatting layers are in no report)."""
        report = json.loads((self.model_path.parent / REPORT_FILE).read_text())
        layers = parse_engine_information(json.dumps(report.get("inspector") or {}))
        layer_of = {node: layer.name for layer in layers.profile_layers(0)
                    for node in layer.fused_onnx_nodes}
        profile = profile_onnxruntime(self.model_path, feeds,
                                      optimization_level=self.optimization_level,
                                      runs=runs, warmup=warmup).profile
        times: dict[str, float] = {}
        for node in profile.nodes:
            layer = layer_of.get(node.node, node.node)
            times[layer] = times.get(layer, 0.0) + node.time_ms
        return times

    def spec(self) -> RunnerSpec:
        # `runner` lets a child process (the memory probe) recreate this runner too.
        return RunnerSpec(backend=FAKE_TENSORRT.name, model_path=str(self.model_path),
                          options={"optimization_level": self.optimization_level},
                          runner=f"{__name__}:FakeTensorRTRunner")


def open_fake_runner(engine_dir: Path, /, *, gpu: GpuIdentity | None = None) -> FakeTensorRTRunner:
    """`runner_for_trt_engine`'s contract: the real metadata check, then the ORT stand-in."""
    path = Path(engine_dir)
    metadata_path = path / METADATA_FILE if path.is_dir() else path
    metadata = EngineMetadata.from_json(metadata_path.read_text())
    check_compatible(metadata, gpu or FAKE_GPU, FAKE_TENSORRT_VERSION)
    runner = FakeTensorRTRunner(metadata_path.parent / metadata.engine_file)
    runner.precision = metadata.precision
    return runner


FAKE_TENSORRT = TensorRTToolkit(
    name="fake-tensorrt",
    detect_capabilities=fake_capabilities,
    build_engine=fake_build_engine,
    open_runner=open_fake_runner,
)


class _Log:
    def __init__(self, on_log: Callable[[LogLine], None] | None) -> None:
        self._on_log = on_log
        self.lines: list[LogLine] = []

    def add(self, severity: str, message: str) -> None:
        line = LogLine(severity, message)
        self.lines.append(line)
        if self._on_log is not None:
            self._on_log(line)


def _control() -> dict[str, Any]:
    path = os.environ.get("FAKE_TENSORRT_CONTROL")
    if not path or not Path(path).is_file():
        return {}
    control: dict[str, Any] = json.loads(Path(path).read_text() or "{}")
    return control


def _fault_if_asked(fault: str, log: _Log) -> None:
    if fault == "abort":
        os.kill(os.getpid(), signal.SIGABRT)
    elif fault == "hang":
        while True:
            time.sleep(1)
    elif fault == "error":
        log.add("ERROR", "[FakeTensorRT] Error Code 2: Internal Error (out of memory, faked)")
        raise EngineBuildError("TensorRT could not build an engine (FakeTensorRT was asked to "
                               "fail):\nError Code 2: Internal Error (out of memory, faked)")
    elif fault:
        raise ValueError(f"FakeTensorRT fault {fault!r}: use abort, hang or error")


def _cache_entries(data: bytes | None) -> set[str]:
    if not data:
        return set()
    try:
        return set(json.loads(data)["entries"])
    except (ValueError, KeyError, TypeError):
        return set()  # like TensorRT: an unreadable cache means a cold start, not an error


def _inspector_layers(model: onnx.ModelProto, precision: str) -> dict[str, Any]:
    """TensorRT 10.x's DETAILED inspector layout, one layer per node or fused pair."""
    graph = model.graph
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    graph_outputs = {value.name for value in graph.output}
    datatype = {"fp32": "FP32", "fp16": "FP16", "bf16": "BF16", "int8": "Int8",
                "fp8": "FP8"}[precision]
    # A quantized engine computes in int8/fp8 only where a layer reads a DequantizeLinear (as
    # TensorRT fuses the DQ into its consumer); every other layer stays fp32.
    dequantized = {out for node in graph.node if node.op_type == "DequantizeLinear"
                   for out in node.output}
    quantized = precision in ("int8", "fp8")
    layers: list[dict[str, Any]] = []
    nodes = list(graph.node)
    index = 0
    while index < len(nodes):
        group = [nodes[index]]
        follower = nodes[index + 1] if index + 1 < len(nodes) else None
        if (follower is not None and nodes[index].op_type in _FUSABLE_PRODUCERS
                and follower.op_type in _FUSABLE_ACTIVATIONS and nodes[index].output
                and follower.input[:1] == nodes[index].output[:1]
                and readers.get(nodes[index].output[0], 0) == 1
                and nodes[index].output[0] not in graph_outputs):
            group.append(follower)
        index += len(group)
        kind = datatype
        if quantized and not (group[0].op_type not in ("QuantizeLinear", "DequantizeLinear")
                              and any(name in dequantized for name in group[0].input)):
            kind = "FP32"
        layers.append({
            "Name": " + ".join(node.name or f"{node.op_type}_{id(node)}" for node in group),
            "LayerType": "FakeKernel" if len(group) == 1 else "FakeFusedKernel",
            "Inputs": [{"Name": name, "Format/Datatype": f"Row major linear {kind}"}
                       for name in group[0].input if name],
            "Outputs": [{"Name": name, "Format/Datatype": f"Row major linear {kind}"}
                        for name in group[-1].output if name],
            "Origin": "FAKE",
            "TacticValue": "0x0",
        })
    return {"Layers": layers, "Bindings": [value.name for value in (*graph.input, *graph.output)]}
