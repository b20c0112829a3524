"""`fuseforge project set-webhook | show`, run as a user runs them (a process of their own)
against a fresh SQLite file and a fresh PostgreSQL database: the default webhook is checked as
a job's callback URL is (the service's FUSEFORGE_WEBHOOKS__* allow-list included), stored on the
named project only, and cleared with --clear."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from core.db.models import Project
from core.db.session import make_engine
from core.settings import Settings
from tests.support.databases import create_postgres_database, drop_postgres_database
from tests.support.processes import REPO_ROOT, fuseforge_env

HOOK = "http://127.0.0.1:8080/hooks/ci"


@pytest.fixture(params=["sqlite", "postgresql"])
def cli_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A service's environment with callbacks to 127/8 allowed, on an unmigrated database."""
    env = fuseforge_env(FUSEFORGE_ENV="test", FUSEFORGE_DATA_DIR=str(tmp_path / "data"),
                        FUSEFORGE_WEBHOOKS__ALLOWED_NETWORKS=json.dumps(["127.0.0.0/8"]))
    if request.param == "sqlite":
        yield env
        return
    url = create_postgres_database(f"fuseforge_cli_{uuid.uuid4().hex[:8]}")
    yield {**env, "FUSEFORGE_DATABASE_URL": url}
    drop_postgres_database(url)


def _fuseforge(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fuseforge_cli.main", *args],
                          capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)


def _defaults(env: dict[str, str]) -> dict[str, str | None]:
    """Each project's default webhook, by name."""
    settings = Settings(env="test", data_dir=Path(env["FUSEFORGE_DATA_DIR"]),
                        database_url=env.get("FUSEFORGE_DATABASE_URL"))
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            rows = session.execute(select(Project.name, Project.default_callback_url))
            return {name: url for name, url in rows}
    finally:
        engine.dispose()


def test_set_webhook_stores_the_url_on_that_project_and_clear_removes_it(
        cli_env: dict[str, str]) -> None:
    for project in ("ci", "other"):
        assert _fuseforge(cli_env, "apikey", "create", "--project", project, "--name", "k"
                          ).returncode == 0

    stored = _fuseforge(cli_env, "project", "set-webhook", "--project", "ci", HOOK)

    assert stored.returncode == 0, stored.stderr
    assert HOOK in stored.stdout
    assert _defaults(cli_env) == {"default": None, "ci": HOOK, "other": None}
    shown = _fuseforge(cli_env, "project", "show", "--project", "ci")
    assert shown.returncode == 0 and f"default webhook: {HOOK}" in shown.stdout

    cleared = _fuseforge(cli_env, "project", "set-webhook", "--project", "ci", "--clear")

    assert cleared.returncode == 0, cleared.stderr
    assert _defaults(cli_env)["ci"] is None
    assert "default webhook: none" in _fuseforge(cli_env, "project", "show", "--project",
                                                 "ci").stdout


@pytest.mark.parametrize(("args", "error", "says"), [
    (["--project", "default", "http://10.0.0.5/hook"], "InvalidCallbackUrl",
     "is a private address"),
    (["--project", "default", "ftp://example.com/hook"], "InvalidCallbackUrl",
     "the scheme must be http or https"),
    (["--project", "nope", HOOK], "ProjectNotFound", "no project is called 'nope'"),
    (["--project", "default", HOOK, "--clear"], "UsageError", "not allowed with"),
    (["--project", "default"], "UsageError", "one of the arguments"),
], ids=["private", "scheme", "unknown-project", "url-and-clear", "neither"])
def test_a_refused_set_webhook_fails_in_one_line_with_exit_3_and_stores_nothing(
        cli_env: dict[str, str], args: list[str], error: str, says: str) -> None:
    assert _fuseforge(cli_env, "migrate").returncode == 0  # usage errors stop before it
    result = _fuseforge(cli_env, "project", "set-webhook", *args)

    assert result.returncode == 3, result.stderr
    # Besides the line naming the database it used, when it got that far.
    [line] = [ln for ln in result.stderr.strip().splitlines() if ": database " not in ln]
    assert f": {error}: " in line and says in line, line
    assert set(_defaults(cli_env).values()) == {None}
