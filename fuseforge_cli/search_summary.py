"""A finished search job's outcome for the terminal: the winner and why, a line per candidate
(the job's search_report, from worker/pipeline/search_stage.py), and the recipe that pins it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from fuseforge_client import Job

__all__ = ["search_lines", "shipped_precision"]

_REASON_WIDTH = 70  # the whole reason is in the job's JSON (--json); a table line stays short
_HEADER = ("candidate", "outcome", "p50 ms [95% interval]", "speed-up", "cosine", "reason")


def search_lines(job: Job) -> list[str]:
    """The search's summary; no lines for a job that is not a search job."""
    report = job.search_report
    if report is None:
        return []
    winner, why = report.get("winner"), report.get("why")
    won = winner or ("the original" if report.get("original") else None)
    lines = [f"search ({report.get('strategy')}): {won} won: {why}" if won
             else f"search ({report.get('strategy')}): no winner: {why}", _effort(report)]
    lines += _table(report.get("rows") or [],
                    throughput=report.get("strategy") == "max_throughput")
    recipe = report.get("recipe")
    if recipe:  # last, on one line, so `| tail -1 > recipe.json` saves it
        lines += ["search: the winner's recipe, the job config that builds just it; save the "
                  "next line and pass it back to pin it: fuseforge submit MODEL --config "
                  "recipe.json", json.dumps(recipe, sort_keys=True)]
    return lines


def shipped_precision(job: Job) -> str | None:
    """The precision the job's engine was built at: a search job's winner's, else None (the
    job config's then)."""
    recipe = (job.search_report or {}).get("recipe") or {}
    precision = recipe.get("precision")
    return None if precision is None else str(precision)


def _effort(report: Mapping[str, Any]) -> str:
    rows = report.get("rows") or []
    race = report.get("race") or {}
    raced = (f"; raced {race.get('rounds')} round(s), stopped: {race.get('stopped')}"
             if race else "; nothing raced")
    resumed = report.get("resumed") or []
    again = f"; resumed after a restart ({len(resumed)} candidate(s) kept)" if resumed else ""
    return (f"search: {len(rows)} candidate(s) in {_number(report.get('elapsed_s'), '.0f')} s "
            f"of a {_number(report.get('time_budget_s'), '.0f')} s budget{raced}{again}")


def _table(rows: Sequence[Mapping[str, Any]], *, throughput: bool) -> list[str]:
    """A line per candidate; a throughput search's also says how many it served a second
    (and how many requests at once, where more than one)."""
    header = _HEADER if not throughput else (*_HEADER[:3], "served/s", *_HEADER[3:])
    cells = [header, *[_cells(row, throughput) for row in rows]]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header) - 1)]
    return ["  " + "  ".join([*(cell.ljust(w) for cell, w in zip(line, widths, strict=False)),
                              line[-1]]).rstrip() for line in cells]


def _cells(row: Mapping[str, Any], throughput: bool) -> tuple[str, ...]:
    p50, interval = row.get("latency_ms_p50"), row.get("latency_ms_p50_ci")
    timing = "-" if p50 is None else _ms(p50) + (
        f" [{_ms(interval[0])}-{_ms(interval[1])}]" if interval else "")
    speedup = row.get("speedup")
    cosine = (row.get("accuracy") or {}).get("cosine")
    served = row.get("throughput_per_s")
    at_once = f" ({row['requests']} at once)" if (row.get("requests") or 1) > 1 else ""
    rate = ("-" if served is None else f"{served:#.4g}".rstrip(".") + at_once,) \
        if throughput else ()
    return (str(row.get("name")), str(row.get("outcome")), timing, *rate,
            "-" if speedup is None else f"{speedup:.3f}x",
            "-" if cosine is None else f"{cosine:.5f}", _shortened(row.get("reason")))


def _ms(value: float) -> str:
    """Four significant digits, trailing zeros kept so a column's figures line up."""
    return f"{value:#.4g}".rstrip(".")


def _shortened(reason: object) -> str:
    text = " ".join(str(reason or "").split())  # reasons can hold a traceback's newlines
    return text if len(text) <= _REASON_WIDTH else text[:_REASON_WIDTH - 3] + "..."


def _number(value: object, spec: str) -> str:
    return "?" if not isinstance(value, int | float) else format(value, spec)
