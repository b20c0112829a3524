"""The SVG charts: one bar per value (per series), bars scaled to the largest value on a round
axis, hostile labels escaped, and "No data" instead of empty axes."""

import math

import pytest
from markupsafe import Markup

from core.svg_charts import (
    NO_DATA,
    Segment,
    Series,
    bar_chart,
    format_number,
    grouped_bar_chart,
    histogram,
    nice_max,
    stage_timeline,
)
from tests.dashboard.html_tree import Element, parse

HOSTILE = '<script>alert("x")</script>" onload="alert(1)'


def svg(markup: Markup) -> Element:
    [chart] = parse(str(markup)).find_all("svg")
    return chart


def bars(markup: Markup) -> list[Element]:
    return svg(markup).find_all("rect", class_="bar")


def test_grouped_chart_has_one_bar_per_category_and_series_and_a_legend() -> None:
    chart = grouped_bar_chart("op-histogram", "Ops", ["Conv", "Relu", "Add"],
                              [Series("before", [2, 2, 1]), Series("after", [0, 0, 1])])
    tree = svg(chart)

    assert tree.attrs["data-chart"] == "op-histogram" and tree.attrs["role"] == "img"
    assert tree.classes == {"chart"}
    assert "Ops" in tree.attrs["aria-label"]
    assert tree.children[0].tag == "title" and tree.children[0].text == "Ops"
    found = tree.find_all("rect", class_="bar")
    assert [(b.attrs["data-series"], b.attrs["data-label"], float(b.attrs["data-value"]))
            for b in found] == [("before", "Conv", 2), ("after", "Conv", 0),
                                ("before", "Relu", 2), ("after", "Relu", 0),
                                ("before", "Add", 1), ("after", "Add", 1)]
    legend = tree.one("g", class_="legend").text
    assert "before" in legend and "after" in legend
    assert "after: 0" in tree.text  # the value is written, not only drawn


def test_series_differ_in_fill_pattern_not_only_colour() -> None:
    found = bars(grouped_bar_chart("c", "t", ["a"], [Series("x", [1]), Series("y", [1])]))
    assert found[0].attrs["fill"].startswith("#")
    assert found[1].attrs["fill"] == "url(#c-hatch)"


def test_a_missing_value_draws_no_bar_but_says_so() -> None:
    chart = grouped_bar_chart("c", "t", ["a", "b"], [Series("x", [1.0, None])])
    assert len(bars(chart)) == 1
    assert "x: –" in svg(chart).text


def test_bars_scale_with_their_values_on_a_round_axis() -> None:
    tree = svg(bar_chart("c", "t", [("small", 1.5), ("large", 7.3), ("none", 0.0)]))
    widths = [float(b.attrs["width"]) for b in tree.find_all("rect", class_="bar")]
    axis = tree.one("line", class_="axis")
    axis_length = float(axis.attrs["x2"]) - float(axis.attrs["x1"])

    assert widths[2] == 0
    assert widths[0] / widths[1] == pytest.approx(1.5 / 7.3, rel=1e-2)
    # The axis ends at 10, so the largest bar fills 73 % of it, and its end is labelled 10.
    assert widths[1] == pytest.approx(0.73 * axis_length, abs=0.2)
    assert [t.text for t in tree.find_all("text")][-1] == "10"


def test_vertical_bars_grow_upwards_in_proportion() -> None:
    found = bars(bar_chart("ablation", "t", [("none", 0.25), ("all", 0.125)], vertical=True))
    heights = [float(b.attrs["height"]) for b in found]
    bottoms = {round(float(b.attrs["y"]) + float(b.attrs["height"]), 1) for b in found}

    assert len(found) == 2
    assert heights[0] == pytest.approx(2 * heights[1])
    assert len(bottoms) == 1  # one baseline


@pytest.mark.parametrize("label", [HOSTILE, "a&b <i>", "</svg><img src=x onerror=alert(1)>"])
def test_hostile_labels_are_text_never_markup(label: str) -> None:
    charts = [
        grouped_bar_chart(label, label, [label], [Series(label, [1]), Series("b", [2])]),
        bar_chart("c", label, [(label, 1.0)], vertical=True),
        stage_timeline("s", label, [Segment(label, 0, 1, note=label)]),
    ]
    for chart in charts:
        tree = parse(str(chart))
        assert not tree.find_all("script") and not tree.find_all("img")
        assert len(tree.find_all("svg")) == 1
        assert all(not name.startswith("on") for e in tree.iter() for name in e.attrs)
        assert label in tree.text or any(label in e.attrs.values() for e in tree.iter())


@pytest.mark.parametrize("chart", [
    lambda: grouped_bar_chart("c", "Ops", [], []),
    lambda: grouped_bar_chart("c", "Ops", ["Conv"], [Series("a", [0]), Series("b", [0])]),
    lambda: bar_chart("c", "Ops", [], vertical=True),
    lambda: bar_chart("c", "Ops", [("a", None), ("b", math.nan)]),
    lambda: histogram("c", "Ops", []),
    lambda: stage_timeline("c", "Ops", []),
    lambda: stage_timeline("c", "Ops", [Segment("load", 0, 0)]),
])
def test_nothing_to_draw_says_no_data(chart) -> None:  # type: ignore[no-untyped-def]
    tree = svg(chart())
    assert tree.attrs["data-chart"] == "c" and tree.attrs["role"] == "img"
    assert not tree.find_all("rect", class_="bar")
    assert tree.one("text", class_="no-data").text == NO_DATA
    assert NO_DATA in tree.attrs["aria-label"]


def test_negative_and_non_finite_values_are_not_drawn_as_lengths() -> None:
    found = bars(bar_chart("c", "t", [("neg", -3.0), ("inf", math.inf), ("ok", 2.0)]))
    assert [(b.attrs["data-label"], float(b.attrs["width"]) > 0) for b in found] == [
        ("neg", False), ("ok", True)]


def test_histogram_counts_every_value_once_in_equal_bins() -> None:
    values = [0.1, 0.2, 0.2, 0.3, 0.9, 1.0, 1.0, 5.0]
    found = bars(histogram("latency-hist", "Latency", values, bins=4, unit="ms"))

    assert len(found) == 4
    assert [float(b.attrs["data-value"]) for b in found] == [7, 0, 0, 1]
    assert found[0].attrs["data-label"].endswith("ms")


def test_histogram_of_equal_values_is_one_bar() -> None:
    assert [float(b.attrs["data-value"]) for b in bars(histogram("h", "t", [2.0] * 5))] == [5]


def test_timeline_places_each_stage_at_its_start_with_its_duration() -> None:
    chart = stage_timeline("stages", "Stages", [
        Segment("queued", 0, 2), Segment("load", 2, 1), Segment("benchmark", 3, 5, "in progress")])
    found = bars(chart)
    xs = [float(b.attrs["x"]) for b in found]
    widths = [float(b.attrs["width"]) for b in found]

    assert [b.attrs["data-label"] for b in found] == ["queued", "load", "benchmark"]
    assert xs[1] - xs[0] == pytest.approx(widths[0], abs=0.2)
    assert widths[2] == pytest.approx(5 * widths[1], abs=0.2)
    assert "5.0 s (in progress)" in svg(chart).text
    assert found[0].attrs["fill"] != found[1].attrs["fill"]  # waiting is not work


@pytest.mark.parametrize(("value", "axis_end"), [
    (0.0, 1.0), (7.3, 10.0), (0.0231, 0.025), (200.0, 200.0), (201.0, 250.0), (1.0, 1.0)])
def test_axis_ends_at_a_round_value_at_or_above_the_largest(value: float, axis_end: float) -> None:
    assert nice_max(value) == pytest.approx(axis_end)


@pytest.mark.parametrize(("value", "unit", "text"), [
    (0.13461, "ms", "0.135 ms"), (14309.03, "/s", "14,309 /s"), (2.0, "", "2"),
    (1.5, "", "1.5"), (37.58, "", "37.6"), (4.77e-07, "", "4.77e-07"), (math.nan, "", "n/a")])
def test_numbers_read_with_three_significant_digits(value: float, unit: str, text: str) -> None:
    assert format_number(value, unit) == text
