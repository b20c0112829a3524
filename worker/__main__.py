"""`python -m worker [--queues cpu,gpu] ...`: run a Celery worker on this machine.

`fuseforge worker` hands over to this (the CLI never imports the worker). A worker asked for
a GPU backend's queues ("gpu": TensorRT's) that can run that backend runs each job in a fresh
pool process.
"""

import argparse

from core.invalid_settings import exit_on_invalid_settings
from core.logging_setup import configure_logging
from core.queues import backend_queues, can_take_gpu_jobs, cpu_queues

__all__ = ["main", "worker_parser"]


def worker_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fuseforge worker", description="run a Celery worker")
    parser.add_argument("--queues", default=",".join(cpu_queues()),
                        help=f"comma-separated: {', '.join(backend_queues())} (default: every "
                        "CPU backend's; a host that cannot run one drops its queue)")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="jobs at once (each uses all cores)")
    parser.add_argument("--pool", default="prefork", choices=["prefork", "solo", "threads"])
    parser.add_argument("--loglevel", default="info")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = worker_parser().parse_args(argv)
    # Imported here: the Celery app reads the settings when it is made, and an invalid one
    # must reach exit_on_invalid_settings as its one line.
    from worker.celery_app import celery_app
    from worker.runtime import current_runtime

    runtime = current_runtime()
    # now, not at Celery's logging set-up: what Celery warns of before that is a log line too
    configure_logging(runtime.settings.log_format, role="worker")
    runtime.settings.data_dir.mkdir(parents=True, exist_ok=True)
    # --quiet: no start-up banner, which Celery prints, not logs: a JSON log holds only JSON.
    quiet = ["--quiet"] if runtime.settings.log_format == "json" else []
    celery_argv = [
        *quiet,
        "worker",
        f"--loglevel={args.loglevel}",
        f"--queues={args.queues}",
        f"--concurrency={args.concurrency}",
        f"--pool={args.pool}",
        "--without-gossip",
        "--without-mingle",
    ]
    requested = [queue.strip() for queue in args.queues.split(",")]
    if can_take_gpu_jobs(runtime.capabilities, requested):
        # Each job in a fresh pool process: a CUDA error is sticky for the process that hit it,
        # and the GPU memory a job's engines held comes back whole.
        celery_argv.append("--max-tasks-per-child=1")
    celery_app.worker_main(celery_argv)
    return 0


if __name__ == "__main__":
    exit_on_invalid_settings(main, "fuseforge worker")
