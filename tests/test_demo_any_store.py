"""The demo after its pipeline adapts to the store it built: another machine's files give another store.

A fresh clone failed `make demo` after 40 minutes on a store of 35 cells, 13 of them in q3/q4: the
micro-ladder's smallest rung scaled the `uniform-sampling` cooldown to 12 sequences. Here the shipped
micro-ladder is planned on a real token store of that shape. And the demo's whole path from a corpus: a
generated corpus that gives 40 cells (16 in q3/q4) through the demo's pipeline config (once for the module),
its mixtures, the micro-ladder planned and every rung's revision built as `ladder run` builds it; then the
demo after its pipeline on that store: training, a micro-ladder of its smallest rungs trained, fitted and
checked against the next rung up, and the site.
"""

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from demo.run import (
    MICRO_LADDER,
    MIXTURE,
    REVISIONS,
    RUN,
    STORE,
    TRAINED_REVISION,
    DemoReport,
    from_store,
    pipeline_config,
)
from millrace.home import Home
from pipeline.runner import run_pipeline
from pipeline.store.format import Store
from testkit.stores import LEARNABLE, make_store
from testkit.topic_corpus import write_topic_corpus
from trainer.ladder.plan import plan_ladder
from trainer.ladder.results import read_ladder
from trainer.ladder.rung_revision import build_rung_revision, resolve_base, rung_problem

# 35 cells as the failing machine's: 8 domains, 13 cells in q3/q4
KEYS = [(d, q) for d in range(8) for q in range(3)][:22] + [(d, q) for d in range(8) for q in (3, 4)][:13]
CELLS = {f"c{d:02d}q{q}": (30_000 if q == 4 else 9_000) + 700 * ((d * 5 + q) % 7) for d, q in KEYS}


def test_the_shapes_of_the_failing_store():
    assert len(CELLS) == 35 and sum(cell[-1] in "34" for cell in CELLS) == 13


@pytest.mark.slow
def test_the_shipped_micro_ladder_is_sized_to_a_35_cell_store(home):
    make_store(home, CELLS, replace(LEARNABLE, name="local"))
    import mixtures

    mixtures.build_result(home, "default", TRAINED_REVISION)
    plan = plan_ladder(MICRO_LADDER, home)
    smallest = plan.rungs[0]
    # the fresh clone's failure: the cooldown of 12 sequences for 13 cells; raised by whole steps of 4
    assert smallest.raised_from == 21_024 and "in 12 sequences" in smallest.raised_because
    assert smallest.tokens == 23 * smallest.batch * plan.seq_len
    base = resolve_base(home, "default", TRAINED_REVISION)
    for rung in plan.rungs + [plan.target]:
        assert rung_problem(base, rung.name, rung.tokens, rung.batch) is None, rung.name


@pytest.fixture(scope="module")
def store_of_40_cells(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Home, Path]]:
    """(home, store): a generated corpus through the demo's pipeline config, once for the module (one pipeline
    run of 0.66 MB, ~30 s of CPU: the only way to start from a corpus)."""
    home = Home.resolve(tmp_path_factory.mktemp("demo-40-cells"))
    corpus = home.root / "corpus" / STORE
    write_topic_corpus(corpus, 32)  # 768 documents: 8 topics x 3 sources (python-docs is the quality reference)
    config = pipeline_config(home, corpus)
    config = config.model_copy(
        update={  # byte-level tokens (enough for the shipped revisions' budgets), one task
            "tokenizer": config.tokenizer.model_copy(update={"vocab_size": 260}),
            "executor": config.executor.model_copy(update={"tasks": 1, "workers": 1}),
        }
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MILLRACE_HOME", str(home.root))
        yield home, run_pipeline(config, home)


@pytest.mark.slow
def test_the_demo_path_from_a_generated_corpus_of_40_cells(store_of_40_cells):
    """Corpus -> the demo's pipeline config -> store -> the shipped mixture -> the micro-ladder's rungs built."""
    home, store = store_of_40_cells
    cells = list(Store(store).manifest.cells)
    assert len(cells) >= 30 and sum(cell[-1] in "34" for cell in cells) >= 13  # the fresh clone's failing shape
    import mixtures

    for revision in REVISIONS:
        mixtures.build_result(home, MIXTURE, revision)
    plan = plan_ladder(MICRO_LADDER, home)
    smallest = plan.rungs[0]
    base = resolve_base(home, MIXTURE, TRAINED_REVISION)
    assert "no sample in 12 sequences" in rung_problem(base, smallest.name, smallest.raised_from, smallest.batch)
    for rung in plan.rungs + [plan.target]:  # what `ladder run` builds before training each rung
        build_rung_revision(home, MIXTURE, TRAINED_REVISION, plan.spec.ladder, rung.name, rung.tokens, rung.batch)


SMALLEST_RUNGS = {  # the shipped micro-ladder cut to its three smallest rungs, predicting d24, in few large steps
    'ladder = "micro"': 'ladder = "smallest"',
    "widths = [8, 12, 16, 24]": "widths = [8, 12, 16]",
    "layers = [1, 1, 1, 2]": "layers = [1, 1, 1]",
    "tokens_per_active_param = 12": "tokens_per_active_param = 3",
    "minimum = 4": "minimum = 16",  # the 40 cells' smallest feasible budget in 3 steps, not 23
    'name = "d32"\nd_model = 32\nlayers = 2': 'name = "d24"\nd_model = 24\nlayers = 1',
    "evaluations = 3\nmax_sequences = 4": "evaluations = 1\nmax_sequences = 1",
    "mfu = 0.25": "mfu = 0.25\npeak_flops = 1e11",  # no matmul measured to estimate the rungs' seconds
    'config = "tiny.toml"': f'config = "{MICRO_LADDER.parent / "tiny.toml"}"',
}


def smallest_rungs_ladder(path: Path) -> Path:
    text = MICRO_LADDER.read_text()
    for old, new in SMALLEST_RUNGS.items():
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text)
    return path


@pytest.mark.slow
def test_the_demo_after_its_pipeline_on_the_40_cell_store_trains_fits_predicts_and_builds_its_site(
    store_of_40_cells, tmp_path
):
    """The demo's steps after its pipeline (`from_store`) on the corpus's store: the shipped mixture, the tiny MoE
    for two steps, the smallest rungs trained, fitted and checked against d24 (trained too), the site. On this
    store such rungs barely learn, so the fit may rise or run off: flagged, printed, recorded; never a crash."""
    home, store = store_of_40_cells
    console = Console(record=True, width=200)
    ladder = smallest_rungs_ladder(tmp_path / "smallest.toml")
    report = from_store(home, DemoReport(home=home.root, store=store), 2, console, ladder)
    assert set(report.manifests) == set(REVISIONS)
    metrics = (home.run(RUN) / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in metrics] == [1, 2]
    check = report.ladder
    assert check is not None and check["target"] == "d24" and check["measured"] > 0
    fit = read_ladder(home, "smallest").fits[TRAINED_REVISION]
    assert [p["name"] for p in fit["predictions"]] == ["d24"] and fit["predictions"][0]["loss"] == check["predicted"]
    assert check["warnings"] == fit["warnings"]
    printed = console.export_text()
    assert f"d24 at {check['flops']:.3g} FLOPs: predicted {check['predicted']:.4f}" in printed
    assert all(f"warning: {w}" in printed for w in check["warnings"])
    for page in (
        home.site / "index.html",
        home.site / STORE / store.name / "index.html",
        home.site / "runs" / RUN / "index.html",
        home.site / "ladders" / "smallest" / "index.html",
    ):
        assert page.is_file(), page
    ladder_page = (home.site / "ladders" / "smallest" / "index.html").read_text()
    assert '<td class="l">d24</td>' in ladder_page
