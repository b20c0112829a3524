"""What `fuseforge jobs` prints of a job: its one-sentence headline, its row in the jobs table,
and the lines of `jobs show`.

A finished job's `outcome` (what was asked, what shipped, the speed-up with its interval and
the server's verdict, the accuracy verdict, why shipped differs from asked, and the headline
that says all of it in one sentence) is printed as the server words it. A server older than
`outcome` gets the same facts built from the fields it has (speedup, speedup_verdict, the
config's precision, the int8 report's `shipped`), so these lines read the same against both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fuseforge_client import Job

__all__ = ["DASHBOARD_JOB_PATH", "asked_precision", "headline", "job_table", "shipped",
           "shipped_precision", "show_lines"]

DASHBOARD_JOB_PATH = "/ui/jobs/{id}"  # the job's page on the server's dashboard
_ID_CHARS = 8  # of a job id in the table: what `jobs show` and the others take as a prefix
_NAME_CHARS = 28
_HEADLINE_CHARS = 90  # a row stays one terminal line; `jobs show` prints it whole


def _outcome(job: Job) -> Mapping[str, Any]:
    outcome = job.data.get("outcome")
    return outcome if isinstance(outcome, Mapping) else {}


def shipped(job: Job) -> str:
    """What the job shipped, e.g. "onnxruntime fp32 engine" or "the original"; for an
    unfinished job, what it was asked to build ("onnxruntime int8 engine")."""
    label = (_outcome(job).get("shipped") or {}).get("label")
    if label:
        return str(label)
    config = job.data.get("config") or {}
    backend = config.get("backend") or job.data.get("backend") or "?"
    return f"{backend} {shipped_precision(job) or '?'} engine"


def shipped_precision(job: Job) -> str | None:
    """The precision of what the job shipped: the outcome's; before `outcome`, an int8 job's
    report's (fp32 ships when int8 does not pay), a search's winner's, else the config's."""
    outcome = _outcome(job).get("shipped") or {}
    if outcome.get("precision"):
        return str(outcome["precision"])
    quantization = (job.data.get("accuracy_report") or {}).get("quantization") or {}
    if quantization.get("shipped"):
        return str(quantization["shipped"])
    recipe = (job.data.get("search_report") or {}).get("recipe") or {}
    if recipe.get("precision"):
        return str(recipe["precision"])
    precision = (job.data.get("config") or {}).get("precision") or job.data.get("precision")
    return None if precision is None else str(precision)


def asked_precision(job: Job) -> str | None:
    asked = _outcome(job).get("asked") or {}
    precision = (asked.get("precision") or (job.data.get("config") or {}).get("precision")
                 or job.data.get("precision"))
    return None if precision is None else str(precision)


def _asked(job: Job) -> str:
    asked = _outcome(job).get("asked") or {}
    config = job.data.get("config") or {}
    backend = asked.get("backend") or config.get("backend") or job.data.get("backend") or "?"
    precision = asked_precision(job) or "?"
    mode = asked.get("mode") or (config.get("quantization") or {}).get("mode")
    search = " (search)" if asked.get("search") or config.get("search") else ""
    return f"{backend} {precision}{f' {mode}' if mode and precision == 'int8' else ''}{search}"


def speedup(job: Job) -> str | None:
    """"1.04x (0.92-1.09): no measurable difference", or None before the benchmark."""
    figures = _outcome(job).get("speedup") or {}
    value = figures.get("value", job.data.get("speedup"))
    if value is None:
        value = job.speedup
    if value is None:
        return None
    low = figures.get("ci_low", job.data.get("speedup_ci_low"))
    high = figures.get("ci_high", job.data.get("speedup_ci_high"))
    verdict = figures.get("verdict") or job.data.get("speedup_verdict")
    interval = f" ({low:.2f}-{high:.2f})" if low is not None and high is not None else ""
    return f"{float(value):.2f}x{interval}{f': {verdict}' if verdict else ''}"


def accuracy(job: Job) -> str | None:
    """"passed", "failed: <worst metric's text>", or None before validation."""
    judged = _outcome(job).get("accuracy")
    if isinstance(judged, Mapping):
        worst = judged.get("worst") or {}
        text = worst.get("text") or (
            f"{worst['output']} {worst['metric']} {worst['value']:.6g} (limit "
            f"{worst['limit']:.6g})" if worst.get("metric") and worst.get("value") is not None
            and worst.get("limit") is not None else None)
        return f"{judged.get('verdict')}{f' (worst: {text})' if text else ''}"
    passed = job.data.get("validation_passed")
    if passed is None:
        passed = job.validation_passed
    return None if passed is None else ("passed" if passed else "failed")


def headline(job: Job) -> str:
    """The job's one-sentence outcome: the server's `outcome.headline` once it has finished;
    built from the job's other fields on a server without it; its status while it runs."""
    text = _outcome(job).get("headline")
    if text:
        return str(text)
    if job.status == "queued":
        return f"queued{': ' + job.data['status_detail'] if job.data.get('status_detail') else ''}"
    if job.status == "running":
        return f"running: stage {job.stage or '?'} ({job.progress:.0%})"
    if job.status == "cancelled":
        return "cancelled"
    if job.status == "failed":
        return f"failed: {job.error_code or 'error'}: {job.error_message or 'no message'}"
    asked = asked_precision(job)
    differs = f" ({asked} asked)" if asked and asked != shipped_precision(job) else ""
    return (f"Shipped the {shipped(job)}{differs}: {_speed_phrase(job)}, accuracy "
            f"{accuracy(job) or 'not judged'}.")


def _speed_phrase(job: Job) -> str:
    """The speed-up as the server judged it, e.g. "no measurable difference in speed (1.04x,
    0.92-1.09)" or "1.50x faster (1.41-1.58)"."""
    value = job.data.get("speedup")
    if value is None:
        value = job.speedup
    if value is None:
        return "not benchmarked"
    low, high = job.data.get("speedup_ci_low"), job.data.get("speedup_ci_high")
    interval = f"{low:.2f}-{high:.2f}" if low is not None and high is not None else None
    verdict = job.data.get("speedup_verdict")
    if verdict == "faster":
        return f"{value:.2f}x faster{f' ({interval})' if interval else ''}"
    if verdict == "slower":
        return f"slower: {value:.2f}x the original's speed{f' ({interval})' if interval else ''}"
    if verdict:
        return f"{verdict} in speed ({value:.2f}x{f', {interval}' if interval else ''})"
    return f"{value:.2f}x the original's speed"


def job_table(jobs: tuple[Job, ...] | list[Job]) -> list[str]:
    """The jobs as a table: id prefix, model, status, what shipped (asked while unfinished),
    the headline (cut to one line)."""
    rows = [("ID", "MODEL", "STATUS", "SHIPPED", "HEADLINE")]
    for job in jobs:
        name = str(job.data.get("model_name") or job.model_id[:_ID_CHARS])
        text = headline(job)
        rows.append((job.id[:_ID_CHARS], _cut(name, _NAME_CHARS), job.status,
                     shipped(job) if job.status == "succeeded" else "-",
                     _cut(text, _HEADLINE_CHARS)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return ["  ".join([*(cell.ljust(width) for cell, width in zip(row[:4], widths,
                                                                    strict=True)), row[4]])
            .rstrip() for row in rows]


def show_lines(job: Job, *, base_url: str) -> list[str]:
    """`fuseforge jobs show`: the headline first, then asked vs shipped, speed-up, accuracy,
    why, the error, the artifacts and the job's page on the dashboard."""
    config = job.data.get("config") or {}
    outcome = _outcome(job)
    lines = [f"job {job.id} ({job.data.get('model_name') or 'model ' + job.model_id}): "
             f"{job.status}", f"  {headline(job)}",
             f"  asked:    {_asked(job)}"]
    if job.status == "succeeded":
        lines.append(f"  shipped:  {shipped(job)}")
    why = outcome.get("why") or ((job.data.get("accuracy_report") or {}).get("quantization")
                                 or {}).get("why")
    if why:
        lines.append(f"  why:      {why}")
    speed = speedup(job)
    if speed:
        lines.append(f"  speed-up: {speed}")
    judged = accuracy(job)
    if judged:
        lines.append(f"  accuracy: {judged}")
    if job.error_code or job.error_message:
        lines.append(f"  error:    {job.error_code}: {job.error_message}")
    if job.regression is not None:
        lines.append(f"  regression: {job.regression.get('detail')}")
    if config.get("input_shapes"):
        lines.append(f"  inputs:   {config['input_shapes']}")
    for artifact in job.artifacts:
        lines.append(f"  artifact: {artifact.name} ({artifact.kind}, {_size(artifact.size_bytes)})")
    lines.append(f"  page:     {base_url}{DASHBOARD_JOB_PATH.format(id=job.id)}")
    return lines


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _size(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
