"""The dashboard's charts: the SVG primitives in core/svg_charts.py, which the worker also uses
to store a job's plots as artifacts (re-exported so pages and tests keep one import)."""

from core.svg_charts import (
    NO_DATA,
    Segment,
    Series,
    bar_chart,
    format_number,
    grouped_bar_chart,
    histogram,
    line_chart,
    nice_max,
    stage_timeline,
)

__all__ = [
    "NO_DATA",
    "Segment",
    "Series",
    "bar_chart",
    "format_number",
    "grouped_bar_chart",
    "histogram",
    "line_chart",
    "nice_max",
    "stage_timeline",
]
