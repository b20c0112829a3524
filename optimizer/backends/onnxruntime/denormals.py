"""Flush denormal floats to zero on the calling thread while an engine runs.

Why: a masked attention row is where denormals come from. ONNX Runtime's CPU softmax clamps
exp's argument at about -88.4, so every masked score (a padding token, a causal mask) becomes
exp(-88.4) = 4e-39, a denormal, and the softmax and the MatMul after it then run on denormal
operands at a fraction of their speed: a softmax of [1, 4, 128, 128] with half its keys masked
took 480 us against 50 us with denormals flushed (bench/denormals.py), a 2-layer BERT at
sequence 128 2.8 ms against 1.4 ms. Flushed, those probabilities are 0, which is what a masked
key should get; no value a float32 model can use in a sum next to a normal number is lost.

ONNX Runtime's own switch (session config "session.set_denormal_as_zero") reaches its intra-op
pool threads, but the calling thread, which computes too (all of it with one intra-op thread),
only through the first session a process ever creates, whichever it is, and then for good. So
the runner sets the CPU's flags itself, around each run, and puts them back after; around
session creation it keeps them as they were, so that first session changes nothing for the
thread.

Supported where the flags are reachable through glibc's fenv: x86-64 (MXCSR's FTZ and DAZ bits)
and AArch64 (FPCR's FZ bit) on Linux. Elsewhere `flushing_supported()` is False and the
context managers do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "denormals_flushed",
    "flushing_supported",
    "thread_float_state_kept",
    "thread_flushes_denormals",
]

_X86_FTZ_DAZ = 0x8040  # MXCSR bit 15 flush-to-zero, bit 6 denormals-are-zero
_ARM_FZ = 1 << 24  # FPCR bit 24 flush-to-zero (inputs and outputs)


class _X86Fenv(ctypes.Structure):
    # glibc's x86-64 fenv_t: the 28-byte x87 environment, then MXCSR.
    _fields_ = [("x87", ctypes.c_ushort * 14), ("mxcsr", ctypes.c_uint)]


class _ArmFenv(ctypes.Structure):
    _fields_ = [("fpcr", ctypes.c_uint), ("fpsr", ctypes.c_uint)]


def _libm() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    except OSError:
        return None


_MACHINE = platform.machine().lower()
_FENV: type[ctypes.Structure] | None = (
    _X86Fenv if _MACHINE in ("x86_64", "amd64") else _ArmFenv if _MACHINE in ("aarch64", "arm64")
    else None)
_LIBM = _libm() if _FENV is not None else None


def flushing_supported() -> bool:
    """Whether this platform lets FuseForge flush denormals on a thread."""
    return _LIBM is not None and _FENV is not None


def _get() -> ctypes.Structure:
    assert _LIBM is not None and _FENV is not None
    env = _FENV()
    if _LIBM.fegetenv(ctypes.byref(env)) != 0:
        raise OSError("fegetenv failed")
    return env


def _set(env: ctypes.Structure) -> None:
    assert _LIBM is not None
    if _LIBM.fesetenv(ctypes.byref(env)) != 0:
        raise OSError("fesetenv failed")


@contextmanager
def thread_float_state_kept() -> Iterator[None]:
    """The calling thread's floating-point environment as it was on entry, after the block."""
    if not flushing_supported():
        yield
        return
    saved = _get()
    try:
        yield
    finally:
        _set(saved)


class denormals_flushed:  # noqa: N801 - used as a context manager, named like one
    """Within the block, denormal inputs read as zero and denormal results become zero on
    the calling thread (when `enabled` and supported); the thread's previous state after.

    A class, not a generator: it wraps every engine run (about 2 us, not 5)."""

    def __init__(self, enabled: bool = True) -> None:
        self._enabled = enabled and flushing_supported()
        self._saved: ctypes.Structure | None = None

    def __enter__(self) -> None:
        if not self._enabled:
            return
        self._saved = _get()
        flushed = type(self._saved).from_buffer_copy(self._saved)
        if isinstance(flushed, _X86Fenv):
            flushed.mxcsr |= _X86_FTZ_DAZ
        else:
            flushed.fpcr |= _ARM_FZ
        _set(flushed)

    def __exit__(self, *exc_info: object) -> None:
        if self._saved is not None:
            _set(self._saved)
            self._saved = None


def thread_flushes_denormals() -> bool:
    """Whether the calling thread flushes denormals now (for tests)."""
    if not flushing_supported():
        return False
    env = _get()
    if isinstance(env, _X86Fenv):
        return bool(env.mxcsr & _X86_FTZ_DAZ == _X86_FTZ_DAZ)
    return bool(env.fpcr & _ARM_FZ)
