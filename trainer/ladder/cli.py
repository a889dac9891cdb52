"""`millrace ladder plan | run | fit | compare`: the scaling ladder's commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import click

from millrace.errors import ConfigError
from millrace.home import Home
from millrace.options import home_option, json_option, print_json
from trainer.fleet.config import Executor
from trainer.ladder.results import read_ladder
from trainer.ladder.spec import load_ladder
from trainer.records import RungResult

if TYPE_CHECKING:  # numpy and scipy load when a fit runs, not for every ladder command
    from trainer.ladder.scaling_law import FitReport

LADDER_HELP = """Plan, train, fit and compare scaling ladders: rungs of one model family on one revision.

\b
  millrace ladder plan LADDER.toml [--json]
  millrace ladder run LADDER.toml [--rungs NAMES] [--seeds N]
  millrace ladder fit [LADDER] [--metric NAME] [--asymptote X | --free-asymptote]
                      [--predict-flops F ...] [--level 0.9] [--points FILE] [--json]
  millrace ladder compare LADDER --revision A --revision B [--seeds 3]

Results go to $MILLRACE_HOME/ladders/<ladder>/ladder.json; `millrace report build` publishes them.
"""


@click.group(help=LADDER_HELP, context_settings={"help_option_names": ["-h", "--help"]})
def ladder() -> None:
    pass


def ladder_file(reference: str, home: Home) -> Path:
    """A ladder TOML path, or the name of a ladder already run (its ladder.json names its file)."""
    path = Path(reference)
    if path.suffix == ".toml" or path.exists():
        return path

    recorded = read_ladder(home, reference).file
    if recorded is None:
        raise ConfigError(f"ladder {reference!r}: its ladder.json names no ladder file")
    return Path(recorded)


def ladder_name(reference: str, home: Home) -> str:
    path = Path(reference)
    if path.suffix == ".toml" or path.is_file():
        return load_ladder(path).ladder
    return reference


def fmt_count(value: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


def fmt_seconds(seconds: float) -> str:
    for unit, size in (("y", 365 * 86400), ("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


@ladder.command("plan")
@click.argument("ladder_toml", metavar="LADDER.toml", type=click.Path(dir_okay=False))
@json_option
@home_option
def plan_command(home: Home, ladder_toml: str, as_json: bool) -> None:
    """Each rung's shape, total and active parameters (active: without embedding and output), tokens,
    steps, batch, learning rate, FLOPs and an estimated time on this machine; and the target's. Each rung's
    scaled revision is checked against the store as `ladder run` will build it: a rung too small to give
    every phase one sequence per weighted cell is raised (and named) or refused, per rules.small_rungs."""
    from trainer.ladder.plan import plan_ladder  # lazy: command body: `millrace --help` stays light

    plan = plan_ladder(ladder_toml, home)
    if as_json:
        print_json(plan.record().dump())
        return
    spec = plan.spec
    click.echo(f"ladder {spec.ladder}: {spec.mixture.mixture}/{spec.mixture.revision}, seq {plan.seq_len}")
    header = (
        f"  {'rung':<12} {'d_model':>7} {'layers':>6} {'total':>7} {'active':>7} {'tokens':>7} {'steps':>8} "
        f"{'batch':>6} {'lr':>9} {'FLOPs':>9} {'time here':>10}"
    )
    click.echo(header)
    for rung in plan.rungs + ([plan.target] if plan.target else []):
        click.echo(
            f"  {rung.name:<12} {rung.d_model:>7} {rung.layers:>6} {fmt_count(rung.total_params):>7} "
            f"{fmt_count(rung.active_params):>7} {fmt_count(rung.tokens):>7} {rung.steps:>8,} {rung.batch:>6,} "
            f"{rung.lr:>9.3g} {rung.flops:>9.3g} {fmt_seconds(rung.seconds_here):>10}"
        )
    if plan.store is None:
        click.echo(
            f"  store of {spec.mixture.mixture}/{spec.mixture.revision} not built here: rungs not checked "
            "against its cells"
        )
    for rung in plan.rungs + ([plan.target] if plan.target else []):
        if rung.raised_from is not None:
            click.echo(
                f"  {rung.name}: tokens raised from {rung.raised_from:,} to {rung.tokens:,} "
                f'(rules.small_rungs = "raise"): at the rule\'s budget, {rung.raised_because}'
            )


@ladder.command("run")
@click.argument("ladder_toml", metavar="LADDER.toml", type=click.Path(dir_okay=False))
@click.option(
    "--rungs",
    default=None,
    help="Comma-separated rung names to train (default: every rung; the target's name trains the target too).",
)
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=None,
    help="Seeds per rung: model initialisations 0..N-1 (default: the ladder's `seeds`).",
)
@click.option("--revision", default=None, help="Train on this revision of the ladder's mixture instead of its own.")
@click.option(
    "--executor",
    type=click.Choice(get_args(Executor)),
    default=None,
    help="Where the rungs train (default: the ladder's [fleet] executor, else in-process one after another): "
    "local processes, torchrun, Ray (RAY_ADDRESS for a cluster) or Slurm ([fleet.slurm] in the ladder file).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Rungs training at once (default: the ladder's [fleet] concurrency); each gets cores / N threads.",
)
@click.option("--no-progress", is_flag=True, help="Log lines instead of a progress bar.")
@json_option
@home_option
def run_command(
    home: Home,
    ladder_toml: str,
    rungs: str | None,
    seeds: int | None,
    revision: str | None,
    executor: str | None,
    concurrency: int | None,
    no_progress: bool,
    as_json: bool,
) -> None:
    """Train each rung (with held-out evaluation) on the revision scaled to its budget, on the ladder's fleet;
    resumable: a finished rung is not retrained, a killed one resumes from its last checkpoint."""
    from trainer.ladder.run import LadderSelection, run_ladder  # lazy: command body: `millrace --help` stays light

    fleet = load_ladder(ladder_toml).fleet
    overrides = {k: v for k, v in (("executor", executor), ("concurrency", concurrency)) if v is not None}

    names = [n.strip() for n in rungs.split(",") if n.strip()] if rungs else None

    def report(result: RungResult) -> None:
        if not as_json:
            final = result.final.loss.macro if result.final is not None else None
            shown = f"held-out macro loss {final:.4f}" if final is not None else "no held-out evaluation"
            click.echo(f"rung {result.rung} seed {result.seed}: {result.status}, {shown} ({result.run})")

    selection = LadderSelection(names, seeds, revision, fleet=fleet.model_copy(update=overrides))
    body = run_ladder(ladder_toml, home, selection, progress=not no_progress and sys.stderr.isatty(), on_result=report)
    if as_json:
        print_json(
            {
                "ladder": body.ladder,
                "results": [{k: v for k, v in r.dump().items() if k != "curve"} for r in body.results],
            }
        )


@ladder.command("fit")
@click.argument("ladder_ref", metavar="[LADDER]", required=False)
@click.option(
    "--metric",
    default=None,
    help="Held-out metric of each rung's final evaluation, a path into "
    "eval.jsonl: loss.macro (default), bpb.macro, loss.set.NAME ...",
)
@click.option(
    "--asymptote",
    type=click.FloatRange(min=0),
    default=None,
    help="Fix L_inf at X (default: the ladder's fit.asymptote; none there: fitted).",
)
@click.option("--free-asymptote", is_flag=True, help="Fit L_inf too (needs at least 3 rungs).")
@click.option(
    "--predict-flops",
    type=float,
    multiple=True,
    help="Predict the metric at F FLOPs (repeatable); the ladder's target is always predicted.",
)
@click.option(
    "--level",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=None,
    help="Nominal coverage of each prediction's interval, a prediction interval for one new run (default 0.9).",
)
@click.option(
    "--points",
    "points_file",
    type=click.Path(dir_okay=False),
    default=None,
    help='Fit a JSON list of {"flops": ..., "loss": ...} instead of a ladder\'s rungs.',
)
@click.option("--revision", default=None, help="Fit this revision's rungs (default: the ladder's own).")
@json_option
@home_option
def fit_command(
    home: Home,
    ladder_ref: str | None,
    metric: str | None,
    asymptote: float | None,
    free_asymptote: bool,
    predict_flops: tuple[float, ...],
    level: float | None,
    points_file: str | None,
    revision: str | None,
    as_json: bool,
) -> None:
    """Fit L(C) = L_inf + A * C^-alpha to each rung's final held-out metric (or to --points): parameters,
    residuals, leave-one-out errors, and predictions with a prediction interval at --level (delta method
    with the residual variance and Student's t); zero degrees of freedom or a rising curve are warned of."""
    # lazy: command body: `millrace --help` loads no scipy
    from trainer.ladder.ladder_fit import FitRequest, fit_ladder
    from trainer.ladder.points import file_points
    from trainer.ladder.scaling_law import LEVEL, fit_report

    if free_asymptote and asymptote is not None:
        raise ConfigError("give --asymptote or --free-asymptote, not both")
    level = LEVEL if level is None else level
    if points_file:
        if ladder_ref:
            raise ConfigError("give a LADDER or --points FILE, not both")
        report = fit_report(
            file_points(points_file),
            asymptote,
            [(None, f) for f in predict_flops],
            where=points_file,
            metric=metric,
            level=level,
        )
    elif ladder_ref:
        request = FitRequest(metric, asymptote, free_asymptote, list(predict_flops), revision, level)
        report = fit_ladder(home, ladder_name(ladder_ref, home), request)
    else:
        raise ConfigError("give a LADDER (name or file) or --points FILE")
    for warning in report["warnings"]:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        print_json(report)
        return
    echo_fit(report)


def echo_fit(report: FitReport) -> None:
    p = report["params"]
    click.echo(f"{report['form']}  ({report['asymptote']} L_inf, metric {report.get('metric') or 'loss'})")
    click.echo(
        f"  L_inf = {p['L_inf']:.4g}   A = {p['A']:.4g}   alpha = {p['alpha']:.4g}   "
        f"rms residual {report['rms_residual']:.2g}"
    )
    for r in report["residuals"]:
        click.echo(
            f"  {r['rung'] or '':<12} C {r['flops']:.3g}  loss {r['loss']:.4f}  fit {r['fit']:.4f}  "
            f"residual {r['residual']:+.4f}" + (f"  seed {r['seed']}" if r["seed"] is not None else "")
        )
    for r in report["leave_one_out"]:
        click.echo(
            f"  leave out {r['rung'] or r['flops']}: predicted {r['predicted']:.4f}, measured "
            f"{r['loss']:.4f} (error {r['error']:+.4f})"
        )
    for r in report["predictions"]:
        interval = (
            f"{report['level']:.0%} prediction interval [{r['low']:.4f}, {r['high']:.4f}]"
            if r["low"] is not None
            else "no interval (zero degrees of freedom)"
        )
        loss = f"{r['loss']:.4f}" if r["loss"] is not None else "no finite loss"
        click.echo(f"  predict {r['name'] or ''} at C {r['flops']:.3g}: {loss}, {interval}")


@ladder.command("compare")
@click.argument("ladder_ref", metavar="LADDER")
@click.option(
    "--revision",
    "revisions",
    multiple=True,
    required=True,
    help="Revision of the ladder's mixture: give it twice, A then B.",
)
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True, help="Seeds per rung and revision.")
@click.option("--rungs", default=None, help="Comma-separated rung names (default: every rung).")
@click.option("--no-progress", is_flag=True, help="Log lines instead of a progress bar.")
@json_option
@home_option
def compare_command(
    home: Home,
    ladder_ref: str,
    revisions: tuple[str, ...],
    seeds: int,
    rungs: str | None,
    no_progress: bool,
    as_json: bool,
) -> None:
    """Train the same rungs for revisions A and B with several seeds; per rung the loss difference and the
    seed spread, and the compute-equivalent speed-up of B over A from the fits, called noise when the
    difference is within the seed spread."""
    from trainer.ladder.compare import compare_ladder  # lazy: command body: `millrace --help` loads no scipy

    if len(revisions) != 2:
        raise ConfigError(f"--revision: give exactly two (A and B), got {len(revisions)}")
    names = [n.strip() for n in rungs.split(",") if n.strip()] if rungs else None
    result = compare_ladder(
        ladder_file(ladder_ref, home),
        home,
        revisions[0],
        revisions[1],
        seeds,
        names,
        progress=not no_progress and sys.stderr.isatty(),
    )
    if as_json:
        print_json(result)
        return
    a, b = result["revisions"]["a"], result["revisions"]["b"]
    click.echo(f"{b} vs {a} ({result['metric']}):")
    for r in result["rungs"]:
        click.echo(
            f"  {r['rung']:<12} {a} {r['loss_a']:.4f}  {b} {r['loss_b']:.4f}  difference "
            f"{r['difference']:+.4f}  seed spread {r['seed_spread']:.4f}"
        )
    click.echo(
        f"  speed-up of {b} over {a} at C {result['at_flops']:.3g}: {result['speedup_b_over_a']:.3f}x "
        f"(the seed spread alone reads as {result['noise_speedup']:.3f}x): {result['verdict']}"
    )
