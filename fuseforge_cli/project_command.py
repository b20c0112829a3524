"""`fuseforge project show | set-webhook`: a project's settings, in the configured database.

Like `fuseforge apikey`, these talk to the database directly (after migrating it), so they run
where the service's settings are (FUSEFORGE_DATABASE_URL, FUSEFORGE_WEBHOOKS__ALLOWED_*). A
key's holder changes its own project's settings with `PATCH /v1/project` instead.
"""

from __future__ import annotations

import argparse
from typing import Any

from fuseforge_cli.arguments import name_argument
from fuseforge_cli.database import migrated_sessions
from fuseforge_cli.database_target import DATABASE_HELP, choose_database
from fuseforge_cli.failures import EXIT_USAGE, CliFailure

__all__ = ["add_project_parser"]


def add_project_parser(sub: Any) -> None:
    """`project` and its commands, on the CLI's subparsers `sub`."""
    parser = sub.add_parser("project", help="show a project, set its default webhook",
                            description=__doc__, epilog=DATABASE_HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="project_command", required=True)
    show = commands.add_parser("show", help="a project's id, name and default webhook")
    show.add_argument("--project", required=True, type=name_argument, help="project name")
    show.set_defaults(func=show_project_command)
    webhook = commands.add_parser(
        "set-webhook", help="the callback URL of the project's jobs submitted without one")
    webhook.add_argument("--project", required=True, type=name_argument, help="project name")
    target = webhook.add_mutually_exclusive_group(required=True)
    target.add_argument("url", nargs="?", metavar="URL",
                        help="http(s) URL whose host resolves to public addresses only")
    target.add_argument("--clear", action="store_true",
                        help="remove the default: jobs without a callback_url send no webhook")
    webhook.set_defaults(func=set_webhook_command)



def _project(session: Any, name: str) -> Any:
    from core.projects import project_named

    project = project_named(session=session, name=name)
    if project is None:
        raise CliFailure("ProjectNotFound", f"no project is called {name!r}; `fuseforge apikey "
                         "list` shows the projects, `fuseforge apikey create --project "
                         f"{name} --name <name>` makes it.", EXIT_USAGE)
    return project


def show_project_command(args: argparse.Namespace) -> int:
    choose_database("project show")
    with migrated_sessions()() as session:
        project = _project(session, args.project)
        print(f"project {project.name!r} ({project.id}), default webhook: "
              f"{project.default_callback_url or 'none'}")
    return 0


def set_webhook_command(args: argparse.Namespace) -> int:
    from core.projects import InvalidCallbackUrl, set_default_callback_url
    from core.settings import get_settings

    url = None if args.clear else args.url
    choose_database("project set-webhook")
    with migrated_sessions()() as session:
        project = _project(session, args.project)
        try:
            set_default_callback_url(session=session, project=project, url=url,
                                     webhooks=get_settings().webhooks)
        except InvalidCallbackUrl as err:
            raise CliFailure("InvalidCallbackUrl", f"{url}: {err}", EXIT_USAGE) from err
        session.commit()
    if url is None:
        print(f"project {args.project!r} has no default webhook now: its jobs without a "
              "callback_url send none.")
    else:
        print(f"project {args.project!r}'s jobs submitted without a callback_url now POST their "
              f"webhook to {url}.")
    return 0
