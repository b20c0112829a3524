"""A minimal stand-in third CPU backend for the backend-race tests: ONNX Runtime's spec under
another name and label, on a queue of its own, runnable only on a host whose capabilities say
so (`host_check`), as a CPU backend with an optional library is (OpenVINO).

It is patched into the modules that read the backend registry for one test (`monkeypatch`),
not registered as a plug-in: the seam's stand-in (tests/support/stand_in.py, where merged) does
that; this one only lets the search's choice of backends and its verdict between them be
tested without naming a real third backend.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import cast

import pytest

from optimizer.capabilities import HostCapabilities
from optimizer.registries.backends import BACKENDS, Backend, BackendSpec

__all__ = ["STAND_IN_CPU", "HostWithStandIn", "patch_stand_in", "stand_in_spec"]

STAND_IN_CPU = cast(Backend, "stand-in-cpu")  # a name, not a member of `Backend`
# The modules that hold the registry under their own name and decide what a search tries.
_READERS = ("optimizer.registries.backends", "core.job_config", "optimizer.search.candidates",
            "optimizer.search.decision")


@dataclass(frozen=True)
class HostWithStandIn(HostCapabilities):
    """A host's capabilities with the stand-in's library present (or not)."""

    has_stand_in: bool = True


def stand_in_spec() -> BackendSpec:
    onnxruntime = BACKENDS[Backend.ONNXRUNTIME]
    return replace(onnxruntime, name=STAND_IN_CPU, label="Stand-in CPU",
                   queue_name="stand-in-cpu", host_check="has_stand_in",
                   host_needs="the stand-in's library")


def patch_stand_in(monkeypatch: pytest.MonkeyPatch) -> BackendSpec:
    """Put the stand-in in the registry as every search module reads it, for this test."""
    spec = stand_in_spec()
    registry = MappingProxyType({**BACKENDS, STAND_IN_CPU: spec})
    for module in _READERS:
        monkeypatch.setattr(f"{module}.BACKENDS", registry)
    return spec
