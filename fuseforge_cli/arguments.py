"""Parse the argument values the CLI's commands share (`optimize`, `validate`, `submit`, `apikey`,
`project`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from optimizer.optimize import PassSelection

__all__ = [
    "DEFAULT_SAMPLES", "add_output_options", "input_range", "input_shape", "name_argument",
    "pass_selection",
]

# `validate --samples`' default: its help text and the command read it here.
DEFAULT_SAMPLES = 8


def input_shape(text: str) -> tuple[str, list[int]]:
    """`--input-shape NAME=D1,D2,...` as (name, dims).

    Raises:
        argparse.ArgumentTypeError: `text` is not NAME=D1,D2,... with integer dims.
    """
    name, sep, dims = text.partition("=")
    try:
        if not sep or not name:
            raise ValueError
        return name, [int(d) for d in dims.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--input-shape {text!r}: expected NAME=D1,D2,... e.g. input=1,3,224,224"
        ) from None


def input_range(text: str) -> tuple[str, tuple[float, float]]:
    """`--input-range NAME=LOW,HIGH` as (name, (low, high)): LOW included, HIGH excluded.

    Raises:
        argparse.ArgumentTypeError: `text` is not NAME=LOW,HIGH with numbers.
    """
    name, sep, bounds = text.partition("=")
    try:
        low, high = bounds.split(",")
        if not sep or not name:
            raise ValueError
        return name, (_number(low), _number(high))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--input-range {text!r}: expected NAME=LOW,HIGH (LOW included, HIGH excluded), "
            "e.g. input_ids=0,30522") from None


def _number(text: str) -> float:
    # Whole numbers stay ints so integer inputs take them as exact bounds.
    try:
        return int(text)
    except ValueError:
        return float(text)


def pass_selection(text: str) -> PassSelection:
    """`--passes all | none | NAME,NAME,...`; unknown names are refused by `select_passes`."""
    return text if text in ("all", "none") else [p for p in text.split(",") if p]


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """--json and --debug, which `optimize` and `validate` share (fuseforge_cli/failures.py)."""
    parser.add_argument("--json", action="store_true",
                        help="print the result as one JSON object on stdout (errors too)")
    parser.add_argument("--debug", action="store_true",
                        help="show tracebacks and ONNX Runtime's own log lines on failure")


def name_argument(text: str) -> str:
    """A name (of a project, of a key) from the command line: 1 to 255 characters, trimmed."""
    text = text.strip()
    if not text or len(text) > 255:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: give 1 to 255 characters")
    return text
