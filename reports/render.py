"""jinja2 rendering: one environment, page data embedded as inert JSON, pages written atomically."""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
from importlib import resources
from pathlib import Path

import jinja2

from millrace import __version__
from millrace.artifacts import atomic_write_text
from reports.numbers import FILTERS

TEMPLATES = resources.files("reports") / "templates"


@functools.cache
def static_text(name: str) -> str:
    """A CSS or JS file from templates/, inlined into pages (no request leaves the page)."""
    return (TEMPLATES / name).read_text(encoding="utf-8")


@functools.cache
def uplot_js() -> str:
    """The vendored uPlot (MIT) with its licence as a comment: it travels inside every page that charts with it."""
    licence = static_text("vendor/uplot/LICENSE").replace("*/", "* /")
    return f"/*\n{licence}*/\n" + static_text("vendor/uplot/uPlot.iife.min.js")


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("reports", "templates"),
        autoescape=True,  # every value is HTML-escaped unless marked safe: sample documents hold markup
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(FILTERS)
    return env


def _clean(value: object) -> object:
    """NaN and infinities become null: JSON has no spelling for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def embed_json(payload: object) -> str:
    """JSON for a `<script type="application/json">` block: `<`, `>` and `&` escaped so no text ends it."""
    text = json.dumps(_clean(payload), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_page(template: str, out: Path, root: str, **context: object) -> Path:
    """Render `template` to `out`; `root` is the relative path from the page back to the site root."""
    html = (
        environment()
        .get_template(template)
        .render(
            css=static_text("style.css"),
            charts_js=static_text("charts.js"),
            uplot_js=uplot_js(),
            uplot_css=static_text("vendor/uplot/uPlot.min.css"),
            timeseries_js=static_text("timeseries.js"),
            root=root,
            version=__version__,
            built_at=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            **context,
        )
    )
    atomic_write_text(out, html)
    return out
