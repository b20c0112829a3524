"""A pre-imported template process that isolated children fork from, instead of each starting
a fresh interpreter and importing onnx, onnxruntime, numpy and the optimizer again (about 1.6 s
a job).

    template = ProcessTemplate(["numpy", "onnxruntime", "worker.supervision.job_process"])
    child = template.spawn("core.isolation:child_main", work_dir, env=dict(os.environ),
                           cwd=os.getcwd(), sys_path=sys.path)

The template is itself a fresh interpreter (`subprocess`, close_fds), started from the worker
before any job: it imports the `preload` modules and nothing else, opens no database or broker
connection and starts no thread of its own, so what a job's process inherits from it is those
imports only. (onnx and onnxruntime start idle native threads as they load; a fork copies only
the forking thread, as with multiprocessing's forkserver and its preloads.) It dies with the
process that started it (PR_SET_PDEATHSIG), and its children die with it.

For each `spawn` the template forks a child which, like a fresh interpreter would, runs in a
session of its own, takes the caller's environment, working folder, sys.path and stdin, stdout
and stderr as they are now, draws new random seeds, and calls the entry point the caller names
("module:function", given `work_dir`; core/isolation.py's child side) without returning. The
caller watches it through `TemplateChild` (the part of `subprocess.Popen` core/isolation.py
uses): its pid for /proc and the kill of its session, and its exit status, which only the
template (its parent) can reap and sends back on a socket of that child's own.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcessTemplate", "TemplateChild", "TemplateUnavailable", "die_with_parent", "template_supported"]

_BOOTSTRAP = ("import sys; from core.process_template import _template_main; "
              "_template_main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])")
_PID = struct.Struct("!i")
_MAX_REQUEST = 1 << 20  # a request: the environment, sys.path, two paths


def template_supported() -> bool:
    """Linux: pidfds (to watch the children) and PR_SET_PDEATHSIG (to tie lifetimes)."""
    return sys.platform == "linux" and hasattr(os, "pidfd_open")


class TemplateUnavailable(RuntimeError):
    """The template process is gone (killed, or it failed to start): start a new one."""


@dataclass(frozen=True)
class _Request:
    work_dir: str
    env: dict[str, str]
    cwd: str
    sys_path: list[str]
    stdio: list[int]  # which of the caller's 0, 1, 2 come with it (after the status socket)
    entry: str  # "module:function" the child calls with work_dir; it ends the process itself


def _open_stdio() -> list[int]:
    open_fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            continue  # closed in the caller: closed in the child too
        open_fds.append(fd)
    return open_fds


class TemplateChild:
    """A child forked by the template: `pid`, `poll()`, `wait(timeout)` and `returncode` as
    `subprocess.Popen` has them (a negative returncode: killed by that signal)."""

    def __init__(self, pid: int, status: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._status = status

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not self._read_status(timeout):
            raise subprocess.TimeoutExpired(f"template child {self.pid}", timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def _read_status(self, timeout: float | None) -> bool:
        readable, _, _ = select.select([self._status], [], [], timeout)
        if not readable:
            return False
        data = self._status.recv(_PID.size)
        # No status: the template died, and its children with it (PR_SET_PDEATHSIG).
        self.returncode = _PID.unpack(data)[0] if len(data) == _PID.size else -signal.SIGKILL
        self._status.close()
        return True


class ProcessTemplate:
    """The template process for this process's isolated children (see the module docstring).
    Thread-safe; `close()` (or the owner's exit) ends it."""

    def __init__(self, preload: Sequence[str]) -> None:
        self.preload = tuple(preload)
        self._lock = threading.Lock()
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        environment = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, str(theirs.fileno()), str(os.getpid()),
                 *self.preload],
                pass_fds=(theirs.fileno(),), env=environment, start_new_session=True)
        except BaseException:
            self._control.close()
            raise
        finally:
            theirs.close()

    @property
    def pid(self) -> int:
        return self._process.pid

    def alive(self) -> bool:
        return self._process.poll() is None

    def spawn(self, entry: str, work_dir: Path, *, env: Mapping[str, str], cwd: str,
              sys_path: Sequence[str]) -> TemplateChild:
        """Fork a child that calls `entry` ("module:function") with `work_dir`."""
        # The caller's stdio as it is now (a fresh interpreter would inherit it; the template's
        # is what the caller had when the template started).
        stdio = _open_stdio()
        request = pickle.dumps(_Request(str(work_dir), dict(env), cwd, list(sys_path), stdio, entry))
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with self._lock:
                socket.send_fds(self._control, [request], [theirs.fileno(), *stdio])
            theirs.close()
            data = mine.recv(_PID.size)  # blocks while the template still imports
        except OSError as err:
            mine.close()
            raise TemplateUnavailable(f"the process template {self.pid} is gone ({err})") from err
        finally:
            theirs.close()
        if len(data) != _PID.size:
            mine.close()
            raise TemplateUnavailable(f"the process template {self.pid} exited (exit code "
                                      f"{self._process.poll()}) before starting the child")
        return TemplateChild(_PID.unpack(data)[0], mine)

    def close(self) -> None:
        """End the template; children still running are killed with it."""
        self._control.close()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when the worker that started it dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return  # not Linux: the parent's kill on timeout still applies
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


# The template's side ------------------------------------------------------------------------


def _template_main(control_fd: int, owner_pid: int, preload: list[str]) -> None:
    die_with_parent(owner_pid)
    control = socket.socket(fileno=control_fd)
    for name in preload:
        try:
            __import__(name)
        except Exception as err:  # the child imports it again and fails there, with its traceback
            print(f"process template: preloading {name} failed: {err!r}", file=sys.stderr)
    import gc

    gc.freeze()  # the imports stay out of the collector's way: fewer copied pages per child
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, status socket)
    try:
        _serve(control, children)
    finally:
        for _pidfd, (pid, _status) in children.items():
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(0)


def _serve(control: socket.socket, children: dict[int, tuple[int, socket.socket]]) -> None:
    while True:
        readable, _, _ = select.select([control.fileno(), *children], [], [])
        for ready in readable:
            if ready == control.fileno():
                message, fds, _flags, _addr = socket.recv_fds(control, _MAX_REQUEST, 4)
                if not message:
                    return  # the owner closed the template
                status = socket.socket(fileno=fds[0])
                try:
                    pid = _fork_child(pickle.loads(message), fds[1:], control, status, children)
                finally:
                    for fd in fds[1:]:
                        os.close(fd)
                status.send(_PID.pack(pid))
                children[os.pidfd_open(pid)] = (pid, status)
            else:
                pid, status = children.pop(ready)
                os.close(ready)
                _, wait_status = os.waitpid(pid, 0)
                try:
                    status.send(_PID.pack(os.waitstatus_to_exitcode(wait_status)))
                except OSError:
                    pass  # the owner stopped watching
                status.close()


def _fork_child(request: _Request, stdio: list[int], control: socket.socket,
                status: socket.socket, children: dict[int, tuple[int, socket.socket]]) -> int:
    # The owner kills the child's session as a group: it must exist before the pid goes out.
    session_ready, session_made = os.pipe()
    pid = os.fork()
    if pid:
        os.close(session_made)
        os.read(session_ready, 1)  # b"" if the child died first: the owner sees it exit
        os.close(session_ready)
        return pid
    try:
        os.setsid()  # a session of its own: the owner's kill reaches what it starts
        os.write(session_made, b"1")
        os.close(session_made)
        os.close(session_ready)
        for target in (0, 1, 2):
            if target in request.stdio:
                os.dup2(stdio[request.stdio.index(target)], target)
            else:
                os.close(target)
        control.close()
        status.close()
        for pidfd, (_pid, other) in children.items():
            os.close(pidfd)
            other.close()
        for fd in stdio:
            os.close(fd)
        _as_if_fresh(request)
        module_name, _, function = request.entry.partition(":")
        getattr(importlib.import_module(module_name), function)(request.work_dir)  # ends the process
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(1)
    return 0  # not reached


def _as_if_fresh(request: _Request) -> None:
    """What a fresh interpreter started by the owner now would have: its environment, folder
    and sys.path, and random state of its own."""
    import tempfile

    os.environ.clear()
    os.environ.update(request.env)
    tempfile.tempdir = None  # TMPDIR is read again (the job's temporary folder)
    sys.path[:] = request.sys_path
    os.chdir(request.cwd)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()  # random reseeds itself after a fork; numpy's global state does not
