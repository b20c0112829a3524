"""BuildProgress: TensorRT's nested build phases -> one non-decreasing fraction for the job."""

from __future__ import annotations

import pytest

from optimizer.backends.tensorrt.progress import BuildProgress


def recorder() -> tuple[list[tuple[float, str]], BuildProgress]:
    seen: list[tuple[float, str]] = []
    return seen, BuildProgress(lambda fraction, phase: seen.append((fraction, phase)),
                               min_delta=0.0)


def test_steps_of_one_phase_advance_the_fraction():
    seen, progress = recorder()

    progress.phase_start("Building engine", None, 4)
    for step in range(4):
        assert progress.step_complete("Building engine", step) is True
    progress.phase_finish("Building engine")

    assert [fraction for fraction, _ in seen] == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])


def test_a_running_child_phase_fills_its_parents_current_step():
    seen, progress = recorder()

    progress.phase_start("Build", None, 2)
    progress.phase_start("Tactic selection", "Build", 10)
    for step in range(5):
        progress.step_complete("Tactic selection", step)

    assert progress.fraction == pytest.approx(0.25)  # half of the first of two steps
    assert seen[-1][1] == "Build > Tactic selection"


def test_fraction_never_goes_back_when_a_new_top_level_phase_starts():
    _, progress = recorder()

    progress.phase_start("Optimizing network", None, 2)
    progress.step_complete("Optimizing network", 1)
    progress.phase_finish("Optimizing network")
    progress.phase_start("Building engine", None, 10)

    assert progress.fraction == pytest.approx(1.0)


def test_phase_finishing_early_counts_as_complete():
    _, progress = recorder()

    progress.phase_start("Build", None, 2)
    progress.phase_start("Child", "Build", 100)
    progress.phase_finish("Child")
    progress.step_complete("Build", 0)

    assert progress.fraction == pytest.approx(0.5)


def test_empty_string_parent_means_top_level():
    _, progress = recorder()

    progress.phase_start("Root", "", 2)
    progress.step_complete("Root", 0)

    assert progress.fraction == pytest.approx(0.5)


def test_small_changes_are_not_sent_until_they_add_up():
    seen: list[tuple[float, str]] = []
    progress = BuildProgress(lambda fraction, phase: seen.append((fraction, phase)),
                             min_delta=0.1)

    progress.phase_start("Build", None, 100)
    for step in range(100):
        progress.step_complete("Build", step)
    progress.finish()

    fractions = [fraction for fraction, _ in seen]
    assert 10 <= len(fractions) <= 13
    assert fractions == sorted(fractions) and fractions[-1] == 1.0


def test_a_failing_callback_cancels_the_build_instead_of_raising():
    def broken(fraction: float, phase: str) -> None:
        raise RuntimeError("job row is gone")

    progress = BuildProgress(broken)
    progress.phase_start("Build", None, 10)

    assert progress.step_complete("Build", 0) is False  # asks TensorRT to cancel
    assert isinstance(progress.callback_error, RuntimeError)


def test_steps_of_unknown_phases_are_ignored():
    _, progress = recorder()

    assert progress.step_complete("never started", 3) is True
    progress.phase_finish("never started")
    assert progress.fraction == 0.0
