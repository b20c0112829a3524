"""Turn the TensorRT builder's nested phases into one progress fraction for the job.

TensorRT reports a build through `IProgressMonitor.phase_start/step_complete/phase_finish`,
called from C++. An exception escaping those callbacks cannot cross the C++ frames safely, so
they never raise: a failing job callback is recorded in `callback_error`, is not called again,
and the next `step_complete` returns False, which asks TensorRT to cancel the build;
`build_trt_engine` re-raises the error after the build returns. `BuildProgress` is plain
Python; `trt_progress_monitor` wraps it in TensorRT's interface.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorrt as trt

__all__ = ["BuildProgress", "trt_progress_monitor"]


class BuildProgress:
    """Turns TensorRT's nested build phases into one fraction in [0, 1] for `on_progress`.

    A phase's fraction is (completed steps + the fraction of its running child) / its steps;
    the reported value is that of the outermost running phase, never decreasing (top-level
    phases restart at 0), and sent only when it grew by `min_delta` or the phase changed.
    `on_progress(fraction, phase)` receives the running phases joined by " > ".
    """

    def __init__(self, on_progress: Callable[[float, str], None] | None = None, *,
                 min_delta: float = 0.01) -> None:
        self._on_progress = on_progress
        self._min_delta = min_delta
        # name -> (parent, steps) of each running phase, in start order.
        self._phases: dict[str, tuple[str, int]] = {}
        self._completed: dict[str, int] = {}
        self.fraction = 0.0
        self._sent: tuple[float, str] | None = None
        self.callback_error: BaseException | None = None

    def phase_start(self, name: str, parent: str | None, steps: int) -> None:
        self._phases[name] = (parent or "", max(int(steps), 0))
        self._completed[name] = 0
        self._update()

    def step_complete(self, name: str, step: int) -> bool:
        """Record that step `step` (0-based) of phase `name` finished; False asks to cancel."""
        if name in self._phases:
            steps = self._phases[name][1]
            self._completed[name] = min(max(self._completed[name], int(step) + 1), steps)
            self._update()
        return self.callback_error is None

    def phase_finish(self, name: str) -> None:
        # TensorRT may finish a phase before reporting all its steps (cancel, shortcuts).
        if name in self._phases:
            self._completed[name] = self._phases[name][1]
            self._update()
            del self._phases[name]
            del self._completed[name]

    def finish(self) -> None:
        """Report 1.0 once the build succeeded."""
        self.fraction = 1.0
        self._send(1.0, "done", force=True)

    def _update(self) -> None:
        roots = [name for name, (parent, _) in self._phases.items()
                 if not parent or parent not in self._phases]
        if not roots:
            return
        root = roots[-1]
        fraction = self._phase_fraction(root, depth=0)
        self.fraction = max(self.fraction, min(fraction, 1.0))
        self._send(self.fraction, " > ".join(self._running_path(root)))

    def _phase_fraction(self, name: str, depth: int) -> float:
        _, steps = self._phases[name]
        child = self._running_child(name)
        inner = self._phase_fraction(child, depth + 1) if child and depth < 32 else 0.0
        if steps <= 0:
            return inner
        return min((self._completed[name] + inner) / steps, 1.0)

    def _running_child(self, name: str) -> str | None:
        children = [child for child, (parent, _) in self._phases.items() if parent == name]
        return children[-1] if children else None

    def _running_path(self, root: str) -> list[str]:
        path = [root]
        child = self._running_child(root)
        while child is not None and len(path) < 32:
            path.append(child)
            child = self._running_child(child)
        return path

    def _send(self, fraction: float, phase: str, *, force: bool = False) -> None:
        if self._on_progress is None or self.callback_error is not None:
            return
        if not force and self._sent is not None:
            last_fraction, last_phase = self._sent
            grew = fraction - last_fraction
            if phase == last_phase and (grew <= 0 or grew < self._min_delta):
                return
        self._sent = (fraction, phase)
        try:
            self._on_progress(fraction, phase)
        except Exception as err:  # must not reach TensorRT's C++ frames
            self.callback_error = err


def trt_progress_monitor(progress: BuildProgress) -> trt.IProgressMonitor:
    """A TensorRT progress monitor that reports into `progress`. Needs `tensorrt`."""
    import tensorrt as trt

    class ForwardingMonitor(trt.IProgressMonitor):  # type: ignore[misc, unused-ignore]
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)

        def phase_start(self, phase_name: str, parent_phase: str, num_steps: int) -> None:
            # parent_phase is None for a top-level phase (nullptr), whatever the stub says.
            progress.phase_start(phase_name, parent_phase, num_steps)

        def step_complete(self, phase_name: str, step: int) -> bool:
            return progress.step_complete(phase_name, step)

        def phase_finish(self, phase_name: str) -> None:
            progress.phase_finish(phase_name)

    return ForwardingMonitor()
