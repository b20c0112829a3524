"""Jinja2 for the pages: autoescaped templates, the filters that format what the API returns,
and `render`, which gives every page the browser's CSRF token and sign-in state."""

from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from dashboard.signed_in import Browser

__all__ = ["STATIC_DIR", "render", "templates"]

STATIC_DIR = Path(__file__).parent / "static"
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 120:
        return f"{minutes} min {secs} s"
    return f"{minutes // 60} h {minutes % 60} min"


def _when(value: str | None) -> str:
    """An API timestamp, as the UTC minute a person reads (the full value stays in title=)."""
    if not value:
        return "–"
    try:
        return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return value


def _size(n: int | None) -> str:
    if n is None:
        return "–"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _speedup(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×"


templates.env.filters.update(duration=_duration, when=_when, size=_size, speedup=_speedup)


def render(request: Request, browser: Browser | None, name: str, status_code: int = 200,
           **context: Any) -> HTMLResponse:
    """The page `name` with `context`, plus what the layout needs (base.html); `browser` is
    None only on pages shown before anyone is known (errors, sign-in)."""
    return templates.TemplateResponse(
        request, name, {"browser": browser, "csrf": browser.csrf if browser else None, **context},
        status_code=status_code)
