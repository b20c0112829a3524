"""A refused setting ends every command that reads settings with one line naming the variable
and exit code 3, never a pydantic traceback: the CLI's own commands and the worker and janitor
it hands over to."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from core.invalid_settings import InvalidSettings
from core.settings import get_settings


def _run(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FUSEFORGE_")}
    return subprocess.run([sys.executable, "-m", *argv], env={**clean, **env},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("argv", [
    ("fuseforge_cli.main", "apikey", "create", "--project", "p", "--name", "n"),
    ("fuseforge_cli.main", "migrate"),
    ("worker",),
    ("worker.janitor",),
])
def test_an_invalid_setting_is_one_line_naming_the_variable_and_exit_3(
        argv: tuple[str, ...]) -> None:
    done = _run(*argv, FUSEFORGE_ENV="prod")
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "InvalidSettings: invalid settings: FUSEFORGE_ENV=prod refuses" in lines[0]
    assert "FUSEFORGE_WEBHOOKS__SECRET" in lines[0]


def test_each_refused_value_is_named_by_its_environment_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSEFORGE_PORT", "eighty")
    monkeypatch.setenv("FUSEFORGE_JOBS__MAX_RUNTIME_S", "-1")
    get_settings.cache_clear()  # what an earlier test read is cached (an error is not)
    with pytest.raises(InvalidSettings) as caught:
        get_settings()
    message = str(caught.value)
    assert "FUSEFORGE_PORT: Input should be a valid integer" in message
    assert "FUSEFORGE_JOBS__MAX_RUNTIME_S: Input should be greater than 0" in message
