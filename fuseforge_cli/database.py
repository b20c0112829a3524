"""The CLI's door to the database: bring it to the schema's head (and make the artifact store's
bucket where it is missing), and sessions on a migrated one (`fuseforge migrate`, `run`,
`apikey`, `project`)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["migrate", "migrate_quietly", "migrated_sessions"]


def _alembic_ini() -> Path:
    # The repo root (editable installs, `make run`) or the working directory (containers).
    for candidate in (Path(__file__).resolve().parents[1] / "alembic.ini", Path("alembic.ini")):
        if candidate.is_file():
            return candidate
    raise SystemExit("alembic.ini not found: run fuseforge from the FuseForge checkout")


def migrate(_: argparse.Namespace | None = None, *, say: Callable[[str], None] | None = None
            ) -> int:
    """Upgrade the database to the newest migration and make the artifact store ready (an S3
    bucket is created where it is missing); `say` (default: print) reports both."""
    from core.artifact_refs import ArtifactStoreUnavailable
    from core.settings import get_settings
    from core.storage import artifact_store

    migrate_quietly()
    report = say or _print
    settings = get_settings()
    report(f"database migrated: {_redacted(settings.resolved_database_url)}")
    store = artifact_store(settings)
    try:
        made = store.ensure_ready()
    except ArtifactStoreUnavailable as err:
        raise SystemExit(f"fuseforge migrate: {err}") from err
    report(f"artifact store {'created' if made else 'ready'}: {store.describe}")
    return 0


def migrate_quietly() -> None:
    """Bring the configured database to the schema's head, saying nothing."""
    # Before the import: alembic's plugins announce themselves as it loads.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from alembic import command
    from alembic.config import Config

    from core.settings import get_settings

    get_settings().data_dir.mkdir(parents=True, exist_ok=True)
    command.upgrade(Config(str(_alembic_ini())), "head")


def _print(message: str) -> None:
    print(message, flush=True)


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def migrated_sessions() -> Any:
    """The configured database's sessionmaker, once the database is at the schema's head."""
    migrate_quietly()
    from core.db.session import get_sessionmaker

    return get_sessionmaker()
