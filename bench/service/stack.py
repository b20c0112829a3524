"""Start a FuseForge command (or any server) on a fresh data folder for a benchmark, wait until
it answers, and stop it with all it started."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

__all__ = ["FUSEFORGE", "free_port", "fuseforge_env", "start", "start_fuseforge", "stop",
           "wait_healthy"]

FUSEFORGE = (sys.executable, "-m", "fuseforge_cli.main")
"""The argv of `fuseforge`, from this interpreter; append the command."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fuseforge_env(data_dir: Path, port: int | None = None,
                  **settings: str | None) -> dict[str, str]:
    """This environment without any FUSEFORGE_* variable, then the data folder, the port and
    `settings` (e.g. FUSEFORGE_DATABASE_URL=...); a setting given None is left out, so an
    optional flag can be passed as it is. API keys are off (the bench runs on 127.0.0.1) unless
    `settings` turns them on (FUSEFORGE_AUTH__ENABLED="true")."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEFORGE_")}
    env["FUSEFORGE_DATA_DIR"] = str(data_dir)
    env["FUSEFORGE_AUTH__ENABLED"] = "false"
    if port is not None:
        env["FUSEFORGE_PORT"] = str(port)
    env.update({name: value for name, value in settings.items() if value is not None})
    return env


def start(argv: Sequence[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`argv` in a session of its own (stop() ends it and what it started), its output in `log`."""
    with log.open("wb") as output:
        return subprocess.Popen(list(argv), env=env, stdout=output, stderr=subprocess.STDOUT,
                                start_new_session=True)


def start_fuseforge(command: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`fuseforge <command>` (serve, run, ...), as start() starts it."""
    return start([*FUSEFORGE, command], env, log)


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float = 300) -> None:
    """Until `url` answers below 500; SystemExit if the process dies or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{process.args!r} exited with code {process.returncode}")
        try:
            if httpx.get(url, timeout=5).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"{url} did not answer within {timeout_s:g} s")


def stop(process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    """SIGTERM to the process's group (it and what it started), then wait for the process."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:  # the group is gone already
        pass
    process.wait(timeout=timeout_s)
