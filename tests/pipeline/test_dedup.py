import random
import shutil

import numpy as np
import pytest
from datatrove.data import Document
from fsspec.implementations.local import LocalFileSystem

from pipeline.config import DedupConfig
from pipeline.remote_work import relocate
from pipeline.steps.dedup.duplicates import find_duplicates, load_duplicates
from pipeline.steps.dedup.signing import DedupSignatures, MinHasher
from pipeline.steps.in_place import reading_in_place
from pipeline.steps.read.readers import document_key
from testkit.near_duplicates import near_duplicate_corpus, removal_quality

OPTIONS = dict(ngram=5, bands=40, rows=3, seed=1, threshold=0.5, verify_threshold=0.4)


def in_process(name, pipeline, tasks):
    """What an executor does with a one-step pipeline: every task, here one after the other."""
    for rank in range(tasks):
        for step in pipeline:
            list(step.run(None, rank, tasks))


def dedup(work, texts: dict[int, str], tasks: int, parts: int, **options) -> dict[int, tuple[str, int]]:
    """Sign `texts` (key -> text) in `tasks` filter tasks (files dealt round-robin), find the duplicates in
    `parts` parts; returns every removal, checking that each task's list holds only its own documents."""
    config = DedupConfig(**{**OPTIONS, **options, "parts": parts})
    ordinals = sorted({key >> 32 for key in texts})
    rank_of = {key: ordinals.index(key >> 32) % tasks for key in texts}
    for rank in range(tasks):
        docs = [Document(text=texts[k], id=str(k), metadata={"key": k}) for k in sorted(texts) if rank_of[k] == rank]
        step = DedupSignatures(work / "signatures", config)
        assert len(list(step.run(iter(docs[::-1]), rank, tasks))) == len(docs)  # any order in
    find_duplicates(config, work / "signatures", work / "components", work / "duplicates", in_process)
    removed = {}
    for rank in range(tasks):
        found = load_duplicates(work / "duplicates", rank)
        assert all(rank_of[key] == rank for key in found)
        removed.update(found)
    return removed


def _keyed(documents):
    """Keys in id order (so the smallest id of a cluster has its smallest key), 40 documents per input file."""
    ids = sorted(doc_id for doc_id, _ in documents)
    key_of = {doc_id: document_key(i // 40, i % 40) for i, doc_id in enumerate(ids)}
    return {key_of[doc_id]: text for doc_id, text in documents}, {key: doc_id for doc_id, key in key_of.items()}


@pytest.mark.slow
def test_fuzzy_dedup_finds_injected_near_duplicates(tmp_path):
    documents, cluster = near_duplicate_corpus()
    texts, id_of = _keyed(documents)
    found = dedup(tmp_path, texts, tasks=2, parts=3)
    removed = {id_of[doc]: id_of[kept] for doc, (reason, kept) in found.items()}
    assert {reason for reason, _ in found.values()} == {"fuzzy"}
    recall, precision = removal_quality(set(removed), cluster)
    assert recall >= 0.95, recall
    assert precision >= 0.99, precision
    assert all(kept < doc for doc, kept in removed.items())  # the smallest id of each cluster is the one kept


@pytest.mark.slow
def test_removals_do_not_depend_on_the_task_or_part_count(tmp_path, monkeypatch):
    documents, _ = near_duplicate_corpus(originals=150, with_copies=90, seed=3)
    rng = random.Random(3)
    documents += [(f"{doc_id}-again{c}", text) for c, (doc_id, text) in enumerate(rng.sample(documents, 25))]
    documents += [("zz-copy-of-a-copy", documents[-1][1])]
    texts, _ = _keyed(documents)
    results = [dedup(tmp_path / f"{tasks}-{parts}", texts, tasks, parts) for tasks, parts in ((1, 1), (3, 4), (5, 2))]
    monkeypatch.setattr("pipeline.steps.dedup.duplicates.PAIRS_PER_BATCH", 5)  # many signature reads, merge batches
    monkeypatch.setattr("pipeline.steps.dedup.sorted_runs.MERGE_BYTES", 200)
    monkeypatch.setattr("pipeline.steps.dedup.sorted_runs.MIN_CHUNK", 3)
    results.append(dedup(tmp_path / "small-batches", texts, 2, 2))
    assert results[0] == results[1] == results[2] == results[3]
    reasons = [reason for reason, _ in results[0].values()]
    assert reasons.count("exact") == 26 and reasons.count("fuzzy") > 50
    assert dedup(tmp_path / "exact-only", texts, 2, 3, fuzzy=False) == {
        key: found for key, found in results[0].items() if found[0] == "exact"
    }


def test_signatures_are_a_pure_function_of_the_text():
    a, b = MinHasher(seed=1), MinHasher(seed=1)
    text = "one two three four five six seven eight nine ten"
    assert np.array_equal(a.signature(text), b.signature(text))
    assert a.signature("Short text").shape == (120,)
    assert np.array_equal(a.signature("One, two; THREE four five six"), a.signature("one two three four five six"))


@pytest.mark.parametrize("parts", [1, 3])
def test_a_chain_of_matches_never_removes_a_document_unlike_the_kept_one(tmp_path, parts):
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

    def agree(i, j):
        return float((sigs[i] == sigs[j]).mean())

    assert agree(0, 1) >= 0.5 and agree(1, 2) >= 0.5 and agree(0, 2) < 0.4, (agree(0, 1), agree(1, 2), agree(0, 2))
    keyed = {document_key(file, 0): text for file, text in enumerate(texts)}
    a_key, b_key, c_key = sorted(keyed)
    found = dedup(tmp_path / "checked", keyed, tasks=2, parts=parts)
    assert found == {b_key: ("fuzzy", a_key)}  # c matches b, but not a, the one kept
    found = dedup(tmp_path / "unchecked", keyed, tasks=2, parts=parts, verify_threshold=0.0)
    assert found == {b_key: ("fuzzy", a_key), c_key: ("fuzzy", a_key)}  # without the check the chain removes c too


def _components_by_rounds(work, left, right, parts):
    """Each node's label from `ComponentsRound` rounds over `parts` parts (round 0 written by 2 tasks)."""
    from pipeline.steps.dedup.components import ComponentFiles, ComponentsRound, edge_records
    from pipeline.steps.dedup.signing import save_array

    files = ComponentFiles(work)
    half = left.size // 2
    for task, (a, b) in enumerate(((left[:half], right[:half]), (left[half:], right[half:]))):
        save_array(files.edges(0, task), edge_records(a, b, parts))
    for round_ in range(100):
        in_process("round", [ComponentsRound(work, round_)], parts)
        if not files.not_star_nodes(round_, parts):
            break
    labels = {}
    for part in range(parts):
        edges = files.part_edges(round_, part)
        for node, other in zip(edges["node"].tolist(), edges["other"].tolist()):
            labels[node] = min(labels.get(node, node), other)
    return labels, round_


def test_component_rounds_label_each_node_with_its_components_smallest_key(tmp_path):
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    rng = np.random.default_rng(2)
    nodes = rng.permutation(np.arange(1000, 1400) * 7919)  # keys in no particular order along the edges
    chain = np.stack([nodes[:120], nodes[1:121]], axis=1)  # one long path: many rounds
    star = np.stack([np.full(40, nodes[130]), nodes[131:171]], axis=1)
    loose = rng.choice(nodes[171:], size=(150, 2))  # random small components
    loose = loose[loose[:, 0] != loose[:, 1]]
    edges = np.concatenate([chain, star, loose])
    edges = edges[rng.permutation(len(edges))]
    index = {key: i for i, key in enumerate(np.unique(edges))}
    keys = np.array(sorted(index))
    graph = coo_matrix(
        (np.ones(len(edges)), ([index[k] for k in edges[:, 0]], [index[k] for k in edges[:, 1]])),
        shape=(keys.size, keys.size),
    )
    component = connected_components(graph, directed=False)[1]
    smallest = {c: keys[component == c].min() for c in np.unique(component)}
    expected = {int(key): int(smallest[component[i]]) for i, key in enumerate(keys)}
    results = [_components_by_rounds(tmp_path / str(parts), edges[:, 0], edges[:, 1], parts) for parts in (1, 4)]
    for labels, rounds in results:
        assert labels == expected
        assert rounds > 4  # the path takes several rounds: a single-pass shortcut would fail here


def test_a_merge_of_sorted_file_slices_is_sorted_and_groups_span_its_batches(tmp_path):
    from pipeline.steps.dedup.signing import BAND, save_array
    from pipeline.steps.dedup.sorted_runs import group_firsts, merged, sorted_records

    rng = np.random.default_rng(1)
    slices, everything = [], []
    for i, (size, start, stop) in enumerate(((0, 0, 0), (37, 0, 37), (200, 50, 160), (5, 0, 5), (120, 3, 500))):
        records = np.empty(size, dtype=BAND)
        records["band"], records["hash"] = rng.integers(0, 3, size), rng.integers(0, 6, size) * (2**61)
        records["key"] = rng.permutation(10_000)[:size] * 5 + i  # unique across files
        records = sorted_records(records)
        save_array(tmp_path / f"{i}.npy", records)
        slices.append((tmp_path / f"{i}.npy", start, stop))
        everything.append(records[start:stop])
    everything = np.concatenate(everything)
    batches = list(merged(slices, chunk=7))
    assert len(batches) > 10
    assert np.array_equal(np.concatenate(batches), sorted_records(everything))
    pairs = [(int(f), int(k)) for first, key in group_firsts(batches, ("band", "hash")) for f, k in zip(first, key)]
    groups = {}
    for record in everything.tolist():
        groups.setdefault(record[:2], []).append(record[2])
    assert sorted(pairs) == sorted((min(ks), k) for ks in groups.values() for k in ks if k != min(ks))


class CountingFileSystem(LocalFileSystem):
    """The local filesystem, counting the bytes its reads return (what a bucket would send; its range reads are
    `cat_file` calls too)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read = 0

    def cat_file(self, path, start=None, end=None, **kwargs):
        got = super().cat_file(path, start, end, **kwargs)
        self.read += len(got)
        return got


def test_dedup_tasks_read_other_tasks_files_in_place_by_range(tmp_path, monkeypatch):
    """Each dedup task in an empty scratch directory, reading the signing tasks' files (and the rounds' edges)
    in place on the 'bucket': the same removals as on one disk, with a fraction of the signatures read."""
    documents, _ = near_duplicate_corpus(originals=60, with_copies=30, seed=5)
    texts, _ = _keyed(documents)
    on_disk = dedup(tmp_path / "disk", texts, tasks=3, parts=4)
    bucket, scratch = tmp_path / "bucket", tmp_path / "scratch"
    dedup(bucket, texts, tasks=3, parts=4)  # the signing tasks' files, on the 'bucket'
    for produced in ("components", "duplicates"):
        shutil.rmtree(bucket / produced)
    fs = CountingFileSystem(skip_instance_cache=True)
    monkeypatch.setattr("pipeline.steps.dedup.sorted_runs.SEARCH_PAGE", 16)  # several pages per binary search
    monkeypatch.setattr("pipeline.steps.dedup.sorted_runs.SPAN_PAGE", 2)  # several rounds per one value's search
    monkeypatch.setattr("pipeline.steps.dedup.sorted_runs.SPAN_FENCES", 3)

    most = 0  # the most bytes one task read

    def staged(name, pipeline, tasks):  # every task in a fresh scratch directory; what it wrote goes up
        nonlocal most
        for rank in range(tasks):
            fs.read = 0
            local = scratch / f"{name}-{rank}"
            moved = relocate(pipeline, scratch / "work", local)
            with reading_in_place(local, fs, str(bucket)):
                for step in moved:
                    list(step.run(None, rank, tasks))
            for path in (p for p in local.rglob("*") if p.is_file()):
                target = bucket / path.relative_to(local)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
            most = max(most, fs.read)

    config = DedupConfig(**{**OPTIONS, "parts": 4})
    work = scratch / "work"
    with reading_in_place(work, fs, str(bucket)):  # the driver's counts, in place too
        find_duplicates(config, work / "signatures", work / "components", work / "duplicates", staged)
    removed = {}
    for rank in range(3):
        with reading_in_place(scratch / "reader", fs, str(bucket)):
            removed.update(load_duplicates(scratch / "reader" / "duplicates", rank))
    assert removed == on_disk and len(removed) > 20
    signatures = sum(p.stat().st_size for p in (bucket / "signatures").rglob("*") if p.is_file())
    assert not (scratch / "find-0" / "signatures").exists()
    assert most < signatures / 2  # every task reads its part in place, never the whole signing output


def test_one_values_rows_are_found_in_place_by_a_few_small_reads(tmp_path):
    """A task's own rows of a file sorted by task (a removal part): found on the 'bucket' by reading a few
    records per round, never the whole file, at the same rows as a search on the disk."""
    from pipeline.steps.dedup.sorted_runs import RecordFile

    records = np.zeros(1000, dtype=[("rank", "<i8"), ("key", "<i8")])
    records["rank"] = np.sort(np.random.default_rng(3).integers(0, 50, size=1000))
    records["key"] = np.arange(1000)
    (tmp_path / "bucket").mkdir()
    np.save(tmp_path / "bucket" / "rows.npy", records)
    fs = CountingFileSystem(skip_instance_cache=True)
    with reading_in_place(tmp_path / "scratch", fs, str(tmp_path / "bucket")):
        rows = RecordFile(tmp_path / "scratch" / "rows.npy")
        for rank in (-1, 0, 7, 31, 49, 50):
            fs.read = 0
            expected = np.searchsorted(records["rank"], rank, "left"), np.searchsorted(records["rank"], rank, "right")
            assert rows.span("rank", rank) == expected
            assert fs.read < records.nbytes / 4  # a few fences and one page per search


def test_a_task_reads_its_removal_rows_by_the_offsets_index_whatever_the_parts_length(tmp_path):
    """A task's rows of a removal part, on the 'bucket': two headers, two offsets and exactly its own rows, the
    same bytes beyond its rows at 1x and 8x the part's rows; a part without an index (written before it) is
    searched, with the same rows."""
    from pipeline.steps.dedup.duplicates import REMOVAL, offsets_file, removal_file, save_removals

    extras = set()
    for rows in (1000, 8000):
        bucket = tmp_path / f"bucket-{rows}"
        records = np.zeros(rows, dtype=REMOVAL)
        records["rank"] = np.random.default_rng(rows).integers(0, 50, size=rows)
        records["key"], records["reason"], records["duplicate_of"] = np.arange(rows) * 3 + 1, 1, 7
        save_removals(removal_file(bucket / "duplicates", "exact", 0), records, tasks=50)
        fs = CountingFileSystem(skip_instance_cache=True)
        with reading_in_place(tmp_path / "scratch", fs, str(bucket)):
            for rank in (-1, 0, 7, 49, 50):
                mine = records[records["rank"] == rank]
                fs.read = 0
                found = load_duplicates(tmp_path / "scratch" / "duplicates", rank)
                assert found == {int(k): ("exact", 7) for k in mine["key"]}
                if 0 <= rank < 50:
                    extras.add(fs.read - mine.nbytes)
            shutil.rmtree(offsets_file(removal_file(bucket / "duplicates", "exact", 0)).parent)
            for rank in (0, 49):
                searched = load_duplicates(tmp_path / "scratch" / "duplicates", rank)
                assert searched == {int(k): ("exact", 7) for k in records[records["rank"] == rank]["key"]}
    assert len(extras) == 1 and extras.pop() <= 2 * 256 + 16  # the headers and two offsets, at both sizes
