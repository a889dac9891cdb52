"""The store manifest's nested records are models: a store written before they were reads into them, unchanged,
and a record of another shape is refused in one line naming the file and the field."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from millrace.artifacts import read_envelope, write_artifact
from millrace.errors import ArtifactError
from pipeline.store.cli import store_summary
from pipeline.store.format import SCHEMA_VERSION, STORE_KIND, Store, StoreManifest
from reports.composition import _funnel

# store.json and sets/fresh/set.json of a store built by the pipeline before its funnel, statistics and overlap
# were models (quality buckets, 2 domains, decontamination on, an evaluation set; commit 445ffb0)
BEFORE = Path(__file__).parents[2] / "testkit" / "data" / "store-before-models"


def test_a_store_written_before_the_records_were_models_reads_into_them_unchanged():
    body = read_envelope(BEFORE / "store.json", STORE_KIND, (SCHEMA_VERSION,))
    store = Store(BEFORE)
    m = store.manifest
    # every key the old writer wrote is a field, and none is added: rewriting it gives the same payload (hash)
    assert m.model_dump(mode="json") == body.payload
    assert (m.funnel.stages[0].name, m.funnel.stages[-1].name) == ("read", "validation")
    config = m.pipeline_config  # the config it was built from, typed
    assert config is not None and config.domains is not None and config.quality is not None
    assert [(s.name, s.kind) for s in config.sources] == [
        ("articles", "prose"),
        ("notes", "prose"),
        ("snippets", "code"),
    ]
    assert (config.domains.k, config.quality.reference_sources, config.validation.sets[0].name) == (
        2,
        ["articles"],
        "fresh",
    )
    read = m.funnel.stages[0].sources["articles"]
    assert read.removed["malformed"].documents == 1 and read.received.documents > read.kept.documents
    assert m.stats.domain_labels() == {"c00": "river stream small", "c01": "total def return"}
    assert m.stats.quality is not None and m.stats.quality.score_ranges["*"]["q0"][0] == 0.0
    assert m.stats.decontamination is not None and (
        m.stats.decontamination.ngram,
        m.stats.decontamination.checked,
    ) == (
        13,
        16,
    )
    overlap = store.eval_set("fresh").overlap
    assert (overlap.exact, overlap.contained) == (2, 2) == (m.sets["fresh"].overlap_exact, m.sets["fresh"].contained)
    assert [(d.index, d.kind, d.cell) for d in overlap.documents] == [(0, "exact", "c00q0"), (1, "exact", "c00q4")]
    assert [d.share for d in overlap.contained_documents] == [1.0, 1.0]
    # what `store info` and the composition page show from it
    summary = store_summary(BEFORE)
    assert summary["funnel"][0]["stage"] == "read" and summary["decontamination"]["checked"] == 16
    assert [s["name"] for s in _funnel(m.funnel)] == [step.name for step in m.funnel.stages]


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("stats", {"domains": {"k": "two", "labels": {}}}, "stats.domains.k"),
        ("funnel", {"stages": [{"name": "read", "sources": {"a": {"kept": {"pages": 1}}}}]}, "funnel.stages.0"),
        ("stats", {"decontamination": {"ngram": 13}}, "stats.decontamination"),
        ("pipeline_config", {"sources": [{"name": "a", "paths": ["x"], "kind": "poetry"}]}, "pipeline_config"),
    ],
)
def test_a_record_of_another_shape_is_one_line_naming_the_file_and_field(tmp_path, field, value, named):
    shutil.copytree(BEFORE, tmp_path / "store")
    path = tmp_path / "store" / "store.json"
    payload = read_envelope(path, STORE_KIND, (SCHEMA_VERSION,)).payload
    write_artifact(path, STORE_KIND, SCHEMA_VERSION, payload | {field: value})
    with pytest.raises(ArtifactError) as caught:
        Store(tmp_path / "store")
    message = str(caught.value)
    assert str(path) in message and named in message and "\n" not in message


def test_the_recorded_config_opens_without_the_checks_a_config_file_gets(tmp_path):
    """A store names filters and an embedder by the names they had when it was built: renamed or unknown since,
    the store still opens (a config file naming them is refused, `test_filter_registry`)."""
    shutil.copytree(BEFORE, tmp_path / "store")
    path = tmp_path / "store" / "store.json"
    payload = read_envelope(path, STORE_KIND, (SCHEMA_VERSION,)).payload
    config = dict(payload["pipeline_config"])
    config["filters"] = {"retired_filter": {"level": 3}}
    config["sources"] = [dict(config["sources"][0], filters=["retired_filter"])]
    config["domains"] = dict(config["domains"], embedder="gone.module:Embedder")
    write_artifact(path, STORE_KIND, SCHEMA_VERSION, payload | {"pipeline_config": config})
    recorded = Store(tmp_path / "store").manifest.pipeline_config
    assert recorded is not None and recorded.domains is not None
    assert (recorded.sources[0].filters, recorded.filters, recorded.domains.embedder) == (
        ["retired_filter"],
        {"retired_filter": {"level": 3}},
        "gone.module:Embedder",
    )


def test_a_stats_only_store_writes_its_empty_funnel_and_stats_as_before(tmp_path):
    """Shipped revisions pin the reference stats-only stores' hashes: their store.json must not change."""
    from pipeline.store.format import write_stats_only_store

    write_stats_only_store(tmp_path, "s", "v", {"a": 10})
    payload = read_envelope(tmp_path / "store.json", STORE_KIND, (SCHEMA_VERSION,)).payload
    assert (payload["funnel"], payload["stats"], payload["pipeline_config"]) == ({}, {}, {})
    assert Store(tmp_path).manifest.pipeline_config is None
    assert StoreManifest.model_validate(payload).model_dump(mode="json") == payload


def test_the_cell_records_of_a_store_written_before_read_into_their_model_unchanged():
    from pipeline.store.format import CELL_KIND, CELL_SCHEMA_VERSION, CellManifest

    store = Store(BEFORE)
    for name in store.manifest.cells:
        body = read_envelope(store.cell_dir(name) / "cell.json", CELL_KIND, (CELL_SCHEMA_VERSION,))
        cell = store.cell(name)
        assert cell.model_dump(mode="json") == body.payload
        assert CellManifest.model_validate(body.payload).stats == cell.stats
        assert (
            cell.stats.domain == int(name[1:3]) and cell.stats.label == store.manifest.stats.domain_labels()[name[:3]]
        )
        assert cell.stats.trace is not None and cell.stats.trace.parts and cell.stats.samples
    # the pinned files they list: every trace part, training and held out
    parts = [p for p, _, owner in store.pinned_files() if owner.endswith("cell.json")]
    assert {p.name for p in parts} >= {"documents-00000.parquet", "held-out-documents-00000.parquet"}
