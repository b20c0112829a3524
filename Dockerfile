# syntax=docker/dockerfile:1
#
# Images for docker-compose.yml, one target per role:
#   web         API and `fuseforge migrate`; no TensorRT (the API sends tasks by name only)
#   worker      CPU Celery worker (ONNX passes, ONNX Runtime validation and benchmarks)
#   worker-gpu  GPU Celery worker on NVIDIA's TensorRT container
#
# Every target runs as the same non-root uid, so files one writes to the shared `artifacts`
# volume are readable by the others.

ARG PYTHON_IMAGE=python:3.11-slim
# NGC TensorRT container 25.10: TensorRT 10.13.3, CUDA 13.0, Ubuntu 24.04, Python 3.12 (see
# "TensorRT Container Release Notes" at docs.nvidia.com). Needs an NVIDIA driver that supports
# CUDA 13.0 on the host; check the release notes before moving the tag.
ARG TENSORRT_IMAGE=nvcr.io/nvidia/tensorrt:25.10-py3
ARG APP_UID=10001

FROM ${PYTHON_IMAGE} AS base
ARG APP_UID
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    FUSEFORGE_DATA_DIR=/data
RUN groupadd --system --gid "${APP_UID}" fuseforge \
    && useradd --system --uid "${APP_UID}" --gid fuseforge --home-dir /app \
       --shell /usr/sbin/nologin fuseforge
WORKDIR /app
# The whole tree (less .dockerignore): `fuseforge migrate` reads alembic.ini and migrations/ here.
COPY . .
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install . \
    && rm -rf build *.egg-info \
    && install -d -o fuseforge -g fuseforge /data
# A fresh named volume mounted at /data takes this directory's owner.
USER fuseforge

FROM base AS web
EXPOSE 8000
CMD ["fuseforge", "serve"]

FROM base AS worker
CMD ["fuseforge", "worker", "--queues", "cpu"]

FROM ${TENSORRT_IMAGE} AS worker-gpu
ARG APP_UID
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    FUSEFORGE_DATA_DIR=/data
# Ubuntu 24.04 already has uid 1000 (`ubuntu`); the fixed uid above avoids it.
RUN groupadd --system --gid "${APP_UID}" fuseforge \
    && useradd --system --uid "${APP_UID}" --gid fuseforge --home-dir /app \
       --shell /usr/sbin/nologin fuseforge
WORKDIR /app
COPY . .
# Into the container's own Python, next to its TensorRT bindings; PIP_BREAK_SYSTEM_PACKAGES lets
# pip past Ubuntu's PEP 668 marker, where present. find_spec rather than import: importing
# tensorrt at build time would look for a GPU driver.
RUN --mount=type=cache,target=/root/.cache/pip \
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install . \
    && rm -rf build *.egg-info \
    && python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('tensorrt') is None)" \
    && install -d -o fuseforge -g fuseforge /data
USER fuseforge
CMD ["fuseforge", "worker", "--queues", "gpu", "--concurrency", "1"]
