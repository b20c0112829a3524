"""`fuseforge jobs list | show | wait | download | cancel | logs`: a server's jobs through
fuseforge_client (its API key, retries and redirects), a job named by its id or a unique
prefix of it; the exit codes are submit's (fuseforge_cli/failures.py)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from fuseforge_cli.failures import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CliFailure
from fuseforge_cli.job_lines import headline, job_table, show_lines
from fuseforge_cli.server_target import server_url
from fuseforge_cli.submit_command import cli_failure, follow_job
from fuseforge_client import FuseForgeClient, FuseForgeError, Job, NotFoundError
from optimizer.registries.precisions import is_quantized

__all__ = ["run_jobs"]

_ENGINE_KINDS = ("engine", "engine_data")  # the engine and the data file its weights sit in
_FOLLOW_EVERY_S = 1.0


def run_jobs(args: argparse.Namespace) -> int:
    if not args.debug:  # a line per request or retry would bury the command's own output
        for chatty in ("httpx", "httpcore", "fuseforge_client"):
            logging.getLogger(chatty).setLevel(logging.WARNING)
    url = server_url(args.url)
    try:
        client = FuseForgeClient(url, args.api_key)
    except ValueError as err:
        raise CliFailure("UsageError", str(err), EXIT_USAGE) from err
    with client:
        try:
            return _COMMANDS[args.jobs_command](args, client)
        except FuseForgeError as err:
            raise cli_failure(err) from err
        except ValueError as err:  # a job id prefix that is malformed or names several jobs
            raise CliFailure("InvalidJobId", str(err), EXIT_USAGE) from err


def _list(args: argparse.Namespace, client: FuseForgeClient) -> int:
    page = client.list_jobs(status=args.status, model_name=args.model, limit=args.limit)
    if args.json:
        print(json.dumps({"items": [dict(job.data) for job in page.items], "total": page.total,
                          "limit": page.limit, "offset": page.offset}))
        return EXIT_OK
    if not page.items:
        _say("no jobs match" if args.status or args.model else "no jobs yet: `fuseforge "
             "submit MODEL.onnx` starts one")
        return EXIT_OK
    for line in job_table([_whole(client, job) for job in page.items]):
        print(line)
    if page.total > len(page.items):
        _say(f"the newest {len(page.items)} of {page.total} jobs; --limit shows more")
    return EXIT_OK


def _whole(client: FuseForgeClient, job: Job) -> Job:
    """`job` as the list has it, or, from a server whose list predates `outcome`, a finished
    quantized job read whole: only its report says whether it or fp32 shipped."""
    if (job.status != "succeeded" or "outcome" in job.data
            or not is_quantized(str(job.data.get("precision")))):
        return job
    return client.get_job(job.id)


def _show(args: argparse.Namespace, client: FuseForgeClient) -> int:
    job = client.find_job(args.job)
    if args.json:
        print(json.dumps(dict(job.data)))
        return EXIT_OK
    for line in show_lines(job, base_url=client.base_url):
        print(line)
    return EXIT_OK


def _wait(args: argparse.Namespace, client: FuseForgeClient) -> int:
    if args.timeout <= 0:
        raise CliFailure("UsageError", f"--timeout {args.timeout:g}: give a positive number of "
                         "seconds.", EXIT_USAGE)
    return follow_job(args, client, client.find_job(args.job).id)


def _download(args: argparse.Namespace, client: FuseForgeClient) -> int:
    job = client.find_job(args.job)
    if args.all:
        target = args.output or Path(f"job-{job.id}-artifacts.tar")
        if target.is_dir():
            target = target / f"job-{job.id}-artifacts.tar"
        path = client.download_archive(job.id, target)
        _say(f"job {job.id}: every artifact in {path} ({path.stat().st_size} bytes)")
        return EXIT_OK
    if args.artifact:
        names = [args.artifact]
    else:
        names = [a.name for a in job.artifacts if a.kind in _ENGINE_KINDS]
        if not names:
            raise NotFoundError(
                f"job {job.id} ({job.status}) has no engine to download"
                + (f"; its artifacts are {', '.join(a.name for a in job.artifacts)}: name one, "
                   "or pass --all" if job.artifacts else
                   ": a job has artifacts once it has succeeded (`fuseforge jobs show "
                   f"{job.id[:8]}` says how it ended)"),
                error="ArtifactNotFound", status_code=404, method="GET",
                path=f"/v1/jobs/{job.id}")
    paths = client.download_artifacts(job, args.output or Path("."), names=names)
    for path in paths:
        print(path)
    _say(f"job {job.id}: downloaded {', '.join(p.name for p in paths)} "
         f"(sha256 checked) to {paths[0].parent}")
    return EXIT_OK


def _cancel(args: argparse.Namespace, client: FuseForgeClient) -> int:
    job = client.cancel(client.find_job(args.job).id)
    print(f"job {job.id} {job.status}")
    return EXIT_OK


def _logs(args: argparse.Namespace, client: FuseForgeClient) -> int:
    job = client.find_job(args.job)
    shown = 0
    while True:
        events = job.data.get("events") or []
        for event in events[shown:]:
            stage = f" [{event['stage']}]" if event.get("stage") else ""
            print(f"{event.get('created_at')}{stage} {event.get('message')}", flush=True)
        shown = len(events)
        if not args.follow or job.finished:
            break
        try:
            time.sleep(_FOLLOW_EVERY_S)
        except KeyboardInterrupt:
            _say(f"stopped following job {job.id}; the job goes on on the server")
            return EXIT_INTERRUPTED
        job = client.get_job(job.id)
    if args.follow:
        _say(f"job {job.id} {job.status}: {headline(job)}")
    return EXIT_OK


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


_COMMANDS = {"list": _list, "show": _show, "wait": _wait, "download": _download,
             "cancel": _cancel, "logs": _logs}
