"""Cells: names, per-cell stats that do not depend on how tasks split the documents, store stats."""

from datatrove.data import Document

from pipeline.cells.stats import CellStatsTally, CellStatsWriter, cell_name, read_cell_stats, trim
from pipeline.steps.tokenize.cell_steps import store_stats


def test_cell_names():
    assert cell_name(3, 4) == "c03q4"
    assert cell_name(12, None) == "c12"
    assert cell_name(None, 0) == "q0"


def test_trim_keeps_short_text_and_cuts_long_text():
    assert trim("  short  ") == "short"
    long = "word " * 200
    assert len(trim(long)) <= 401 and trim(long).endswith("…")


def _docs(n=60):
    return [
        Document(
            text=f"document {i} " * 50,
            id=f"doc-{i:03d}",
            metadata={
                "source": "s",
                "cell": f"c0{i % 2}q{i % 3}",
                "domain": i % 2,
                "quality_bucket": i % 3,
                "quality_score": i / 100,
            },
        )
        for i in range(n)
    ]


def test_cell_stats_are_the_same_however_tasks_split_the_documents(tmp_path):
    docs = _docs()
    whole = tmp_path / "whole"
    list(CellStatsWriter(whole).run(iter(docs), rank=0))
    split = tmp_path / "split"
    for rank in range(3):
        list(CellStatsWriter(split).run(iter(docs[rank::3][::-1]), rank=rank, world_size=3))
    labels = {"c00": "zero", "c01": "one"}
    assert read_cell_stats(whole, labels) == read_cell_stats(split, labels)
    stats = read_cell_stats(whole, labels)
    assert set(stats) == {f"c0{d}q{b}" for d in range(2) for b in range(3)}
    cell = stats["c01q2"]
    assert cell["domain"] == 1 and cell["bucket"] == 2 and cell["label"] == "one"
    scores = [d.metadata["quality_score"] for d in docs if d.metadata["cell"] == "c01q2"]
    assert cell["score_range"] == [min(scores), max(scores)]
    assert len(cell["samples"]) == 5 and all(len(s["text"]) <= 401 for s in cell["samples"])
    assert set(cell["samples"][0]) == {"id", "source", "text"}


def test_merge_ignores_a_document_seen_twice():
    doc = _docs(1)[0]
    a, b = CellStatsTally(), CellStatsTally()
    a.add(doc)
    b.add(doc)
    assert len(a.merge(b).samples) == 1


def test_store_stats_carry_the_contract_keys(fitted):
    stats = store_stats(fitted.model_dir)
    assert stats.domains is not None and stats.quality is not None
    assert stats.domains.k == len(stats.domains.labels) == 8
    assert sorted(stats.domains.labels) == [f"c{d:02d}" for d in range(8)]
    assert all(isinstance(label, str) and label for label in stats.domains.labels.values())
    assert set(stats.model_dump()) == {"domains", "quality"}
    assert set(stats.model_dump()["quality"]) == {
        "buckets",
        "score_ranges",
        "good",
        "other",
        "calibrated_by",
        "meaning",
    }


def test_starter_sections_load_into_the_models_with_their_defaults(tmp_path):
    import tomllib

    from pipeline.cells.domains import DomainsConfig
    from pipeline.cells.quality import QualityConfig
    from pipeline.starter import init_config

    def starter(names: list[str]) -> str:
        for name in names:
            (tmp_path / "/".join(names) / name).mkdir(parents=True)
            (tmp_path / "/".join(names) / name / "a.jsonl").write_text('{"text": "a line"}\n')
        return init_config(tmp_path / "/".join(names))

    tables = tomllib.loads(starter(["python-code", "python-docs"]))
    assert QualityConfig(**tables["quality"]) == QualityConfig()
    assert DomainsConfig(**tables["domains"]) == DomainsConfig()
    # without the reference source, quality is written disabled rather than failing at fit time
    assert tomllib.loads(starter(["articles"]))["quality"]["enabled"] is False
