"""`fuseforge serve | worker | janitor | migrate | run | apikey | project | optimize | validate |
submit | jobs`: what the Makefile and containers call, and what users run."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from core.invalid_settings import InvalidSettings
from fuseforge_cli.apikey_command import add_apikey_parser
from fuseforge_cli.database import migrate
from fuseforge_cli.deferred_imports import defer_import
from fuseforge_cli.failures import EXIT_CODES_HELP, EXIT_USAGE, CliFailure, failure_from, report_failure
from fuseforge_cli.jobs_parser import add_jobs_parser
from fuseforge_cli.optimize_parser import add_optimize_parser
from fuseforge_cli.project_command import add_project_parser
from fuseforge_cli.submit_parser import add_submit_parser
from fuseforge_cli.validate_parser import add_validate_parser

if TYPE_CHECKING:
    from optimizer.passes import FusionPass

__all__ = ["main"]


def _service_logging(role: str) -> logging.Logger:
    """Log lines of a long-running command in FUSEFORGE_LOG_FORMAT (core/logging_setup.py)."""
    from core.logging_setup import configure_logging
    from core.settings import get_settings

    configure_logging(get_settings().log_format, role=role,
                      level=os.environ.get("FUSEFORGE_LOG_LEVEL", "INFO").upper())
    return logging.getLogger("fuseforge")


def serve(_: argparse.Namespace) -> int:
    import uvicorn

    from core.settings import get_settings
    from fuseforge_cli.auth_notice import auth_notice

    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    log = _service_logging("api")
    log.info("FuseForge on http://%s:%s (dashboard: /ui, API docs: /docs)", settings.host, settings.port)
    log.info("%s", auth_notice(settings))
    # log_config=None: uvicorn's own lines (access log included) go through the root logger,
    # in FUSEFORGE_LOG_FORMAT, with the request id.
    uvicorn.run("dashboard.site:app", host=settings.host, port=settings.port, log_level="info",
                log_config=None)
    return 0


def worker(worker_args: list[str]) -> NoReturn:
    """Hand over to `python -m worker` (the worker's own entry point, which parses the
    options) in this process: the CLI never imports the worker."""
    os.execv(sys.executable, [sys.executable, "-m", "worker", *worker_args])


def run(args: argparse.Namespace) -> int:
    """Migrate, then keep the API, a worker and the janitor running until Ctrl-C/SIGTERM."""
    from fuseforge_cli.run_command import run_service

    log = _service_logging("run")  # its children log in the same format (they inherit the env)
    migrate(say=log.info)
    return run_service()


def janitor(janitor_args: list[str]) -> NoReturn:
    """Hand over to `python -m worker.janitor`: stale jobs, lost messages, leftover files."""
    os.execv(sys.executable, [sys.executable, "-m", "worker.janitor", *janitor_args])


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is a CliFailure (one line, exit 3) rather than argparse's
    usage block and exit 2 (fuseforge_cli/failures.py)."""

    def error(self, message: str) -> NoReturn:
        raise CliFailure("UsageError", f"{message}; see `{self.prog} --help`.", EXIT_USAGE)


# The commands whose every failure is one line and an exit code (fuseforge_cli/failures.py).
_MODEL_COMMANDS = ("optimize", "validate", "submit", "jobs")


def _parser(catalog: Sequence[FusionPass] | None) -> argparse.ArgumentParser:
    parser = _Parser(prog="fuseforge", description=__doc__, epilog=EXIT_CODES_HELP,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("migrate", help="apply database migrations").set_defaults(func=migrate)
    sub.add_parser("serve", help="run the REST API").set_defaults(func=serve)
    sub.add_parser("run", help="migrate, then run API + worker + janitor (what `make run` calls)"
                   ).set_defaults(func=run)
    # Listed for --help; main() hands its arguments to the worker's own parser.
    sub.add_parser("worker", help="run a Celery worker (`fuseforge worker --help` for options)")
    sub.add_parser("janitor", help="fail stale jobs, re-send lost ones, remove leftover files")
    add_apikey_parser(sub)
    add_project_parser(sub)
    add_optimize_parser(sub, catalog=catalog)
    add_validate_parser(sub, catalog=catalog)
    add_submit_parser(sub)
    add_jobs_parser(sub)
    return parser


def main(argv: list[str] | None = None, *,
         catalog: Sequence[FusionPass] | None = None) -> int:
    """Run the command `argv` names (default: sys.argv); `optimize` and `validate --bisect`
    take their passes from `catalog` (default: the default passes; see
    OptimizeOptions.catalog). Commands import what they need when they run, so `--help` is
    instant."""
    logging.basicConfig(level=os.environ.get("FUSEFORGE_LOG_LEVEL", "INFO"))
    # See fuseforge_cli/deferred_imports.py.
    for deferred in ("sympy", "onnx_ir._symbolic_shapes", "onnx.reference.ops"):
        defer_import(deferred)
    for chatty in ("onnxscript", "onnx_ir"):  # a line per rewrite would bury our own output
        logging.getLogger(chatty).setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        worker(argv[1:])
    if argv[:1] == ["janitor"]:
        janitor(argv[1:])
    command = argv[0] if argv[:1] and argv[0] in _MODEL_COMMANDS else ""
    debug = "--debug" in argv or os.environ.get("FUSEFORGE_LOG_LEVEL", "").upper() == "DEBUG"
    try:
        args = _parser(catalog).parse_args(argv)
        return int(args.func(args) or 0)
    except Exception as err:  # noqa: BLE001 - every failure becomes one line and a code
        if not (command or isinstance(err, CliFailure | InvalidSettings)):
            raise  # serve, migrate...: their tracebacks are the server log
        if debug:
            traceback.print_exc()
        return report_failure(command, failure_from(err), json_output="--json" in argv)


if __name__ == "__main__":
    sys.exit(main())
