"""Static report site: store composition pages and live training pages, from artifacts only.

No torch, no datatrove: this package reads store.json / cell.json, built mixture
manifests, run.json and metrics.jsonl, and writes HTML with jinja2.
"""

from reports.site import build_pages, build_run_page, build_site
from reports.watch import WatchEvent, WatchOptions, WatchResult, watch

__all__ = ["WatchEvent", "WatchOptions", "WatchResult", "build_pages", "build_run_page", "build_site", "watch"]
