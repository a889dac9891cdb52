"""A finished ladder's record (ladder.json), computed by the ladder's own maths from losses on a known law, with
no rung trained: the ladder page's body, and a ladder whose rungs' runs hold evaluations for `ladder fit`.
Apart from `testkit.ladders` (the ladder files), which stays light: this one loads the fit's maths."""

import json
from collections.abc import Sequence

import numpy as np

from millrace.home import Home
from trainer.ladder.compare import compare_points
from trainer.ladder.results import write_ladder
from trainer.ladder.scaling_law import Law, Point, fit_law, fit_report
from trainer.records import (
    EVAL_FILE,
    LadderPlanRecord,
    LadderRecord,
    PlannedRung,
    RungParams,
    RungResult,
    RunRecord,
    write_run,
)

PAGE_FLOPS = [1e12, 4e12, 1.6e13, 6.4e13]
PAGE_LAW = Law(2.0, 300.0, 0.2)
PAGE_REVISIONS = (("uniform-sampling", 0.0), ("natural", 0.003))  # each revision's loss shift over the law


def page_rungs() -> list[dict[str, object]]:
    """Four planned rungs, each 4x the FLOPs of the one before (`PAGE_FLOPS`), widths 8 to 64."""
    return [
        {
            "name": f"d{8 * 2**i}",
            "d_model": 8 * 2**i,
            "layers": 1 + i,
            "params": {"total": 10 ** (4 + i), "active": 10 ** (3 + i)},
            "tokens": 4 * 10 ** (3 + i),
            "steps": 10 * (i + 1),
            "batch": 4,
            "lr": 3e-3,
            "flops": f,
            "seconds_here": 2.0 * (i + 1),
        }
        for i, f in enumerate(PAGE_FLOPS)
    ]


def page_result(rung: dict[str, object], revision: str, seed: int, loss: float) -> dict[str, object]:
    """One completed rung run: its final held-out loss and a short curve falling to it."""
    curve = [{"step": s, "tokens": s * 128, "loss": loss + 2.0 / s, "bpb": None} for s in (1, 2, 4, 8)]
    return {
        "rung": rung["name"],
        "revision": revision,
        "seed": seed,
        "run": f"ladder-page-{revision}-{rung['name']}-s{seed}",
        "status": "completed",
        "flops": rung["flops"],
        "tokens": rung["tokens"],
        "steps": rung["steps"],
        "batch": 4,
        "seconds": 1.0,
        "final": {"schema": "millrace.eval/1", "step": 8, "loss": {"macro": loss}},
        "curve": curve,
    }


def page_results(rungs: list[dict[str, object]]) -> tuple[list[dict[str, object]], dict[str, list[Point]]]:
    """Two seeds of every rung for both revisions, their losses on `PAGE_LAW` with a little noise (seeded): the
    results and, per revision, the points a fit takes."""
    rng = np.random.default_rng(0)
    results: list[dict[str, object]] = []
    points: dict[str, list[Point]] = {revision: [] for revision, _ in PAGE_REVISIONS}
    for revision, shift in PAGE_REVISIONS:
        for rung, flops in zip(rungs, PAGE_FLOPS):
            for seed in range(2):
                loss = PAGE_LAW.loss(flops) + shift + rng.normal(0, 0.002)
                points[revision].append(Point(flops, loss, str(rung["name"]), seed))
                results.append(page_result(rung, revision, seed, loss))
    return results, points


def page_ladder_body() -> dict[str, object]:
    """The body of ladder `page`'s ladder.json (`LadderRecord`) over revisions `uniform-sampling` and `natural`:
    the plan, every rung's result, each revision's fit with a prediction at the next rung, and the comparison,
    computed by the ladder's own maths from losses on a known law; nothing is trained."""
    rungs = page_rungs()
    target = dict(rungs[-1], name="next-d128", d_model=128, flops=2.56e14)
    results, points = page_results(rungs)
    fits = {rev: fit_report(pts, 2.0, [("next-d128", 2.56e14)], metric="loss.macro") for rev, pts in points.items()}
    comparison = compare_points(
        points["uniform-sampling"],
        points["natural"],
        fit_law(points["uniform-sampling"], 2.0),
        fit_law(points["natural"], 2.0),
        ("uniform-sampling", "natural"),
    )
    plan = {"ladder": "page", "file": "page.toml", "mixture": "default", "revision": "uniform-sampling"}
    return {
        "ladder": "page",
        "file": "page.toml",
        "metric": "loss.macro",
        "asymptote": 2.0,
        "plan": {**plan, "seq_len": 32, "rungs": rungs, "target": target},
        "results": results,
        "fits": fits,
        "comparison": comparison,
    }


def rung_eval_line(step: int, macro: float, other: float) -> dict[str, object]:
    """One eval.jsonl line as the trainer writes it: the macro loss and one eval set's (`other`)."""
    return {
        "schema": "millrace.eval/1",
        "step": step,
        "tokens": step * 100,
        "seconds": 1.0,
        "loss": {
            "macro": macro,
            "micro": macro + 0.01,
            "cell": {},
            "domain": {},
            "bucket": {},
            "source": {},
            "set": {"other": other},
        },
        "bpb": {"macro": macro / 2, "micro": macro / 2},
        "sequences": {},
    }


def planned_rung(name: str, flops: float) -> PlannedRung:
    """A rung of a plan with the FLOPs the fit reads (the shape does not matter to it)."""
    return PlannedRung(
        name=name,
        d_model=8,
        layers=1,
        params=RungParams(total=1, active=1),
        tokens=1,
        steps=1,
        batch=1,
        lr=1e-3,
        flops=flops,
    )


def write_evaluated_ladder(
    home: Home, flops: Sequence[float], losses: Sequence[float], other: Sequence[float]
) -> None:
    """Ladder `fake` over revision `rev`: a ladder.json with one rung per `flops`, each rung's run completed
    with two evaluations in eval.jsonl ending at `losses` (macro) and `other` (eval set `other`); no training,
    so `ladder fit` reads the rung path as it would after a real ladder run."""
    rungs, results = [], []
    for i, (rung_flops, loss) in enumerate(zip(flops, losses)):
        run = f"ladder-fake-rev-r{i}-s0"
        run_dir = home.run(run)
        run_dir.mkdir(parents=True)
        write_run(run_dir, RunRecord(run=run, status="completed"))
        lines = [rung_eval_line(5, loss + 1.0, other[i] + 1.0), rung_eval_line(10, loss, other[i])]
        (run_dir / EVAL_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
        rungs.append(planned_rung(f"r{i}", rung_flops))
        results.append(RungResult(rung=f"r{i}", revision="rev", seed=0, run=run, flops=rung_flops))
    plan = LadderPlanRecord(
        ladder="fake",
        file="fake.toml",
        mixture="m",
        revision="rev",
        seq_len=32,
        rungs=rungs,
        target=planned_rung("big", 1e23),
    )
    write_ladder(
        home,
        LadderRecord(ladder="fake", metric="loss.macro", asymptote=1.6, results=results, plan=plan),
    )
