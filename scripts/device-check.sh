#!/usr/bin/env bash
# The one script a GPU session runs, from the repository root:
#
#     bash scripts/device-check.sh            # everything also written under $OUT when set
#
# 1. the machine: nvidia-smi, Python and the versions of numpy, torch, triton (and onnx, onnx_ir
#    when present: without them the registration-comparison tests skip);
# 2. pytest tests/gpu (the kernels against their numpy references on CUDA, and the AOT compile
#    check), only tests/gpu's conftest (the suite's root conftest needs the whole service);
#    where pytest is missing, step 3's correctness part stands in for it;
# 3. python -m bench.plugins_gpu --json $OUT/plugins_gpu.json: correctness in float32/16/bf16,
#    then bandwidth against a device-to-device copy and speed-ups over eager PyTorch.
# Each step has a time limit (PYTEST_TIMEOUT_S, BENCH_TIMEOUT_S); the exit status is non-zero
# when a test or a correctness check fails or a step times out. Needs numpy, torch and triton
# only: the project is not installed there, so PYTHONPATH is the repository root.
set -u -o pipefail

cd "$(dirname "$0")/.."
OUT="${OUT:-${TMPDIR:-/tmp}/fuseforge-device-check}"
mkdir -p "$OUT"
PYTEST_TIMEOUT_S="${PYTEST_TIMEOUT_S:-300}"
BENCH_TIMEOUT_S="${BENCH_TIMEOUT_S:-240}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
unset TRITON_INTERPRET  # the kernels must compile for the GPU here

if [ -n "${PYTHON:-}" ]; then
    :
elif [ -x .venv/bin/python ] && .venv/bin/python -c "import torch, triton" 2>/dev/null; then
    PYTHON=.venv/bin/python
elif command -v python3 >/dev/null; then
    PYTHON=python3
else
    PYTHON=python
fi

status=0
step() { printf '\n=== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

step "machine"
{
    nvidia-smi || echo "nvidia-smi failed (no NVIDIA driver?)"
    "$PYTHON" - <<'EOF'
import importlib, platform, sys
print("python", platform.python_version(), sys.executable)
for name in ("numpy", "torch", "triton", "pytest", "onnx", "onnx_ir"):
    try:
        print(f"{name:8}", getattr(importlib.import_module(name), "__version__", "?"))
    except Exception as err:
        print(f"{name:8} missing ({type(err).__name__}: {err})")
try:
    import torch
    print("cuda", torch.version.cuda, "available:", torch.cuda.is_available(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
except Exception as err:
    print("torch unusable:", err)
EOF
} 2>&1 | tee "$OUT/machine.txt"

step "pytest tests/gpu (limit ${PYTEST_TIMEOUT_S}s)"
if "$PYTHON" -c "import pytest" 2>/dev/null; then
    timeout --kill-after=10 "$PYTEST_TIMEOUT_S" "$PYTHON" -m pytest tests/gpu -q -rfEsx \
        --confcutdir=tests/gpu -p no:cacheprovider --junitxml="$OUT/pytest-gpu.xml" \
        2>&1 | tee "$OUT/pytest-gpu.txt"
    code=${PIPESTATUS[0]}
    echo "pytest exit status: $code"
    [ "$code" -eq 0 ] || status=1
else
    echo "pytest is not installed: the bench's correctness checks below stand in" \
        | tee "$OUT/pytest-gpu.txt"
fi

step "python -m bench.plugins_gpu (limit ${BENCH_TIMEOUT_S}s)"
timeout --kill-after=10 "$BENCH_TIMEOUT_S" "$PYTHON" -m bench.plugins_gpu \
    --json "$OUT/plugins_gpu.json" 2>&1 | tee "$OUT/plugins_gpu.txt"
code=${PIPESTATUS[0]}
echo "bench exit status: $code"
[ "$code" -eq 0 ] || status=1

step "done: exit status $status; results in $OUT"
exit "$status"
