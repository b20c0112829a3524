"""One row per corpus model, printed as a text table and written as JSON and Markdown."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Row", "fused_counts", "top_refusals", "write_outputs", "format_table"]

TOP_REFUSALS = 4
NOT_FUSIONS = ("cleanup",)  # passes that tidy the graph (constant folding, dead nodes)


@dataclass
class Row:
    model: str
    exporter: str
    opset: int | None
    size_mb: float | None
    source: str
    licence: str
    outcome: str  # "succeeded", or "failed: Code: message" (also upload / job refused)
    validation: str  # "passed" / "failed (outputs ...)" / "-"
    fused: str  # "LayerNorm x5, Attention x2" from the rules that fired
    ratio: float | None  # engine time / original time at ORT's default level
    ratio_source: str  # "job engine; <p50s>", "library engine (job failed); <p50s>", or why none
    refusals: list[str] = field(default_factory=list)
    target: str = ""  # "ok", "missed: ..." against the target
    seconds: float = 0.0
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)  # JSON only


def fused_counts(fusion_report: dict[str, Any] | None) -> str:
    """'FuseLayerNorm x5, FuseAttention x2' from a fusion report's rules, or '-'."""
    if not fusion_report:
        return "-"
    applied = Counter[str]()
    for rule in fusion_report.get("rules", []):
        if rule["applied"] and rule["pass_name"] not in NOT_FUSIONS:
            applied[rule["rule"]] += rule["applied"]
    return ", ".join(f"{name} x{count}" for name, count in applied.items()) or "none"


def top_refusals(fusion_report: dict[str, Any] | None, limit: int = TOP_REFUSALS) -> list[str]:
    """The most frequent refusals, one line per pass and kind of reason (quoted names stripped,
    so one reason at 12 nodes is one line), counting distinct nodes, with one full example:
    'fuse_attention x12: 'val_64' is also used by node 'node_view_4' (Reshape)'."""
    if not fusion_report:
        return []
    nodes: dict[tuple[str, str], set[str]] = {}
    example: dict[tuple[str, str], str] = {}
    for rule in fusion_report.get("rules", []):
        for refusal in rule.get("refusals", []):
            key = (rule["pass_name"], _QUOTED.sub("'…'", refusal["reason"]))
            nodes.setdefault(key, set()).add(refusal["node"])
            example.setdefault(key, f"{rule['rule']}: {refusal['reason']}")
    ranked = sorted(nodes, key=lambda key: -len(nodes[key]))[:limit]
    return [f"{key[0]} x{len(nodes[key])}: {_short(example[key], 200)}" for key in ranked]


_QUOTED = re.compile(r"'[^']*'")


_COLUMNS = ("model", "exporter", "opset", "outcome", "validation", "fused ops", "engine/orig@all",
            "target", "s")


def _cells(row: Row) -> list[str]:
    ratio = f"{row.ratio:.2f}" if row.ratio is not None else "-"
    if row.ratio is not None and not row.ratio_source.startswith("job engine"):
        ratio += " (lib)"
    return [row.model, row.exporter, str(row.opset or "-"), _short(row.outcome, 70),
            _short(row.validation, 30), _short(row.fused, 70), ratio, _short(row.target, 40),
            f"{row.seconds:.0f}"]


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def format_table(rows: list[Row]) -> str:
    """The text table, then each model's refusals and full error message below it."""
    table = [list(_COLUMNS), *(_cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(_COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
             for line in table]
    lines.append("")
    for row in rows:
        extra = [f"  outcome: {row.outcome}"] if len(row.outcome) > 70 else []
        extra += [f"  fused: {row.fused}"] if len(row.fused) > 70 else []
        extra += [f"  ratio: {row.ratio_source}"]
        extra += [f"  refused: {r}" for r in row.refusals]
        if extra:
            lines.append(f"{row.model} ({row.source}; {row.licence}):")
            lines.extend(extra)
    return "\n".join(lines)


def _markdown(rows: list[Row], header: str) -> str:
    columns = ["model", "exporter", "opset", "MB", "source (licence)", "job outcome", "validation",
               "fused ops", "engine/orig @ORT all", "target", "top refusals"]
    lines = [header, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        if r.ratio is not None:
            ratio += f" ({r.ratio_source})"
        elif r.ratio is None:
            ratio = f"- ({r.ratio_source})"
        cells = [r.model, r.exporter, str(r.opset or "-"),
                 f"{r.size_mb:.1f}" if r.size_mb is not None else "-",
                 f"{r.source} ({r.licence})", r.outcome, r.validation, r.fused, ratio, r.target,
                 "<br>".join(r.refusals) or "-"]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells)
                     + " |")
    return "\n".join(lines) + "\n"


def write_outputs(rows: list[Row], out: Path, header: str) -> tuple[Path, Path]:
    """`out` with .json and .md suffixes; returns both paths."""
    out.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out.with_suffix(".json"), out.with_suffix(".md")
    json_path.write_text(json.dumps({"header": header, "rows": [asdict(r) for r in rows]},
                                    indent=2, default=str))
    md_path.write_text(_markdown(rows, header))
    return json_path, md_path
