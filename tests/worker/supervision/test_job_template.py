"""The worker's job template imports the job's code and holds nothing a job must not inherit:
no database or broker connection, no socket but the one its owner talks to it on."""

import os
from pathlib import Path

import pytest

from core.isolation import ChildLimits, run_isolated
from core.process_template import ProcessTemplate, template_supported
from tests.core import isolated_calls
from worker.supervision.job_template import JOB_PRELOAD

pytestmark = pytest.mark.skipif(not template_supported(), reason="the template needs Linux")


def test_the_job_template_holds_no_connection_after_its_imports() -> None:
    template = ProcessTemplate(JOB_PRELOAD)
    try:
        # The first child starts once the imports are done (the template serves only then).
        run_isolated(isolated_calls.add, (1, 2), limits=ChildLimits(timeout_s=120),
                     what="a child of the job template", template=template)
        fds = Path(f"/proc/{template.pid}/fd")
        sockets = [link for link in (os.readlink(fd) for fd in fds.iterdir())
                   if link.startswith("socket:")]
        command = Path(f"/proc/{template.pid}/cmdline").read_bytes().decode(errors="replace")
    finally:
        template.close()
    assert sockets and len(sockets) == 1, f"the template holds sockets: {sockets}"
    assert "worker.supervision.job_process" in command
