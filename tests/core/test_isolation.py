"""An isolated call returns its value or its exception, and a child that hangs, grows or crashes
fails with an EngineBuildError naming the limit or signal while the calling process carries on."""

import os
import sys
import time
from pathlib import Path

import pytest

from core.isolation import ChildLimits, run_isolated
from optimizer.errors import EngineBuildError, PassError
from tests.core import isolated_calls

LIMITS = ChildLimits(timeout_s=60)
WHAT = "the test build"


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _wait_gone(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


def test_isolated_call_returns_the_functions_value_from_another_process() -> None:
    result = run_isolated(isolated_calls.add, (2, 3), {"scale": 10}, limits=LIMITS, what=WHAT)
    assert result["sum"] == 50
    assert result["pid"] != os.getpid()


def test_exception_raised_in_the_child_propagates_with_its_class_and_message() -> None:
    with pytest.raises(EngineBuildError, match="node 'n7' uses op 'Mystery'") as caught:
        run_isolated(isolated_calls.raise_build_error, ("n7",), limits=LIMITS, what=WHAT)
    assert any("raise_build_error" in note for note in caught.value.__notes__)


def test_exception_that_cannot_be_pickled_comes_back_as_the_chosen_error_naming_it() -> None:
    with pytest.raises(PassError, match="_Unpicklable: the parser lost its mind"):
        run_isolated(isolated_calls.raise_unpicklable, limits=LIMITS, what=WHAT, error=PassError)


def test_hanging_child_is_stopped_at_the_time_limit(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(EngineBuildError, match=r"the test build did not finish within its time limit of 3 s"):
        run_isolated(
            isolated_calls.sleep_forever, (pid_file,), limits=ChildLimits(timeout_s=3), what=WHAT
        )
    assert time.monotonic() - started < 15
    assert _wait_gone(int(pid_file.read_text()))


def test_timeout_also_stops_processes_the_child_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with pytest.raises(EngineBuildError, match="time limit"):
        run_isolated(
            isolated_calls.sleep_forever_with_grandchild,
            (pid_file,),
            limits=ChildLimits(timeout_s=3),
            what=WHAT,
        )
    assert _wait_gone(int(pid_file.read_text()))


def test_child_growing_past_the_resident_memory_limit_is_stopped() -> None:
    limits = ChildLimits(timeout_s=60, max_rss_bytes=300 * 2**20)
    with pytest.raises(EngineBuildError, match=r"exceeded its memory limit of 300 MiB \(resident: \d+ MiB\)"):
        run_isolated(isolated_calls.grow_forever, (20,), limits=limits, what=WHAT)


def test_allocation_past_the_address_space_limit_fails_naming_the_limit() -> None:
    limits = ChildLimits(timeout_s=60, max_address_space_bytes=2 * 2**30)
    message = "ran out of memory under its address-space limit of 2048 MiB"
    with pytest.raises(EngineBuildError, match=message) as caught:
        run_isolated(isolated_calls.allocate_at_once, (8,), limits=limits, what=WHAT)
    assert isinstance(caught.value.__cause__, MemoryError)


def test_child_that_aborts_fails_naming_the_signal_and_the_caller_carries_on() -> None:
    message = "the test build crashed: its child process was killed by signal SIGABRT"
    with pytest.raises(EngineBuildError, match=message):
        run_isolated(isolated_calls.abort, limits=LIMITS, what=WHAT)
    assert run_isolated(isolated_calls.add, (1, 1), limits=LIMITS, what=WHAT)["sum"] == 2


def test_child_that_exits_without_a_result_fails_naming_the_exit_code() -> None:
    with pytest.raises(EngineBuildError, match="exited with code 3"):
        run_isolated(isolated_calls.exit_with, (3,), limits=LIMITS, what=WHAT)


def test_sys_exit_in_the_child_fails_the_call_instead_of_stopping_the_caller() -> None:
    with pytest.raises(EngineBuildError, match=r"ended early in its child process: SystemExit\(4\)"):
        run_isolated(sys.exit, (4,), limits=LIMITS, what=WHAT)


def test_keep_going_false_stops_the_child(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with pytest.raises(EngineBuildError, match="no longer running"):
        run_isolated(
            isolated_calls.sleep_forever,
            (pid_file,),
            limits=LIMITS,
            what=WHAT,
            keep_going=lambda: not pid_file.exists(),
        )
    assert _wait_gone(int(pid_file.read_text()))


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_rss_bytes"):
        ChildLimits(timeout_s=1, max_rss_bytes=0)
    with pytest.raises(ValueError, match="timeout_s"):
        ChildLimits(timeout_s=0)
