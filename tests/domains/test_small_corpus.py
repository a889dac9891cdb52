"""A small corpus gets fewer domains with a notice, never an error with a wrong count; an empty sample is one
line that says what to set."""

import logging
import random

import pytest
from datatrove.data import Document

from millrace.errors import ConfigError
from pipeline.cells.domains import DomainModel, DomainsConfig, domains_stats, fit_domains
from testkit.corpus import prose


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
    assert domains_stats(tmp_path).k_configured == 8
    assert set(model.assign([d.text for d in documents(count)])) <= set(range(model.k))


def test_an_empty_sample_says_what_to_set(tmp_path):
    with pytest.raises(ConfigError) as raised:
        fit_domains([], DomainsConfig(k=8), tmp_path)
    message = str(raised.value)
    assert "\n" not in message and "domains.enabled = false" in message and "no document reached" in message


def test_a_corpus_of_one_document_gets_one_domain(tmp_path):
    """The whole corpus in one long document: one domain, not an SVD error (`k` must be ... < min(A.shape))."""
    long = [Document(text="\n".join(d.text for d in documents(60)), id="book", metadata={"key": 0, "language": "en"})]
    fit_domains(long, DomainsConfig(k=8), tmp_path)
    model = DomainModel.load(tmp_path)
    assert model.k == 1 and list(model.assign([long[0].text, documents(1)[0].text])) == [0, 0]
