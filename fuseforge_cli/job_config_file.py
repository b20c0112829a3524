"""Read `fuseforge submit --config job.json` and lay the command line's options over it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fuseforge_cli.failures import EXIT_USAGE, CliFailure, readable_file
from fuseforge_cli.search_parser import SEARCH_OPTIONS

__all__ = ["job_body", "unknown_fields"]


def job_body(args: argparse.Namespace) -> dict[str, Any]:
    """The job options: --config's object, then --backend, --precision, --input-shape,
    --input-range and the search options over it (an --input-shape or --input-range replaces
    that input's entry only, a search option that search field only).

    Raises:
        CliFailure: (exit 3) the file is missing, not JSON, not an object, or holds model_id;
            a search option is given without --search (or a config's "search" object).
    """
    body = _read(args.config) if args.config is not None else {}
    if args.backend is not None:
        body["backend"] = args.backend
    if args.precision is not None:
        body["precision"] = args.precision
    if args.input_shape:
        shapes = body.get("input_shapes") or {}
        if not isinstance(shapes, dict):
            raise CliFailure("InvalidConfig", f"{args.config}: input_shapes must be an object "
                             'like {"input": [1, 3, 224, 224]}', EXIT_USAGE)
        body["input_shapes"] = {**shapes, **dict(args.input_shape)}
    if getattr(args, "input_range", None):
        ranges = body.get("input_ranges") or {}
        if not isinstance(ranges, dict):
            raise CliFailure("InvalidConfig", f"{args.config}: input_ranges must be an object "
                             'like {"input_ids": [0, 30522]}', EXIT_USAGE)
        body["input_ranges"] = {**ranges, **{name: list(bounds)
                                            for name, bounds in args.input_range}}
    quantization = {key: value for key, value in (
        ("mode", getattr(args, "quantization_mode", None)),
        ("method", getattr(args, "calibration_method", None))) if value is not None}
    if quantization:
        body["quantization"] = {**(body.get("quantization") or {}), **quantization}
    _lay_search_over(body, args)
    return body


def _lay_search_over(body: dict[str, Any], args: argparse.Namespace) -> None:
    """--search and its options into body["search"]."""
    given = {field: getattr(args, f"search_{field}") for field in SEARCH_OPTIONS
             if getattr(args, f"search_{field}", None) is not None}
    configured = body.get("search")
    if configured is not None and not isinstance(configured, dict):
        raise CliFailure("InvalidConfig", f"{args.config}: search must be an object like "
                         '{"strategy": "min_latency"}', EXIT_USAGE)
    if not getattr(args, "search", False) and configured is None:
        if given:
            flags = " and ".join(SEARCH_OPTIONS[field] for field in given)
            needs, they = ("needs", "it shapes") if len(given) == 1 else ("need", "they shape")
            raise CliFailure("UsageError", f"{flags} {needs} --search: {they} a search job. "
                             f"Add --search, or drop {flags}.", EXIT_USAGE)
        return
    body["search"] = {**(configured or {}), **given}


def unknown_fields(body: dict[str, Any], accepted: set[str]) -> list[str]:
    """The top-level fields of `body` the server's job schema does not have."""
    return sorted(set(body) - accepted)


def _read(path: Path) -> dict[str, Any]:
    text = readable_file(path, "config").read_text(encoding="utf-8", errors="replace")
    try:
        body = json.loads(text)
    except json.JSONDecodeError as err:
        raise CliFailure("InvalidConfig", f"{path} is not valid JSON: {err.msg} at line "
                         f"{err.lineno} column {err.colno}", EXIT_USAGE) from err
    if not isinstance(body, dict):
        raise CliFailure("InvalidConfig", f"{path} holds a JSON {type(body).__name__}; a job "
                         'config is an object like {"backend": "onnxruntime", "precision": '
                         '"fp16"}', EXIT_USAGE)
    if "model_id" in body:
        raise CliFailure("InvalidConfig", f"{path} sets model_id; submit uploads the model and "
                         "sets it. Remove model_id from the file.", EXIT_USAGE)
    return body
