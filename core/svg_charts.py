"""Small SVG charts, rendered on the server so a page needs no chart library or script: inline
in the dashboard's pages, and stored as a job's plot artifacts by the worker.

Every chart is `<svg class="chart" data-chart=NAME role="img" aria-label=...>` opening with a
`<title>`; each bar is a `rect.bar` carrying `data-value` (and `data-label`, `data-series`) so
tests and scripts read the numbers back (a line chart's points are `circle.point` with
`data-x` and `data-value`; a search scatter's `.point` marks carry `data-name` too). Values
are written next to their bars and series are named in a legend and on each bar, and the
second series is hatched, so colour is never the only cue. Every label is escaped: model,
node and op names come from uploaded files.

A chart with nothing to draw (no values, or all zero) says "No data" instead of drawing empty
axes. Pages still show each chart's numbers in a table for screen readers.
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from math import ceil, floor, isfinite, log10
from typing import Any

from markupsafe import Markup, escape

__all__ = [
    "NO_DATA",
    "Segment",
    "Series",
    "bar_chart",
    "format_cosine",
    "format_number",
    "grouped_bar_chart",
    "histogram",
    "line_chart",
    "nice_max",
    "search_scatter",
    "stage_timeline",
    "standalone_svg",
]

NO_DATA = "No data to chart"
WIDTH = 720
_BAR = 16  # bar thickness in a horizontal chart
_GAP = 6
_CHAR_W = 6.6  # average width of a 12 px system-ui character, for laying out labels
_MAX_LABEL = 42  # characters shown of a long label (the whole one is in the bar's <title>)
_VALUE_W = 150  # room right of the plot for a bar's value text
# Blue, orange, green, purple, grey: apart in hue and lightness for the common colour-vision
# deficiencies; each meets 3:1 against white.
PALETTE = ("#0a58ca", "#c2410c", "#146c2e", "#6f42c1", "#57606a")
_QUEUED = 4  # the grey: waiting for a worker, not work


@dataclass(frozen=True)
class Series:
    """One named row of values, aligned with a grouped chart's categories (None: no value)."""

    name: str
    values: Sequence[float | None]


@dataclass(frozen=True)
class Segment:
    """One bar of a timeline: `label` ran from `start` to `start + duration` (seconds)."""

    label: str
    start: float
    duration: float
    note: str = ""


def format_number(value: float, unit: str = "") -> str:
    """A value as a person reads it: three significant digits, thousands separated.

    >>> format_number(0.13461, "ms"), format_number(14309.03, "/s"), format_number(2)
    ('0.135 ms', '14,309 /s', '2')
    """
    if not isfinite(value):
        text = "n/a"
    elif value == int(value) and abs(value) < 1e15:
        text = f"{int(value):,}"
    elif abs(value) >= 1000:
        text = f"{value:,.0f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}" if unit else text


def format_cosine(value: float | None) -> str:
    """A cosine similarity near 1 as its distance from 1, which is what tells two apart.

    >>> format_cosine(0.9999999999999949), format_cosine(1.0), format_cosine(0.98765432)
    ('1 − 5.1e-15', '1', '0.987654')
    """
    if value is None:
        return "not finite"
    if value >= 1.0:
        return "1"
    if value >= 0.999:
        return f"1 − {1.0 - value:.2g}"
    return f"{value:.6f}"


def nice_max(value: float) -> float:
    """The axis end for `value`: the next 1, 2, 2.5 or 5 times a power of ten at or above it.

    >>> nice_max(0.0); nice_max(7.3); nice_max(0.0231); nice_max(200)
    1.0
    10.0
    0.025
    200.0
    """
    if not isfinite(value) or value <= 0:
        return 1.0
    power = 10.0 ** floor(log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= step * power * (1 + 1e-9):
            return step * power
    return 10.0 * power


def bar_chart(name: str, title: str, bars: Sequence[tuple[str, float | None]], *,
              unit: str = "", axis_label: str = "", vertical: bool = False) -> Markup:
    """One bar per (label, value), horizontal (labels left) or `vertical` (labels below)."""
    if vertical:
        return _vertical(name, title, [label for label, _ in bars],
                         [value for _, value in bars], unit=unit, axis_label=axis_label)
    return grouped_bar_chart(name, title, [label for label, _ in bars],
                             [Series("", [value for _, value in bars])],
                             unit=unit, axis_label=axis_label)


def grouped_bar_chart(name: str, title: str, categories: Sequence[str], series: Sequence[Series],
                      *, unit: str = "", axis_label: str = "") -> Markup:
    """Horizontal bars, one group per category and one bar per series in it (a zero is a bar
    of no length, None no bar); a legend names the series when there are several."""
    values = [_value(v) for s in series for v in s.values]
    if not categories or not series or not any(v for v in values if v is not None):
        return _no_data(name, title)
    named = len(series) > 1 or bool(series[0].name)
    top = 34 if named else 8
    label_w = _label_width(categories)
    plot_w = WIDTH - label_w - _VALUE_W
    group_h = len(series) * (_BAR + 2) + _GAP * 2
    plot_h = len(categories) * group_h
    height = top + plot_h + 46
    scale_max = nice_max(max(v for v in values if v is not None))
    parts = [_open(name, title, height, f"{len(categories)} categories"
                   + (f", {len(series)} series: {', '.join(s.name for s in series)}" if named else "")),
             _defs(name)]
    if named:
        parts.append(_legend(name, series, y=8))
    for index, category in enumerate(categories):
        y0 = top + index * group_h + _GAP
        parts.append(_text(label_w - 8, y0 + group_h / 2 - _GAP + 4, _short(category),
                           anchor="end", full=category))
        for number, one in enumerate(series):
            value = _value(one.values[index]) if index < len(one.values) else None
            y = y0 + number * (_BAR + 2)
            value_text = "–" if value is None else format_number(value, unit)
            if one.name:
                value_text = f"{one.name}: {value_text}"
            if value is not None:
                width = plot_w * value / scale_max
                parts.append(_rect(name, label_w, y, width, _BAR, number, value, category, one.name))
                parts.append(_text(label_w + width + 4, y + _BAR - 4, value_text))
            else:
                parts.append(_text(label_w + 4, y + _BAR - 4, value_text, muted=True))
    parts.append(_x_axis(label_w, plot_w, top + plot_h, scale_max, unit, axis_label))
    parts.append("</svg>")
    return Markup("".join(parts))


def histogram(name: str, title: str, values: Sequence[float], *, bins: int | None = None,
              unit: str = "", axis_label: str = "") -> Markup:
    """The distribution of `values`: counts in equal-width bins (about √n of them, 5 to 30
    unless `bins` says), one bar per bin, the bin's range as its label."""
    finite = sorted(v for v in (_value(v) for v in values) if v is not None)
    if not finite:
        return _no_data(name, title)
    low, high = finite[0], finite[-1]
    count = bins or min(max(ceil(len(finite) ** 0.5), 5), 30)
    if high == low:
        count = 1
    width = (high - low) / count if high > low else 1.0
    counts = [0] * count
    for value in finite:
        counts[min(int((value - low) / width), count - 1)] += 1
    labels = [f"{format_number(low + i * width)}–{format_number(low + (i + 1) * width)}"
              + (f" {unit}" if unit else "") for i in range(count)]
    return _vertical(name, title, labels, [float(c) for c in counts], unit="",
                     axis_label=axis_label or "count", gapless=True)


def stage_timeline(name: str, title: str, segments: Sequence[Segment]) -> Markup:
    """A Gantt chart: one row per segment, a bar from its start to its end on a seconds axis,
    the duration written after it."""
    total = max((s.start + max(s.duration, 0.0) for s in segments), default=0.0)
    if not segments or total <= 0:
        return _no_data(name, title)
    label_w = _label_width([s.label for s in segments])
    plot_w = WIDTH - label_w - _VALUE_W
    row = _BAR + _GAP
    top = 8
    height = top + len(segments) * row + 46
    scale_max = nice_max(total)
    parts = [_open(name, title, height, f"{len(segments)} stages over "
                   f"{format_number(total, 's')}"), _defs(name)]
    for index, segment in enumerate(segments):
        y = top + index * row
        x = label_w + plot_w * max(segment.start, 0.0) / scale_max
        width = plot_w * max(segment.duration, 0.0) / scale_max
        parts.append(_text(label_w - 8, y + _BAR - 4, _short(segment.label), anchor="end",
                           full=segment.label))
        colour = _QUEUED if segment.label == "queued" else 0
        parts.append(_rect(name, x, y, max(width, 1.0), _BAR, colour, segment.duration,
                           segment.label, "", note=segment.note, unit="s"))
        parts.append(_text(x + width + 4, y + _BAR - 4, _duration(segment.duration)
                           + (f" ({segment.note})" if segment.note else "")))
    parts.append(_x_axis(label_w, plot_w, top + len(segments) * row, scale_max, "s",
                         "seconds since the job was created"))
    parts.append("</svg>")
    return Markup("".join(parts))


def line_chart(name: str, title: str, xs: Sequence[float], series: Sequence[Series], *,
               unit: str = "", x_label: str = "", axis_label: str = "") -> Markup:
    """One line per series over the points `xs` (e.g. batch sizes), evenly spaced in order and
    labelled with their values; each value is a `circle.point` (None: no point, the line
    breaks). The second series is dashed and its points hollow, so colour is not the only cue."""
    values = [_value(v) for s in series for v in s.values]
    if not xs or not series or not any(v for v in values if v is not None):
        return _no_data(name, title)
    left, top, bottom = 64, 34, 64
    plot_w, plot_h = WIDTH - left - 24, 200
    height = top + plot_h + bottom
    scale_max = nice_max(max(v for v in values if v is not None))
    step = plot_w / max(len(xs) - 1, 1)
    base = top + plot_h
    parts = [_open(name, title, height, f"{len(xs)} points, {len(series)} series: "
                   + ", ".join(s.name for s in series)), _defs(name), _legend(name, series, y=8)]
    for tick in (0.0, 0.5, 1.0):
        y = base - plot_h * tick
        parts.append(f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" '
                     f'y2="{y:.1f}" stroke="#d0d7de"/>')
        parts.append(_text(left - 6, y + 4, format_number(scale_max * tick), anchor="end"))
    for index, x_value in enumerate(xs):
        x = left + (index * step if len(xs) > 1 else plot_w / 2)
        parts.append(_text(x, base + 16, format_number(x_value), anchor="middle"))
    for number, one in enumerate(series):
        colour = PALETTE[number % len(PALETTE)]
        dash = ' stroke-dasharray="6 4"' if number == 1 else ""
        run: list[str] = []
        points = []
        for index, raw in enumerate(one.values[:len(xs)]):
            value = _value(raw)
            x = left + (index * step if len(xs) > 1 else plot_w / 2)
            if value is None:
                if len(run) > 1:
                    parts.append(_polyline(run, colour, dash))
                run = []
                continue
            y = base - plot_h * value / scale_max
            run.append(f"{x:.1f},{y:.1f}")
            fill = "#ffffff" if number == 1 else colour
            tooltip = " · ".join(part for part in (one.name, f"{x_label or 'x'} "
                                                   f"{format_number(xs[index])}",
                                                   format_number(value, unit)) if part)
            points.append(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="4" '
                          f'fill="{fill}" stroke="{colour}" stroke-width="2" '
                          f'data-x="{xs[index]!r}" data-value="{value!r}" '
                          f'data-series="{escape(one.name)}"><title>{escape(tooltip)}</title>'
                          "</circle>")
        if len(run) > 1:
            parts.append(_polyline(run, colour, dash))
        parts.extend(points)
    parts.append(f'<line class="axis" x1="{left}" x2="{left + plot_w}" y1="{base}" y2="{base}" '
                 'stroke="#57606a"/>')
    if x_label:
        parts.append(_text(left + plot_w / 2, base + 36, x_label, anchor="middle"))
    if axis_label or unit:
        parts.append(_text(14, top + plot_h / 2, axis_label or unit, anchor="middle",
                           rotate=True))
    parts.append("</svg>")
    return Markup("".join(parts))


@dataclass(frozen=True)
class _Raced:
    """A search candidate the race timed, as the scatter places it."""

    name: str
    outcome: str
    p50: float
    low: float  # the median's 95% interval
    high: float
    cosine: float
    pareto: bool

    @property
    def faith(self) -> float:
        """-log10 of the cosine's distance from 1: higher is more faithful, 16 the most float64
        tells apart (a cosine below 0 counts as 0)."""
        return -log10(min(max(1.0 - self.cosine, _COSINE_FLOOR), 1.0))


_COSINE_FLOOR = 1e-16  # float64's resolution near 1: a cosine closer to 1 reads as 1
_SEARCH_TITLE = "Median latency against cosine similarity of each raced candidate"


def search_scatter(rows: Sequence[Mapping[str, Any]]) -> Markup:
    """A search report's raced candidates (its `rows` with a latency p50 and a cosine) as one
    point each: median latency on x, its 95% interval a line through the point, and cosine
    similarity on y as its distance from 1 on a log scale (higher: more faithful), since the
    candidates differ in the digits after 0.999. Candidates on the Pareto front are filled
    diamonds, the others hollow circles (shape, not only colour), and the winner is named
    beside its point. Each mark is a `.point` carrying `data-name`, `data-x` (ms),
    `data-value` (the cosine) and `data-pareto`."""
    raced = [found for found in (_raced(row) for row in rows) if found is not None]
    if not raced:
        return _no_data("search-pareto", _SEARCH_TITLE)
    left, top, bottom = 96, 34, 56
    plot_w, plot_h = WIDTH - left - 24, 220
    base = top + plot_h
    x_low, x_high = _padded(min(c.low for c in raced), max(c.high for c in raced))
    y_low = floor(min(c.faith for c in raced))
    decades = max(ceil(max(c.faith for c in raced)) - y_low, 1)
    step = ceil(decades / 5)  # at most six ticks, the top one a tick too
    y_high = y_low + step * ceil(decades / step)

    def x_at(value: float) -> float:
        return left + plot_w * (value - x_low) / (x_high - x_low)

    def y_at(faith: float) -> float:
        return base - plot_h * (faith - y_low) / (y_high - y_low)

    on_front = sum(c.pareto for c in raced)
    winner = next((c for c in raced if c.outcome == "won"), None)
    summary = (f"{len(raced)} candidates, {on_front} on the Pareto front"
               + (f"; winner {winner.name} at {format_number(winner.p50, 'ms')}, cosine "
                  f"{format_cosine(winner.cosine)}" if winner else ""))
    parts = [_open("search-pareto", _SEARCH_TITLE, top + plot_h + bottom, summary),
             _scatter_legend(y=8)]
    for decade in range(y_low, y_high + 1, step):
        y = y_at(decade)
        parts.append(f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" '
                     f'y2="{y:.1f}" stroke="#d0d7de"/>')
        parts.append(_text(left - 6, y + 4, _cosine_tick(decade), anchor="end"))
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = left + plot_w * tick
        parts.append(_text(x, base + 16, format_number(x_low + (x_high - x_low) * tick),
                           anchor="middle"))
    parts.append(f'<line class="axis" x1="{left}" x2="{left + plot_w}" y1="{base}" y2="{base}" '
                 'stroke="#57606a"/>')
    for candidate in sorted(raced, key=lambda c: c.outcome == "won"):  # the winner on top
        parts.append(_scatter_point(candidate, x_at, y_at(candidate.faith)))
    if winner is not None:
        x, y = x_at(winner.p50), y_at(winner.faith)
        right_half = x > left + plot_w * 0.6
        parts.append(_text(x - 10 if right_half else x + 10, max(y - 8, top + 10),
                           f"winner: {_short(winner.name)}", anchor="end" if right_half
                           else "start", full=f"winner: {winner.name}"))
    parts.append(_text(left + plot_w / 2, base + 36, "median latency (ms)", anchor="middle"))
    parts.append(_text(14, top + plot_h / 2, "cosine similarity", anchor="middle", rotate=True))
    parts.append("</svg>")
    return Markup("".join(parts))


def _raced(row: Mapping[str, Any]) -> _Raced | None:
    p50 = _number(row.get("latency_ms_p50"))
    cosine = _number((row.get("accuracy") or {}).get("cosine"))
    if p50 is None or cosine is None:
        return None  # not raced (refused, failed, not tried, out of a budget), or no cosine
    low, high = (_number(v) for v in row.get("latency_ms_p50_ci") or (None, None))
    return _Raced(str(row.get("name", "")), str(row.get("outcome", "")), p50,
                  min(p50 if low is None else low, p50), max(p50 if high is None else high, p50),
                  cosine, bool(row.get("pareto")))


def _number(value: object) -> float | None:
    """`value` as a float; None when it is missing, not a number, or not finite."""
    if isinstance(value, int | float) and isfinite(value):
        return float(value)
    return None


def _padded(low: float, high: float) -> tuple[float, float]:
    """An axis from `low` to `high` with room either side, never below zero."""
    span = high - low or max(abs(high) * 0.1, 1e-3)
    return max(low - span * 0.08, 0.0), high + span * 0.08


def _cosine_tick(decade: int) -> str:
    """The label of the cosine 1 − 10^-decade: 0, 0.9, 0.99, 0.999, then 1 − 1e-4 and on."""
    if decade <= 0:
        return "0"
    if decade <= 3:
        return f"{1.0 - 10.0 ** -decade:.{decade}f}"
    return f"1 − 1e-{decade}"


def _scatter_point(candidate: _Raced, x_at: Callable[[float], float], y: float) -> str:
    x, colour = x_at(candidate.p50), PALETTE[1] if candidate.outcome == "won" else PALETTE[0]
    tooltip = " · ".join((
        f"{candidate.name} ({candidate.outcome.replace('_', ' ')})",
        f"p50 {format_number(candidate.p50, 'ms')} (95% interval "
        f"{format_number(candidate.low)}–{format_number(candidate.high)})",
        f"cosine {format_cosine(candidate.cosine)}",
        "on the Pareto front" if candidate.pareto else "not on the Pareto front"))
    data = (f'data-name="{escape(candidate.name)}" data-outcome="{escape(candidate.outcome)}" '
            f'data-x="{candidate.p50!r}" data-value="{candidate.cosine!r}" '
            f'data-pareto="{"true" if candidate.pareto else "false"}"')
    if candidate.pareto:
        mark = (f'<path class="point pareto" d="M{x:.1f} {y - 7:.1f}L{x + 7:.1f} {y:.1f}'
                f'L{x:.1f} {y + 7:.1f}L{x - 7:.1f} {y:.1f}Z" fill="{colour}" {data}>')
        closing = "</path>"
    else:
        mark = (f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="5" fill="#ffffff" '
                f'stroke="{colour}" stroke-width="2" {data}>')
        closing = "</circle>"
    interval = (f'<line class="interval" x1="{x_at(candidate.low):.1f}" '
                f'x2="{x_at(candidate.high):.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{colour}" '
                'stroke-width="1.5"/>')
    return f"{interval}{mark}<title>{escape(tooltip)}</title>{closing}"


def _scatter_legend(*, y: float) -> str:
    blue = PALETTE[0]
    return ('<g class="legend">'
            f'<path d="M15 {y}L22 {y + 7}L15 {y + 14}L8 {y + 7}Z" fill="{blue}"/>'
            + _text(28, y + 11, "on the Pareto front")
            + f'<circle cx="160" cy="{y + 7}" r="5" fill="#ffffff" stroke="{blue}" '
              'stroke-width="2"/>'
            + _text(172, y + 11, "not on it")
            + f'<line x1="250" x2="274" y1="{y + 7}" y2="{y + 7}" stroke="{blue}" '
              'stroke-width="1.5"/>'
            + _text(280, y + 11, "95% interval of the median")
            + "</g>")


def standalone_svg(title: str, charts: Sequence[Markup]) -> str:
    """`charts` stacked top to bottom in one SVG document of its own (a file, not a page: it
    carries its own style for the text, since no stylesheet reaches it)."""
    parts, y = [], 0
    for chart in charts:
        parts.append(f'<g class="panel" transform="translate(0 {y})">{chart}</g>')
        found = _HEIGHT.search(str(chart))
        y += (int(found.group(1)) if found else 300) + 16
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {max(y, 1)}" '
            f'width="{WIDTH}" height="{max(y, 1)}"><title>{escape(title)}</title>'
            "<style>text{font:12px system-ui,sans-serif;fill:#1f2328}"
            ".muted,.no-data{fill:#57606a}</style>"
            + "".join(parts) + "</svg>\n")


_HEIGHT = re.compile(r'^<svg [^>]*? height="(\d+)"')


def _polyline(points: Sequence[str], colour: str, dash: str) -> str:
    return (f'<polyline class="line" points="{" ".join(points)}" fill="none" '
            f'stroke="{colour}" stroke-width="2"{dash}/>')


def _vertical(name: str, title: str, labels: Sequence[str], raw: Sequence[float | None], *,
              unit: str, axis_label: str, gapless: bool = False) -> Markup:
    values = [_value(v) for v in raw]
    if not labels or not any(v for v in values if v is not None):
        return _no_data(name, title)
    left, top, bottom = 64, 22, 64
    plot_w, plot_h = WIDTH - left - 16, 200
    height = top + plot_h + bottom
    scale_max = nice_max(max(v for v in values if v is not None))
    slot = plot_w / len(labels)
    bar_w = slot if gapless else min(slot * 0.7, 90)
    chars = max(int(slot / _CHAR_W) - 1, 3)
    parts = [_open(name, title, height, f"{len(labels)} bars"), _defs(name)]
    base = top + plot_h
    for tick in (0.0, 0.5, 1.0):
        y = base - plot_h * tick
        parts.append(f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" '
                     f'y2="{y:.1f}" stroke="#d0d7de"/>')
        parts.append(_text(left - 6, y + 4, format_number(scale_max * tick), anchor="end"))
    for index, (label, value) in enumerate(zip(labels, values, strict=True)):
        x = left + index * slot + (slot - bar_w) / 2
        centre = left + index * slot + slot / 2
        if value is not None:
            h = plot_h * value / scale_max
            parts.append(_rect(name, x, base - h, bar_w, h, 0, value, label, "",
                               outline=gapless))
            parts.append(_text(centre, base - h - 4, format_number(value, unit), anchor="middle"))
        else:
            parts.append(_text(centre, base - 4, "–", anchor="middle", muted=True))
        parts.append(_text(centre, base + 16, _short(label, chars), anchor="middle", full=label))
    parts.append(f'<line class="axis" x1="{left}" x2="{left + plot_w}" y1="{base}" y2="{base}" '
                 'stroke="#57606a"/>')
    if axis_label or unit:
        parts.append(_text(14, top + plot_h / 2, axis_label or unit, anchor="middle",
                           rotate=True))
    parts.append("</svg>")
    return Markup("".join(parts))


def _value(value: float | None) -> float | None:
    """A drawable value: finite and not below zero (None otherwise)."""
    if value is None or not isinstance(value, int | float) or not isfinite(value):
        return None
    return max(float(value), 0.0)


def _open(name: str, title: str, height: float, summary: str) -> str:
    label = f"{title} ({summary})"
    return (f'<svg class="chart" data-chart="{escape(name)}" role="img" '
            f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg" '
            f'viewBox="0 0 {WIDTH} {height:.0f}" width="{WIDTH}" height="{height:.0f}">'
            f"<title>{escape(title)}</title>")


def _no_data(name: str, title: str) -> Markup:
    return Markup(
        f'<svg class="chart chart-empty" data-chart="{escape(name)}" role="img" '
        f'aria-label="{escape(title)}: {NO_DATA}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {WIDTH} 40" width="{WIDTH}" height="40"><title>{escape(title)}</title>'
        f'<text class="no-data" x="8" y="24">{NO_DATA}</text></svg>')


def _defs(name: str) -> str:
    # The second series' bars are hatched, so the two differ in more than colour.
    return (f'<defs><pattern id="{escape(name)}-hatch" patternUnits="userSpaceOnUse" width="6" '
            f'height="6" patternTransform="rotate(45)"><rect width="6" height="6" '
            f'fill="{PALETTE[1]}"/><line x1="0" y1="0" x2="0" y2="6" stroke="#ffffff" '
            'stroke-width="2"/></pattern></defs>')


def _fill(name: str, number: int) -> str:
    return f"url(#{escape(name)}-hatch)" if number == 1 else PALETTE[number % len(PALETTE)]


def _rect(name: str, x: float, y: float, width: float, height: float, number: int,
          value: float, label: str, series: str, *, note: str = "", unit: str = "",
          outline: bool = False) -> str:
    tooltip = " · ".join(part for part in (series, label, format_number(value, unit), note) if part)
    stroke = ' stroke="#ffffff" stroke-width="1"' if outline else ""
    return (f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" '
            f'height="{height:.1f}" fill="{_fill(name, number)}"{stroke} '
            f'data-value="{value!r}" data-label="{escape(label)}" data-series="{escape(series)}">'
            f"<title>{escape(tooltip)}</title></rect>")


def _text(x: float, y: float, text: str, *, anchor: str = "start", full: str | None = None,
          muted: bool = False, rotate: bool = False) -> str:
    attrs = f' text-anchor="{anchor}"' if anchor != "start" else ""
    if muted:
        attrs += ' class="muted"'
    if rotate:
        attrs += f' transform="rotate(-90 {x:.1f} {y:.1f})"'
    tip = f"<title>{escape(full)}</title>" if full is not None and full != text else ""
    return f'<text x="{x:.1f}" y="{y:.1f}"{attrs}>{tip}{escape(text)}</text>'


def _legend(name: str, series: Sequence[Series], *, y: float) -> str:
    parts = ['<g class="legend">']
    x = 8.0
    for number, one in enumerate(series):
        parts.append(f'<rect class="swatch" x="{x:.1f}" y="{y}" width="14" height="14" '
                     f'fill="{_fill(name, number)}"/>')
        parts.append(_text(x + 20, y + 11, one.name))
        x += 36 + len(one.name) * _CHAR_W
    parts.append("</g>")
    return "".join(parts)


def _x_axis(left: float, width: float, y: float, scale_max: float, unit: str,
            axis_label: str) -> str:
    parts = [f'<line class="axis" x1="{left:.1f}" x2="{left + width:.1f}" y1="{y:.1f}" '
             f'y2="{y:.1f}" stroke="#57606a"/>']
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = left + width * tick
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y:.1f}" y2="{y + 4:.1f}" '
                     'stroke="#57606a"/>')
        parts.append(_text(x, y + 16, format_number(scale_max * tick), anchor="middle"))
    label = axis_label or unit
    if label:
        parts.append(_text(left + width / 2, y + 36, label, anchor="middle"))
    return "".join(parts)


def _label_width(labels: Sequence[str]) -> float:
    longest = max((len(_short(label)) for label in labels), default=4)
    return min(max(longest * _CHAR_W + 16, 60), 300)


def _short(label: str, limit: int = _MAX_LABEL) -> str:
    return label if len(label) <= limit else label[:limit - 1] + "…"


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes} min {secs} s"
