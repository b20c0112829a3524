"""`fuseforge serve | worker | migrate | run | optimize`: what the Makefile and containers call."""

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import NoReturn

from core.settings import get_settings
from fuseforge_cli.optimize_command import add_optimize_parser
from fuseforge_cli.validate_command import add_validate_parser
from optimizer.passes import DEFAULT_PASSES, FusionPass

__all__ = ["main"]

_STOP_TIMEOUT_S = 20


def _alembic_ini() -> Path:
    # The repo root (editable installs, `make run`) or the working directory (containers).
    for candidate in (Path(__file__).resolve().parents[1] / "alembic.ini", Path("alembic.ini")):
        if candidate.is_file():
            return candidate
    raise SystemExit("alembic.ini not found: run fuseforge from the FuseForge checkout")


def migrate(_: argparse.Namespace | None = None) -> int:
    from alembic import command
    from alembic.config import Config

    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # its plugin chatter buries the URL
    command.upgrade(Config(str(_alembic_ini())), "head")
    print(f"database migrated: {_redacted(settings.resolved_database_url)}", flush=True)
    return 0


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def serve(_: argparse.Namespace) -> int:
    import uvicorn

    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    print(f"FuseForge API on http://{settings.host}:{settings.port} (docs: /docs)", flush=True)
    uvicorn.run("api.main:app", host=settings.host, port=settings.port, log_level="info")
    return 0


def worker(worker_args: list[str]) -> NoReturn:
    """Hand over to `python -m worker` (the worker's own entry point, which parses the
    options) in this process: the CLI never imports the worker."""
    os.execv(sys.executable, [sys.executable, "-m", "worker", *worker_args])


def run(args: argparse.Namespace) -> int:
    """Migrate, then run the API and a worker (with the stale-job sweep) until Ctrl-C/SIGTERM."""
    migrate()
    settings = get_settings()
    me = [sys.executable, "-m", "fuseforge_cli.main"]
    children = {
        "api": subprocess.Popen([*me, "serve"]),
        # gpu too: a worker that cannot build TensorRT engines drops it, saying why
        "worker": subprocess.Popen([*me, "worker", "--beat", "--queues", "cpu,gpu"]),
    }
    stopping = False

    def _request_stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _request_stop)
    signal.signal(signal.SIGTERM, _request_stop)
    print(
        f"FuseForge is up: http://{settings.host}:{settings.port} "
        f"(data in {settings.data_dir.resolve()}). Ctrl-C stops it.",
        flush=True,
    )
    exit_code = 0
    while not stopping:
        for name, child in children.items():
            if child.poll() is not None:
                print(f"fuseforge: the {name} exited with code {child.returncode}; stopping", flush=True)
                exit_code = child.returncode or 1
                stopping = True
        time.sleep(0.2)
    _stop_children(children)
    print("FuseForge stopped.", flush=True)
    return exit_code


def _stop_children(children: dict[str, subprocess.Popen[bytes]]) -> None:
    for child in children.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)  # uvicorn and celery both shut down warmly on TERM
    deadline = time.monotonic() + _STOP_TIMEOUT_S
    for name, child in children.items():
        try:
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"fuseforge: the {name} did not stop in {_STOP_TIMEOUT_S} s; killing it", flush=True)
            child.kill()
            child.wait()


def _parser(catalog: tuple[FusionPass, ...]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fuseforge", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("migrate", help="apply database migrations").set_defaults(func=migrate)
    sub.add_parser("serve", help="run the REST API").set_defaults(func=serve)
    sub.add_parser("run", help="migrate, then run API + worker (what `make run` calls)"
                   ).set_defaults(func=run)
    # Listed for --help; main() hands its arguments to the worker's own parser.
    sub.add_parser("worker", help="run a Celery worker (`fuseforge worker --help` for options)")
    add_optimize_parser(sub, catalog=catalog)
    add_validate_parser(sub, catalog=catalog)
    return parser


def main(argv: list[str] | None = None, *,
         catalog: tuple[FusionPass, ...] = DEFAULT_PASSES) -> int:
    """Run the command `argv` names (default: sys.argv); `optimize` and `validate --bisect`
    take their passes from `catalog` (see OptimizeOptions.catalog)."""
    logging.basicConfig(level=os.environ.get("FUSEFORGE_LOG_LEVEL", "INFO"))
    for chatty in ("onnxscript", "onnx_ir"):  # a line per rewrite would bury our own output
        logging.getLogger(chatty).setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        worker(argv[1:])
    args = _parser(catalog).parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
