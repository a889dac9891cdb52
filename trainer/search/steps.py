"""The search's five steps as functions (the CLI, the demo, the bench and the tests call the same ones): each
loads the search file, does its part under the search's writer lock and writes its artifact atomically.

A search is named by its TOML file or, once planned, by its name (plan.json records the file).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from millrace.errors import ConfigError, Interrupted, Terminated
from millrace.home import Home
from trainer.search.fit import DEFAULT_METRICS, fit_search
from trainer.search.plan import plan_search
from trainer.search.records import (
    FIT_FILE,
    PLAN_FILE,
    PROPOSAL_FILE,
    FitReport,
    ProposalRecord,
    ProxyRow,
    SwarmPlan,
    ValidationRecord,
    read_fit,
    read_plan,
    read_plan_head,
    write_search_record,
)
from trainer.search.run import run_swarm, search_writer
from trainer.search.spec import Search, load_search


def search_file(reference: str | Path, home: Home) -> Path:
    """A search TOML path, or the name of a search already planned here."""
    path = Path(reference)
    if path.suffix == ".toml" or path.exists():
        return path
    directory = home.search(str(reference))
    if not (directory / PLAN_FILE).exists():
        raise ConfigError(f"search {reference!r}: no such file and no plan in {directory} (give the search's TOML)")
    return Path(read_plan_head(directory).spec_file)


@contextlib.contextmanager
def resumable(command: str, reference: str | Path) -> Iterator[None]:
    """Ctrl-C or SIGTERM during a step: one line saying how to continue (exit 130 / 143)."""
    again = (
        f"millrace mix search {command} {reference}: stopped; run it again to continue (finished runs are kept, "
        "the others resume from their checkpoints)"
    )
    try:
        yield
    except (Interrupted, Terminated) as exc:
        raise type(exc)(f"{again} [{exc}]") from None
    except KeyboardInterrupt:  # a Ctrl-C outside a training step (between runs, in a checkpoint read)
        raise Interrupted(again) from None


def plan_step(reference: str | Path, home: Home) -> tuple[Search, SwarmPlan]:
    """Plan the swarm and write plan.json (planning again with the same file gives the same swarm)."""
    search = load_search(search_file(reference, home), home)
    plan = plan_search(search, home)
    with search_writer(search):
        write_search_record(search.directory, PLAN_FILE, plan)
    return search, plan


def run_step(
    reference: str | Path, home: Home, progress: bool = False, on_row: Callable[[ProxyRow], None] | None = None
) -> tuple[Search, SwarmPlan, list[ProxyRow]]:

    search, plan = plan_step(reference, home)
    with resumable("run", reference):
        return search, plan, run_swarm(home, search, plan, progress, on_row)


def fit_step(
    reference: str | Path,
    home: Home,
    kind: str = "log-linear",
    target: dict[str, float] | None = None,
    patterns: Sequence[str] | None = None,
) -> FitReport:
    """Fit on the rows there are (no training); `target` overrides the file's (a new target, no new runs)."""
    search = load_search(search_file(reference, home), home)
    plan = read_plan(search.directory)
    terms = target or search.spec.target.terms()
    report = fit_search(
        home, plan, terms, kind, search.spec.reuse, patterns or DEFAULT_METRICS, search.spec.sampling.seed
    )
    with search_writer(search):
        write_search_record(search.directory, FIT_FILE, report)
    return report


def propose_step(reference: str | Path, home: Home, name: str | None = None) -> ProposalRecord:
    from trainer.search.proposal import propose_search  # lazy: heavy (sklearn)

    search = load_search(search_file(reference, home), home)
    plan, fit = read_plan(search.directory), read_fit(search.directory)
    with search_writer(search):
        record = propose_search(home, search, plan, fit, name)
        write_search_record(search.directory, PROPOSAL_FILE, record)
    return record


def validate_step(
    reference: str | Path, home: Home, progress: bool = False, on_run: Callable[[str], None] | None = None
) -> ValidationRecord:
    from trainer.search.validate import validate_search  # lazy: heavy (scipy)

    search = load_search(search_file(reference, home), home)
    with resumable("validate", reference):
        return validate_search(home, search, read_plan(search.directory), progress, on_run)
