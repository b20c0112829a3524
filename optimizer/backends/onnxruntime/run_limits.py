"""A time limit on each ONNX Runtime run of a model that holds a Loop.

A Loop whose condition is computed from data may never end on some inputs (acc += 1 while
acc < 1e30 stalls at 2^24 in float32), and no check before the run can tell
(`optimizer.model.endless_loops` refuses only the loops that provably never end). Without a
limit such a run holds its stage until the stage's wall-clock limit (10 minutes by default).
So a run of a model with a Loop is stopped (ONNX Runtime's `RunOptions.terminate`, set by one
watchdog thread of the process: the run returns at its next kernel) when it takes longer than
`FIRST_RUN_LIMIT_S` before any run of it has finished, or `LATER_RUN_MULTIPLE` times its
slowest finished run (at least `LATER_RUN_FLOOR_S`) after: generous for a real model (its runs
on other inputs of the same shapes differ by far less), and seconds for one that loops on.
A model without a Loop is bounded by its graph and runs without a timer.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from optimizer.errors import InferenceTimeLimitError

__all__ = ["FIRST_RUN_LIMIT_S", "LATER_RUN_FLOOR_S", "LATER_RUN_MULTIPLE", "RunLimit",
           "file_has_loop", "model_has_loop", "set_first_run_limit"]

FIRST_RUN_LIMIT_S = 30.0  # the default; a job's process sets its own (jobs.first_run_limit_s)
LATER_RUN_MULTIPLE = 20.0
LATER_RUN_FLOOR_S = 2.0

# A NodeProto's op_type is field 4, a length-delimited string: tag 0x22, length 4, "Loop".
_LOOP_OP_TYPE = b"\x22\x04Loop"
_RUNNING_NODE = re.compile(r"running (\w+) node\. Name:'([^']*)'")


_first_run_limit_s = FIRST_RUN_LIMIT_S


def set_first_run_limit(seconds: float) -> None:
    """The first-run limit of every `RunLimit` made after this in the process (a job's process
    sets it from its settings once, before any model runs)."""
    global _first_run_limit_s
    if not seconds > 0:
        raise ValueError(f"a first-run limit must be positive, not {seconds!r}")
    _first_run_limit_s = seconds


class RunLimit:
    """The time limit of the next run of one model, learnt from its finished runs."""

    def __init__(self, first_run_s: float | None = None) -> None:
        self.first_run_s = _first_run_limit_s if first_run_s is None else first_run_s
        self._slowest_s: float | None = None

    def seconds(self) -> float:
        if self._slowest_s is None:
            return self.first_run_s
        return max(LATER_RUN_FLOOR_S, LATER_RUN_MULTIPLE * self._slowest_s)

    def run(self, session: ort.InferenceSession, output_names: Sequence[str] | None,
            feeds: Mapping[str, np.ndarray], *, log_severity_level: int | None = None,
            what: str = "the model") -> list[Any]:
        """`session.run` stopped at `seconds()`; a run that finishes teaches the limit.

        Raises:
            InferenceTimeLimitError: the run was stopped at its limit, naming the node it was
                running (a Loop, or the node around it) and the limit.
            Exception: whatever ONNX Runtime raises otherwise, as it is.
        """
        limit = self.seconds()
        options = ort.RunOptions()  # one per run: a terminated RunOptions stays terminated
        if log_severity_level is not None:
            options.log_severity_level = log_severity_level
        started = time.perf_counter()
        token = _WATCHDOG.arm(options, time.monotonic() + limit)
        try:
            outputs: list[Any] = session.run(
                None if output_names is None else list(output_names), dict(feeds), options)
        except Exception as err:
            if options.terminate:
                raise InferenceTimeLimitError(self._stopped_message(
                    what, limit, str(err))) from err
            raise
        finally:
            _WATCHDOG.disarm(token)
        took = time.perf_counter() - started
        self._slowest_s = took if self._slowest_s is None else max(self._slowest_s, took)
        return outputs

    def _stopped_message(self, what: str, limit: float, ort_message: str) -> str:
        nodes = _RUNNING_NODE.findall(ort_message)
        loops = [name for op, name in nodes if op == "Loop"]
        where = (f" in Loop node {loops[-1]!r}" if loops
                 else f" in node {nodes[-1][1]!r} ({nodes[-1][0]})" if nodes else "")
        bound = ("no run of it had finished yet" if self._slowest_s is None else
                 f"{LATER_RUN_MULTIPLE:g}x its slowest earlier run, {self._slowest_s:.3g} s")
        return (f"ONNX Runtime stopped running {what} after {limit:.3g} s{where} (the limit: "
                f"{bound}; a model with a Loop gets {self.first_run_s:g} s for its first run "
                "(FUSEFORGE_JOBS__FIRST_RUN_LIMIT_S in a job) and "
                f"{LATER_RUN_MULTIPLE:g}x its slowest finished run, at least "
                f"{LATER_RUN_FLOOR_S:g} s, after). A Loop whose condition is computed from data "
                "may never end on these inputs: export it with its real trip count, or give "
                "the job a validation dataset of inputs it ends on.")


class _Watchdog:
    """Sets `terminate` on each armed run's options at its deadline. One thread for the whole
    process, started on first use; arming costs a lock, not a thread (a Timer per run took
    ~160 us, more than a small model's run)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Condition()
        self._armed: dict[int, tuple[ort.RunOptions, float]] = {}
        self._next_token = 0
        self._waking_at = float("inf")  # the deadline the thread sleeps until
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def arm(self, options: ort.RunOptions, deadline: float) -> int:
        if self._pid != os.getpid():  # a forked child has the lock and dict, not the thread
            self._reset()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="run-limits",
                                                daemon=True)
                self._thread.start()
            self._next_token += 1
            self._armed[self._next_token] = (options, deadline)
            if deadline < self._waking_at:
                self._lock.notify()
            return self._next_token

    def disarm(self, token: int) -> None:
        with self._lock:
            self._armed.pop(token, None)  # the thread finds it gone when it wakes

    def _watch(self) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                for token, (options, deadline) in list(self._armed.items()):
                    if deadline <= now:
                        options.terminate = True
                        del self._armed[token]
                self._waking_at = min((d for _, d in self._armed.values()), default=float("inf"))
                self._lock.wait(None if self._waking_at == float("inf")
                                else self._waking_at - now)


_WATCHDOG = _Watchdog()


def model_has_loop(model: onnx.ModelProto) -> bool:
    """Whether a Loop node sits anywhere in `model` (subgraphs and local functions too)."""
    in_functions = (node for function in model.functions for node in function.node)
    return any(node.op_type == "Loop" for node in (*_nodes(model.graph), *in_functions))


def file_has_loop(path: Path) -> bool:
    """Whether the model file at `path` may hold a Loop node: its op_type's bytes are there.
    (Weights may hold the same bytes by chance: then a run is timed, not refused.)"""
    with path.open("rb") as file:
        tail = b""
        while chunk := file.read(1 << 24):
            if _LOOP_OP_TYPE in tail + chunk:
                return True
            tail = chunk[-len(_LOOP_OP_TYPE):]
    return False


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for body in [attribute.g] if attribute.HasField("g") else attribute.graphs:
                yield from _nodes(body)
