"""Readable domain labels: each domain's most distinctive content words, in whatever languages it holds.

A domain that gathers the same kind of page in twenty languages has, by frequency, the stop words
of twenty languages as its top terms. Terms come from class-based TF-IDF (BERTopic's c-TF-IDF) over
letter-only words that occur in at least two of the domain's documents, and every stop word of every
language present in the sample (`pipeline.cells.languages`) is left out.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer

from pipeline.cells.languages import ALWAYS, all_stop_words

LABEL_TOKEN_PATTERN = r"(?u)\b[^\W\d_]{3,24}\b"
MIN_DOCUMENTS = 2  # a label term occurs in at least this many of its domain's documents (fewer in a tiny domain)


def distinctive_terms(texts: Sequence[str], domains: np.ndarray, k: int, top: int,
                      languages: Sequence[str] = ALWAYS) -> list[list[str]]:
    """Per domain, up to `top` terms by c-TF-IDF: a term's frequency in the domain × log(1 + A / its total)."""
    vectorizer = CountVectorizer(token_pattern=LABEL_TOKEN_PATTERN, max_features=50_000)
    try:
        counts = vectorizer.fit_transform(texts).tocsr()
    except ValueError:  # no terms at all
        return [[] for _ in range(k)]
    vocabulary = vectorizer.get_feature_names_out()
    stop = all_stop_words(languages)
    content = np.fromiter((term not in stop for term in vocabulary), dtype=bool, count=len(vocabulary))
    domains = np.asarray(domains)
    per_domain = np.zeros((k, counts.shape[1]))
    documents = np.zeros((k, counts.shape[1]))
    for domain in range(k):
        rows = np.flatnonzero(domains == domain)
        if len(rows):
            per_domain[domain] = np.asarray(counts[rows].sum(axis=0)).ravel()
            documents[domain] = np.asarray((counts[rows] > 0).sum(axis=0)).ravel()
    words_per_domain = per_domain.sum(axis=1, keepdims=True)
    frequency = per_domain / np.maximum(words_per_domain, 1)
    idf = np.log(1 + words_per_domain.mean() / np.maximum(per_domain.sum(axis=0), 1))
    terms = []
    for domain in range(k):
        enough = documents[domain] >= min(MIN_DOCUMENTS, int(np.sum(domains == domain)))
        scores = np.where(content & enough, frequency[domain] * idf, 0.0)
        best = [i for i in np.lexsort((np.arange(len(vocabulary)), -scores))[:top] if scores[i] > 0]
        terms.append([str(vocabulary[i]) for i in best])
    return terms
