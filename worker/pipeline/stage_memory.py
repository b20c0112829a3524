"""The job process's peak resident memory within each stage.

Linux keeps a process's high-water mark of resident memory (VmHWM in /proc/self/status), and
writing 5 to /proc/self/clear_refs sets it back to the current resident size: so a stage's
peak is the mark read as it ends, reset as it starts. That is the whole process (every
thread), not its children: the upload check and a TensorRT build in a process of their own
count for themselves. Where the process cannot reset its mark (no /proc: macOS), nothing is
measured and the job's report has no figures rather than wrong ones.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["METHOD", "PeakMemory"]

METHOD = "VmHWM of the job's process, reset as each stage starts"
_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")
_RESET_HIGH_WATER_MARK = "5"


class PeakMemory:
    """Each stage's peak resident memory, in bytes, as the stages come and go."""

    def __init__(self) -> None:
        self.peaks: dict[str, int] = {}
        self._stage: str | None = None
        self._works = _reset()

    def enter(self, stage: str) -> None:
        """The current stage (if any) ends here, and `stage` starts."""
        self.close()
        self._stage = stage
        self._works = self._works and _reset()

    def close(self) -> None:
        """Record the current stage's peak so far (it may go on: a later close raises it)."""
        if self._stage is None or not self._works:
            return
        peak = _high_water_mark()
        if peak is not None:
            self.peaks[self._stage] = max(self.peaks.get(self._stage, 0), peak)

    def peak_rss_mb(self) -> dict[str, float] | None:
        """Every stage's peak so far (the current one up to now), in MiB; None where the
        process cannot measure its own."""
        self.close()
        if not self._works:
            return None
        return {stage: round(peak / 2**20, 1) for stage, peak in self.peaks.items()}


def _reset() -> bool:
    try:
        _CLEAR_REFS.write_text(_RESET_HIGH_WATER_MARK)
    except OSError:
        return False
    return True


def _high_water_mark() -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError):
        return None
    return None
