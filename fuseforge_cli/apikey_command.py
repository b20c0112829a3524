"""`fuseforge apikey create | list | revoke`: API keys, kept in the configured database.

These talk to the database directly (after migrating it), so they run where the service's
settings are: the same FUSEFORGE_DATABASE_URL and FUSEFORGE_AUTH__SECRET (or data dir, whose
`secret` file holds the generated one) as the API's. Each says on stderr which database it
uses; without FUSEFORGE_DATA_DIR and FUSEFORGE_DATABASE_URL it uses the running `fuseforge
run`'s, and never makes a new database unasked (fuseforge_cli/database_target.py).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from datetime import datetime, timedelta
from typing import Any

from fuseforge_cli.arguments import name_argument
from fuseforge_cli.database import migrated_sessions
from fuseforge_cli.database_target import DATABASE_HELP, choose_database
from fuseforge_cli.failures import EXIT_USAGE, CliFailure

__all__ = ["add_apikey_parser"]


def add_apikey_parser(sub: Any) -> None:
    """`apikey` and its three commands, on the CLI's subparsers `sub`."""
    parser = sub.add_parser("apikey", help="create, list and revoke API keys",
                            description=__doc__, epilog=DATABASE_HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="apikey_command", required=True)
    create = commands.add_parser(
        "create", help="make a key for a project (created when new); prints the key once")
    create.add_argument("--project", required=True, type=name_argument, help="project name, e.g. ci")
    create.add_argument("--name", required=True, type=name_argument, help="what the key is for")
    create.add_argument("--expires-in-days", type=_days, default=None,
                        help="the key stops working after this many days (default: never)")
    create.set_defaults(func=create_key_command)
    listing = commands.add_parser("list", help="list keys (never their secrets)")
    listing.add_argument("--project", type=name_argument, default=None, help="only this project's")
    listing.set_defaults(func=list_keys_command)
    revoke = commands.add_parser("revoke", help="stop a key from working, at once")
    revoke.add_argument("key_id", type=_key_id, metavar="ID", help="the key's id (apikey list)")
    revoke.set_defaults(func=revoke_key_command)


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = 0.0
    if not 0 < days <= 36500:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of days above 0, e.g. 90")
    return days


def _key_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a key id: ids are UUIDs, as `fuseforge apikey list` shows"
        ) from None


def create_key_command(args: argparse.Namespace) -> int:
    from core.api_keys import create_key, get_or_create_project, server_secret
    from core.settings import get_settings

    choose_database("apikey create", makes_keys=True)
    settings = get_settings()
    expires_in = timedelta(days=args.expires_in_days) if args.expires_in_days else None
    with migrated_sessions()() as session:
        project, new = get_or_create_project(session=session, name=args.project)
        created = create_key(session=session, secret=server_secret(settings), project=project,
                             name=args.name, expires_in=expires_in)
        session.commit()
    expiry = (f"expires {_when(created.row.expires_at)}" if created.row.expires_at
              else "never expires")
    # The key alone on stdout (KEY=$(fuseforge apikey create ...)); the rest on stderr.
    print(f"API key {created.row.id} '{args.name}' of project '{args.project}'"
          f"{' (new project)' if new else ''}; it {expiry}. It is shown only now: FuseForge "
          "keeps its hash, not the key. Send it as `Authorization: Bearer <key>`.",
          file=sys.stderr)
    print(created.key, flush=True)
    return 0


def list_keys_command(args: argparse.Namespace) -> int:
    from core.api_keys import list_keys
    from core.db.types import utc_now

    choose_database("apikey list")
    with migrated_sessions()() as session:
        rows = list_keys(session=session, project=args.project)
    now = utc_now()
    print(f"{'ID':36}  {'PROJECT':16}  {'NAME':16}  {'PREFIX':11}  {'CREATED':20}  "
          f"{'EXPIRES':20}  STATE")
    for key, project in rows:
        state = ("revoked" if key.revoked_at is not None
                 else "expired" if key.expires_at is not None and key.expires_at <= now
                 else "active")
        print(f"{key.id!s:36}  {project:16}  {key.name:16}  {key.prefix:11}  "
              f"{_when(key.created_at):20}  {_when(key.expires_at):20}  {state}")
    return 0


def revoke_key_command(args: argparse.Namespace) -> int:
    from core.api_keys import revoke_key

    choose_database("apikey revoke")
    with migrated_sessions()() as session:
        key = revoke_key(session=session, key_id=args.key_id)
        if key is None:
            raise CliFailure("ApiKeyNotFound", f"no API key has id {args.key_id}; `fuseforge "
                             "apikey list` shows the keys and their ids.", EXIT_USAGE)
        session.commit()
        print(f"revoked API key {key.id} '{key.name}' (prefix {key.prefix}) at "
              f"{_when(key.revoked_at)}; requests with it now get 401.")
    return 0


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment is not None else "-"
