"""The template job processes fork from (core/process_template.py): a process of this worker
that has imported the job's code once, so a claimed job starts running in milliseconds instead
of importing onnx, onnxruntime, numpy and the optimizer anew (about 1.6 s a job).

One template per worker process (a prefork pool process starts its own), started on the first
job or by `warm_job_template()` at start-up, and started again if it died. Where the platform
has no template support (not Linux), jobs start fresh interpreters as before.
"""

from __future__ import annotations

import logging
import os
import threading

from core.process_template import ProcessTemplate, template_supported

__all__ = ["JOB_PRELOAD", "job_template", "warm_job_template"]

logger = logging.getLogger(__name__)

# What a job's process imports before its first stage; worker.supervision.job_process brings the
# pipeline, both backends and the optimizer (it imports no TensorRT: that stays per build).
JOB_PRELOAD = ("numpy", "onnx", "onnxruntime", "onnxscript", "worker.supervision.job_process")

_lock = threading.Lock()
_template: ProcessTemplate | None = None
_owner_pid: int | None = None


def job_template() -> ProcessTemplate | None:
    """This process's running template (started here if needed); None where unsupported."""
    global _template, _owner_pid
    if not template_supported():
        return None
    with _lock:
        # A forked process (Celery's prefork pool) cannot use its parent's template.
        if _template is None or _owner_pid != os.getpid() or not _template.alive():
            if _template is not None and _owner_pid == os.getpid():
                logger.warning("the job process template %s exited; starting another",
                               _template.pid)
            _template, _owner_pid = ProcessTemplate(JOB_PRELOAD), os.getpid()
        return _template


def warm_job_template() -> None:
    """Start the template now, so that the first job does not wait for its imports."""
    job_template()
