import numpy as np
from datatrove.data import Document

from bench.near_duplicates import near_duplicate_corpus, removal_quality
from pipeline.stages.dedup import DedupSignatures, FindDuplicates, MinHasher, duplicate_file, load_duplicates


def test_fuzzy_dedup_finds_injected_near_duplicates(tmp_path):
    documents, cluster = near_duplicate_corpus()
    params = dict(ngram=5, bands=40, rows=3, seed=1)
    key_of = {doc_id: key for key, doc_id in enumerate(sorted(i for i, _ in documents))}  # key order = id order
    id_of = {key: doc_id for doc_id, key in key_of.items()}
    # two tasks, as an executor would run them
    for rank in range(2):
        step = DedupSignatures(tmp_path / "signatures", **params)
        mine = [Document(text=t, id=i, metadata={"source": "s", "key": key_of[i]}) for i, t in documents[rank::2]]
        assert len(list(step.run(iter(mine), rank, 2))) == len(mine)
    finder = FindDuplicates(tmp_path / "signatures", tmp_path / "dups", threshold=0.5, verify_threshold=0.4, exact=True, fuzzy=True,
                            **params)
    list(finder.run(None, 0, 1))
    lists = [load_duplicates(duplicate_file(tmp_path / "dups", rank)) for rank in range(2)]
    mine = [{key_of[i] for i, _ in documents[rank::2]} for rank in range(2)]
    assert all(set(found) <= mine[rank] for rank, found in enumerate(lists))  # each task's list holds its own
    removed = {id_of[doc]: id_of[kept] for found in lists for doc, (reason, kept) in found.items()}
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


def test_a_chain_of_matches_never_removes_a_document_unlike_the_kept_one():
    import random

    from pipeline.stages.dedup import content_hash, find_duplicates

    rng = random.Random(4)
    words = [f"w{rng.randrange(5000)}" for _ in range(400)]

    def edited(base, start):  # 5% of the words replaced, every 20th from `start`
        return [f"x{rng.randrange(5000)}" if i % 20 == start else w for i, w in enumerate(base)]

    a = words
    b = edited(a, 3)
    c = edited(b, 13)
    texts = [" ".join(t) for t in (a, b, c)]
    hasher = MinHasher(seed=1)
    sigs = np.stack([hasher.signature(t) for t in texts])
    agree = lambda i, j: float((sigs[i] == sigs[j]).mean())
    assert agree(0, 1) >= 0.5 and agree(1, 2) >= 0.5 and agree(0, 2) < 0.4, (agree(0, 1), agree(1, 2), agree(0, 2))
    keys = np.array([10, 11, 12], dtype=np.int64)
    hashes = np.array([content_hash(t) for t in texts], dtype=np.uint64)
    removed, _, kept = find_duplicates(keys, hashes, sigs, hasher, 0.5, True, verify_threshold=0.4)
    assert removed.tolist() == [11] and kept.tolist() == [10]  # c matches b, but not a, the one kept
    removed, _, _ = find_duplicates(keys, hashes, sigs, hasher, 0.5, True, verify_threshold=0.0)
    assert removed.tolist() == [11, 12]  # without the check the chain removes c too
