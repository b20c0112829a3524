"""The record of one optimization: graph sizes before and after, and what each rule did."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["FusionReport", "Refusal", "RuleStats"]


@dataclass(frozen=True)
class Refusal:
    """A near-miss: the pattern matched at `node` but the rule's check refused it."""

    node: str
    reason: str


@dataclass(frozen=True)
class RuleStats:
    pass_name: str
    rule: str
    applied: int
    refusals: tuple[Refusal, ...] = ()


@dataclass(frozen=True)
class FusionReport:
    backend: str
    passes_run: tuple[str, ...]
    passes_skipped: dict[str, str]  # pass name -> why it did not run
    nodes_before: int
    nodes_after: int
    ops_before: dict[str, int]
    ops_after: dict[str, int]
    rules: tuple[RuleStats, ...]
    iterations: int  # rounds over all passes until none changed the graph
    duration_s: float
    notes: tuple[str, ...] = ()  # what was left alone and why
    excluded_rules: tuple[str, ...] = ()  # rules kept off (e.g. named by bisection as unsafe)

    def applied_rules(self) -> tuple[str, ...]:
        """Names of the rules that fired at least once, in run order."""
        return tuple(s.rule for s in self.rules if s.applied)

    def applied(self, rule_or_pass: str) -> int:
        """Times the rule (or every rule of the pass) fired."""
        return sum(s.applied for s in self.rules if rule_or_pass in (s.rule, s.pass_name))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
