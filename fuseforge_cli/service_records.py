"""Where each running `fuseforge run` keeps its data, recorded where another shell finds it.

`fuseforge run` writes one small JSON file per running service into the user's state folder
($XDG_STATE_HOME/fuseforge/services, else ~/.local/state/fuseforge/services) when it starts,
and removes it when it stops: its process id, URL, data dir, database (password hidden) and a
check value of its API-key secret (an HMAC of a fixed text: it tells whether two processes
hold the same secret, and reveals nothing of it). The database commands (`fuseforge apikey`,
`fuseforge project`) read these records so that a shell without the server's
FUSEFORGE_DATA_DIR does not silently make a second database whose keys the server refuses
(fuseforge_cli/database_target.py). A record whose process is gone (a killed service) is
ignored and removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.settings import Settings

__all__ = ["ServiceRecord", "live_services", "recorded_service", "records_folder",
           "secret_check"]

_CHECK_TEXT = b"fuseforge service record: API-key secret check"


@dataclass(frozen=True)
class ServiceRecord:
    pid: int
    url: str
    data_dir: str  # absolute
    database: str  # the resolved database URL, password hidden
    embedded: bool  # the database is data_dir's SQLite file (no FUSEFORGE_DATABASE_URL)
    secret_check: str
    started_at: str


def records_folder() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "fuseforge" / "services"


def secret_check(settings: Settings) -> str:
    """A value that is equal for two settings exactly when their API-key secrets are."""
    from core.api_keys import server_secret  # noqa: PLC0415

    return hmac.new(server_secret(settings), _CHECK_TEXT, hashlib.sha256).hexdigest()[:16]


def shown_database(settings: Settings) -> str:
    """The settings' database URL with its password hidden."""
    from sqlalchemy.engine import make_url  # noqa: PLC0415

    return make_url(settings.resolved_database_url).render_as_string(hide_password=True)


@contextlib.contextmanager
def recorded_service(settings: Settings, url: str) -> Iterator[Path | None]:
    """Record this process as a service with `settings` at `url` while the block runs; the
    record's path, or None where the state folder cannot be written (the service runs on)."""
    path = records_folder() / f"{os.getpid()}.json"
    try:
        record = ServiceRecord(
            pid=os.getpid(), url=url, data_dir=str(settings.data_dir.resolve()),
            database=shown_database(settings), embedded=settings.database_url is None,
            secret_check=secret_check(settings), started_at=datetime.now(UTC).isoformat())
        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f".{path.name}.draft")
        draft.write_text(json.dumps(asdict(record)))
        draft.chmod(0o600)
        draft.replace(path)
    except OSError:
        yield None
        return
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def live_services() -> list[ServiceRecord]:
    """The recorded services whose process still runs, oldest first; stale records are
    removed on the way."""
    records = []
    folder = records_folder()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            record = ServiceRecord(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue  # half-written or from another version: not ours to judge
        if _running(record.pid):
            records.append(record)
        else:
            path.unlink(missing_ok=True)
    return sorted(records, key=lambda record: record.started_at)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
