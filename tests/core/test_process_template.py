"""Children forked from the process template keep the promises of a fresh interpreter: the
caller's environment and folders as they are now, a session of their own, no inherited
connections, new random state; their value, exception or death comes back as from any isolated
call, a kill reaches what they started, and they die with the template."""

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.isolation import ChildLimits, IsolatedChild, run_isolated
from core.process_template import ProcessTemplate, template_supported
from optimizer.errors import EngineBuildError
from tests.core import isolated_calls

pytestmark = pytest.mark.skipif(not template_supported(), reason="the template needs Linux")

LIMITS = ChildLimits(timeout_s=60)
WHAT = "the test call"


@pytest.fixture(scope="module")
def template() -> Iterator[ProcessTemplate]:
    started = ProcessTemplate(["numpy", "tests.core.isolated_calls"])
    yield started
    started.close()


def _wait_gone(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_forked_child_returns_the_value_and_raises_the_exception(
        template: ProcessTemplate) -> None:
    result = run_isolated(isolated_calls.add, (2, 3), {"scale": 10}, limits=LIMITS, what=WHAT,
                          template=template)
    assert result["sum"] == 50 and result["pid"] not in (os.getpid(), template.pid)
    with pytest.raises(EngineBuildError, match="op 'Mystery'"):
        run_isolated(isolated_calls.raise_build_error, ("n1",), limits=LIMITS, what=WHAT,
                     template=template)


def test_a_child_sees_the_callers_environment_and_folder_of_now_not_of_the_templates_start(
        template: ProcessTemplate, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSEFORGE_TEMPLATE_PROBE", "set after the template started")
    monkeypatch.chdir(tmp_path)
    leaked = socket.socket()  # a connection opened by the caller: the child must not hold it
    try:
        seen = [run_isolated(isolated_calls.environment, ("FUSEFORGE_TEMPLATE_PROBE",),
                             limits=LIMITS, what=WHAT, template=template)
                for _ in range(2)]
    finally:
        leaked.close()
    first = seen[0]
    assert first["value"] == "set after the template started"
    assert first["cwd"] == str(tmp_path)
    assert first["sid"] == first["pid"]  # a session of its own
    fresh = run_isolated(isolated_calls.environment, ("FUSEFORGE_TEMPLATE_PROBE",),
                         limits=LIMITS, what=WHAT)
    assert first["fds"] == fresh["fds"]  # stdio, its call file, its listing of /proc/self/fd
    assert seen[0]["random"] != seen[1]["random"]


def test_a_temporary_folder_given_in_env_is_the_childs(template: ProcessTemplate,
                                                       tmp_path: Path) -> None:
    with IsolatedChild(isolated_calls.environment, ("TMPDIR",), env={"TMPDIR": str(tmp_path)},
                       template=template) as child:
        assert child.wait(60)
        assert child.outcome(LIMITS, WHAT, EngineBuildError)["tmp"] == str(tmp_path)


def test_a_crash_comes_back_naming_the_signal(template: ProcessTemplate) -> None:
    with pytest.raises(EngineBuildError, match="SIGABRT"):
        run_isolated(isolated_calls.abort, limits=LIMITS, what=WHAT, template=template)
    with pytest.raises(EngineBuildError, match="exited with code 3"):
        run_isolated(isolated_calls.exit_with, (3,), limits=LIMITS, what=WHAT, template=template)


def test_the_time_limit_kills_the_child_and_what_it_started(template: ProcessTemplate,
                                                            tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    with pytest.raises(EngineBuildError, match="time limit of 1 s"):
        run_isolated(isolated_calls.sleep_forever_with_grandchild, (pid_file,),
                     limits=ChildLimits(timeout_s=1), what=WHAT, template=template)
    assert _wait_gone(int(pid_file.read_text()))


def test_the_resident_memory_limit_stops_a_growing_child(template: ProcessTemplate) -> None:
    with pytest.raises(EngineBuildError, match="memory limit of 300 MiB"):
        run_isolated(isolated_calls.grow_forever, (16,), what=WHAT, template=template,
                     limits=ChildLimits(timeout_s=60, max_rss_bytes=300 * 2**20))


def test_children_die_with_the_template(tmp_path: Path) -> None:
    template = ProcessTemplate(["tests.core.isolated_calls"])
    pid_file = tmp_path / "child.pid"
    with IsolatedChild(isolated_calls.sleep_forever, (pid_file,), template=template) as child:
        deadline = time.monotonic() + 30
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(template.pid, signal.SIGKILL)
        assert child.wait(10)
        assert child.process.returncode == -signal.SIGKILL
    assert _wait_gone(int(pid_file.read_text()))
    template.close()


def test_a_kill_right_after_the_spawn_reaches_the_child(template: ProcessTemplate,
                                                        tmp_path: Path) -> None:
    """The child's session exists before its pid is handed out: a kill at once (a limit broken
    at the first check) must not miss it and let it run on."""
    for attempt in range(20):
        with IsolatedChild(isolated_calls.sleep_forever, (tmp_path / f"{attempt}.pid",),
                           template=template) as child:
            child.kill()
            assert child.process.returncode == -signal.SIGKILL
