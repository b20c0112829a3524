#!/usr/bin/env bash
# mypy --strict on the TensorRT backend and the plugins' TensorRT registrations against the type
# stubs of TensorRT 11.4 and 10.16 (../shared/tensorrt-stubs/, generated from the real wheels):
# TensorRT cannot be installed where FuseForge is developed, so the stubs stand in for it and
# flag calls a version lacks (e.g. BuilderFlag.FP16 on 11.x) or wrong signatures.
# Skips, saying so, where ../shared is absent (a user's clone has none).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
STUBS=../shared/tensorrt-stubs
CHECKED=(
  optimizer/backends/tensorrt
  optimizer/plugins/bias_gelu/trt_registration.py
  optimizer/plugins/multi_head_attention/trt_registration.py
  optimizer/plugins/skip_layer_norm/trt_registration.py
  optimizer/plugins/trt_aot.py
  optimizer/plugins/trt_registry.py
)
for version in 11.4 10.16; do
  if [ ! -f "$STUBS/$version/tensorrt/__init__.pyi" ]; then
    echo "typecheck-tensorrt: SKIPPED for TensorRT $version: no stubs at $STUBS/$version" \
         "(they live in ../shared/tensorrt-stubs/)"
    continue
  fi
  echo "typecheck-tensorrt: TensorRT $version stubs"
  MYPYPATH="$STUBS/$version" "$PYTHON" -m mypy --strict \
    --cache-dir ".mypy_cache/tensorrt-$version" "${CHECKED[@]}"
done
