"""Report site build time at the reference shape: a stats-only 200-cell store with 5 built revisions.

Requirement: the site builds in under 10 s and each page weighs under 3 MB. Baseline measured in the same run:
`json.dumps` of the very data the page embeds (the least any build must do), plus those
budgets as fixed baselines (ratio >= 1 means met). Also: how `report watch`
rebuilds a long run's page after one new metrics line (it parses only the new bytes)
against rebuilding it from the whole stream.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from bench.result import Result
from millrace.home import Home
from reports import build_pages, build_run_page
from reports.composition import load_composition
from reports.training import MetricsTail
from trainer.records import METRICS_FILE

BUDGET_SECONDS = 10.0
BUDGET_BYTES = 3 * 1024 * 1024
REPEATS = 3
LONG_RUN_STEPS = 20_000


def main() -> list[Result]:
    from testkit.factory import make_reference_store  # stats-only store + 5 revisions built by mixtures

    with tempfile.TemporaryDirectory(prefix="bench-reports-") as tmp:
        home = Home.resolve(Path(tmp) / "home")
        store_dir = make_reference_store(home, revisions=5)
        builds, dumps = [], []
        for repeat in range(REPEATS):
            started = time.perf_counter()
            pages = build_pages(home, Path(tmp) / f"site-{repeat}", runs=[])
            builds.append(time.perf_counter() - started)
            data = load_composition(store_dir).page_data()
            started = time.perf_counter()
            json.dumps(data)
            dumps.append(time.perf_counter() - started)
        size = pages.stores[0].stat().st_size
    build_s, dump_s = statistics.median(builds), statistics.median(dumps)
    full_s, incremental_s = _watch_rebuilds()
    return [
        Result(
            "site build (200 cells, 5 revisions)",
            build_s,
            dump_s,
            "json.dumps of its page data",
            "s",
            higher_is_better=False,
        ),
        Result(
            "site build vs budget", build_s, BUDGET_SECONDS, "the 10 s budget", "s", higher_is_better=False, target=1.0
        ),
        Result(
            "store page size vs budget",
            size / 1e6,
            BUDGET_BYTES / 1e6,
            "the 3 MB budget",
            "MB",
            higher_is_better=False,
            target=1.0,
        ),
        Result(
            f"watch rebuild after 1 new line ({LONG_RUN_STEPS:,}-step stream)",
            incremental_s,
            full_s,
            "rebuild from the whole stream",
            "s",
            higher_is_better=False,
        ),
    ]


def _watch_rebuilds() -> tuple[float, float]:
    from testkit.factory import make_small_revisions, make_small_store, write_contract_metrics

    with tempfile.TemporaryDirectory(prefix="bench-reports-run-") as tmp:
        home = Home.resolve(Path(tmp) / "home")
        make_small_store(home)
        manifest = make_small_revisions(home)["natural"]
        run_dir = write_contract_metrics(home, "long", manifest, steps=LONG_RUN_STEPS, status="running")
        lines = (run_dir / METRICS_FILE).read_text().splitlines(keepends=True)
        (run_dir / METRICS_FILE).write_text("".join(lines[:-REPEATS]))
        site = Path(tmp) / "site"
        full, incremental = [], []
        tail = MetricsTail(run_dir / METRICS_FILE)
        build_run_page(home, "long", site, tail=tail)
        for line in lines[-REPEATS:]:
            with open(run_dir / METRICS_FILE, "a") as stream:
                stream.write(line)
            started = time.perf_counter()
            build_run_page(home, "long", site, tail=tail)
            incremental.append(time.perf_counter() - started)
            started = time.perf_counter()
            build_run_page(home, "long", site)
            full.append(time.perf_counter() - started)
    return statistics.median(full), statistics.median(incremental)
