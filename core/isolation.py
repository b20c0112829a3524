"""Run a function in a child process under a time and a memory limit, so its crash is not ours.

A job, an engine build or the check of an uploaded model runs native code that can hang,
exhaust memory or abort the process. Running it in a child (a fresh interpreter: no inherited
CUDA context, database connections or threads) means it fails with a clear error while the
worker or the API carries on:

    engine_path = run_isolated(
        build_engine_file, args=(onnx_path, engine_dir),
        limits=ChildLimits(timeout_s=1800, max_rss_bytes=64 * 2**30),
        what=f"the TensorRT engine build of job {job_id}",
    )

The function (module-level, imported by name) and its arguments are pickled, and so is its
return value: return a path, not a gigabyte of engine bytes. An exception it raises comes back as
the same exception, with the child's traceback as a note. Two memory limits exist:
`max_rss_bytes` is watched from the parent and works for any process, CUDA included;
`max_address_space_bytes` is RLIMIT_AS in the child, enforced by the kernel, and is meant for
CPU-only work: CUDA reserves far more virtual address space than it uses, and fails to start
under a tight RLIMIT_AS.

The child is a `subprocess`, not a `multiprocessing` process: Celery's prefork pool runs tasks in
daemonic processes, which multiprocessing forbids to have children. It runs in a session of its
own (a kill reaches anything it started) and dies with its parent (PR_SET_PDEATHSIG).
"""

import logging
import os
import pickle
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from core.process_template import ProcessTemplate, TemplateChild, die_with_parent
from optimizer.errors import EngineBuildError, OptimizerError

__all__ = ["ChildLimits", "IsolatedChild", "run_isolated"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_MIB = 2**20
_CALL_FILE = "call.pickle"
_RESULT_FILE = "result.pickle"
# The child imports this module by name; the parent's sys.path travels in PYTHONPATH.
_BOOTSTRAP = "import sys; from core.isolation import child_main; child_main(sys.argv[1])"
_SIGNAL_HINTS = {
    signal.SIGABRT: "aborted: an assertion or an uncaught C++ exception in native code",
    signal.SIGSEGV: "segmentation fault in native code",
    signal.SIGBUS: "bus error in native code",
    signal.SIGFPE: "arithmetic fault in native code",
    signal.SIGILL: "illegal instruction in native code",
    signal.SIGKILL: "killed from outside, often by the kernel's out-of-memory killer",
    signal.SIGTERM: "terminated from outside",
}


@dataclass(frozen=True)
class ChildLimits:
    """Limits on one isolated call. `timeout_s` is wall-clock time from the child's start."""

    timeout_s: float
    max_rss_bytes: int | None = None  # resident memory, checked every `poll_s` by the parent
    max_address_space_bytes: int | None = None  # RLIMIT_AS in the child; not for CUDA work
    poll_s: float = 0.1

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.poll_s <= 0:
            raise ValueError(f"timeout_s and poll_s must be positive, got {self}")
        for name in ("max_rss_bytes", "max_address_space_bytes"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive or None, got {value}")


def child_main(work_dir: str) -> None:
    """The child's side: apply the limits, run the call in `work_dir`, pickle what happened there."""
    folder = Path(work_dir)
    with (folder / _CALL_FILE).open("rb") as call_file:
        parent_pid, max_address_space_bytes = pickle.load(call_file)
        die_with_parent(parent_pid)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash must not fill the disk
        if max_address_space_bytes is not None:
            limit = (max_address_space_bytes, max_address_space_bytes)
            resource.setrlimit(resource.RLIMIT_AS, limit)
        try:
            fn, args, kwargs = pickle.load(call_file)  # imports fn's module, under the limits
            outcome: tuple[Any, ...] = ("returned", fn(*args, **kwargs))
        except BaseException as err:  # everything goes back to the parent, which decides
            outcome = ("raised", _portable(err), traceback.format_exc())
    try:
        data = pickle.dumps(outcome)
    except Exception as err:  # an unpicklable return value
        data = pickle.dumps(("raised", _portable(err), traceback.format_exc()))
    partial = folder / (_RESULT_FILE + ".partial")
    partial.write_bytes(data)
    partial.rename(folder / _RESULT_FILE)  # all or nothing, even if the child dies mid-write
    # Done: skip the interpreter's teardown (with onnxruntime or TensorRT loaded it takes a
    # good part of a second, and its parent waits on it to take the next job).
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _portable(err: BaseException) -> BaseException | tuple[str, str]:
    """The exception itself if it survives pickling, else (its class name, its message)."""
    try:
        restored = pickle.loads(pickle.dumps(err))
    except Exception:
        return (type(err).__qualname__, str(err))
    if not isinstance(restored, BaseException):
        return (type(err).__qualname__, str(err))
    return restored


class IsolatedChild:
    """`fn(*args, **kwargs)` running in a fresh Python child process, to watch, kill, and read
    what it returned or raised. Use it in a `with` block: leaving kills the child (and anything
    it started) if it still runs, and removes its work folder.

    `fn` (module-level, imported by name) and its arguments are pickled into the child; `env`
    adds to (or replaces in) the environment it inherits. With a `template`
    (core/process_template.py) the child is forked from that pre-imported process instead of
    starting a fresh interpreter: the same guarantees, without the imports' start-up time.
    """

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...] = (),
                 kwargs: Mapping[str, Any] | None = None, *,
                 max_address_space_bytes: int | None = None,
                 env: Mapping[str, str] | None = None,
                 template: ProcessTemplate | None = None) -> None:
        self._work_dir = Path(tempfile.mkdtemp(prefix="fuseforge-isolated-"))
        try:
            # The child dies with its parent: this process, or the template it forks from.
            parent_pid = template.pid if template is not None else os.getpid()
            with (self._work_dir / _CALL_FILE).open("wb") as call_file:
                pickle.dump((parent_pid, max_address_space_bytes), call_file)
                pickle.dump((fn, tuple(args), dict(kwargs or {})), call_file)
            environment = dict(os.environ, **(env or {}),
                               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
            self.process: subprocess.Popen[bytes] | TemplateChild
            if template is not None:
                self.process = template.spawn(f"{__name__}:child_main", self._work_dir,
                                              env=environment, cwd=os.getcwd(), sys_path=sys.path)
            else:
                self.process = subprocess.Popen(
                    [sys.executable, "-c", _BOOTSTRAP, str(self._work_dir)], env=environment,
                    start_new_session=True)
        except BaseException:
            shutil.rmtree(self._work_dir, ignore_errors=True)
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if self.process.poll() is None:
                self.kill()
        finally:
            shutil.rmtree(self._work_dir, ignore_errors=True)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s`; True once the child has exited."""
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def rss_bytes(self) -> int | None:
        """The child's resident memory now; None once it is gone (or off Linux)."""
        try:
            with open(f"/proc/{self.pid}/statm") as statm:
                return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            return None

    def cpu_seconds(self) -> float | None:
        """CPU time the child has used so far (user + system, its threads and the children it
        has waited for); None once it is gone (or off Linux)."""
        try:
            with open(f"/proc/{self.pid}/stat") as stat:
                # Fields after the parenthesised command name; utime is the 14th field overall.
                fields = stat.read().rsplit(")", 1)[1].split()
            ticks = sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
        except (OSError, IndexError, ValueError):
            return None
        return ticks / os.sysconf("SC_CLK_TCK")

    def kill(self) -> None:
        """SIGKILL the child's whole session (it runs in a session of its own) and reap it."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # start_new_session: group id == pid
        except ProcessLookupError:
            pass  # already gone (and its group with it)
        self.process.wait()

    def outcome(self, limits: "ChildLimits", what: str, error: type[OptimizerError]) -> Any:
        """Once it has exited: what `fn` returned, or its exception re-raised, or `error`
        saying how the child died."""
        return _outcome(self._work_dir / _RESULT_FILE, self.process.wait(), limits, what, error)


def run_isolated(
    fn: Callable[..., T],
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    limits: ChildLimits,
    what: str,
    error: type[OptimizerError] = EngineBuildError,
    keep_going: Callable[[], bool] | None = None,
    template: ProcessTemplate | None = None,
) -> T:
    """Call `fn(*args, **kwargs)` in a child Python process and return its result.

    `what` names the work in messages ("the TensorRT engine build of job 1234..."). `keep_going`,
    if given, is asked every `limits.poll_s`; once it returns False the child is killed (e.g. the
    job was cancelled). `template`: fork the child from that pre-imported process
    (core/process_template.py) instead of starting a fresh interpreter.

    Raises:
        the exception `fn` raised, with the child's traceback as a note (or `error` naming its class
            and message if the exception does not survive pickling);
        `error` (EngineBuildError by default): the child ran past `limits.timeout_s`, exceeded a
            memory limit, died from a signal or exited without a result, or `keep_going` said stop;
        pickle.PicklingError (or the error pickle raises): `fn` or an argument cannot be pickled.
    """
    with IsolatedChild(fn, args, kwargs, max_address_space_bytes=limits.max_address_space_bytes,
                       template=template) as child:
        _wait(child, limits, what, error, keep_going)
        result: T = child.outcome(limits, what, error)
        return result


def _wait(
    child: IsolatedChild,
    limits: ChildLimits,
    what: str,
    error: type[OptimizerError],
    keep_going: Callable[[], bool] | None,
) -> None:
    """Wait for the child to exit; raise `error` when it breaks a limit (the caller's `with`
    block then kills it)."""
    started = time.monotonic()
    while not child.wait(limits.poll_s):
        if time.monotonic() - started > limits.timeout_s:
            raise error(
                f"{what} did not finish within its time limit of {limits.timeout_s:g} s and was "
                f"stopped; raise the limit or give it less to do (a smaller model, fewer shapes)"
            )
        rss = child.rss_bytes() if limits.max_rss_bytes is not None else None
        if rss is not None and limits.max_rss_bytes is not None and rss > limits.max_rss_bytes:
            raise error(
                f"{what} exceeded its memory limit of {limits.max_rss_bytes // _MIB} MiB "
                f"(resident: {rss // _MIB} MiB) and was stopped; raise the limit or use a smaller "
                f"model"
            )
        if keep_going is not None and not keep_going():
            raise error(f"{what} was stopped because its job is no longer running (cancelled)")


def _outcome(
    result_path: Path,
    returncode: int,
    limits: ChildLimits,
    what: str,
    error: type[OptimizerError],
) -> Any:
    """The child's return value, or its exception re-raised, or `error` saying how it died."""
    try:
        outcome = pickle.loads(result_path.read_bytes())
    except FileNotFoundError:
        raise error(_death_message(what, returncode, limits)) from None
    except Exception as err:  # e.g. the result's class does not import here
        raise error(f"{what} returned a result this process cannot read ({err})") from err
    if outcome[0] == "returned":
        return outcome[1]
    _kind, raised, child_traceback = outcome
    if isinstance(raised, MemoryError) and limits.max_address_space_bytes is not None:
        raise error(
            f"{what} ran out of memory under its address-space limit of "
            f"{limits.max_address_space_bytes // _MIB} MiB; raise the limit or use a smaller model"
        ) from raised
    if isinstance(raised, BaseException) and not isinstance(raised, Exception):
        # SystemExit or KeyboardInterrupt would stop the worker: they stay the child's business.
        raise error(f"{what} ended early in its child process: {type(raised).__name__}({raised})")
    if isinstance(raised, BaseException):
        raised.add_note(f"in the isolated child process:\n{child_traceback}")
        raise raised
    name, text = raised
    raise error(f"{what} failed in its child process: {name}: {text}")


def _death_message(what: str, returncode: int, limits: ChildLimits) -> str:
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode)
        except ValueError:
            return f"{what} crashed: its child process was killed by signal {-returncode}"
        hint = _SIGNAL_HINTS.get(sig, "")
        if sig == signal.SIGKILL and limits.max_rss_bytes is None:
            hint += "; set a memory limit to get a clearer message"
        return f"{what} crashed: its child process was killed by signal {sig.name}" + (
            f" ({hint})" if hint else ""
        )
    return f"{what} ended without a result: its child process exited with code {returncode}"
