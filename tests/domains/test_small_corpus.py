"""A small corpus gets fewer domains with a notice, never an error with a wrong count; an empty sample is one
line that says what to set."""

import json
import logging
import random

import pytest

from datatrove.data import Document
from millrace.errors import ConfigError
from millrace.home import Home
from pipeline.cells.domains import DomainModel, DomainsConfig, domains_stats, fit_domains
from pipeline.config import load_pipeline_config
from pipeline.runner import PipelineError, run_pipeline
from tests.pipeline.corpus_fixture import prose


def documents(count: int, seed: int = 0) -> list[Document]:
    rng = random.Random(seed)
    return [Document(text=prose(rng), id=f"d{i}", metadata={"key": i, "language": "en"}) for i in range(count)]


@pytest.mark.parametrize("count, most", [(60, 7), (12, 1), (5, 1)])
def test_a_small_sample_gets_fewer_domains_with_a_notice(tmp_path, caplog, count, most):
    with caplog.at_level(logging.WARNING, logger="pipeline.cells.domains"):
        fit_domains(documents(count), DomainsConfig(k=8), tmp_path)
    model = DomainModel.load(tmp_path)
    assert 1 <= model.k <= most
    assert f"{count} documents in the sample give" in caplog.text and "domains.k = 8" in caplog.text
    assert domains_stats(tmp_path)["k_configured"] == 8
    assert set(model.assign([d.text for d in documents(count)])) <= set(range(model.k))


def test_an_empty_sample_says_what_to_set(tmp_path):
    with pytest.raises(ConfigError) as raised:
        fit_domains([], DomainsConfig(k=8), tmp_path)
    message = str(raised.value)
    assert "\n" not in message and "domains.enabled = false" in message and "no document reached" in message


@pytest.mark.slow  # a pipeline run (~10 s of CPU): the only way to show where the run stops
def test_a_corpus_whose_documents_all_fail_the_filters_says_which_and_what_to_change(tmp_path):
    """The reporter's "8 domains need as many documents; the sample has 0": 60 distinct documents, every one
    removed before the sample (here too short for gopher_quality). The run stops there, before the tokenizer
    and the cell models, with what removed them; it does not blame domains.k."""
    rng = random.Random(3)
    (tmp_path / "corpus" / "fortunes").mkdir(parents=True)
    lines = [json.dumps({"id": f"f{i}", "text": " ".join(prose(rng).split()[:20])}) + "\n" for i in range(60)]
    (tmp_path / "corpus" / "fortunes" / "part-0.jsonl").write_text("".join(lines))
    (tmp_path / "p.toml").write_text(
        f'[[sources]]\nname = "fortunes"\npaths = ["{tmp_path / "corpus" / "fortunes"}"]\nlanguage_id = false\n'
        'filters = ["gopher_quality"]\n[dedup]\nfuzzy = false\n[domains]\nk = 8\n[executor]\ntasks = 1\nworkers = 1\n')
    with pytest.raises(PipelineError) as raised:
        run_pipeline(load_pipeline_config(tmp_path / "p.toml"), Home.resolve(tmp_path / "home"))
    message = str(raised.value)
    assert "\n" not in message and "domains" not in message
    assert "60 read" in message and "gopher_quality 60 (gopher_short_doc 60)" in message
    assert "[filters.<name>]" in message
    assert not any((tmp_path / "home").rglob("tokenizer.json"))  # stopped before fitting on nothing
