"""Several runs on one page: `SITE/compare/<A>--<B>.../index.html` (`millrace report build --run A --run B`).

Training loss and held-out macro loss and bits per byte of every run overlaid (by tokens, so runs of
different batch sizes line up), and a table of each run's latest and best evaluation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reports.run_observations import read_eval
from reports.render import embed_json, render_page, static_text
from reports.training import Buckets, RunView


def compare_name(views: list[RunView]) -> str:
    return "--".join(view.name for view in views)


def _best(steps: list[int], values: list[float | None]) -> dict[str, Any]:
    finite = [(v, s) for v, s in zip(values, steps) if v is not None]
    if not finite:
        return {"value": None, "step": None}
    value, step = min(finite)
    return {"value": value, "step": step}


def run_series(view: RunView) -> dict[str, Any]:
    buckets = Buckets(view.records)
    evals = read_eval(view.run_dir) if view.run_dir is not None else {"steps": [], "tokens": [], "loss": {}, "bpb": {}}
    summary = {}
    for metric in ("loss", "bpb"):
        for average in ("macro", "micro"):
            values = ((evals.get(metric) or {}).get("average") or {}).get(average, [])
            summary[f"{metric}_{average}"] = {"latest": values[-1] if values else None,
                                              **_best(evals["steps"], values)}
    return {
        "name": view.name, "status": view.status, "mixture": view.run.get("mixture"),
        "revision": view.run.get("revision"), "href": f"../../runs/{view.name}/index.html",
        "tokens": [r.get("tokens") for r in buckets.points],
        "loss": buckets.series("loss", lambda r: r.get("loss")),
        "eval": {"tokens": evals["tokens"], "steps": evals["steps"],
                 "loss": ((evals.get("loss") or {}).get("average") or {}).get("macro", []),
                 "bpb": ((evals.get("bpb") or {}).get("average") or {}).get("macro", [])},
        "summary": summary, "last_step": view.last.get("step"),
    }


def write_compare_page(views: list[RunView], site: Path) -> Path:
    out = site / "compare" / compare_name(views) / "index.html"
    data = {"runs": [run_series(view) for view in views]}
    return render_page("compare.html.j2", out, root="../../", names=[v.name for v in views],
                       page_json=embed_json(data), page_js=static_text("compare.js"))
