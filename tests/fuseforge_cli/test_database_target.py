"""`fuseforge apikey` in a second shell, without the server's FUSEFORGE_DATA_DIR: it uses the
database of the running `fuseforge run` (recorded in the user's state folder), refuses to make
a brand-new one silently, and says on stderr which database it used.

A running service is played by this test process: its record is written as `fuseforge run`
writes it (`recorded_service`), with this process's id, so it counts as running."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from core.api_keys import project_for_key, server_secret
from core.db.session import make_engine
from core.settings import Settings
from fuseforge_cli.service_records import live_services, recorded_service, records_folder
from tests.support.databases import migrated_sqlite_file
from tests.support.processes import REPO_ROOT, fuseforge_env

URL = "http://127.0.0.1:8123"


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))  # where this process records a service
    return home


@pytest.fixture
def second_shell(tmp_path: Path) -> Path:
    """An empty folder to run the CLI in, as a user's second shell might."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


def _server_settings(tmp_path: Path) -> Settings:
    data_dir = tmp_path / "server-data"
    migrated_sqlite_file(data_dir / "fuseforge.sqlite")
    return Settings(env="test", data_dir=data_dir)


def _apikey(state_home: Path, cwd: Path, *args: str, **env: str
            ) -> subprocess.CompletedProcess[str]:
    environment = fuseforge_env(XDG_STATE_HOME=str(state_home), PYTHONPATH=str(REPO_ROOT), **env)
    environment.pop("FUSEFORGE_AUTH__ENABLED")  # no FUSEFORGE_* at all: a bare second shell
    return subprocess.run([sys.executable, "-m", "fuseforge_cli.main", "apikey", *args],
                          capture_output=True, text=True, env=environment, cwd=cwd, timeout=120)


def test_with_no_server_recorded_it_refuses_to_make_a_new_database_here(
        state_home: Path, second_shell: Path) -> None:
    run = _apikey(state_home, second_shell, "create", "--project", "ci", "--name", "me")

    assert run.returncode == 3, run.stderr
    assert run.stdout == ""
    [line] = run.stderr.splitlines()
    assert line.startswith(f"fuseforge: NoDatabase: no FuseForge database at "
                           f"{second_shell / '.fuseforge' / 'fuseforge.sqlite'}")
    assert "FUSEFORGE_DATA_DIR=<the data dir `fuseforge run` prints>" in line
    assert "`fuseforge migrate` makes a new database here on purpose" in line
    assert list(second_shell.iterdir()) == []  # nothing made


def test_it_uses_the_running_services_database_and_says_so(
        tmp_path: Path, state_home: Path, second_shell: Path) -> None:
    settings = _server_settings(tmp_path)
    with recorded_service(settings, URL):
        run = _apikey(state_home, second_shell, "create", "--project", "ci", "--name", "me")

    assert run.returncode == 0, run.stderr
    database = f"sqlite:///{settings.data_dir.resolve() / 'fuseforge.sqlite'}"
    assert (f"fuseforge apikey create: database {database} (FUSEFORGE_DATA_DIR unset: the data "
            f"dir of the FuseForge service running at {URL}); used by the FuseForge service at "
            f"{URL}") in run.stderr
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:  # the server's database holds the key, and accepts it
            assert project_for_key(session=session, secret=server_secret(settings),
                                   key=run.stdout.strip()) is not None
    finally:
        engine.dispose()
    assert list(second_shell.iterdir()) == []


def test_an_explicit_data_dir_wins_and_a_new_database_there_is_said_to_be_new(
        tmp_path: Path, state_home: Path, second_shell: Path) -> None:
    settings = _server_settings(tmp_path)
    chosen = tmp_path / "mine"
    with recorded_service(settings, URL):
        run = _apikey(state_home, second_shell, "list", FUSEFORGE_DATA_DIR=str(chosen))

    assert run.returncode == 0, run.stderr
    assert (f"database sqlite:///{chosen / 'fuseforge.sqlite'} (new: made now) "
            "(FUSEFORGE_DATA_DIR); no running `fuseforge run` is recorded on it; running "
            f"services use {URL}") in run.stderr
    assert (chosen / "fuseforge.sqlite").is_file()


def test_a_key_for_a_service_with_another_secret_is_refused(
        tmp_path: Path, state_home: Path, second_shell: Path) -> None:
    settings = _server_settings(tmp_path)
    with recorded_service(settings, URL):
        run = _apikey(state_home, second_shell, "create", "--project", "ci", "--name", "me",
                      FUSEFORGE_DATA_DIR=str(settings.data_dir),
                      FUSEFORGE_AUTH__SECRET="not-the-servers-secret-" + "x" * 32)

    assert run.returncode == 3, run.stderr
    assert f"SecretMismatch: the FuseForge service at {URL}" in run.stderr
    assert "Set FUSEFORGE_AUTH__SECRET as the service has it" in run.stderr


def test_two_services_on_different_databases_are_not_guessed_between(
        tmp_path: Path, state_home: Path, second_shell: Path) -> None:
    first = _server_settings(tmp_path / "a")
    with recorded_service(first, URL):
        other = records_folder() / "1.json"  # pid 1 always runs
        record = json.loads(next(records_folder().glob("*.json")).read_text())
        other.write_text(json.dumps({**record, "pid": 1, "url": "http://127.0.0.1:9000",
                                     "database": "sqlite:////elsewhere/fuseforge.sqlite"}))
        run = _apikey(state_home, second_shell, "list")

    assert run.returncode == 3, run.stderr
    assert "WhichDatabase: FUSEFORGE_DATA_DIR and FUSEFORGE_DATABASE_URL are unset" in run.stderr
    assert URL in run.stderr and "http://127.0.0.1:9000" in run.stderr


def test_a_service_record_lasts_while_the_service_runs_and_a_dead_ones_is_dropped(
        tmp_path: Path, state_home: Path) -> None:
    settings = _server_settings(tmp_path)
    with recorded_service(settings, URL) as path:
        assert path is not None and path.is_file()
        [live] = live_services()
        assert (live.url, live.data_dir, live.embedded) == (URL, str(settings.data_dir.resolve()),
                                                             True)
        dead = path.with_name("999999999.json")  # beyond any pid
        dead.write_text(path.read_text().replace(f'"pid": {live.pid}', '"pid": 999999999'))
        assert [s.pid for s in live_services()] == [live.pid]
        assert not dead.exists()
    assert not path.exists() and live_services() == []
