"""`millrace demo`: the main job end to end on the embedded default corpus.

corpus → pipeline (filters, dedup, quality buckets, topic domains, tokenize) → store
→ the shipped `default` mixture's revisions → the tiny MoE trained on
`uniform-sampling` → the static site. Every step reuses what an earlier run built,
so a second `make demo` only checks and re-renders.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from millrace.artifacts import atomic_write_text, read_artifact
from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from millrace.progress import on_terminal
from pipeline.config import load_pipeline_config
from trainer.ladder.spec import SHIPPED_CONFIGS
from trainer.records import RungResult, read_run
from trainer.search.cli import proposal_lines
from trainer.train_request import TrainRequest

log = logging.getLogger("millrace.demo")  # the logger name users know

STORE = "local"
MIXTURE = "default"
REVISIONS = ("natural", "uniform-sampling", "quality-tilt")
TRAINED_REVISION = "uniform-sampling"
RUN = "demo"
DEFAULT_MAX_BYTES = 10_000_000
TINY_CONFIG = SHIPPED_CONFIGS / "tiny.toml"
MICRO_LADDER = SHIPPED_CONFIGS / "micro-ladder.toml"
MICRO_SEARCH = SHIPPED_CONFIGS / "micro-search.toml"


@dataclass
class DemoReport:
    home: Path
    store: Path | None = None
    manifests: dict[str, str] = field(default_factory=dict)
    not_built: dict[str, str] = field(default_factory=dict)  # revision: why this store cannot hold it
    run: Path | None = None
    ladder: dict | None = None
    search: dict | None = None
    site: Path | None = None
    page: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict:
        return {
            "home": str(self.home),
            "store": str(self.store),
            "manifests": self.manifests,
            "not_built": self.not_built,
            "run": str(self.run),
            "ladder": self.ladder,
            "search": self.search,
            "site": str(self.site),
            "page": self.page,
            "seconds": {k: round(v, 1) for k, v in self.seconds.items()},
        }


def heading(console: Console, text: str) -> None:
    """A rule with `text` on a terminal; elsewhere (a log, CI) the whole line, never cut at the console's width."""
    if console.is_terminal:
        console.rule(text)
    else:
        console.print(f"== {text}", soft_wrap=True, highlight=False)


@contextlib.contextmanager
def step(console: Console, report: DemoReport, name: str, what: str) -> Iterator[None]:
    """Says what a step does, and records how long it took."""
    heading(console, f"[bold]{name}[/]: {what}")
    started = time.perf_counter()
    yield
    report.seconds[name] = time.perf_counter() - started
    console.print(f"[green]✓[/] {name} in {report.seconds[name]:.1f} s")


def build_corpus(home: Home, max_bytes: int) -> Path:
    """The corpus under home/corpus/local, rebuilt only when --max-bytes changed (or it is missing)."""
    # lazy: command body: `millrace --help` stays light
    from pipeline.corpus.builder import SUMMARY_KIND, CorpusManifest, build_local_corpus

    out = home.root / "corpus" / STORE
    summary_path = out / "corpus.json"
    if summary_path.exists():
        try:
            summary = read_artifact(summary_path, SUMMARY_KIND, CorpusManifest)
            if summary.max_bytes == max_bytes:
                log.info("reusing the corpus at %s (%s documents)", out, summary.documents)
                return out
        except ArtifactError as exc:
            log.warning("rebuilding the corpus: %s", exc)
    stale = sorted((home.stores / STORE).glob("*/store.json"))
    if stale:
        raise ConfigError(
            f"--max-bytes {max_bytes:,}: the corpus would change under the stores already built from it "
            f"({', '.join(str(p.parent) for p in stale)}); use another --home or remove them"
        )
    built = build_local_corpus(out, max_bytes)
    log.info("corpus: %d documents, %d bytes in %s", built.documents, built.bytes, out)
    return out


def pipeline_config(home: Home, corpus: Path):
    """The starter config for the corpus; the store version of an earlier identical run is reused."""
    from pipeline.runner import stored_config_hash  # lazy: command body: `millrace --help` loads no datatrove
    from pipeline.starter import init_config  # lazy: command body: `millrace --help` stays light
    from pipeline.store.format import SCHEMA_VERSION, STORE_KIND, StoreManifest  # lazy: numpy

    path = home.root / "configs" / f"{STORE}.toml"
    text = init_config(corpus)
    if not path.exists() or path.read_text() != text:
        atomic_write_text(path, text)
    config = load_pipeline_config(path)
    for existing in sorted((home.stores / STORE).glob("*/store.json"), reverse=True):
        store = read_artifact(existing, STORE_KIND, StoreManifest, (SCHEMA_VERSION,))
        candidate = config.model_copy(update={"output": config.output.model_copy(update={"version": store.version})})
        if store.config_hash == stored_config_hash(candidate):
            log.info("reusing store %s/%s", STORE, store.version)
            return candidate
    return config


def run_demo(
    home: Home,
    max_bytes: int,
    steps: int | None,
    console: Console,
    ladder: Path | None = MICRO_LADDER,
    search: Path | None = MICRO_SEARCH,
) -> DemoReport:
    from pipeline.runner import run_pipeline  # lazy: command body: `millrace --help` loads no datatrove

    report = DemoReport(home=home.root)

    corpus_what = f"the embedded default corpus from this machine's files (up to {max_bytes:,} bytes)"
    with step(console, report, "corpus", corpus_what):
        corpus = build_corpus(home, max_bytes)
    pipeline_what = "filters, language id, exact + fuzzy dedup, quality buckets, topic domains, tokenize"
    with step(console, report, "pipeline", pipeline_what):
        config = pipeline_config(home, corpus)
        with console.status("pipeline: starting") as status:
            report.store = run_pipeline(
                config,
                home,
                on_phase=lambda label: status.update(f"pipeline: {label}"),
                progress_lines=not on_terminal(),
            )
    return from_store(home, report, steps, console, ladder, search)


def from_store(
    home: Home,
    report: DemoReport,
    steps: int | None,
    console: Console,
    ladder: Path | None,
    search: Path | None = None,
) -> DemoReport:
    """The demo after the pipeline, on whatever store it built (any number of cells): the shipped mixture,
    the tiny MoE, the micro-ladder (its rungs sized to the store's cells by `ladder plan`), a small mixture
    search, the site."""
    from reports import build_site  # lazy: command body: `millrace --help` loads no jinja2

    assert report.store is not None
    with step(console, report, "mixtures", f"build the shipped mixture {MIXTURE!r}: {', '.join(REVISIONS)}"):
        build_revisions(home, report, console)
    with step(console, report, "train", f"the tiny MoE on {MIXTURE}/{TRAINED_REVISION}"):
        report.run = train_demo(home, steps, console)
    if ladder is not None:
        with step(
            console,
            report,
            "ladder",
            f"a micro-ladder on {MIXTURE}/{TRAINED_REVISION}: train the rungs, fit, "
            "predict the next rung up, train it",
        ):
            report.ladder = ladder_demo(home, ladder, console)
    if search is not None:
        with step(
            console,
            report,
            "search",
            f"a small mixture search from {MIXTURE}/{TRAINED_REVISION}: proxies from one shared checkpoint, "
            "a surrogate, a proposed revision",
        ):
            report.search = search_demo(home, search, console)
    with step(console, report, "report", "the static site"):
        report.site = build_site(home)
        version = report.store.name
        page = home.site / STORE / version / "index.html"
        report.page = f"{page.as_uri()}?revision={TRAINED_REVISION}"
    return report


def build_revisions(home: Home, report: DemoReport, console: Console) -> None:
    """The shipped revisions on this store. One the store is too small for (a small corpus: a cooldown's
    cells under their epoch cap) is left out with its reason, unless it is the one the demo trains."""
    import mixtures  # lazy: command body: `millrace --help` stays light

    for revision in REVISIONS:
        try:
            result = mixtures.build_result(home, MIXTURE, revision)
        except ConfigError as error:
            if revision == TRAINED_REVISION:
                raise ConfigError(
                    f"{error} (the demo trains this revision: a larger --max-bytes gives it room)"
                ) from None
            report.not_built[revision] = str(error)
            console.print(f"  {revision}: [yellow]not built on this store[/]: {error}")
            continue
        report.manifests[revision] = result.manifest_hash
        console.print(f"  {revision}: {result.path} ({'built' if result.written else 'already built'})")


def train_demo(home: Home, steps: int | None, console: Console) -> Path:
    # lazy: command body: `millrace --help` loads no torch
    from trainer.checkpoint import latest_checkpoint
    from trainer.loop import train

    run_dir = home.run(RUN)
    if (run_dir / "run.json").exists() and read_run(run_dir).status == "completed":
        console.print(f"  run {RUN!r} already completed: {run_dir}")
        return run_dir
    resume = latest_checkpoint(run_dir / "checkpoints") is not None
    result = train(
        TINY_CONFIG,
        home,
        TrainRequest(mixture=MIXTURE, revision=TRAINED_REVISION, steps=steps, run=RUN, resume=resume, progress=True),
    )
    losses = result.losses
    if losses:
        console.print(f"  loss {losses[0]:.3f} → {losses[-1]:.3f} over {len(losses)} steps")
    return run_dir


def ladder_demo(home: Home, ladder: Path, console: Console) -> dict:
    """The ladder's main job, small: the prediction for the next rung up beside what it measures."""
    from trainer.ladder.check import predict_then_measure  # lazy: command body: `millrace --help` loads no scipy

    def show(result: RungResult) -> None:
        final = result.final.loss.macro if result.final is not None else None
        console.print(
            f"  rung {result.rung}: held-out macro loss {final:.4f} at {result.flops or 0:.3g} FLOPs"
            if final is not None
            else f"  rung {result.rung}: no held-out evaluation"
        )

    check = predict_then_measure(ladder, home, progress=True, on_result=show)
    p = check.fit["params"]
    console.print(f"  fit: L(C) = {p['L_inf']:.3f} + {p['A']:.4g}·C^-{p['alpha']:.4f}")
    for warning in check.fit["warnings"]:  # a store too small for the rungs to learn: a rising or diverged fit
        console.print(f"  [yellow]warning:[/] {escape(warning)}", highlight=False)
    interval = f"[{check.low:.4f}, {check.high:.4f}]" if check.low is not None else "(no interval)"
    console.print(
        f"  [bold]{check.target}[/] at {check.flops:.3g} FLOPs: predicted {check.predicted:.4f} "
        f"{interval}, measured [bold]{check.measured:.4f}[/] (error {check.error:+.4f})",
        highlight=False,
    )
    return check.as_dict()


def search_demo(home: Home, search: Path, console: Console) -> dict:
    """The search's main job, small: plan, train the proxies, fit, and the proposal beside its baseline."""
    # lazy: command body: `millrace --help` stays light
    from trainer.search.steps import fit_step, plan_step, propose_step, run_step

    _, plan = plan_step(search, home)
    console.print(
        f"  {len(plan.proxies)} proxies of {plan.budget.steps} steps over {len(plan.components)} components, "
        f"branched at step {plan.branch.at_step} of {plan.branch.total_steps}"
    )
    run_step(search, home, on_row=lambda row: console.print(f"  proxy {row.proxy}: target {_macro(row)}"))
    fit = fit_step(search, home, patterns=["bpb.macro"])
    quality = fit.target_fit
    console.print(
        f"  {fit.surrogate} surrogate: out-of-fold Spearman {quality.spearman or 0:.3f}, "
        f"RMSE {quality.rmse or 0:.4f}, regret@1 {quality.regret_at_1 or 0:.4f}"
    )
    proposal = propose_step(search, home)
    for line in proposal_lines(proposal):
        console.print(line, markup=False, highlight=False)
    return {
        "search": plan.search,
        "proposal": proposal.revision,
        "spearman": quality.spearman,
        "predicted": proposal.provenance.predicted,
        "prior_predicted": proposal.provenance.prior_predicted,
    }


def _macro(row: object) -> str:
    results = getattr(row, "results", None)
    value = results.bpb.macro if results is not None else None
    return f"macro held-out bpb {value:.4f}" if value is not None else "no evaluation"


def print_done(console: Console, home: Home, report: DemoReport) -> None:
    """Where everything is; paths and URLs whole on their own lines, copy-pasteable at any width."""

    def whole(text: str, **style) -> None:  # never wrapped, whatever the console; no markup inside a path
        console.print(text, soft_wrap=True, markup=False, highlight=False, **style)

    heading(console, "[bold green]done[/]")
    whole(f"artifacts under {home.root} ({report.seconds['total']:.0f} s in all)")
    whole(f"store:    {report.store}")
    whole(f"run:      {report.run}")
    console.print("open the composition page:")
    whole(f"  {report.page}", style="bold")
    console.print("and the training page:")
    whole(f"  {(home.site / 'runs' / RUN / 'index.html').as_uri()}")
    if report.ladder:
        console.print("and the ladder page:")
        whole(f"  {(home.site / 'ladders' / report.ladder['ladder'] / 'index.html').as_uri()}")
    if report.search:
        console.print("the search's proposal, an ordinary revision (compare it: millrace mix diff):")
        whole(f"  {MIXTURE}/{report.search['proposal']}")
