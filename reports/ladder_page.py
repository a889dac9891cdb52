"""The page for one scaling ladder: `SITE/ladders/<ladder>/index.html`, from its ladder.json alone.

Shows the rung table, every rung's held-out curve overlaid, the fit on log-log axes with each
prediction and its interval, residuals and leave-one-out errors, and a comparison when there is one.
"""

from __future__ import annotations

from pathlib import Path

from millrace.home import Home
from millrace.names import artifact_name
from reports.render import embed_json, render_page, static_text
from trainer.records import LADDER_FILE, LadderRecord, read_ladder_file


def find_ladders(home: Home) -> list[Path]:
    return [p / LADDER_FILE for p in home.ladder_dirs(LADDER_FILE)]


def load_ladder(path: Path) -> LadderRecord:
    """ladder.json; its `ladder` name becomes the page's directory, so it is checked like `--ladder`."""
    body = read_ladder_file(path)
    artifact_name(body.ladder, "ladder", path)
    return body


def ladder_href(name: str, root: str) -> str:
    return f"{root}ladders/{name}/index.html"


def revisions_of(body: LadderRecord) -> set[str]:
    """The revisions a ladder trained (its own, compared ones) and the rung revisions built from them."""
    plan = body.plan
    trained = {r.revision for r in body.results} | {plan.revision}
    rungs = [r.name for r in plan.rungs] + ([plan.target.name] if plan.target is not None else [])
    return trained | {f"{rev}.{body.ladder}.{rung}" for rev in trained for rung in rungs}


def load_ladders(home: Home) -> list[LadderRecord]:
    return [load_ladder(path) for path in find_ladders(home)]


def ladder_links(bodies: list[LadderRecord], pairs: set[tuple[str, str]], root: str) -> list[dict[str, str]]:
    """Ladders that trained on any of these (mixture, revision) pairs: name, page, and which revisions."""
    found = []
    for body in bodies:
        hits = sorted(rev for rev in revisions_of(body) if (body.plan.mixture, rev) in pairs)
        if hits:
            own = [rev for rev in hits if rev.count(".") < 2] or hits[:1]
            found.append({"name": body.ladder, "href": ladder_href(body.ladder, root), "revisions": ", ".join(own)})
    return found


def page_data(body: LadderRecord) -> dict[str, object]:
    plan = body.plan.dump()
    return {
        "ladder": body.ladder,
        "metric": body.metric,
        "rungs": plan.get("rungs", []),
        "target": plan.get("target"),
        "results": [
            {k: v for k, v in r.dump().items() if k in ("rung", "revision", "seed", "run", "flops", "curve")}
            for r in body.results
        ],
        "fits": {
            rev: {k: fit.get(k) for k in ("params", "residuals", "predictions", "asymptote")}
            for rev, fit in body.fits.items()
        },
        "comparison": body.comparison,
    }


def final_metrics(body: LadderRecord) -> dict[str, float | None]:
    """Per run: the final held-out macro loss, for the rung table."""
    return {r.run: r.final.loss.macro if r.final is not None else None for r in body.results}


def write_ladder_page(body: LadderRecord, site: Path, store_links: list[dict[str, str]]) -> Path:
    out = site / "ladders" / body.ladder / "index.html"
    return render_page(
        "ladder.html.j2",
        out,
        root="../../",
        ladder=body,
        plan=body.plan,
        rungs=body.plan.rungs,
        target=body.plan.target,
        results=body.results,
        finals=final_metrics(body),
        fits=body.fits,
        comparison=body.comparison,
        store_links=store_links,
        page_json=embed_json(page_data(body)),
        page_js=static_text("ladder.js"),
    )
