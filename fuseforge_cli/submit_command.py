"""`fuseforge submit`: upload a model, start a job, follow it, print its verdict, download its
artifacts; the exit code says how it ended (fuseforge_cli/failures.py)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fuseforge_cli.failures import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    EXIT_VALIDATION_FAILED,
    CliFailure,
    readable_file,
    report_failure,
)
from fuseforge_cli.job_config_file import job_body, unknown_fields
from fuseforge_cli.job_lines import DASHBOARD_JOB_PATH
from fuseforge_cli.search_summary import search_lines, shipped_precision
from fuseforge_cli.server_target import server_url
from fuseforge_cli.submit_checks import check_before_upload
from fuseforge_cli.submit_progress import JobProgressLines, UploadBar
from fuseforge_client import (
    ApiError,
    AuthenticationError,
    ConnectionFailedError,
    FuseForgeClient,
    FuseForgeError,
    InvalidRequestError,
    Job,
    JobError,
    JobTimeoutError,
    ServiceUnavailableError,
    ValidationFailedError,
)

__all__ = ["cli_failure", "follow_job", "run_submit"]

COMMAND = "submit"


def run_submit(args: argparse.Namespace) -> int:
    if not args.debug:  # a line per request or retry would bury the progress lines
        for chatty in ("httpx", "httpcore", "fuseforge_client"):
            logging.getLogger(chatty).setLevel(logging.WARNING)
    if args.output is not None and not args.wait:
        raise CliFailure("UsageError", "--output needs --wait: artifacts exist once the job has "
                         "succeeded.", EXIT_USAGE)
    if args.fail_on_regression and not args.wait:
        raise CliFailure("UsageError", "--fail-on-regression needs --wait: a job's regression "
                         "is known once it has succeeded.", EXIT_USAGE)
    if args.timeout <= 0:
        raise CliFailure("UsageError", f"--timeout {args.timeout:g}: give a positive number of "
                         "seconds.", EXIT_USAGE)
    model = readable_file(args.model)
    if args.calibration is not None:
        readable_file(args.calibration, "dataset")
        if args.precision not in (None, "int8"):
            raise CliFailure("UsageError", f"--calibration calibrates int8 jobs; this one is "
                             f"--precision {args.precision}.", EXIT_USAGE)
    if args.validation is not None:
        readable_file(args.validation, "dataset")
    body = job_body(args)
    check_before_upload(model, body, validation=args.validation, calibration=args.calibration)
    try:
        client = FuseForgeClient(server_url(args.url), args.api_key)
    except ValueError as err:
        raise CliFailure("UsageError", str(err), EXIT_USAGE) from err
    with client:
        try:
            return _submit(args, client, model, body)
        except FuseForgeError as err:
            raise cli_failure(err) from err


def cli_failure(err: FuseForgeError) -> CliFailure:
    """The CLI's failure for an error of the client: the server's detail and where it came
    from, with submit's exit codes (unreachable or refused key 4, a bad request 3, else 1)."""
    return CliFailure(err.error, _detail(err), _exit_code(err))


def _data_files(model: Path) -> tuple[str, ...]:
    """The external data files `model` names, sent with it; none for a file the server will
    refuse anyway (it says why better), or a .tar of the set made beforehand.

    Raises:
        CliFailure: a data file named is not beside the model, or not inside its folder.
    """
    from optimizer.errors import OptimizerError  # noqa: PLC0415 - only submit reads models
    from optimizer.model.external_data import data_file_locations, escapes_folder  # noqa: PLC0415

    try:
        locations = data_file_locations(model)
    except OptimizerError:
        return ()
    for location in locations:
        if escapes_folder(location):
            raise CliFailure("InvalidModel", f"{model} stores weights at {location!r}, which is "
                             "not a path inside its folder; re-save it with relative data file "
                             "locations.", EXIT_USAGE)
        if not model.parent.joinpath(*location.split("/")).is_file():
            raise CliFailure("InvalidModel", f"{model} stores weights in {location!r}, which "
                             f"is not in {model.parent}: keep its data files beside it.",
                             EXIT_USAGE)
    return locations


def _submit(args: argparse.Namespace, client: FuseForgeClient, model: Path,
            body: dict[str, Any]) -> int:
    """Check the job options, upload the model, start the job and, with --wait, follow it."""
    accepted = client.job_fields()
    unknown = [] if accepted is None else unknown_fields(body, set(accepted))
    if unknown:
        raise CliFailure("InvalidConfig", f"unknown job option(s) {', '.join(unknown)}; "
                         f"the server accepts {', '.join(sorted(accepted or ()))}.", EXIT_USAGE)
    client.check_access()  # a refused key shows before the upload, not after it
    data_files = _data_files(model)
    with UploadBar(model.name if not data_files else
                   f"{model.name} and {len(data_files)} data file(s)") as bar:
        uploaded = client.upload_model(model, data_files=data_files, on_progress=bar.update)
    if args.validation is not None:
        with UploadBar(args.validation.name) as bar:
            dataset = client.upload_dataset(args.validation, on_progress=bar.update)
        body["dataset_id"] = dataset.id
    if args.calibration is not None:
        with UploadBar(args.calibration.name) as bar:
            dataset = client.upload_dataset(args.calibration, on_progress=bar.update,
                                            role="calibration")
        body["quantization"] = {**(body.get("quantization") or {}), "calibration": dataset.id}
    job = client.submit_job(uploaded.id, body)
    _say(f"job {job.id} submitted: {client.base_url}{DASHBOARD_JOB_PATH.format(id=job.id)}")
    if not args.wait:
        print(_job_json(job) if args.json else job.id)
        return EXIT_OK
    return follow_job(args, client, job.id)


def follow_job(args: argparse.Namespace, client: FuseForgeClient, job_id: str) -> int:
    """Follow the job to its end (a line per status and stage on stderr), print its verdict,
    download its artifacts with --output; the exit code says how it ended. Ctrl-C stops
    following, not the job, and says how to follow it again (`fuseforge jobs wait`)."""
    try:
        job = client.wait(job_id, timeout_s=args.timeout, on_progress=JobProgressLines(_say))
    except JobError as err:
        return _ended_badly(err, json_output=args.json)
    except KeyboardInterrupt:
        _say(f"stopped following job {job_id}; the job goes on on the server. Follow it again "
             f"with `fuseforge jobs wait {job_id[:8]}`, stop it with `fuseforge jobs cancel "
             f"{job_id[:8]}`, or open {client.base_url}{DASHBOARD_JOB_PATH.format(id=job_id)}")
        return EXIT_INTERRUPTED
    if args.output is not None:
        paths = client.download_artifacts(job, args.output)
        _say(f"downloaded {len(paths)} artifact(s) to {args.output}: "
             f"{', '.join(p.name for p in paths)}")
    print(_job_json(job) if args.json else finished_summary(job))
    if job.regression is not None:
        detail = job.regression.get("detail") or "its engine is slower than an earlier job's"
        if args.fail_on_regression:
            return report_failure(COMMAND, CliFailure(
                "Regression", f"job {job.id}: {detail}", EXIT_REGRESSION), json_output=False)
        _say(f"job {job.id}: regression: {detail}")
    return EXIT_OK


def _ended_badly(err: JobError, *, json_output: bool) -> int:
    """Say how the job ended (the verdict on stderr, the job on stdout with --json)."""
    job = err.job
    if isinstance(err, ValidationFailedError):
        failure = CliFailure("ValidationFailed", f"job {job.id}: {err.detail}",
                             EXIT_VALIDATION_FAILED)
    elif isinstance(err, JobTimeoutError):
        failure = CliFailure("JobTimeout", err.detail, EXIT_FAILED)
    else:
        failure = CliFailure(err.error, f"job {job.id} {job.status}: {err.detail}", EXIT_FAILED)
    report_failure(COMMAND, failure, json_output=False)
    if json_output:
        print(_job_json(job))
    else:  # a search that found nothing keeps its table: it says why each candidate lost
        for line in search_lines(job):
            _say(line)
    return failure.exit_code


def finished_summary(job: Job) -> str:
    """A succeeded job's summary: the server's headline (the same words as the dashboard's and
    the API's `outcome.headline`), why shipped differs from asked (a search's table says it for
    a search), then the details."""
    outcome = job.outcome
    if outcome is not None:
        lines = [f"job {job.id} succeeded: {outcome.headline}"]
        if outcome.why and job.search_report is None:
            lines.append(f"why: {outcome.why}")
    else:  # a server from before outcomes: its verdicts, never a bare median
        lines = [_verdict_without_outcome(job)]
    return "\n".join([*lines, *_quantization_lines(job), *_hot_spot_lines(job),
                      *search_lines(job)])


def _verdict_without_outcome(job: Job) -> str:
    config = job.data.get("config") or {}
    passed = {True: "validation passed", False: "validation failed",
              None: "not validated"}[job.validation_passed]
    engine: Mapping[str, Any] = next((record for record in job.data.get("benchmarks") or ()
                                      if record.get("suite") == "comparison"
                                      and record.get("variant") == "engine"), {})
    speedup, verdict = engine.get("speedup_vs_reference"), engine.get("speedup_verdict")
    low, high = engine.get("speedup_ci_low"), engine.get("speedup_ci_high")
    if speedup is None:
        speed = "no benchmark"
    elif verdict is None or low is None or high is None:
        speed = f"engine {speedup:.2f}x the original's speed (no interval to judge it by)"
    else:
        speed = f"engine speed: {verdict} ({speedup:.2f}x, {low:.2f}-{high:.2f})"
    precision = shipped_precision(job) or config.get("precision", "?")
    return (f"job {job.id} succeeded: {passed}, {speed} "
            f"({config.get('backend', '?')}, {precision})")


def _hot_spot_lines(job: Job) -> list[str]:
    """The profile's biggest hot spot, or why the job has no profile."""
    profile = job.data.get("profile_report") or {}
    if profile.get("hot_spot"):
        return [f"hot spot: {profile['hot_spot']}"]
    return [f"hot spot: not profiled: {profile['skipped']}"] if profile.get("skipped") else []


def _quantization_lines(job: Job) -> list[str]:
    """An int8 job's summary: what shipped and why, and its nodes by precision."""
    report = (job.data.get("accuracy_report") or {}).get("quantization")
    if not report:
        return []
    # With an outcome, its `why` line has said what shipped instead and why.
    lines = [] if job.outcome is not None and job.outcome.why else [
        f"int8: {report.get('shipped')} shipped: {report.get('why')}"]
    counts = (report.get("node_precisions") or {}).get("node_counts")
    if counts:
        lines.append("int8: nodes by precision in the engine: " + ", ".join(
            f"{precision} {count}" for precision, count in sorted(counts.items())))
    kept = report.get("kept_nodes") or []
    if kept:
        lines.append(f"int8: kept in float to meet the budget: "
                     f"{', '.join(node['name'] for node in kept)}")
    return lines


def _job_json(job: Job) -> str:
    return json.dumps(dict(job.data))


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _exit_code(err: FuseForgeError) -> int:
    if isinstance(err, ConnectionFailedError | AuthenticationError | ServiceUnavailableError):
        return EXIT_UNREACHABLE
    if isinstance(err, InvalidRequestError):
        return EXIT_USAGE
    return EXIT_FAILED


def _detail(err: FuseForgeError) -> str:
    # The error's name leads the CLI's line already: the server's detail, then where it came from.
    text = f"{err.detail} ({err.status_code} on {err.method} {err.path})" if isinstance(
        err, ApiError) else err.detail
    if isinstance(err, AuthenticationError):
        text += "; set FUSEFORGE_API_KEY or --api-key to a valid key"
    return text

