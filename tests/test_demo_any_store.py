"""The demo after its pipeline adapts to the store it built: another machine's files give another store.

A fresh clone failed `make demo` after 40 minutes on a store of 35 cells, 13 of them in q3/q4: the
micro-ladder's smallest rung scaled the `uniform-sampling` cooldown to 12 sequences. Here the shipped
micro-ladder is planned on a real token store of that shape, and the demo's mixtures, training,
micro-ladder (a lighter copy, same rules otherwise) and site run on it. And the demo's path from a corpus:
a generated corpus that gives 40 cells (16 in q3/q4) through the demo's pipeline config, its mixtures, and
the micro-ladder planned and every rung's revision built as `ladder run` builds it.
"""

from pathlib import Path

import pytest
from rich.console import Console

from demo.run import MICRO_LADDER, MIXTURE, REVISIONS, STORE, TRAINED_REVISION, DemoReport, from_store, pipeline_config
from pipeline.runner import run_pipeline
from pipeline.store.format import Store
from testkit.stores import make_store
from tests.pipeline.topic_corpus import write_topic_corpus
from trainer.ladder.plan import plan_ladder
from trainer.ladder.rung_revision import build_rung_revision, resolve_base, rung_problem

# 35 cells as the failing machine's: 8 domains, 13 cells in q3/q4
KEYS = [(d, q) for d in range(8) for q in range(3)][:22] + [(d, q) for d in range(8) for q in (3, 4)][:13]
CELLS = {f"c{d:02d}q{q}": (30_000 if q == 4 else 9_000) + 700 * ((d * 5 + q) % 7) for d, q in KEYS}


def test_the_shapes_of_the_failing_store():
    assert len(CELLS) == 35 and sum(cell[-1] in "34" for cell in CELLS) == 13


@pytest.mark.slow
def test_the_shipped_micro_ladder_is_sized_to_a_35_cell_store(home):
    make_store(home, CELLS, name="local")
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


def light_micro_ladder(path: Path) -> Path:
    """The shipped micro-ladder at a quarter of its tokens per parameter (the test's time; rungs raised more)."""
    text = MICRO_LADDER.read_text().replace("tokens_per_active_param = 12", "tokens_per_active_param = 3")
    assert text != MICRO_LADDER.read_text()
    path.write_text(text.replace('config = "tiny.toml"', f'config = "{MICRO_LADDER.parent / "tiny.toml"}"'))
    return path


@pytest.mark.slow
def test_the_demo_after_its_pipeline_runs_on_a_35_cell_store(home, tmp_path):
    store = make_store(home, CELLS, name="local", held_out=3)
    ladder = light_micro_ladder(tmp_path / "micro-ladder.toml")
    report = from_store(home, DemoReport(home=home.root, store=store), 2, Console(quiet=True), ladder)
    assert set(report.manifests) == {"natural", "uniform-sampling", "quality-tilt"}
    check = report.ladder
    assert check["target"] == "d32" and check["measured"] > 0 and check["low"] <= check["predicted"]
    assert (home.site / "ladders" / "micro" / "index.html").is_file()
    assert report.page.endswith(f"index.html?revision={TRAINED_REVISION}")


@pytest.mark.slow  # one pipeline run of 0.66 MB (~30 s of CPU): the only way to start from a corpus
def test_the_demo_path_from_a_generated_corpus_of_40_cells(home):
    """Corpus -> the demo's pipeline config -> store -> the shipped mixture -> the micro-ladder's rungs built."""
    corpus = home.root / "corpus" / STORE
    write_topic_corpus(corpus, 32)  # 768 documents: 8 topics x 3 sources (python-docs is the quality reference)
    config = pipeline_config(home, corpus)
    config = config.model_copy(
        update={  # byte-level tokens (enough for the shipped revisions' budgets), one task
            "tokenizer": config.tokenizer.model_copy(update={"vocab_size": 260}),
            "executor": config.executor.model_copy(update={"tasks": 1, "workers": 1}),
        }
    )
    cells = list(Store(run_pipeline(config, home)).manifest.cells)
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
