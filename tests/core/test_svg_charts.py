"""Charts as stored files: a line chart's points carry their numbers, a search's scatter has a
point per raced candidate with the Pareto front marked, and a standalone SVG document parses as
XML with its charts inside and hostile labels escaped."""

import re
import xml.etree.ElementTree as ET
from typing import Any

from markupsafe import Markup

from core.svg_charts import (
    NO_DATA,
    Series,
    grouped_bar_chart,
    line_chart,
    search_scatter,
    standalone_svg,
)

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert("x")</script>'


def test_line_chart_draws_one_point_per_value_and_skips_none() -> None:
    chart = line_chart("sweep", "Latency", [1, 4, 16],
                       [Series("original", [1.0, 3.0, 11.0]), Series("engine", [0.5, None, 6.0])],
                       unit="ms", x_label="batch size")
    root = ET.fromstring(str(chart))
    points = root.findall(f".//{SVG}circle[@class='point']")

    assert [(p.get("data-series"), p.get("data-x"), p.get("data-value")) for p in points] == [
        ("original", "1", "1.0"), ("original", "4", "3.0"), ("original", "16", "11.0"),
        ("engine", "1", "0.5"), ("engine", "16", "6.0")]


def test_line_chart_without_values_says_no_data() -> None:
    assert NO_DATA in line_chart("sweep", "Latency", [1, 2], [Series("engine", [None, None])])


def test_standalone_svg_is_one_xml_document_with_labels_escaped() -> None:
    bars = grouped_bar_chart("p", "Percentiles", ["p50"], [Series(HOSTILE, [1.0])])
    document = standalone_svg(HOSTILE, [bars, bars])
    root = ET.fromstring(document.encode())

    assert root.tag == f"{SVG}svg" and root.findall(f".//{SVG}script") == []
    assert len(root.findall(f".//{SVG}rect[@class='bar']")) == 2
    assert int(root.get("height", "0")) > 2 * 40


def _candidate(name: str, p50: float | None, cosine: float | None, *, outcome: str = "slower",
               pareto: bool = False) -> dict[str, Any]:
    """A search report row; without `p50` one the race never timed."""
    row: dict[str, Any] = {"name": name, "outcome": outcome, "pareto": pareto,
                           "reason": None if outcome == "won" else "lost"}
    if cosine is not None:
        row["accuracy"] = {"cosine": cosine}
    if p50 is not None:
        row.update(latency_ms_p50=p50, latency_ms_p50_ci=[p50 * 0.9, p50 * 1.1])
    return row


def _points(chart: Markup) -> dict[str, ET.Element]:
    root = ET.fromstring(str(chart))
    return {point.get("data-name", ""): point for point in root.iter()
            if "point" in (point.get("class") or "").split()}


def _diamond_top(point: ET.Element) -> float:
    """The y of a diamond's first vertex (its top): `d="M x y L ..."`."""
    found = re.match(r"M[\d.]+ ([\d.]+)L", point.get("d", ""))
    assert found, point.get("d")
    return float(found.group(1))


def test_search_scatter_draws_one_point_per_raced_candidate_and_marks_the_pareto_front() -> None:
    rows = [_candidate("fp32/all", 0.040, 0.99999999, outcome="won", pareto=True),
            _candidate("fp16/all", 0.030, 0.9995, pareto=True),
            _candidate("fp32/none", 0.045, 0.99999999),
            _candidate("int8-dynamic/all", None, None),  # not raced
            {"name": "int8-static", "outcome": "refused", "reason": "no dataset", "pareto": False}]
    chart = search_scatter(rows)
    points = _points(chart)

    assert sorted(points) == ["fp16/all", "fp32/all", "fp32/none"]
    assert {name for name, p in points.items() if p.tag == f"{SVG}path"} == {"fp32/all",
                                                                               "fp16/all"}
    assert points["fp32/none"].tag == f"{SVG}circle"
    assert [points[n].get("data-pareto") for n in ("fp32/all", "fp32/none")] == ["true", "false"]
    assert float(points["fp16/all"].get("data-x", "")) == 0.030
    # slower is further right, more faithful higher (a smaller y)
    assert float(points["fp32/none"].get("cx", "")) > float(points["fp32/all"].get("cx", "0"))
    assert _diamond_top(points["fp32/all"]) < _diamond_top(points["fp16/all"])
    root = ET.fromstring(str(chart))
    assert "winner: fp32/all" in list(root.itertext())
    assert "3 candidates, 2 on the Pareto front" in root.get("aria-label", "")


def test_search_scatter_of_a_race_that_timed_nothing_says_no_data() -> None:
    rows = [_candidate("fp32/all", None, 0.9999, outcome="failed")]
    assert NO_DATA in search_scatter(rows)


def test_search_scatter_escapes_candidate_names() -> None:
    chart = search_scatter([_candidate(HOSTILE, 0.05, 1.0, outcome="won")])
    root = ET.fromstring(str(chart))  # parses: the name did not break out of its attribute

    assert root.findall(f".//{SVG}script") == [] and list(_points(chart)) == [HOSTILE]
