"""Charts as stored files: a line chart's points carry their numbers, and a standalone SVG
document parses as XML with its charts inside and hostile labels escaped."""

import xml.etree.ElementTree as ET

from core.svg_charts import NO_DATA, Series, grouped_bar_chart, line_chart, standalone_svg

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
