"""`fuseforge apikey create | list | revoke`, run as a user runs them (a process of their own)
against a fresh SQLite file and a fresh PostgreSQL database."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from core.api_keys import project_for_key, server_secret
from core.db.models import ApiKey, Project
from core.db.session import make_engine
from core.settings import Settings
from tests.support.databases import create_postgres_database, drop_postgres_database
from tests.support.processes import REPO_ROOT, fuseforge_env


@pytest.fixture(params=["sqlite", "postgresql"])
def cli_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a service with API keys on, on an unmigrated database."""
    env = fuseforge_env(FUSEFORGE_ENV="test", FUSEFORGE_DATA_DIR=str(tmp_path / "data"),
                        FUSEFORGE_AUTH__ENABLED="true")
    if request.param == "sqlite":
        yield env
        return
    url = create_postgres_database(f"fuseforge_cli_{uuid.uuid4().hex[:8]}")
    yield {**env, "FUSEFORGE_DATABASE_URL": url}
    drop_postgres_database(url)


def _apikey(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fuseforge_cli.main", "apikey", *args],
                          capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)


def _settings(env: dict[str, str]) -> Settings:
    return Settings(env="test", data_dir=Path(env["FUSEFORGE_DATA_DIR"]),
                    database_url=env.get("FUSEFORGE_DATABASE_URL"))


def _project_of(env: dict[str, str], key: str) -> uuid.UUID | None:
    settings = _settings(env)
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            return project_for_key(session=session, secret=server_secret(settings), key=key)
    finally:
        engine.dispose()


def test_create_prints_the_key_once_on_stdout_and_stores_only_its_hash(
        cli_env: dict[str, str]) -> None:
    created = _apikey(cli_env, "create", "--project", "ci", "--name", "pipeline")

    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert re.fullmatch(r"ff_[A-Za-z0-9_-]{43}", key), created.stdout
    assert "shown only now" in created.stderr and "project 'ci' (new project)" in created.stderr
    assert key not in created.stderr
    project_id = _project_of(cli_env, key)
    engine = make_engine(_settings(cli_env).resolved_database_url)
    with Session(engine) as session:
        [row] = session.query(ApiKey).all()
        assert key not in (row.key_hash, row.prefix, row.name)
        assert session.get_one(Project, project_id).name == "ci"
    engine.dispose()


def test_list_shows_keys_without_their_secrets_and_revoke_stops_a_key(
        cli_env: dict[str, str]) -> None:
    key = _apikey(cli_env, "create", "--project", "ci", "--name", "pipeline").stdout.strip()
    _apikey(cli_env, "create", "--project", "other", "--name", "laptop",
            "--expires-in-days", "30")

    listing = _apikey(cli_env, "list")
    assert listing.returncode == 0, listing.stderr
    assert key not in listing.stdout and key[:11] in listing.stdout
    [row] = [line for line in listing.stdout.splitlines() if "pipeline" in line]
    assert row.split()[1:3] == ["ci", "pipeline"] and row.endswith("active")
    assert "laptop" not in _apikey(cli_env, "list", "--project", "ci").stdout

    revoked = _apikey(cli_env, "revoke", row.split()[0])

    assert revoked.returncode == 0, revoked.stderr
    assert _project_of(cli_env, key) is None
    assert _apikey(cli_env, "list", "--project", "ci").stdout.rstrip().endswith("revoked")


def test_an_expiring_key_lists_its_expiry(cli_env: dict[str, str]) -> None:
    key = _apikey(cli_env, "create", "--project", "ci", "--name", "temp",
                  "--expires-in-days", "2").stdout.strip()
    [row] = _apikey(cli_env, "list").stdout.splitlines()[1:]
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s+active$", row), row
    assert _project_of(cli_env, key) is not None


@pytest.mark.parametrize(("args", "error"), [
    (["revoke", "not-an-id"], "UsageError"),
    (["revoke", str(uuid.UUID(int=7))], "ApiKeyNotFound"),
    (["create", "--project", "ci", "--name", "x", "--expires-in-days", "0"], "UsageError"),
    (["create", "--name", "x"], "UsageError"),
])
def test_bad_apikey_commands_fail_in_one_line_with_exit_3(
        cli_env: dict[str, str], args: list[str], error: str) -> None:
    result = _apikey(cli_env, *args)
    assert result.returncode == 3, result.stderr
    # Besides the line naming the database it used (revoke reaches it before it fails).
    [line] = [ln for ln in result.stderr.strip().splitlines() if ": database " not in ln]
    assert f": {error}: " in line
