"""Uploads into an S3 store: the API's memory and its throughput against a plain copy.

Starts a real SeaweedFS (bench/service/seaweed.py) and `fuseforge serve` keeping artifacts in it
(FUSEFORGE_STORAGE__BACKEND=s3), then per round, on a new model of `--model-mb` (new bytes, so
no upload is deduplicated), in alternating order:

- the API upload: POST /v1/models (streamed into the bucket in 8 MiB multipart parts as the
  body arrives, its skeleton checked in the model-check process, then the multipart upload
  completed: no local copy), with the API's peak resident memory growth
  (/proc/PID/clear_refs, VmHWM) over its resident memory before;
- the plain copy: boto3's `upload_file` of the same file into the same bucket, as a user's own
  script would send it (boto3's default transfer settings).

Prints each round and the median of the per-round throughput ratios (plain time / API time:
1.0 is as fast as the plain copy).

    .venv/bin/python -m bench.service.s3_upload [--model-mb 1900 --rounds 3]

Linux only (it reads /proc); run as the API's user or root.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import onnx

from bench.service.seaweed import SeaweedServer
from bench.service.stack import FUSEFORGE, free_port, fuseforge_env, start_fuseforge, stop, wait_healthy
from optimizer.testing.models import large_model

_BUCKET = "bench-uploads"


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _api_upload(base_url: str, pid: int, path: Path) -> tuple[float, float]:
    """(seconds, peak RSS growth in MB) of one upload through the API."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
    before = _status_kib(pid, "VmRSS")
    started = time.perf_counter()
    with path.open("rb") as handle:
        answer = httpx.post(f"{base_url}/v1/models", params={"name": path.name}, content=handle,
                            headers={"Content-Type": "application/octet-stream"}, timeout=3600)
    took = time.perf_counter() - started
    if answer.status_code != 201:
        raise SystemExit(f"the upload of {path.name} answered {answer.status_code}: "
                         f"{answer.text[:500]}")
    return took, (_status_kib(pid, "VmHWM") - before) / 1024


def _plain_copy(seaweed: SeaweedServer, path: Path, key: str) -> float:
    client = seaweed.client()
    started = time.perf_counter()
    client.upload_file(str(path), _BUCKET, key)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-mb", type=int, default=1900,
                        help="size of each model (ONNX keeps a model without external data "
                             "under 2 GiB)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="fuseforge-s3-upload-"))
    seaweed = SeaweedServer(folder / "seaweed")
    seaweed.start()
    port = free_port()
    env = fuseforge_env(folder / "data", port, FUSEFORGE_MAX_UPLOAD_BYTES=str(4 * 2**30),
                        **seaweed.environment(_BUCKET))
    subprocess.run([*FUSEFORGE, "migrate"], env=env, check=True, capture_output=True)
    api = start_fuseforge("serve", env, folder / "api.log")
    base_url = f"http://127.0.0.1:{port}"
    ratios, growths = [], []
    try:
        wait_healthy(f"{base_url}/healthz", api, timeout_s=120)
        warm_up = folder / "warm-up.onnx"
        onnx.save(large_model(1, 0), warm_up)
        _api_upload(base_url, api.pid, warm_up)
        print(f"{'round':>5}  {'API upload':>11}  {'API peak':>10}  {'plain copy':>11}  "
              f"{'ratio':>6}", flush=True)
        for round_no in range(args.rounds):
            model = folder / f"model-{round_no}.onnx"
            onnx.save(large_model(args.model_mb, 100 + round_no), model)
            size_mb = model.stat().st_size / 2**20
            if round_no % 2 == 0:  # alternate which goes first: the page cache favours neither
                api_s, growth = _api_upload(base_url, api.pid, model)
                plain_s = _plain_copy(seaweed, model, f"plain/{round_no}.onnx")
            else:
                plain_s = _plain_copy(seaweed, model, f"plain/{round_no}.onnx")
                api_s, growth = _api_upload(base_url, api.pid, model)
            model.unlink()
            ratios.append(plain_s / api_s)
            growths.append(growth)
            print(f"{round_no:>5}  {api_s:9.1f} s  {growth:+7.1f} MB  {plain_s:9.1f} s  "
                  f"{plain_s / api_s:5.2f}x   ({size_mb:.0f} MB, API "
                  f"{size_mb / api_s:.0f} MB/s, plain {size_mb / plain_s:.0f} MB/s)", flush=True)
        print(f"median throughput ratio (plain copy time / API upload time): "
              f"{statistics.median(ratios):.2f}x; largest API peak growth {max(growths):+.1f} MB",
              flush=True)
    finally:
        stop(api, timeout_s=30)
        seaweed.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
