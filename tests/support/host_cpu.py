"""Whether this host's CPU runs a precision natively, as the capability registry decides: tests
of a real engine at that precision run where it does, and its refusal is tested where it does
not (the refusal's own rule is tested with stubbed flags in tests/optimizer/test_capabilities.py).
"""

from __future__ import annotations

import pytest

from optimizer.capabilities import detect_capabilities
from optimizer.registries.precisions import PRECISIONS, Precision

__all__ = ["cpu_refusal", "needs_cpu_for", "needs_cpu_without"]


def cpu_refusal(precision: Precision) -> str | None:
    """Why this host's CPU cannot run `precision` natively; None where it can."""
    return PRECISIONS[precision].cpu_refusal(detect_capabilities().cpu_flags)


def needs_cpu_for(precision: Precision) -> pytest.MarkDecorator:
    """Skip, saying why, on a host whose CPU lacks `precision`'s instructions."""
    refusal = cpu_refusal(precision)
    return pytest.mark.skipif(refusal is not None, reason=f"this host: {refusal}")


def needs_cpu_without(precision: Precision) -> pytest.MarkDecorator:
    """Skip, saying why, on a host whose CPU runs `precision`: the test is of its refusal."""
    return pytest.mark.skipif(cpu_refusal(precision) is None,
                              reason=f"this host's CPU runs {precision}; the test is of its "
                                     "refusal on a CPU without it")
