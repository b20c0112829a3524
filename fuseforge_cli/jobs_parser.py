"""The arguments of `fuseforge jobs list | show | wait | download | cancel | logs` (the commands
themselves are jobs_command.py, imported when they run, so `fuseforge --help` loads no httpx)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fuseforge_cli.failures import EXIT_CODES_HELP

__all__ = ["add_jobs_parser"]

_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")

_EPILOG = """A JOB is a job's id or its first characters (at least 4, as `jobs list` shows
them) when only one of the project's jobs starts with them.

The server is --url, else FUSEFORGE_URL, else http://FUSEFORGE_HOST:FUSEFORGE_PORT (the
settings `fuseforge run` starts the server with), else the one `fuseforge run` running on
this host (it records its URL), else http://127.0.0.1:8000; the API key is --api-key, else
FUSEFORGE_API_KEY. Each command says on stderr which server it asks.

Every jobs command exits 4 when the server is unreachable or refuses the key, 1 when it
answers that the job or artifact does not exist (or, `jobs wait`, the job failed or was
cancelled), 3 for a malformed or ambiguous JOB; `jobs wait` exits as `submit --wait` does,
and 130 when Ctrl-C stops following (the job goes on).

"""


def add_jobs_parser(sub: Any) -> None:
    """`jobs` and its commands, on the CLI's subparsers `sub`."""
    parser = sub.add_parser(
        "jobs", help="list, show, follow, download, cancel a FuseForge server's jobs",
        description="The jobs of the API key's project on a FuseForge server.",
        epilog=_EPILOG + EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="jobs_command", required=True)

    listing = _command(commands, "list", "the newest jobs: id, model, status, what shipped, "
                       "the outcome's headline")
    listing.add_argument("--status", choices=_STATUSES, help="only jobs in this status")
    listing.add_argument("--model", metavar="NAME",
                         help="only jobs whose model's name contains NAME (case-insensitive)")
    listing.add_argument("--limit", type=_count, default=20, metavar="N",
                         help="at most N jobs, newest first (default 20, at most 500)")
    listing.add_argument("--json", action="store_true", help="print the page of jobs as JSON")

    show = _command(commands, "show", "a job's outcome: headline, asked vs shipped, speed-up, "
                    "accuracy, error, artifacts, its dashboard page")
    _job_argument(show)
    show.add_argument("--json", action="store_true", help="print the whole job as JSON")

    wait = _command(commands, "wait", "follow a job to its end as `submit --wait` does "
                    "(Ctrl-C stops following, not the job)")
    _job_argument(wait)
    wait.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                      help="give up (exit 1) after this long; the job goes on (default 3600)")
    wait.add_argument("--output", type=Path, metavar="DIR",
                      help="download every artifact of the job here once it has succeeded")
    wait.add_argument("--fail-on-regression", action="store_true",
                      help="exit 5 when the server flagged the job's engine slower than the "
                      "model's best earlier one")
    wait.add_argument("--json", action="store_true", help="print the final job as JSON")

    download = _command(commands, "download", "download the job's engine (with its data "
                        "file), one named artifact, or all of them as one tar")
    _job_argument(download)
    what = download.add_mutually_exclusive_group()
    what.add_argument("artifact", nargs="?", metavar="ARTIFACT",
                      help="an artifact's name, as `jobs show` lists them (default: the engine)")
    what.add_argument("--all", action="store_true",
                      help="every artifact as one tar (GET /v1/jobs/{id}/artifacts.tar)")
    download.add_argument("-o", "--output", type=Path, metavar="PATH",
                          help="the folder to write into (default: the current one); with "
                          "--all, the tar's path (default job-<id>-artifacts.tar)")

    cancel = _command(commands, "cancel", "cancel a queued or running job")
    _job_argument(cancel)

    logs = _command(commands, "logs", "the job's events (stages, fallbacks, warnings), oldest "
                    "first")
    _job_argument(logs)
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep printing events until the job ends")


def _command(commands: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    command: argparse.ArgumentParser = commands.add_parser(
        name, help=help_text, description=help_text[:1].upper() + help_text[1:] + ".",
        epilog=_EPILOG + EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    command.add_argument("--url", help="the server (default: FUSEFORGE_URL, else "
                         "http://FUSEFORGE_HOST:FUSEFORGE_PORT)")
    command.add_argument("--api-key", help="the API key (default: FUSEFORGE_API_KEY)")
    command.add_argument("--debug", action="store_true", help="show tracebacks on failure")
    command.set_defaults(func=_run_jobs)
    return command


def _job_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB", help="the job's id, or its first characters")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 500:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of jobs from 1 to 500")
    return value


def _run_jobs(args: argparse.Namespace) -> int:
    from fuseforge_cli.jobs_command import run_jobs  # noqa: PLC0415 - httpx on use only

    return run_jobs(args)
