"""`millrace mix search plan | run | fit | propose | validate`: choose a mixture with a swarm of proxy runs.

Routed from the frame's command table onto the `mix` group (the mixtures room never imports it). Heavy
modules are imported inside the commands, so `millrace mix --help` stays quick.
"""

from __future__ import annotations

import click

from millrace.home import Home
from millrace.options import home_option, json_option, print_json
from trainer.search.records import ProposalRecord, ProxyRow

SEARCH_HELP = """Choose a mixture, not only build it: a swarm of small proxy runs branched from one shared
checkpoint, a surrogate fitted on their held-out results, a proposed revision under the epoch cap, and its
validation against the baselines at several seeds.

\b
  millrace mix search plan SEARCH.toml [--json]       the swarm on paper: proxies, sampling, budget, FLOPs, caps
  millrace mix search run SEARCH [--json]             the shared checkpoint once, then every proxy (resumable)
  millrace mix search fit SEARCH [--kind lightgbm] [--target METRIC=WEIGHT ...] [--metric PATTERN ...] [--json]
  millrace mix search propose SEARCH [--name REVISION] [--json]
  millrace mix search validate SEARCH [--json]        the proposal and baselines at 3+ seeds, measured

SEARCH is the search's TOML file (see trainer/configs/micro-search.toml) or, once planned, its name.
Everything goes to $MILLRACE_HOME/searches/<search>/; the proposal is a revision under mixtures/<mixture>/.
Each step is killable (Ctrl-C) and resumable: run it again and it continues where it stopped.
"""

SEARCH_ARGUMENT = click.argument("reference", metavar="SEARCH")


@click.group(help=SEARCH_HELP, context_settings={"help_option_names": ["-h", "--help"]})
def search() -> None:
    pass


def fmt_flops(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


@search.command("plan")
@SEARCH_ARGUMENT
@json_option
@home_option
def plan_command(home: Home, reference: str, as_json: bool) -> None:
    """Print the swarm: the number of proxies (default 2 per component), the sampling distribution, the phases
    and switch point, each proxy's budget, the total compute, and whether the epoch caps allow it. Writes
    plan.json (nothing is trained)."""
    # lazy: command body: `millrace --help` stays light
    from trainer.search.plan import without_held_out
    from trainer.search.steps import plan_step

    search_, plan = plan_step(reference, home)
    if as_json:
        print_json(plan.dump())
        return
    budget = plan.budget
    click.echo(
        f"search {plan.search}: {search_.spec.mixture.mixture}/{search_.spec.mixture.revision} on store "
        f"{plan.store.name}/{plan.store.version}, {len(plan.components)} components"
    )
    click.echo(f"  proxies        {len(plan.proxies)}")
    if plan.sampling is not None:
        click.echo(
            f"  sampling       Dirichlet around the {plan.sampling.centre} weights, concentrations "
            f"{plan.sampling.concentrations}, seed {plan.sampling.seed}"
        )
    click.echo(
        f"  branch         run {plan.branch.run} trains {plan.branch.revision} to step {plan.branch.at_step} "
        f"of {plan.branch.total_steps} ({fmt_flops(plan.branch.flops)} FLOPs), once"
    )
    phases = ", ".join(f"{n} {s} steps" for n, s in zip(search_.phase_names, budget.phase_steps))
    click.echo(
        f"  each proxy     {budget.tokens:,} tokens, {budget.steps} steps ({phases}), {fmt_flops(budget.flops)} FLOPs"
    )
    click.echo(f"  total compute  {fmt_flops(plan.total_flops)} FLOPs")
    unmeasured = without_held_out(search_, plan.components)
    if unmeasured:
        named = ", ".join(unmeasured[:5]) + (f" and {len(unmeasured) - 5} more" if len(unmeasured) > 5 else "")
        click.echo(
            f"  held-out       {len(unmeasured)} of {len(plan.components)} components hold no held-out data "
            f"({named}): the macro target does not measure them"
        )
    caps = plan.epochs
    state = "allow it" if caps.feasible else "do NOT allow it"
    planned = "allow" if caps.planned_feasible else "do NOT allow"
    click.echo(
        f"  epoch caps     {state}: the worst component, {caps.worst_cell}, reaches "
        f"{caps.worst_epochs or 0:.2f} epochs of {caps.epoch_cap:g} {caps.note}".rstrip()
    )
    click.echo(
        f"  planned run    the caps ({search_.spec.constraints.epoch_cap:g} epochs over the whole run) {planned} "
        "a mixture for the planned run from the branch on"
    )


@search.command("run")
@SEARCH_ARGUMENT
@click.option("--no-progress", is_flag=True, help="Log lines instead of progress bars for each training.")
@json_option
@home_option
def run_command(home: Home, reference: str, no_progress: bool, as_json: bool) -> None:
    """Train the shared checkpoint once (the baseline to the branch step), then each proxy as a run branched
    from it on its own revision. Resumable: finished proxies are skipped, a killed one resumes."""
    from trainer.search.steps import run_step  # lazy: command body: `millrace --help` stays light

    def show(row: ProxyRow) -> None:
        macro = row.results.bpb.macro if row.results else None
        click.echo(
            f"search: proxy {row.proxy} done ({row.run}): macro bpb {macro}, {row.seconds or 0:.1f} s", err=True
        )

    _, plan, rows = run_step(reference, home, progress=not no_progress and not as_json, on_row=show)
    done = [r for r in rows if r.status == "done"]
    if as_json:
        print_json(
            {"search": plan.search, "proxies": len(plan.proxies), "done": len(done), "rows": [r.dump() for r in rows]}
        )
        return
    click.echo(f"search {plan.search}: {len(done)} of {len(plan.proxies)} proxies done")


def parse_target(values: tuple[str, ...]) -> dict[str, float] | None:
    if not values:
        return None
    out = {}
    for value in values:
        metric, _, weight = value.partition("=")
        try:
            out[metric] = float(weight) if weight else 1.0
        except ValueError:
            raise click.BadParameter(f"{value!r}: expected METRIC=WEIGHT, e.g. bpb.set.code=0.5") from None
    return out


@search.command("fit")
@SEARCH_ARGUMENT
@click.option(
    "--kind",
    type=click.Choice(["log-linear", "lightgbm"]),
    default="log-linear",
    show_default=True,
    help="The surrogate: log-linear (Olmix's robust default) or LightGBM (RegMix).",
)
@click.option(
    "--target",
    "target",
    multiple=True,
    metavar="METRIC=WEIGHT",
    help="Fit this target instead of the file's (repeat for a weighted sum), from the rows already "
    "trained: e.g. bpb.macro, bpb.set.code=1, bpb.cell.c00q0=0.5.",
)
@click.option(
    "--metric",
    "patterns",
    multiple=True,
    metavar="PATTERN",
    help="Eval metrics to fit besides the target (fnmatch; default bpb.macro, bpb.set.*, bpb.domain.*, bpb.bucket.*).",
)
@json_option
@home_option
def fit_command(
    home: Home, reference: str, kind: str, target: tuple[str, ...], patterns: tuple[str, ...], as_json: bool
) -> None:
    """Fit surrogates on the proxies' rows and report k-fold out-of-fold Spearman, RMSE and regret@1 for the
    target and every eval set. Rows whose cells changed since they were trained are named, not used."""
    from trainer.search.steps import fit_step  # lazy: command body: `millrace --help` stays light

    report = fit_step(reference, home, kind, parse_target(target), list(patterns) or None)
    if as_json:
        print_json(report.dump())
        return
    click.echo(
        f"search {report.search}: {report.surrogate} surrogate on {len(report.rows_used)} rows, target {report.target}"
    )
    if report.rows_stranded:
        click.echo(f"  stranded (their cells' content is gone): {', '.join(report.rows_stranded)}")
    if report.changed_components:
        click.echo(f"  components no usable row has seen: {', '.join(report.changed_components)}")
    click.echo(f"  {'metric':<28} {'rows':>5} {'spearman':>9} {'rmse':>9} {'regret@1':>9}")
    for fit in [report.target_fit, *report.sets]:
        click.echo(
            f"  {fit.metric:<28} {fit.rows:>5} {fit.spearman or 0:>9.3f} {fit.rmse or 0:>9.4f} "
            f"{fit.regret_at_1 or 0:>9.4f}"
        )


@search.command("propose")
@SEARCH_ARGUMENT
@click.option("--name", default=None, help="The new revision's name (default: <date>-search-<search>).")
@json_option
@home_option
def propose_command(home: Home, reference: str, name: str | None, as_json: bool) -> None:
    """Optimise each phase's weights under the constraints (epoch cap over the whole planned run, min/max
    share, optional closeness to the prior) and write the proposal as a new revision continuing the
    baseline at the branch step; its provenance names the swarm, the surrogate and the predicted target."""
    from trainer.search.steps import propose_step  # lazy: command body: `millrace --help` stays light

    record = propose_step(reference, home, name)
    if as_json:
        print_json(record.dump())
        return
    show_proposal(record)


def show_proposal(record: ProposalRecord) -> None:
    for line in proposal_lines(record):
        click.echo(line)


def proposal_lines(record: ProposalRecord, rows: int = 12) -> list[str]:
    """The proposal beside its prior (the baseline's weights from the branch on), per phase, largest first."""
    p = record.provenance
    lines = [
        f"proposal {record.mixture}/{record.revision} ({record.revision_file}), continuing "
        f"{record.continues} at step {record.at_step}",
        f"  predicted target {p.predicted:.4f} [{p.interval[0]:.4f}, {p.interval[1]:.4f}]"
        + (f", baseline's weights predicted {p.prior_predicted:.4f}" if p.prior_predicted is not None else ""),
    ]
    for mine, prior in zip(record.phases, record.prior):
        before = {w.component: w.weight for w in prior.weights}
        lines.append(f"  phase {mine.phase}: {'component':<16} {'proposal':>9} {'baseline':>9}")
        for w in sorted(mine.weights, key=lambda w: -w.weight)[:rows]:
            lines.append(f"    {w.component:<24} {w.weight:>9.3f} {before.get(w.component, 0.0):>9.3f}")
        rest = len(mine.weights) - rows
        if rest > 0:
            lines.append(f"    ... and {rest} more (searches/{record.search}/proposal.json)")
    return lines


@search.command("validate")
@SEARCH_ARGUMENT
@click.option("--no-progress", is_flag=True, help="Log lines instead of progress bars for each training.")
@json_option
@home_option
def validate_command(home: Home, reference: str, no_progress: bool, as_json: bool) -> None:
    """Train the proposal and the baselines (natural and the current revision, by default) at 3 or more seeds
    each from the same checkpoint and budget, and report the measured difference per eval set with a
    confidence interval ("not distinguishable from noise" when the interval holds 0)."""
    from trainer.search.steps import validate_step  # lazy: command body: `millrace --help` stays light

    def show(run: str) -> None:
        click.echo(f"search: validation run {run} done", err=True)

    record = validate_step(reference, home, progress=not no_progress and not as_json, on_run=show)
    if as_json:
        print_json(record.dump())
        return
    click.echo(
        f"validation of {record.proposal}: seeds {record.seeds}, {record.confidence:.0%} intervals "
        "(proposal - baseline; lower is better)"
    )
    for c in record.comparisons:
        click.echo(
            f"  {c.metric:<24} vs {c.against:<8} {c.difference:+.4f} [{c.low:+.4f}, {c.high:+.4f}]  {c.verdict}"
        )
