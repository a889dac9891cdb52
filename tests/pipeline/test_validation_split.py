"""The held-out split: by keyed hash, bounded per cell, in validation shards, never in training batches."""

import json
import random

import numpy as np
import pytest

from loader import MixtureStream
from millrace.home import Home
from pipeline.cells.held_out_split import (
    HeldOutConfig,
    document_hash,
    held_out,
    held_out_mask,
    split_candidates,
    split_cutoff,
)
from pipeline.config import load_pipeline_config
from pipeline.runner import run_pipeline
from pipeline.store.format import ShardReader, Store
from testkit.corpus import config_text, make_corpus, prose, write_jsonl_zst, write_overlapping_eval_set


def by_fraction(**options):
    return HeldOutConfig(tokens_per_cell=0, max_token_share=1.0, **options)


def test_the_split_depends_on_content_and_key_only():
    rng = np.random.default_rng(0)
    hashes = np.asarray([document_hash(rng.integers(0, 5000, size=50), seed=0) for _ in range(5000)], dtype=np.uint64)
    lengths = np.full(hashes.size, 50)
    config = by_fraction(fraction=0.01, max_documents_per_cell=200)
    mask = held_out(hashes, lengths, config)
    assert 25 <= mask.sum() <= 75  # about 1% of 5,000
    order = rng.permutation(hashes.size)
    assert np.array_equal(held_out(hashes[order], lengths, config), mask[order])  # position plays no part
    assert held_out(hashes, lengths, by_fraction(fraction=0.5, max_documents_per_cell=200)).sum() == 200
    assert (
        held_out(hashes[:2], lengths[:2], config).sum() == 1 and held_out(hashes[:1], lengths[:1], config).sum() == 0
    )
    assert held_out(hashes[:2], lengths[:2], by_fraction(fraction=0.9)).sum() == 1  # a cell keeps a training document
    assert held_out(hashes, lengths, by_fraction(fraction=0.0)).sum() == 0
    doc = rng.integers(0, 5000, size=50)
    assert document_hash(doc, 0) == document_hash(doc.astype(np.uint16), 0) != document_hash(doc, 1)  # keyed


@pytest.mark.parametrize(
    "fraction,cap,tokens,share",
    [
        (0.01, 200, 0, 1.0),
        (0.5, 30, 0, 1.0),
        (0.0001, 200, 0, 1.0),
        (0.3, 1, 0, 1.0),
        (0.0, 200, 4096, 0.2),
        (0.005, 200, 20_000, 0.2),
        (0.0, 200, 10**6, 0.05),
        (0.01, 5, 4096, 1.0),
    ],
)
def test_the_split_merged_from_each_tasks_candidates_is_the_split_of_the_whole_cell(fraction, cap, tokens, share):
    """Each task offers a few (hash, key, length) candidates; the cutoff merged from them holds out exactly
    the documents the split of the whole cell holds out, whatever the number of tasks."""
    rng = np.random.default_rng(3)
    hashes = rng.integers(0, 2**64 - 1, size=3000, dtype=np.uint64)
    keys = rng.permutation(10**6)[:3000].astype(np.int64)
    lengths = rng.integers(202, 1025, size=3000)
    config = HeldOutConfig(
        fraction=fraction, max_documents_per_cell=cap, tokens_per_cell=tokens, max_token_share=share
    )
    total = int(lengths.sum())
    whole = held_out_mask(
        hashes, keys, split_cutoff(hashes.size, total, split_candidates(hashes, keys, lengths, config), config)
    )
    by_position = held_out(hashes, lengths, config)
    assert np.array_equal(whole, by_position) and 1 <= whole.sum() <= cap  # no ties: keys decide nothing here
    for tasks in (2, 7, 64):
        parts = np.array_split(rng.permutation(hashes.size), tasks)
        offered = [split_candidates(hashes[p], keys[p], lengths[p], config) for p in parts]
        assert sum(len(o) for o in offered) <= tasks * cap
        cutoff = split_cutoff(hashes.size, total, np.concatenate(offered), config)
        assert np.array_equal(held_out_mask(hashes, keys, cutoff), whole)


def test_the_held_out_size_is_set_in_tokens():
    """The default holds out the lowest-hash documents until they reach 4,096 tokens (the demo's cells held
    one 202-1,024-token document each), within the share of a small cell's tokens it may take."""
    rng = np.random.default_rng(4)
    hashes = rng.integers(0, 2**64 - 1, size=300, dtype=np.uint64)
    lengths = rng.integers(202, 1025, size=300)
    for cell in (slice(0, 300), slice(0, 60)):
        mask = held_out(hashes[cell], lengths[cell], HeldOutConfig())
        held = np.sort(hashes[cell][mask])
        assert np.array_equal(held, np.sort(hashes[cell])[: mask.sum()])  # the lowest hashes
        assert mask.sum() > 1
        assert lengths[cell][mask].sum() >= 4096 and lengths[cell][mask].sum() - lengths[cell][mask].max() < 4096
    tiny = held_out(hashes[:12], lengths[:12], HeldOutConfig())  # about 7,500 tokens: a fifth of them at most
    assert tiny.sum() >= 1 and (tiny.sum() == 1 or lengths[:12][tiny].sum() <= 0.2 * lengths[:12].sum())
    assert (
        held_out(hashes, lengths, HeldOutConfig(tokens_per_cell=10_000)).sum()
        > held_out(hashes, lengths, HeldOutConfig()).sum()
    )


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("split")
    corpus = make_corpus(root / "corpus")
    corpus_rng = random.Random(0)  # make_corpus's own sequence of texts
    articles = [prose(corpus_rng) for _ in range(60)]
    long_note = {"id": "n-all", "text": "\n\n".join(articles)}  # every article inside one long training document
    write_jsonl_zst(corpus / "notes" / "z.jsonl.zst", [long_note])
    write_overlapping_eval_set(root / "sets" / "fresh.jsonl")
    config_path = root / "pipeline.toml"
    config_path.write_text(
        config_text(corpus) + "\n[validation]\nfraction = 0.1\nmax_documents_per_cell = 3\n"
        '\n[[validation.sets]]\nname = "fresh"\npaths = ["sets/fresh.jsonl"]\nformat = "jsonl"\n'
    )
    home = Home.resolve(root / "home")
    return home, run_pipeline(load_pipeline_config(config_path), home)


def documents_of(prefix, dtype):
    reader = ShardReader(prefix, dtype)
    return [reader.document(i).tobytes() for i in range(reader.documents)]


@pytest.mark.slow
def test_held_out_documents_are_in_validation_shards_only(store_path):
    _, path = store_path
    store = Store(path)
    assert store.verify() == []
    for name, summary in store.manifest.cells.items():
        cell = store.cell(name)
        dtype = np.dtype(cell.dtype)
        training = {d for shard in cell.shards.rows() for d in documents_of(store.shard_prefix(name, shard), dtype)}
        held = [d for shard in cell.validation.shards for d in documents_of(store.shard_prefix(name, shard), dtype)]
        assert all(shard.name.startswith("validation-") for shard in cell.validation.shards)
        total = len(training) + len(held)
        assert len(held) <= min(3, total - 1) if total >= 2 else not held
        assert not training & set(held)
        everything = sorted(training) + held
        hashes = np.asarray([document_hash(np.frombuffer(d, dtype=dtype), 0) for d in everything], dtype=np.uint64)
        lengths = np.asarray([len(d) // dtype.itemsize for d in everything])
        chosen = held_out(hashes, lengths, HeldOutConfig(fraction=0.1, max_documents_per_cell=3))
        assert set(held) <= {d for d, c in zip(everything, chosen) if c}  # the keyed-hash choice, but for those
        # found in training (next test)
        assert summary.validation_documents == cell.validation.documents == len(held)
        assert summary.documents == cell.documents == len(training)


@pytest.mark.slow
def test_no_held_out_document_reaches_a_training_batch(store_path):
    from mixtures.build import build
    from mixtures.new import NewRevision, new_revision

    home, path = store_path
    store = Store(path)
    new_revision(
        home,
        NewRevision(mixture="m", revision="all", store=store.name, strategy="natural", seq_len=64, global_batch=4),
    )
    manifest = build(home, "m", "all")
    stream = MixtureStream(manifest, prefetch=0)
    rows = b"".join(
        np.ascontiguousarray(b.input_ids.astype(store.manifest.dtype)).tobytes() + b"|" for b in stream.iterate()
    )
    held = [
        d
        for name in store.manifest.cells
        for shard in store.cell(name).validation.shards
        for d in documents_of(store.shard_prefix(name, shard), np.dtype(store.manifest.dtype))
    ]
    assert held
    for doc in held:
        piece = doc[: 2 * 24]  # 24 tokens (the documents are longer): no two documents of this corpus share them
        assert len(piece) == 48 and rows.find(piece) == -1
    some_training = store.cell(sorted(store.manifest.cells)[0])
    first_shard = next(some_training.shards.rows())
    first = documents_of(store.shard_prefix(some_training.cell, first_shard), np.dtype(store.manifest.dtype))
    assert any(rows.find(doc[:48]) != -1 for doc in first)  # the check can see a document when it is there


@pytest.mark.slow
def test_an_external_set_is_tokenized_into_the_store_and_its_overlap_reported(store_path, tmp_path):
    from loader.held_out import ValidationSequences
    from mixtures.build import build
    from mixtures.new import NewRevision, new_revision
    from pipeline.steps.tokenize.tokenization import load_tokenizer

    home, path = store_path
    store = Store(path)
    summary = store.manifest.sets["fresh"]
    eval_set = store.eval_set("fresh")
    assert summary.documents == eval_set.held.documents == 3  # the three new texts: the others are in training
    tokenizer = load_tokenizer(path / "tokenizer" / "tokenizer.json")
    documents = write_overlapping_eval_set(tmp_path / "again.jsonl")
    eos = store.manifest.tokenizer.eos_id
    stored = {
        d
        for name in store.manifest.cells
        for shard in [*store.cell(name).shards.rows(), *store.cell(name).validation.shards]
        for d in documents_of(store.shard_prefix(name, shard), np.dtype(store.manifest.dtype))
    }
    as_stored = [
        np.asarray(tokenizer.encode(t, add_special_tokens=False).ids + [eos], dtype=store.manifest.dtype).tobytes()
        for t in documents
    ]
    expected_exact = [i for i in range(6) if as_stored[i] in stored]
    assert expected_exact == [0, 1]  # both copies reached the store (the test corpus keeps them)
    overlap = eval_set.overlap
    assert overlap.exact == 2 and overlap.near == 1  # the edited copy; the three new texts are new
    assert [(d.index, d.kind) for d in overlap.documents] == [(0, "exact"), (1, "exact"), (2, "near")]
    assert all(d.cell == "articles" for d in overlap.documents)
    assert store.verify() == []
    set_docs = documents_of(path / "sets" / "fresh" / eval_set.held.shards[0].name, np.dtype(store.manifest.dtype))
    assert set_docs == as_stored[3:]
    # every built manifest pins it beside the cells' held-out shards, and the loader reads it last
    new_revision(
        home,
        NewRevision(mixture="m", revision="sets", store=store.name, strategy="natural", seq_len=64, global_batch=4),
    )
    manifest = build(home, "m", "sets")
    sequences = ValidationSequences(manifest, max_sequences=100)
    assert sequences.entries[-1].name == "fresh" and sequences.entries[-1].kind == "set"
    assert sequences.entries[-1].tokens == summary.tokens


@pytest.mark.slow
def test_an_external_set_is_scored_whole_while_cells_give_their_first_windows(store_path):
    from loader.held_out import PAD_LABEL, ValidationSequences
    from mixtures.build import build
    from mixtures.new import NewRevision, new_revision

    home, path = store_path
    store = Store(path)
    new_revision(
        home,
        NewRevision(mixture="m", revision="whole", store=store.name, strategy="natural", seq_len=16, global_batch=4),
    )
    sequences = ValidationSequences(build(home, "m", "whole"), max_sequences=1)
    *cells, fresh = sequences.entries
    assert all(e.kind == "cell" and e.sequences == 1 for e in cells) and fresh.kind == "set"
    assert fresh.sequences == -(-(fresh.tokens - 1) // 16) > 1
    rows = sequences.rows(sequences.total - fresh.sequences, sequences.total)
    labels = rows.labels[rows.labels != PAD_LABEL]
    eval_set = store.eval_set("fresh")
    tokens = np.concatenate(
        [
            np.frombuffer(d, dtype=store.manifest.dtype)
            for d in documents_of(
                path / "sets" / "fresh" / eval_set.held.shards[0].name, np.dtype(store.manifest.dtype)
            )
        ]
    )
    assert np.array_equal(labels, tokens[1:])  # every token of the set is scored, once


def test_eval_sets_read_jsonl_parquet_and_text(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from millrace.errors import ConfigError
    from pipeline.config import EvalSetConfig
    from pipeline.steps.held_out.eval_sets import read_texts

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "b.txt").write_text("second file")
    (tmp_path / "t" / "a.txt").write_text("first file")
    assert read_texts(EvalSetConfig(name="t", paths=[str(tmp_path / "t")], format="text")) == [
        "first file",
        "second file",
    ]
    pq.write_table(pa.table({"body": ["one", "", "two"]}), tmp_path / "p.parquet")
    assert read_texts(
        EvalSetConfig(name="p", paths=[str(tmp_path / "p.parquet")], format="parquet", text_key="body")
    ) == ["one", "two"]
    (tmp_path / "j.jsonl").write_text('{"text": "x y"}\n{"text": "z"}\n')
    assert read_texts(EvalSetConfig(name="j", paths=[str(tmp_path / "j.jsonl")])) == ["x y", "z"]
    (tmp_path / "empty.jsonl").write_text('{"text": ""}\n')
    with pytest.raises(ConfigError, match="set 'e': no document with text"):
        read_texts(EvalSetConfig(name="e", paths=[str(tmp_path / "empty.jsonl")]))


def ngrams(tokens, n=13):
    return {tuple(tokens[i : i + n]) for i in range(max(len(tokens) - n + 1, 1))}


@pytest.mark.slow
def test_held_out_documents_found_in_training_go_back_to_training(store_path, capsys):
    """Every article also sits inside one long note: fuzzy dedup cannot see it, n-gram containment does.
    Checked against 13-gram tuples of every training document outside the keyed-hash choice."""
    from millrace.cli import main as millrace

    _, path = store_path
    store = Store(path)
    dtype = np.dtype(store.manifest.dtype)
    training, chosen = {}, {}
    for name in store.manifest.cells:
        cell = store.cell(name)
        docs = [d for shard in cell.shards.rows() for d in documents_of(store.shard_prefix(name, shard), dtype)]
        held = [d for shard in cell.validation.shards for d in documents_of(store.shard_prefix(name, shard), dtype)]
        everything = docs + held
        hashes = np.asarray([document_hash(np.frombuffer(d, dtype=dtype), 0) for d in everything], dtype=np.uint64)
        lengths = np.asarray([len(d) // dtype.itemsize for d in everything])
        mask = held_out(hashes, lengths, HeldOutConfig(fraction=0.1, max_documents_per_cell=3))
        chosen[name] = {d: d in held for d, c in zip(everything, mask) if c}
        training[name] = [d for d, c in zip(everything, mask) if not c]
    seen = set().union(*(ngrams(np.frombuffer(d, dtype=dtype).tolist()) for docs in training.values() for d in docs))
    contained: set[bytes] = set()
    while True:  # to a fixpoint: a document given back trains, and may contain another candidate
        more = [
            doc
            for docs in chosen.values()
            for doc in docs
            if doc not in contained
            and len((grams := ngrams(np.frombuffer(doc, dtype=dtype).tolist())) & seen) / len(grams) >= 0.5
        ]
        if not more:
            break
        contained |= set(more)
        seen |= set().union(*(ngrams(np.frombuffer(d, dtype=dtype).tolist()) for d in more))
    given_back = 0
    for name, docs in chosen.items():
        for doc, in_validation in docs.items():
            assert in_validation != (doc in contained), name
            given_back += doc in contained
    assert chosen["articles"] and not any(chosen["articles"].values())  # every held-out article went back
    found = store.manifest.stats.decontamination
    assert found is not None
    assert found.documents == given_back >= 1 and found.per_cell["articles"].documents == len(chosen["articles"])
    assert found.checked == sum(len(d) for d in chosen.values()) and (found.ngram, found.threshold) == (13, 0.5)
    assert found.rounds is not None and found.rounds >= 1 and found.later_rounds is not None  # the store keeps them
    # the funnel counts them under their own reason, per source, as kept (they train): store.json, store info, page
    from pipeline.cells.held_out_split import GIVEN_BACK_REASON
    from reports.composition import _funnel

    stage = store.manifest.funnel.stages[-1]
    back = [c.given_back[GIVEN_BACK_REASON] for c in stage.sources.values() if c.given_back]
    assert (sum(b.documents for b in back), sum(b.tokens for b in back)) == (given_back, found.tokens)
    page = _funnel(store.manifest.funnel)[-1]["total"]
    assert page["given_back"][GIVEN_BACK_REASON]["documents"] == given_back
    assert millrace(["store", "info", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"held-out decontamination (13-grams, threshold 0.5): {given_back} of {found.checked}" in out
    assert f"(of which given back to training, {GIVEN_BACK_REASON}: {given_back})" in out


@pytest.mark.slow
def test_evaluation_set_documents_found_in_training_are_left_out_of_the_set(store_path, capsys):
    """The two copied texts and the edited one are mostly found in training (13-gram tuples of every
    training document, counted here without the pipeline's hashes); the three new texts are scored."""
    from millrace.cli import main as millrace
    from pipeline.steps.tokenize.tokenization import load_tokenizer

    _, path = store_path
    store = Store(path)
    dtype = np.dtype(store.manifest.dtype)
    seen = set().union(
        *(
            ngrams(np.frombuffer(d, dtype=dtype).tolist())
            for name in store.manifest.cells
            for shard in store.cell(name).shards.rows()
            for d in documents_of(store.shard_prefix(name, shard), dtype)
        )
    )
    tokenizer = load_tokenizer(path / "tokenizer" / "tokenizer.json")
    eos = store.manifest.tokenizer.eos_id
    texts = [
        json.loads(line)["text"]
        for line in (path.parent.parent.parent.parent / "sets" / "fresh.jsonl").read_text().splitlines()
    ]
    shares = []
    for text in texts:
        grams = ngrams(tokenizer.encode(text, add_special_tokens=False).ids + [eos])
        shares.append(len(grams & seen) / len(grams))
    overlap = store.eval_set("fresh").overlap
    assert [d.index for d in overlap.contained_documents] == [i for i, s in enumerate(shares) if s >= 0.5] == [0, 1, 2]
    assert [d.share for d in overlap.contained_documents] == pytest.approx(shares[:3], abs=1e-3)
    assert overlap.contained == store.manifest.sets["fresh"].contained == 3 and max(shares[3:]) < 0.5
    assert millrace(["store", "info", str(path)]) == 0
    assert "3 mostly found in training, left out" in capsys.readouterr().out


def test_a_snippet_of_a_candidate_given_back_to_training_goes_back_too(tmp_path):
    """Two held-out candidates: a long document whose second half trains elsewhere (so it goes back), and a
    snippet of its first half, found nowhere else in training. One pass judged the snippet against a
    training set without the long one and kept it held out while training held all its 13-grams; judged
    to a fixpoint it goes back in the second round and is counted."""
    from pipeline.steps.dedup.ngrams import found_in, ngram_hashes
    from pipeline.steps.held_out.contamination import INDEX_FILE, contaminated, found_file, save_index

    rng = np.random.default_rng(3)
    long_doc = rng.integers(0, 50_000, 400)
    snippet, training_doc = long_doc[20:80], np.concatenate([rng.integers(0, 50_000, 50), long_doc[150:]])
    other = rng.integers(0, 50_000, 120)  # a held-out candidate found nowhere: stays held out
    docs = {"long": long_doc, "snippet": snippet, "other": other}
    grams = [ngram_hashes(d, 13) for d in docs.values()]
    save_index(
        tmp_path, ["c00q0", "c00q1", "c00q1"], [(1, 10), (2, 20), (3, 30)], [d.size for d in docs.values()], grams
    )
    with np.load(tmp_path / INDEX_FILE) as stored:
        index = stored["index"]
    seen = ngram_hashes(training_doc, 13)  # what the task over the training documents finds
    np.save(found_file(tmp_path, 0), np.unique(seen[found_in(seen, index)]))
    assert found_in(grams[1], seen).mean() == 0 and found_in(grams[0], seen).mean() > 0.5
    decision = contaminated(tmp_path, 0.5, 13)
    assert decision.cells == {"c00q0": [[1, 10]], "c00q1": [[2, 20]]}  # the snippet removed from held-out
    assert (decision.documents, decision.tokens, decision.checked) == (2, 460, 3)
    assert (decision.rounds, decision.later_rounds) == (2, 1)
    assert {c: e.model_dump() for c, e in decision.per_cell.items()} == {
        "c00q0": {"documents": 1, "tokens": 400},
        "c00q1": {"documents": 1, "tokens": 60},
    }
