"""The error an invalid setting raises, apart from core/settings.py so the CLI can catch it
without importing pydantic-settings (which `fuseforge --help` would pay for)."""

import sys
from collections.abc import Callable
from typing import NoReturn

__all__ = ["InvalidSettings", "exit_on_invalid_settings"]


class InvalidSettings(ValueError):
    """A setting's value is refused: one line naming each variable and what is wrong with it,
    for the entry points to print instead of pydantic's traceback."""


def exit_on_invalid_settings(main: Callable[[], int | None], program: str) -> NoReturn:
    """Run an entry point's `main`; an invalid setting ends it with one line on stderr and
    exit code 3 (the CLI's code for bad usage), not a traceback."""
    try:
        code = main()
    except InvalidSettings as err:
        print(f"{program}: InvalidSettings: {err}", file=sys.stderr)
        sys.exit(3)
    sys.exit(code or 0)
