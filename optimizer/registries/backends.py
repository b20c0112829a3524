"""The inference backends, each declared once with the facts every other layer reads.

`Backend` is the vocabulary; `BACKENDS` maps each to its `BackendSpec`. Job-config validation
(which options and precisions a backend takes), queue routing (its queue), the worker's
runner lookup (its runner's dotted path), `/v1/backends`, the CLI's and the dashboard's choices
all read the spec, so adding a backend is its package plus one entry here (and its worker-side
strategy, worker/pipeline/backends/registry.py); a plug-in's registers at start-up instead
(`register_backend`, core/plugins.py).

Importing this module loads no backend library (the CLI's --help reads it).
"""

from __future__ import annotations

import importlib
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from optimizer.registries.ort_levels import DEFAULT_ORT_LEVEL, OrtLevel
from optimizer.registries.plug_ins import add_registered, remove_registered
from optimizer.registries.precisions import PRECISIONS, Precision
from optimizer.registries.quantization import FLAVOURS, QuantFlavour

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "Backend", "BackendSpec", "QueueKind", "backends_for",
           "load_dotted", "register_backend", "unregister_backend"]


class Backend(StrEnum):
    ONNXRUNTIME = "onnxruntime"
    TENSORRT = "tensorrt"
    OPENVINO = "openvino"

    @classmethod
    def _missing_(cls, value: object) -> Backend | None:
        # A backend a plug-in registered (`register_backend`): its name is no member above.
        return next((name for name in BACKENDS if name == value), None)


class QueueKind(StrEnum):
    """The kind of worker that runs a backend's jobs (core/queues.py names the queues)."""

    CPU = "cpu"
    GPU = "gpu"


@dataclass(frozen=True)
class BackendSpec:
    """One backend: what a job on it may ask for and where it runs.

    `options` are the job-config fields only some backends take; a job on a backend whose spec
    does not list a field it sets is refused, and `why_not` says why for that backend (keyed by
    the field, or by a precision it does not run), so the 422 names the reason, not a rule.

    The stages read the rest instead of asking which backend a job is on: the order a search
    tries its precisions in, the Q/DQ flavours of each quantized precision, whether ONNX
    Runtime runs its engines (and so must load the models a job writes at the engine's level),
    which runtime judges and times its quantized candidates, and how its int8 engine's per-node
    precisions are read.
    """

    name: Backend
    label: str
    queue: QueueKind
    # The broker queue its jobs go to; core/queues.py narrows a GPU backend's to
    # "<queue_name>.sm90" / "<queue_name>.h200" for jobs naming a target_gpu. A GPU backend's is
    # its own: only a host that can run that backend consumes it. Deployed workers name these.
    queue_name: str = field(kw_only=True)
    precisions: tuple[Precision, ...]
    runner: str  # "module:Class" of its `Runner`, imported on first use
    engine_builder: str  # "module:function" that builds its engine, imported on first use
    options: frozenset[str] = frozenset()
    why_not: Mapping[str, str] = field(default_factory=dict)
    # The `HostCapabilities` property that says a host can run it; None: any host can.
    host_check: str | None = None
    # What a host needs to run it, in words, for the messages that say why none is taking its jobs.
    host_needs: str | None = None
    # The order a search tries its precisions in, the likeliest winner first
    # (optimizer/search/candidates.py); every precision in `precisions`, each once.
    precision_order: tuple[Precision, ...] = field(kw_only=True)
    # The Q/DQ flavours each quantized precision's engine is written in, all tried by the
    # quantization search (worker/pipeline/steps/quantize.py); every quantized precision in
    # `precisions` has one or more.
    quant_flavours: Mapping[Precision, tuple[QuantFlavour, ...]] = field(
        kw_only=True, default_factory=dict)
    # Its engines are ONNX Runtime sessions: the models a job writes must load in ONNX Runtime
    # at the engine's level (`model_check_level`), and ONNX Runtime's CPU time of a quantized
    # candidate is the engine's speed, so the quantization search times candidates on the
    # worker. False: ONNX Runtime only runs its models as the reference, at level "disabled",
    # and the benchmark stage times the engine on the backend's own device.
    ort_runs_engines: bool = field(kw_only=True, default=False)
    # "module:function" reporting the precision each node runs at in its quantized engine
    # (optimizer/quantization/node_precision.py's signature); None: no report.
    node_precisions: str | None = field(kw_only=True, default=None)
    # The float precisions its runtime computes in from the fp32 graph (OpenVINO's inference
    # precision hint): the optimize stage converts no graph for these, where it converts the
    # graph to the `onnx_type` of the others (`converts_graph`).
    runtime_precisions: frozenset[Precision] = field(kw_only=True, default=frozenset())
    # "module:function" opening the runner the quantization search judges and times candidates
    # with, `factory(model_path, threads) -> Runner` (optimizer/quantization/search.py's
    # `CandidateRunner`): its own runtime, on the worker's CPU. None: ONNX Runtime at the
    # engine's level (its own engines; the reference for a GPU backend's, timed elsewhere).
    candidate_runner: str | None = field(kw_only=True, default=None)

    def __post_init__(self) -> None:
        if sorted(self.precision_order) != sorted(self.precisions):
            raise ValueError(
                f"backend {self.name!r}: precision_order {[str(p) for p in self.precision_order]} "
                f"must list each of its precisions {[str(p) for p in self.precisions]} once")
        unknown = [str(p) for p in self.precisions if p not in PRECISIONS]
        if unknown:
            raise ValueError(f"backend {str(self.name)!r} runs {', '.join(unknown)}, which no "
                             "PrecisionSpec declares: register_precision it first "
                             "(optimizer/registries/precisions.py)")
        unflavoured = [str(p) for p in self.precisions
                       if PRECISIONS[p].quantizes and not self.quant_flavours.get(p)]
        if unflavoured:
            raise ValueError(f"backend {self.name!r} runs {', '.join(unflavoured)} but names no "
                             "quant_flavours for it (optimizer/registries/quantization.py)")

    def converts_graph(self, precision: Precision) -> bool:
        """Whether a job at `precision` on this backend has its graph converted to the
        precision's ONNX type (else the engine computes at it from the fp32 graph)."""
        return PRECISIONS[precision].converts and precision not in self.runtime_precisions

    def has_dynamic_form(self, precision: Precision) -> bool:
        """Whether its engines run `precision` dynamically quantized (activation scales at run
        time): the precision has such a form and every flavour it is written in here runs it."""
        return PRECISIONS[precision].has_dynamic_form and all(
            FLAVOURS[flavour].runs_dynamic_form for flavour in self.quant_flavours.get(precision, ()))

    @property
    def quantized_precisions(self) -> tuple[Precision, ...]:
        """Its precisions reached by quantization (int8, fp8), in `precisions`' order."""
        return tuple(p for p in self.precisions if PRECISIONS[p].quantizes)

    @property
    def needs_gpu(self) -> bool:
        return self.queue is QueueKind.GPU

    def runs_on(self, capabilities: object) -> bool:
        """Whether a host with `capabilities` (optimizer.capabilities.HostCapabilities, which
        reads the precision registry, so it is not imported here) can build and run this
        backend's engines."""
        return self.host_check is None or bool(getattr(capabilities, self.host_check))

    @property
    def times_quantized_candidates(self) -> bool:
        """Whether the quantization search times its candidates on the worker's CPU: its engines
        are ONNX Runtime's, or its own runtime runs the candidates there."""
        return self.ort_runs_engines or self.candidate_runner is not None

    def model_check_level(self, engine_level: OrtLevel | None) -> OrtLevel:
        """The ONNX Runtime level the models a job writes must load at: the engine's
        (`engine_level`, else the default) where ONNX Runtime runs the engine; else
        "disabled", the level ONNX Runtime runs them at as the reference."""
        if self.ort_runs_engines:
            return engine_level or DEFAULT_ORT_LEVEL
        return "disabled"


BACKENDS: Mapping[Backend, BackendSpec] = MappingProxyType({
    Backend.ONNXRUNTIME: BackendSpec(
        Backend.ONNXRUNTIME, "ONNX Runtime", QueueKind.CPU, queue_name="cpu",
        precisions=(Precision.FP32, Precision.FP16, Precision.INT8),
        precision_order=(Precision.INT8, Precision.FP32, Precision.FP16),
        # Picked by measurement on the worker's own CPU (uint8 activations win on x86 with
        # VNNI, int8 ones elsewhere).
        quant_flavours={Precision.INT8: (QuantFlavour.ORT_U8S8, QuantFlavour.ORT_S8S8)},
        ort_runs_engines=True,
        node_precisions="optimizer.quantization.node_precision:engine_node_precisions",
        runner="optimizer.backends.onnxruntime.runner:OnnxRuntimeRunner",
        engine_builder="optimizer.backends.onnxruntime.build:build_ort_engine",
        options=frozenset({"ort_optimization_level", "ort_flush_denormals",
                           "ort_intra_op_threads", "intra_op_threads"}),
        why_not={
            "target_gpu": "backend 'onnxruntime' runs on CPU workers.",
            "profiles": "ONNX Runtime accepts any shape the graph allows, so backend "
                        "'onnxruntime' needs none (input_shapes sets the shape jobs run at).",
            Precision.BF16: "ONNX Runtime's CPU provider has no bf16 kernels for most ops.",
            Precision.FP8: "ONNX Runtime's CPU provider has no fp8 compute kernels (it only "
                           "emulates fp8 Q/DQ).",
        }),
    Backend.TENSORRT: BackendSpec(
        Backend.TENSORRT, "TensorRT", QueueKind.GPU, queue_name="gpu",
        precisions=(Precision.FP32, Precision.FP16, Precision.BF16, Precision.INT8,
                    Precision.FP8),
        precision_order=(Precision.FP8, Precision.INT8, Precision.FP16, Precision.BF16,
                         Precision.FP32),
        quant_flavours={Precision.INT8: (QuantFlavour.TENSORRT,),
                        Precision.FP8: (QuantFlavour.TENSORRT_FP8,)},
        runner="optimizer.backends.tensorrt.runner:TensorRTRunner",
        engine_builder="optimizer.backends.tensorrt.build:build_trt_engine",
        options=frozenset({"target_gpu", "profiles"}),
        host_check="can_build_tensorrt", host_needs="an NVIDIA GPU and TensorRT",
        why_not={
            "ort_optimization_level": "a TensorRT engine is optimized by TensorRT's builder.",
            "ort_flush_denormals": "TensorRT's GPU kernels choose their own denormal handling.",
            "ort_intra_op_threads": "a TensorRT engine runs on the GPU, not on CPU threads.",
            "intra_op_threads": "a TensorRT engine runs on the GPU, not on CPU threads.",
        }),
    # CPU, but a queue of its own: only a host with the openvino and nncf packages takes its
    # jobs (an ONNX Runtime worker without them leaves them queued, and says why).
    Backend.OPENVINO: BackendSpec(
        Backend.OPENVINO, "OpenVINO", QueueKind.CPU, queue_name="openvino",
        precisions=(Precision.FP32, Precision.BF16, Precision.INT8),
        # bf16 first where the CPU has it: within its budget on nearly every model (PP-OCR
        # cosine 0.996-1.000 at 0.37-0.60x the original), where int8 is faster only where it
        # meets its budget (ResNet-50 0.27-0.36x, bf16 0.50x) and on PP-OCRv5's recognizer
        # NNCF's int8 stays out of its 0.99 cosine even with 16 nodes kept in float
        # (bench/openvino_int8.py); int8 next, the only reduced precision without bf16.
        precision_order=(Precision.BF16, Precision.INT8, Precision.FP32),
        quant_flavours={Precision.INT8: (QuantFlavour.OPENVINO_NNCF,)},
        # Its int8 candidates are judged and timed in OpenVINO itself, against the fp32 graph
        # at inference precision f32 (what it ships otherwise at fp32).
        candidate_runner="optimizer.backends.openvino.candidates:candidate_runner",
        node_precisions="optimizer.backends.openvino.node_precision:openvino_node_precisions",
        # bf16 is OpenVINO's inference precision hint on the fp32 IR (its CPU plugin keeps
        # the layers that need it in f32): no graph conversion.
        runtime_precisions=frozenset({Precision.BF16}),
        runner="optimizer.backends.openvino.runner:OpenVinoRunner",
        engine_builder="optimizer.backends.openvino.build:build_ov_engine",
        options=frozenset({"intra_op_threads"}),
        host_check="can_run_openvino",
        host_needs="the openvino and nncf Python packages (pip install 'fuseforge[openvino]')",
        why_not={
            "target_gpu": "backend 'openvino' runs on CPU workers.",
            "profiles": "an OpenVINO engine is built at the job's input_shapes, or keeps the "
                        "model's own dynamic dims where they cannot be fixed; it takes no "
                        "TensorRT profiles.",
            "ort_optimization_level": "an OpenVINO engine is optimized by OpenVINO's own "
                                      "graph transformations.",
            "ort_flush_denormals": "OpenVINO's CPU plugin sets its own denormal handling.",
            "ort_intra_op_threads": "it is ONNX Runtime's name; backend 'openvino' takes "
                                    "intra_op_threads.",
            Precision.FP16: "OpenVINO's CPU plugin runs fp16 natively only on CPUs with "
                            "AVX512_FP16 (Intel Sapphire Rapids and later); FuseForge does not "
                            "offer it yet.",
            Precision.FP8: "OpenVINO's CPU plugin has no fp8 compute kernels.",
        }),
})

# BACKENDS is a read-only view of this dict: a backend `register_backend` adds is seen by every
# module that imported BACKENDS, and no reader can change it.
_REGISTERED: dict[Backend, BackendSpec] = dict(BACKENDS)
BACKENDS = MappingProxyType(_REGISTERED)

# The backend a job, the CLI and a library call run on when they name none: any host has it.
DEFAULT_BACKEND = Backend.ONNXRUNTIME


def register_backend(spec: BackendSpec) -> None:
    """Add a backend declared outside this module: a plug-in's (core/plugins.py calls it at
    start-up in every process), named by `plug_in_member(Backend, "...")`
    (optimizer/registries/plug_ins.py). Registering an equal spec again does nothing.

    Raises:
        ValueError: another spec has that name.
    """
    add_registered(_REGISTERED, spec.name, spec, "backend", same=operator.eq)


def unregister_backend(name: Backend) -> None:
    """Remove a backend `register_backend` added (a test's stand-in, when the test ends).

    Raises:
        ValueError: `name` is one of `Backend`'s own members, or was not registered.
    """
    remove_registered(_REGISTERED, name, "backend")


def backends_for(option_or_precision: str) -> tuple[Backend, ...]:
    """The backends that take a job option (a field in some spec's `options`) or a precision."""
    return tuple(name for name, spec in BACKENDS.items()
                 if option_or_precision in spec.options or option_or_precision in spec.precisions)


def load_dotted(path: str) -> Any:
    """The object a "package.module:name" path names, importing its module."""
    module_name, _, name = path.partition(":")
    return getattr(importlib.import_module(module_name), name)
