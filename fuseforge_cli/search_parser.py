"""The options of `fuseforge submit --search`, which make the job a search job (JobConfig.search
in core/job_config.py): their choices come from the registries and enums the server checks
them against, loaded when an option is used (fuseforge_cli/deferred_choices.py)."""

from __future__ import annotations

import argparse
import typing
from collections.abc import Iterable

from fuseforge_cli.deferred_choices import CommaSeparated, DeferredChoices
from optimizer.registries.backends import BACKENDS
from optimizer.registries.precisions import PRECISIONS

__all__ = ["SEARCH_OPTIONS", "add_search_options"]

# A search field and the option that sets it; the option's value is on args as
# `search_<field>`, None when not given (the server's default then holds).
SEARCH_OPTIONS = {"strategy": "--strategy", "latency_budget_ms": "--latency-budget-ms",
                  "time_budget_s": "--time-budget-s", "precisions": "--search-precisions",
                  "pass_sets": "--no-pass-sets", "ort_levels": "--ort-levels",
                  "threads": "--search-threads", "backends": "--search-backends"}


_SEARCH_HELP = """\
Build and race every candidate the server allows (pass sets, precisions, int8 forms,
ONNX Runtime levels) and ship the winner; with --wait the summary has the candidates'
table and the recipe that rebuilds the winner. A search chooses the precision and the
passes itself: the server refuses a search job that also sets them (--precision, or a
--config's precision or passes)."""


def _strategies() -> Iterable[object]:
    from optimizer.search.strategy import Strategy

    return Strategy


def _ort_levels() -> Iterable[object]:
    from optimizer.registries.ort_levels import OrtLevel

    return typing.get_args(OrtLevel)


def _thread_counts(value: str) -> list[int]:
    """`--search-threads 1,2,4` as [1, 2, 4]."""
    try:
        counts = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(
            f"{value!r}: give thread counts of 1 or more, comma-separated (e.g. 1,2,4)")
    return counts


def add_search_options(parser: argparse.ArgumentParser) -> None:
    """Add --search and the options that shape a search job (each needs --search, or a
    --config with a "search" object: fuseforge_cli/job_config_file.py says so)."""
    # Line breaks of our own: submit's help is RawDescriptionHelpFormatter, which keeps them.
    group = parser.add_argument_group("search jobs", _SEARCH_HELP)
    group.add_argument("--search", action="store_true", help="make the job a search job")
    group.add_argument("--strategy", dest="search_strategy", metavar="STRATEGY",
                       choices=DeferredChoices(_strategies),
                       help="how the winner is chosen: %(choices)s (unset: the server's "
                       "default)")
    group.add_argument("--latency-budget-ms", dest="search_latency_budget_ms", type=float,
                       metavar="MS", help="with --strategy min_latency_under_budget: the p99 a "
                       "candidate must stay within")
    group.add_argument("--time-budget-s", dest="search_time_budget_s", type=float,
                       metavar="SECONDS", help="the most the search may take (unset: the "
                       "server's default)")
    group.add_argument("--search-precisions", dest="search_precisions", action=CommaSeparated,
                       allowed=list(PRECISIONS), metavar="P,P,...",
                       help=f"the precisions to try, of {', '.join(PRECISIONS)} (default: "
                       "every one the backend builds)")
    group.add_argument("--no-pass-sets", dest="search_pass_sets", action="store_const",
                       const=False, help="try only the full pass set, not fp32 with no passes "
                       "and with each fusion family switched off")
    group.add_argument("--ort-levels", dest="search_ort_levels", action=CommaSeparated,
                       allowed=DeferredChoices(_ort_levels), metavar="LEVEL,...",
                       help="backend onnxruntime: also try fp32 at these ONNX Runtime levels, "
                       "of %(allowed)s (unset: its default level only)")
    group.add_argument("--search-threads", dest="search_threads", type=_thread_counts,
                       metavar="N,...", help="backend onnxruntime: also try each precision "
                       "at these intra-op thread counts (unset: ONNX Runtime's default only)")
    group.add_argument("--search-backends", dest="search_backends", action=CommaSeparated,
                       allowed=list(BACKENDS), metavar="B,B,...",
                       help=f"the backends to race, of {', '.join(BACKENDS)}, the job's "
                       "--backend among them (it decides the workers, which must build every "
                       "one: a tensorrt search may add onnxruntime; unset: --backend only)")
