"""Option choices read from a module that is imported only when the option is used.

A search job's strategies come from optimizer/search/decision.py, which imports the fusion
passes (onnxscript, ~0.45 s), and its ONNX Runtime levels from core/job_config.py (pydantic as
well): importing them while the parser is built would make every `fuseforge` command, `--help`
included, that much slower. A `DeferredChoices` loads its values on the first membership test,
iteration or str(): when the option is given, or when `submit --help` lists them.

    parser.add_argument("--strategy", choices=DeferredChoices(_strategies), metavar="STRATEGY",
                        help="one of %(choices)s")

Give such an argument a `metavar`: without one argparse lists the choices while the argument
is added, which loads them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, overload

__all__ = ["CommaSeparated", "DeferredChoices"]


class DeferredChoices(Sequence[str]):
    """The strings `load()` returns, loaded once, on first use; str() is "a, b, c"."""

    def __init__(self, load: Callable[[], Iterable[object]]) -> None:
        self._load = load
        self._values: tuple[str, ...] | None = None

    def _loaded(self) -> tuple[str, ...]:
        if self._values is None:
            self._values = tuple(str(value) for value in self._load())
        return self._values

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._loaded()[index]

    def __len__(self) -> int:
        return len(self._loaded())

    def __str__(self) -> str:
        return ", ".join(self._loaded())


class CommaSeparated(argparse.Action):
    """`--option a,b` as the list ["a", "b"], each one of `allowed` (a DeferredChoices, or
    any collection of strings); help can name them with %(allowed)s. An empty list or a name
    outside `allowed` is a usage error naming the option, the value and what would work."""

    def __init__(self, option_strings: Sequence[str], dest: str, *,
                 allowed: Collection[str], **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.allowed = allowed

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        names = [name.strip() for name in str(values).split(",") if name.strip()]
        unknown = [name for name in names if name not in self.allowed]
        if not names or unknown:
            found = f"{', '.join(unknown)} is not one" if unknown else "give at least one"
            raise argparse.ArgumentError(
                self, f"{values!r}: {found} of {', '.join(self.allowed)} (comma-separated)")
        setattr(namespace, self.dest, names)
