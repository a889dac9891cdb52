"""Readable domain labels: each domain's most distinctive content words, in whatever languages it holds.

A domain that gathers the same kind of page in twenty languages has, by frequency, the stop words
of twenty languages as its top terms. Terms come from class-based TF-IDF (BERTopic's c-TF-IDF) over
letter-only words that occur in at least two of the domain's documents, and every stop word of every
language present in the sample (`pipeline.cells.languages`) is left out.

A label describes the domain's majority: when the documents carry a group (their source), a domain's
terms are counted over its largest groups that together hold more than half of it, so a minority of
long, repetitive documents (an npm manual inside a domain of fortunes) cannot name the domain.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer

from pipeline.cells.languages import ALWAYS, all_stop_words

LABEL_TOKEN_PATTERN = r"(?u)\b[^\W\d_]{3,24}\b"
MIN_DOCUMENTS = 2  # a label term occurs in at least this many of its domain's documents (fewer in a tiny domain)


def majority_rows(rows: np.ndarray, groups: Sequence[str | None] | None) -> np.ndarray:
    """The domain's documents of its largest groups that together hold more than half of it (all without groups)."""
    if groups is None or len(rows) == 0:
        return rows
    labels = np.asarray([str(groups[i]) for i in rows])
    names, sizes = np.unique(labels, return_counts=True)
    order = sorted(range(len(names)), key=lambda i: (-sizes[i], names[i]))
    chosen, held = [], 0
    for i in order:
        chosen.append(names[i])
        held += sizes[i]
        if 2 * held > len(rows):
            break
    return rows[np.isin(labels, chosen)]


def distinctive_terms(
    texts: Sequence[str],
    domains: np.ndarray,
    k: int,
    top: int,
    languages: Sequence[str] = ALWAYS,
    groups: Sequence[str | None] | None = None,
) -> list[list[str]]:
    """Per domain, up to `top` terms by c-TF-IDF: a term's frequency in the domain's majority (by `groups`,
    e.g. the documents' sources) × log(1 + A / its total)."""
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
        rows = majority_rows(np.flatnonzero(domains == domain), groups)
        if len(rows):
            per_domain[domain] = np.asarray(counts[rows].sum(axis=0)).ravel()
            documents[domain] = np.asarray((counts[rows] > 0).sum(axis=0)).ravel()
    words_per_domain = per_domain.sum(axis=1, keepdims=True)
    frequency = per_domain / np.maximum(words_per_domain, 1)
    idf = np.log(1 + words_per_domain.mean() / np.maximum(per_domain.sum(axis=0), 1))
    terms = []
    for domain in range(k):
        enough = documents[domain] >= min(MIN_DOCUMENTS, len(majority_rows(np.flatnonzero(domains == domain), groups)))
        scores = np.where(content & enough, frequency[domain] * idf, 0.0)
        best = [i for i in np.lexsort((np.arange(len(vocabulary)), -scores))[:top] if scores[i] > 0]
        terms.append([str(vocabulary[i]) for i in best])
    return terms
