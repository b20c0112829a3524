"""How a search picks its winner: an enum of its own, free of the search's imports (the CLI's
--help lists the strategies without loading onnx or numpy)."""

from enum import StrEnum

__all__ = ["Strategy"]


class Strategy(StrEnum):
    """`min_latency`: the lowest p50 at the job's batch; `max_throughput`: the most inferences
    a second the host serves at it, each CPU candidate running as many requests at once as the
    cores hold at its thread count (streams.py); `min_latency_under_budget`: the lowest p50 of
    the candidates whose p99 stays within `latency_budget_ms`."""

    MIN_LATENCY = "min_latency"
    MAX_THROUGHPUT = "max_throughput"
    MIN_LATENCY_UNDER_BUDGET = "min_latency_under_budget"
