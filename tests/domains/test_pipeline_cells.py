"""The pipeline with quality and domains: cells `cNNqQ`, their stats, and the same cells however it runs."""

import json
from collections import Counter

import pytest

from millrace.home import Home
from millrace.ray_cluster import connect_ray
from pipeline.config import load_pipeline_config
from pipeline.runner import run_pipeline
from pipeline.store.cli import store_summary
from pipeline.store.format import Store
from testkit.local_corpus import cells_config_text, write_local_corpus

pytestmark = pytest.mark.slow  # every test reads one pipeline run with fitted cells (a module fixture of ~50 s)

PER_SOURCE = 40


def _build(root, sources, tasks, executor=None, workers=1):
    config_path = root / f"pipeline-{tasks}.toml"
    config_path.write_text(cells_config_text(root / "corpus", sources, tasks, workers))
    return run_pipeline(
        load_pipeline_config(config_path),
        Home.resolve(root / f"home-{tasks}-{executor}"),
        executor=executor,
        workers=workers,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("cells")
    sources, documents = write_local_corpus(root / "corpus", PER_SOURCE)
    return root, sources, documents, _build(root, sources, tasks=2)


def _cells(path):
    store = Store(path)
    return {
        name: (cell.documents, cell.tokens, store.cell(name).shards.digests, store.cell(name).stats)
        for name, cell in store.manifest.cells.items()
    }


def test_cells_are_domain_by_bucket_with_their_stats(built):
    _, _, documents, path = built
    store = Store(path)
    assert store.verify() == []
    stats = store.manifest.stats
    assert stats.domains is not None and stats.quality is not None
    assert stats.domains.k == 4 and sorted(stats.domains.labels) == ["c00", "c01", "c02", "c03"]
    assert stats.quality.buckets == 5
    # the fitted models travel with the store, so its cells can be reproduced from it alone
    assert (path / "models" / "domains.json").is_file() and (path / "models" / "quality.json").is_file()
    assert not (path / "models" / "cell-stats").exists()
    names = sorted(store.manifest.cells)
    assert all(len(n) == 5 and n[0] == "c" and n[3] == "q" for n in names), names
    # every kept document is in exactly one cell: the cells' totals are the store's totals
    funnel = {stage.name: stage.sources for stage in store.manifest.funnel.stages}
    kept = sum(s.kept.documents for s in funnel["tokenize"].values())
    # (training documents plus each cell's held-out ones)
    assert sum(c.documents + c.validation_documents for c in store.manifest.cells.values()) == kept
    assert 0.8 * documents <= kept <= documents  # exact dedup drops the repeated licence texts
    assert sum(c.tokens + c.validation_tokens for c in store.manifest.cells.values()) == sum(
        s.kept.tokens for s in funnel["tokenize"].values()
    )
    buckets = Counter()
    for name in names:
        cell = store.cell(name)
        assert cell.stats.domain == int(name[1:3]) and cell.stats.bucket == int(name[4])
        assert cell.stats.label == stats.domains.labels[name[:3]]
        assert cell.stats.score_range is not None and cell.stats.languages and cell.stats.samples
        lo, hi = cell.stats.score_range
        ranges = [group[name[3:]] for group in stats.quality.score_ranges.values()]
        assert min(r[0] for r in ranges) <= lo <= hi <= max(r[1] for r in ranges)
        assert sum(cell.stats.languages.values()) == cell.documents + cell.validation.documents
        assert 1 <= len(cell.stats.samples) <= 5
        buckets[name[3:]] += cell.documents + cell.validation.documents
    # edges are quantiles of the ~70 held-out documents of this small corpus (the classifier scores the half it
    # trained on more confidently), so every bucket is filled, though not to exact fifths
    assert sorted(buckets) == [f"q{b}" for b in range(5)]
    assert all(0.05 <= count / kept <= 0.35 for count in buckets.values()), buckets


def test_store_info_shows_the_grid_with_labels(built):
    _, _, _, path = built
    grid = store_summary(path)["grid"]
    assert sorted(grid["labels"]) == ["c00", "c01", "c02", "c03"]
    total = sum(sum(row.values()) for row in grid["tokens"].values())
    assert total == sum(c.tokens for c in Store(path).manifest.cells.values())


def test_store_info_says_what_the_score_means_and_each_buckets_language_mix(built):
    from click.testing import CliRunner

    from pipeline.store.cli import info

    _, _, _, path = built
    quality = store_summary(path)["quality"]
    assert quality["good"] == ["prose"] and "prose" in quality["meaning"]
    mix = quality["language_mix"]
    assert sorted(mix["buckets"]) == [f"q{b}" for b in range(5)]
    store = Store(path)
    documents = sum(store.cell(c).documents + store.cell(c).validation.documents for c in store.manifest.cells)
    assert sum(mix["corpus"].values()) == documents == sum(sum(row.values()) for row in mix["buckets"].values())
    shown = CliRunner().invoke(info, [str(path)]).output
    assert "quality score: P(good)" in shown and "language mix per bucket" in shown


def _cell_contents(path):
    """Per cell: counts, its documents (sorted token bytes, training and held out) and its stats less the
    trace parts (the training documents' and the held-out documents'), which follow the task split as the shards
    do: a part is named by the tokenize task that wrote it."""
    from pipeline.store.format import ShardReader

    store = Store(path)
    contents = {}
    for name, summary in store.manifest.cells.items():
        cell = store.cell(name)
        readers = [ShardReader(store.shard_prefix(name, s)) for s in [*cell.shards.rows(), *cell.validation.shards]]
        documents = sorted(r.document(i).tobytes() for r in readers for i in range(r.documents))
        stats = cell.stats.model_dump(exclude={"trace", "held_out_trace"})
        contents[name] = (summary.documents, summary.tokens, summary.validation_documents, documents, stats)
    return contents


def test_another_task_split_gives_the_same_cells(built):
    root, sources, _, path = built
    assert _cell_contents(_build(root, sources, tasks=3)) == _cell_contents(path)


@pytest.mark.slow
def test_the_ray_executor_with_several_worker_processes_gives_the_identical_store(built):
    """The one Ray test (its start-up is the cost): tasks run in worker processes, none in the driver, and the
    store, cells with quality and domains included, equals the local executor's byte for byte."""
    import os

    ray = pytest.importorskip("ray")
    root, sources, _, path = built
    connect_ray(2)
    try:
        other = _build(root, sources, tasks=2, executor="ray", workers=2)
    finally:
        ray.shutdown()
    work = Home.resolve(root / "home-2-ray").work("local", "2026.01.03")
    pids = {
        "tokenize": {json.loads(p.read_text())["worker"]["pid"] for p in (work / "tokens").glob("*/held-out.json")},
        "shards": {json.loads(p.read_text())["worker"]["pid"] for p in (work / "parts").glob("*.json")},
    }
    for phase, seen in pids.items():
        assert len(seen) == 2 and os.getpid() not in seen, (phase, seen)
    assert _cells(other) == _cells(path)
    files = {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
    assert {p.relative_to(other).as_posix(): p.read_bytes() for p in sorted(other.rglob("*")) if p.is_file()} == files


@pytest.mark.slow
def test_a_run_killed_after_fitting_then_rerun_gives_the_identical_store(built):
    import os
    import signal
    import subprocess
    import sys
    import time

    root, _, _, path = built
    home = root / "home-killed"
    work = home / "work" / "local" / "2026.01.03"
    command = [sys.executable, "-m", "millrace", "pipeline", "run", str(root / "pipeline-2.toml")]
    env = {**os.environ, "MILLRACE_HOME": str(home)}

    def start():
        return subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )

    process = start()
    deadline = time.monotonic() + 120
    while not (work / "models" / "cell-stats").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    killed = process.poll() is None
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert killed, "the run finished before the kill point"
    assert (work / "models" / "domains.json").exists()
    assert start().wait(timeout=300) == 0
    rerun = home / "stores" / "local" / "2026.01.03"

    def files(p):
        return {f.relative_to(p).as_posix(): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}

    assert files(rerun) == files(path)
