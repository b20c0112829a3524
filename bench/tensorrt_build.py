"""TensorRT build time with and without a warm timing cache, on this machine's GPU.

Builds each model (fused for TensorRT, at the precision asked) three times: cold (no cache),
again from the cache the first build left (same model: every tactic timed before), and a
*similar* model (other random weights, same shapes) from that cache, the case the stored
per-GPU caches serve. Prints build seconds and cold/warm ratios; needs TensorRT and a GPU.
`--toolkit tests.support.fake_tensorrt:FAKE_TENSORRT` dry-runs the script where they are
missing (its times mean nothing).

    .venv/bin/python -m bench.tensorrt_build [--models resnet50,bert] [--precision fp16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import onnx

from optimizer.backends.tensorrt import TrtBuildOptions, TrtEngine
from optimizer.backends.tensorrt.toolkit import TensorRTToolkit, load_toolkit
from optimizer.model.shapes import fix_input_shapes, resolve_input_shapes
from optimizer.model.tensor_specs import summarize_model
from optimizer.optimize import OptimizeOptions, optimize_model
from optimizer.precision import convert_precision
from optimizer.testing.real_models import bert_encoder, resnet50

MODELS: dict[str, Callable[[int], onnx.ModelProto]] = {
    "resnet50": lambda seed: resnet50(batch=8, seed=seed),
    "bert": lambda seed: bert_encoder(seed=seed, batch=8),
}


def _engine_source(model: onnx.ModelProto, precision: str, path: Path) -> Path:
    static = fix_input_shapes(model, resolve_input_shapes(summarize_model(model).inputs, None))
    fused, _ = optimize_model(static, OptimizeOptions(backend="tensorrt"))
    if precision != "fp32":
        fused, _ = convert_precision(fused, precision)
    onnx.save(fused, path)
    return path


def _build(toolkit: TensorRTToolkit, source: Path, out_dir: Path, precision: str,
           cache: bytes | None) -> TrtEngine:
    gpu = toolkit.detect_capabilities().gpu
    return toolkit.build_engine(source, out_dir, gpu=gpu, timing_cache=cache,
                                options=TrtBuildOptions(precision=precision))


def bench_model(toolkit: TensorRTToolkit, name: str, precision: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        source = _engine_source(MODELS[name](0), precision, folder / "a.onnx")
        similar = _engine_source(MODELS[name](1), precision, folder / "b.onnx")
        cold = _build(toolkit, source, folder / "cold", precision, None)
        again = _build(toolkit, source, folder / "again", precision, cold.timing_cache)
        other = _build(toolkit, similar, folder / "similar", precision, cold.timing_cache)
    cold_s = cold.metadata.build_seconds
    print(f"{name:9} {precision:5} cold {cold_s:7.2f} s | same model warm "
          f"{again.metadata.build_seconds:7.2f} s ({cold_s / again.metadata.build_seconds:5.2f}x) "
          f"| similar model warm {other.metadata.build_seconds:7.2f} s "
          f"({cold_s / other.metadata.build_seconds:5.2f}x) | cache {len(cold.timing_cache)} B, "
          f"warm={again.metadata.timing_cache_warm}/{other.metadata.timing_cache_warm}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tensorrt_build")
    parser.add_argument("--models", default="resnet50,bert")
    parser.add_argument("--precision", default="fp16", choices=("fp32", "fp16", "bf16"))
    parser.add_argument("--toolkit", default=None,
                        help="module:attribute of another TensorRTToolkit (a dry run)")
    args = parser.parse_args(argv)
    toolkit = load_toolkit(args.toolkit)
    capabilities = toolkit.detect_capabilities()
    if not capabilities.can_build_tensorrt:
        print(f"no GPU with TensorRT here ({capabilities.describe()}); nothing measured")
        return 0
    print(f"{toolkit.name} on {capabilities.describe()}")
    for name in args.models.split(","):
        bench_model(toolkit, name.strip(), args.precision)
    return 0


if __name__ == "__main__":
    sys.exit(main())
