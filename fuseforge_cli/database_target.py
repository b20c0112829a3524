"""Which database `fuseforge apikey` and `fuseforge project` work on, said on stderr, and never
a brand-new one by accident.

They read the server's settings (FUSEFORGE_DATABASE_URL, else the SQLite file in
FUSEFORGE_DATA_DIR, default ./.fuseforge in the current folder). A second shell that lacks the
server's FUSEFORGE_DATA_DIR would otherwise make a second database, and keys the server answers
401 to. So, with neither variable set:

- when running `fuseforge run` services are recorded (fuseforge_cli/service_records.py) and
  none uses the default database, the one service's data dir is used (several on different
  databases: refused, listing them, since guessing would be worse);
- a default SQLite file that does not exist yet is not created: the command stops, naming the
  path it would have made and how to point at the server's (`fuseforge migrate` makes a new
  database on purpose).

With either variable set, that database is used (created when new, and said so). `apikey
create` also refuses when the service using the database holds another API-key secret
(FUSEFORGE_AUTH__SECRET): its keys would be refused too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fuseforge_cli.failures import EXIT_USAGE, CliFailure
from fuseforge_cli.service_records import ServiceRecord, live_services, secret_check, shown_database

if TYPE_CHECKING:
    from core.settings import Settings

__all__ = ["DATABASE_HELP", "choose_database"]

DATABASE_HELP = """Which database: FUSEFORGE_DATABASE_URL, else the SQLite file in FUSEFORGE_DATA_DIR,
as the server reads them; each command says on stderr which one it uses. With neither set, a
running `fuseforge run` (it records its data dir in $XDG_STATE_HOME/fuseforge/services, else
~/.local/state/fuseforge/services) lends its database, and a default ./.fuseforge database
that does not exist yet is not made: the command stops and says how to point at the
server's (`fuseforge migrate` makes a new one on purpose). Keys made for one database (and one
FUSEFORGE_AUTH__SECRET) are refused with 401 by a server on another."""

_SETTINGS = ("FUSEFORGE_DATABASE_URL", "FUSEFORGE_DATA_DIR")


def choose_database(command: str, *, makes_keys: bool = False) -> None:
    """Settle the database of `fuseforge <command>` (setting FUSEFORGE_DATA_DIR to a running
    service's when that is the one meant) and say it on stderr.

    Raises:
        CliFailure: (exit 3) nothing says which database and the default one does not exist
            yet, or the running services use several others; with `makes_keys`, the service on
            this database holds another API-key secret.
    """
    from core.settings import get_settings  # noqa: PLC0415

    explicit = [name for name in _SETTINGS if os.environ.get(name)]
    services = live_services()
    settings = get_settings()
    database = shown_database(settings)
    source = (" and ".join(explicit) if explicit else
              f"FUSEFORGE_DATA_DIR unset: the default {settings.data_dir}/ in {Path.cwd()}")
    if not explicit and not any(s.database == database for s in services):
        others = {s.database: s for s in services}
        if len(others) > 1:
            raise CliFailure("WhichDatabase", f"FUSEFORGE_DATA_DIR and FUSEFORGE_DATABASE_URL "
                             f"are unset and the running FuseForge services use different "
                             f"databases: {_listed(services)}. Set FUSEFORGE_DATA_DIR (or "
                             "FUSEFORGE_DATABASE_URL) to the one whose server is meant.",
                             EXIT_USAGE)
        if others:
            service = next(iter(others.values()))
            if not service.embedded:
                raise CliFailure("WhichDatabase", f"FUSEFORGE_DATABASE_URL is unset, but the "
                                 f"FuseForge service at {service.url} (pid {service.pid}) uses "
                                 f"{service.database}: set FUSEFORGE_DATABASE_URL as it has it.",
                                 EXIT_USAGE)
            os.environ["FUSEFORGE_DATA_DIR"] = service.data_dir
            get_settings.cache_clear()
            settings = get_settings()
            database = shown_database(settings)
            source = (f"FUSEFORGE_DATA_DIR unset: the data dir of the FuseForge service "
                      f"running at {service.url}")
        elif _new_sqlite(settings):
            raise CliFailure("NoDatabase", f"no FuseForge database at {_sqlite_path(settings)}, "
                             f"and no running `fuseforge run` is recorded: FUSEFORGE_DATA_DIR is "
                             f"unset, so this would make a new database in {settings.data_dir}/ "
                             f"here ({Path.cwd()}), and a key in it would get 401 from a server "
                             "started elsewhere. Run it with the server's settings "
                             "(FUSEFORGE_DATA_DIR=<the data dir `fuseforge run` prints>, or "
                             "FUSEFORGE_DATABASE_URL), or from the folder where the server "
                             "runs; `fuseforge migrate` makes a new database here on purpose.",
                             EXIT_USAGE)
    users = [s for s in services if s.database == database]
    if makes_keys:
        _check_secret(settings, users)
    new = " (new: made now)" if _new_sqlite(settings) else ""
    used = (f"used by the FuseForge service at {', '.join(s.url for s in users)}" if users
            else "no running `fuseforge run` is recorded on it"
            + (f"; running services use {_listed(services)}" if services else ""))
    print(f"fuseforge {command}: database {database}{new} ({source}); {used}", file=sys.stderr,
          flush=True)


def _check_secret(settings: Settings, users: list[ServiceRecord]) -> None:
    mine = secret_check(settings)
    for service in users:
        if service.secret_check != mine:
            raise CliFailure("SecretMismatch", f"the FuseForge service at {service.url} (pid "
                             f"{service.pid}) uses this database with another API-key secret: "
                             "it would answer 401 to a key made here. Set "
                             "FUSEFORGE_AUTH__SECRET as the service has it.", EXIT_USAGE)


def _listed(services: list[ServiceRecord]) -> str:
    return ", ".join(f"{s.url} (pid {s.pid}) on {s.database}" for s in services)


def _sqlite_path(settings: Settings) -> Path:
    return settings.data_dir.resolve() / "fuseforge.sqlite"


def _new_sqlite(settings: Settings) -> bool:
    """The settings' database is the embedded SQLite file, and it does not exist yet."""
    return settings.database_url is None and not _sqlite_path(settings).exists()
