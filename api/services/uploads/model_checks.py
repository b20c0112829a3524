"""Check uploaded models without the API process paying for them.

`onnx.load` of a model costs two to three times its size in memory, and a hostile file can make
the parser or the checker take far longer. So the API checks the model's skeleton, built while
the upload arrived (optimizer/model/skeleton.py: the model without its weights' bytes, whose
framing is checked on the way, so garbage is refused at once), and runs the full check
(`optimizer.model_check.check_model_file`) on it in a process of its own under a memory and a
time limit, `model_check.at_once` of them at a time (the others wait for a turn).

Each check's process is forked from a fork server that has already imported onnx and the
checks (Python's "forkserver" start method), so it starts in milliseconds instead of the second
a fresh interpreter needs to import them, and still shares nothing with the API process: no
threads, no event loop, no database connections.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from api.services.uploads.freshness import kept_fresh
from core.settings import ModelCheckSettings
from optimizer.errors import OptimizerError
from optimizer.model.limits import ModelLimits
from optimizer.model.skeleton import ModelSkeleton, SkeletonBuilder, WeightCount
from optimizer.model.tensor_specs import ModelSummary
from optimizer.model_check import check_model_file

__all__ = ["ModelCheckAborted", "ModelChecker"]

_GIB = 2**30
_MIB = 2**20
_POLL_S = 0.05
_READ_BYTES = 2**20
_TOUCH_EVERY_S = 1.0
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["optimizer.model_check"])


class ModelCheckAborted(OptimizerError):
    """The check of an upload ran out of time or memory, or its process died."""


class ModelChecker:
    def __init__(self, settings: ModelCheckSettings) -> None:
        self._timeout_s = settings.timeout_s
        self._max_bytes = int(settings.max_rss_gib * _GIB)
        self._turns = threading.BoundedSemaphore(settings.at_once)

    def check(self, path: Path, limits: ModelLimits, *, name: str) -> ModelSummary:
        """The summary of the model file at `path` (called `name` in messages): its skeleton
        is built from the file, then checked as `check_skeleton` checks one.

        Raises:
            InvalidModelError, UnsupportedModelError, ModelLimitError: as check_model_file.
            ModelCheckAborted: the check broke its time or memory limit, or its process died.
        """
        # The janitor removes upload files left untouched for `janitor.upload_stale_s` (an API
        # killed mid-upload): this one is touched for as long as it is checked, including
        # the first check's wait for the fork server to import onnx (seconds on a busy host).
        with kept_fresh(lambda: _touch(path), _TOUCH_EVERY_S):
            builder = SkeletonBuilder(name)
            with path.open("rb") as handle:
                while chunk := handle.read(_READ_BYTES):
                    builder.feed(chunk)
            return self.check_skeleton(builder.finish(), path.parent, limits, name=name)

    def check_skeleton(self, skeleton: ModelSkeleton, scratch: Path, limits: ModelLimits, *,
                       name: str, data_files: Sequence[tuple[str, int]] | None = None
                       ) -> ModelSummary:
        """The summary of the model whose skeleton (optimizer/model/skeleton.py) was built
        while it was received: checked as `check` checks a file, in a folder of its own under
        `scratch` beside the empty stand-in file its stripped tensors name. Raises as `check`.

        `data_files`: the (path, size) of the external data files that came with it (an
        archive's other members, optimizer/model/archive.py; paths relative to the model's
        folder, already checked to stay inside it). The model may then name them: each is
        checked as a sparse stand-in of its size, since the check reads no tensor's bytes.
        None: a single-file upload, which may name no data file."""
        scratch.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="skeleton-", dir=scratch))
        try:
            path = folder / "model.onnx"
            path.write_bytes(skeleton.data)
            (folder / skeleton.location).touch()
            for location, size in data_files or ():
                _sparse_file(folder / location, size)
            # (The skeleton's framing was checked as it was built; the child checks the rest.)
            with kept_fresh(lambda: _touch(folder), _TOUCH_EVERY_S), self._turns:
                return self._check_in_child(path, limits, name, skeleton.location,
                                            skeleton.weights,
                                            external_data=data_files is not None)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _check_in_child(self, path: Path, limits: ModelLimits, name: str,
                        stand_in: str | None = None, stripped: Sequence[WeightCount] = (), *,
                        external_data: bool = False) -> ModelSummary:
        receiving, sending = _CONTEXT.Pipe(duplex=False)
        process = _CONTEXT.Process(target=_check, args=(sending, path, limits, name,
                                                        self._max_bytes, stand_in,
                                                        tuple(stripped), external_data),
                                   daemon=True)
        process.start()
        sending.close()
        try:
            outcome = self._wait(process, receiving, name)
        finally:
            if process.is_alive():
                process.kill()
            process.join()
            receiving.close()
        kind, value = outcome
        if kind == "returned":
            summary: ModelSummary = value
            return summary
        raise value

    def _wait(self, process: Any, receiving: Connection, name: str) -> tuple[str, Any]:
        deadline = time.monotonic() + self._timeout_s
        while not receiving.poll(_POLL_S):
            if not process.is_alive() and not receiving.poll(0):
                raise ModelCheckAborted(
                    f"the check of model file {name!r} died (exit code {process.exitcode}), "
                    "most likely out of memory")
            if time.monotonic() > deadline:
                raise ModelCheckAborted(
                    f"the check of model file {name!r} did not finish within "
                    f"{self._timeout_s:g} s")
        try:
            outcome: tuple[str, Any] = receiving.recv()
        except EOFError as err:
            raise ModelCheckAborted(f"the check of model file {name!r} ended without an "
                                    "answer") from err
        if outcome[0] == "out_of_memory":
            raise ModelCheckAborted(
                f"the check of model file {name!r} needs more than its "
                f"{self._max_bytes / _GIB:g} GiB of memory")
        return outcome


def _sparse_file(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        handle.truncate(size)  # no blocks written: a stand-in of any size costs no disk


def _touch(path: Path) -> None:
    os.utime(path)  # FileNotFoundError stops the touching: the check then says it is gone


def _check(sending: Connection, path: Path, limits: ModelLimits, name: str,
           max_bytes: int, stand_in: str | None, stripped: tuple[WeightCount, ...],
           external_data: bool) -> None:
    """The check's process: the check under an address-space limit, its outcome sent back.
    (RLIMIT_AS suits this CPU-only work; it is the kernel's own, so nothing escapes it.)"""
    resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        outcome: tuple[str, Any] = ("returned", check_model_file(
            path, limits, name=name, stand_in=stand_in, stripped=stripped,
            external_data=external_data))
    except MemoryError:
        outcome = ("out_of_memory", None)
    except OptimizerError as err:
        outcome = ("raised", err)
    except Exception as err:  # a bug of ours: still an answer, never a hang
        outcome = ("raised", ModelCheckAborted(f"the check of model file {name!r} failed "
                                               f"({type(err).__name__}: {err})"))
    sending.send(outcome)
    sending.close()
    os._exit(0)  # skip the interpreter's teardown: the answer is sent
