import numpy as np
from datatrove.data import Document

from bench.near_duplicates import near_duplicate_corpus, removal_quality
from pipeline.stages.dedup import DedupSignatures, FindDuplicates, MinHasher, load_duplicates


def test_fuzzy_dedup_finds_injected_near_duplicates(tmp_path):
    documents, cluster = near_duplicate_corpus()
    params = dict(ngram=5, bands=40, rows=3, seed=1)
    # two tasks, as an executor would run them
    for rank in range(2):
        step = DedupSignatures(tmp_path / "signatures", **params)
        mine = [Document(text=t, id=i, metadata={"source": "s"}) for i, t in documents[rank::2]]
        assert len(list(step.run(iter(mine), rank, 2))) == len(mine)
    finder = FindDuplicates(tmp_path / "signatures", tmp_path / "dups.npz", threshold=0.5, exact=True, fuzzy=True,
                            **params)
    list(finder.run(None, 0, 1))
    removed = {doc: kept for doc, (reason, kept) in load_duplicates(tmp_path / "dups.npz").items()}
    recall, precision = removal_quality(set(removed), cluster)
    assert recall >= 0.95, recall
    assert precision >= 0.99, precision
    # the smallest id of each cluster is the one kept
    assert all(kept < doc for doc, kept in removed.items())


def test_signatures_are_a_pure_function_of_the_text():
    a, b = MinHasher(seed=1), MinHasher(seed=1)
    text = "one two three four five six seven eight nine ten"
    assert np.array_equal(a.signature(text), b.signature(text))
    assert a.signature("Short text").shape == (120,)
    assert np.array_equal(a.signature("One, two; THREE four five six"), a.signature("one two three four five six"))
