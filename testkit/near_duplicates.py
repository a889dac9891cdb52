"""A corpus with injected near-duplicates: copies with 1–5% of words edited, plus unrelated documents."""

from __future__ import annotations

import random

import numpy as np


def zipf_words(rng: np.random.Generator, vocabulary: list[str], n: int) -> list[str]:
    ranks = np.minimum(rng.zipf(1.15, size=n), len(vocabulary)) - 1
    return [vocabulary[r] for r in ranks]


def edit_words(rng: random.Random, words: list[str], fraction: float, vocabulary: list[str]) -> list[str]:
    words = list(words)
    for _ in range(max(1, round(len(words) * fraction))):
        i = rng.randrange(len(words))
        action = rng.random()
        if action < 0.6:
            words[i] = rng.choice(vocabulary)
        elif action < 0.8:
            words.insert(i, rng.choice(vocabulary))
        elif len(words) > 1:
            del words[i]
    return words


def near_duplicate_corpus(
    originals: int = 600, with_copies: int = 300, seed: int = 7
) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """Returns (documents as (id, text), cluster label per id): copies share their original's label."""
    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "po", "se", "vi", "do", "ga", "he", "ju", "be", "fa", "zo"]
    vocabulary = sorted({"".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(8000)})
    documents, cluster = [], {}
    for i in range(originals):
        words = zipf_words(np_rng, vocabulary, rng.randint(80, 600))
        doc_id = f"doc-{i:05d}"
        documents.append((doc_id, " ".join(words)))
        cluster[doc_id] = i
        if i < with_copies:
            for c in range(rng.randint(1, 3)):
                copy_id = f"doc-{i:05d}-copy{c}"
                documents.append((copy_id, " ".join(edit_words(rng, words, rng.uniform(0.01, 0.05), vocabulary))))
                cluster[copy_id] = i
    rng.shuffle(documents)
    return documents, cluster


def removal_quality(removed: set[str], cluster: dict[str, int]) -> tuple[float, float]:
    """(recall, precision) of a set of removed ids against the true clusters.

    A cluster of size s should lose exactly s - 1 documents; removals up to that are right,
    removals beyond it (the whole cluster gone) and removals of unique documents are wrong.
    """
    sizes: dict[int, int] = {}
    taken: dict[int, int] = {}
    for doc, label in cluster.items():
        sizes[label] = sizes.get(label, 0) + 1
        if doc in removed:
            taken[label] = taken.get(label, 0) + 1
    right = sum(min(count, sizes[label] - 1) for label, count in taken.items())
    should = sum(size - 1 for size in sizes.values())
    return right / should, (right / len(removed) if removed else 1.0)
