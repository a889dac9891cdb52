"""The loader at the reference scale, in small: opening reads no shard file, open files stay bounded under a
low `ulimit -n`, the built manifest stays small at 200 cells x 2,000 shards, and documents are shuffled."""

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loader import MixtureStream
from millrace.errors import ArtifactError
from testkit.manifests import ManifestFrame, make_manifest
from testkit.stores import RANDOM, StoreContents, StoreTokenizer, many_shard_store, tagged_store, write_store

EOS = RANDOM.eos

ROOT = Path(__file__).resolve().parents[2]


def drawing_every_window(home, store: Path, seq_len: int = 16, batch: int = 64) -> Path:
    """A manifest that draws each cell's every sequence once (so every shard is read)."""
    from pipeline.store.format import Store

    counts = {cell: max(0, (summary.tokens - 1) // seq_len) for cell, summary in Store(store).manifest.cells.items()}
    first = sorted(counts)[0]
    counts[first] -= sum(counts.values()) % batch
    return make_manifest(
        home, store, [counts], ManifestFrame(seq_len=seq_len, global_batch=batch), mixture="many", revision="all"
    )


STREAM_ALL = """
import resource, sys, json
from loader import MixtureStream
from loader.files import ReadOptions, StoreAccess
limit, max_open, manifest = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
stream = MixtureStream(manifest, prefetch=2, store=StoreAccess(read=ReadOptions(max_open_files=max_open)))
opened = stream.open_files
most = 0
for batch in stream.iterate():
    most = max(most, stream.open_files)
print(json.dumps({"opened_at_start": opened, "most_open": most, "steps": stream.steps}))
"""


def stream_all(manifest: Path, limit: int, max_open: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", STREAM_ALL, str(limit), str(max_open), str(manifest)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin"},
    )


@pytest.mark.slow
def test_a_store_of_many_shards_streams_under_ulimit_256_and_running_out_is_one_line(home):
    store = many_shard_store(home, cells=2, shards=100)  # 200 shards, 600 mapped files: more than either limit
    manifest = drawing_every_window(home, store)
    ok = stream_all(manifest, limit=256, max_open=128)
    assert ok.returncode == 0, ok.stderr[-2000:]
    report = json.loads(ok.stdout)
    assert report["opened_at_start"] == 0 and 100 <= report["most_open"] <= 128
    starved = stream_all(manifest, limit=40, max_open=128)
    assert starved.returncode != 0
    last = starved.stderr.strip().splitlines()[-1]
    assert "ulimit -n is 40" in last and "max_open_files=128" in last


def test_opening_reads_no_shard_file(home):
    store = many_shard_store(home, cells=2, shards=3)
    manifest = drawing_every_window(home, store)
    for path in (store / "cells").rglob("shard_*"):
        path.rename(path.with_name("gone-" + path.name))
    stream = MixtureStream(manifest, prefetch=0)  # opens: only store.json and each cell.json were read
    assert stream.index(stream.steps - 1).positions.size == 64
    with pytest.raises(ArtifactError, match=r"cells/c0\d/shard_0000\d\.xxh: missing"):
        stream.batch(0)


@pytest.mark.slow
def test_built_manifest_stays_small_at_200_cells_of_2000_shards(home):
    """The mixtures room's own build over a store whose cells list 2,000 shards each (tables only)."""
    from mixtures.build import build
    from mixtures.new import NewRevision, new_revision
    from pipeline.store.format import (
        CellManifest,
        CellSummary,
        ShardTable,
        StoreManifest,
        TokenizerInfo,
        write_cell_manifest,
        write_store_manifest,
    )

    root = home.store("ref", "2026.01.01")
    shards = 2000
    table = ShardTable(
        names=[f"shard-{i:05d}" for i in range(shards)],
        documents=[200_000] * shards,
        tokens=[1 << 28] * shards,
        digests=[f"{i:032x}" for i in range(shards)],
        sources=True,
    )
    summaries = {}
    for c in range(200):
        cell = f"c{c // 5:02d}q{c % 5}"
        manifest = CellManifest(
            cell=cell,
            dtype="int32",
            tokenizer_fingerprint="t",
            documents=200_000 * shards,
            tokens=shards << 28,
            bytes=0,
            shards=table,
        )
        summaries[cell] = CellSummary(
            documents=manifest.documents,
            tokens=manifest.tokens,
            manifest_hash=write_cell_manifest(root / "cells" / cell, manifest),
        )
    write_store_manifest(
        root,
        StoreManifest(
            name="ref",
            version="2026.01.01",
            dtype="int32",
            cells=summaries,
            tokenizer=TokenizerInfo(fingerprint="t", vocab_size=1 << 17, eos_id=0),
        ),
    )
    new_revision(
        home,
        NewRevision(
            mixture="ref", revision="uniform", store="ref", strategy="uniform", seq_len=4096, global_batch=11264
        ),
    )
    path = build(home, "ref", "uniform")
    assert path.stat().st_size <= 1 << 20, f"{path.stat().st_size} bytes"
    cell_json = root / "cells" / "c00q0" / "cell.json"
    assert cell_json.stat().st_size / shards < 120, "a shard costs a few columns of its cell's table, not an object"


# ---- shuffling ---------------------------------------------------------------------------


def window_documents(stream: MixtureStream, epoch: int) -> list[list[int]]:
    """The documents of each window of cell x in `epoch`, in order."""
    sequences = np.arange(stream.manifest.cells["x"].sequences_available)
    windows, _ = stream._space.read(np.zeros_like(sequences), sequences, np.full_like(sequences, epoch), False)
    out = []
    for window in windows:
        tags = window[window != EOS].astype(np.int64) - 2
        out.append(tags[np.flatnonzero(np.diff(np.concatenate([[-1], tags])))].tolist())
    return out


def adjacent_pairs(windows: list[list[int]]) -> set[tuple[int, int]]:
    return {(a, b) for docs in windows for a, b in itertools.pairwise(docs)}


@pytest.mark.parametrize("run", [1, 16])
def test_a_repeated_cells_windows_differ_between_epochs(home, run):
    """Per document (run 1) each epoch brings new neighbours; in runs, neighbours inside a run stay (the store's
    keyed order, and attention is masked per document), but each epoch's windows are cut elsewhere."""
    store = tagged_store(home, documents=3000, sources=4)
    stream = MixtureStream(
        make_manifest(
            home,
            store,
            [{"x": 64}],
            ManifestFrame(seq_len=64, global_batch=64, document_run=run),
            revision=f"run{run}",
        ),
        prefetch=0,
    )
    windows = [window_documents(stream, e) for e in range(3)]
    for before, after in itertools.pairwise(windows):
        shared = adjacent_pairs(before) & adjacent_pairs(after)
        assert len(shared) / len(adjacent_pairs(after)) <= 0.25 if run == 1 else 1 - 2 / run
    sequences = np.arange(stream.manifest.cells["x"].sequences_available)
    tokens = [
        {
            w.tobytes()
            for w in stream._space.read(np.zeros_like(sequences), sequences, np.full_like(sequences, e), False)[0]
        }
        for e in range(3)
    ]
    for before, after in itertools.pairwise(tokens):
        assert len(before & after) / len(after) <= 0.05  # the same window of tokens seldom comes twice
    # every document appears in every epoch, exactly once across the windows (windows overlap by one token)
    for e in range(2):
        seen = sorted({d for docs in window_documents(stream, e) for d in docs})
        assert len(seen) >= 2990


@pytest.mark.parametrize("run", [1, 16])
def test_neighbours_in_a_window_are_no_more_alike_than_at_random(home, tmp_path, run):
    """Documents arrive grouped by source; the pipeline's shard tasks write a cell in a keyed-hash order and the
    loader reorders blocks per epoch: the same-source rate of neighbours ends within 10% of the random rate."""
    from pipeline.steps.tokenize.cell_shards import store_order

    rng = np.random.default_rng(5)
    sources = rng.choice(3, p=[0.6, 0.3, 0.1], size=4000)
    keys = np.arange(sources.size, dtype=np.int64) * 7 + 3  # internal keys in input order, which follows the source
    order = store_order(keys)
    ordered = np.sort(sources)[order]
    assert sorted(order.tolist()) == list(range(keys.size))
    shares = np.bincount(ordered) / ordered.size
    random_rate = float((shares**2).sum())
    sorted_rate = float(np.mean(np.sort(sources)[1:] == np.sort(sources)[:-1]))
    assert sorted_rate > 0.9  # what key order gave

    docs = [
        (np.append(np.full(int(rng.integers(3, 30)), j + 2), EOS).astype(np.uint16), int(ordered[j]))
        for j in range(ordered.size)
    ]
    contents = StoreContents({"x": [docs[:2000], docs[2000:]]}, ["a", "b", "c"])
    store = write_store(home, "hashed", "2026.01.01", contents, StoreTokenizer(ordered.size + 2, EOS))
    stream = MixtureStream(
        make_manifest(
            home,
            store,
            [{"x": 64}],
            ManifestFrame(seq_len=64, global_batch=64, document_run=run),
            revision=f"run{run}",
        ),
        prefetch=0,
    )
    pairs = [pair for e in range(2) for docs in window_documents(stream, e) for pair in itertools.pairwise(docs)]
    same = np.mean([ordered[a] == ordered[b] for a, b in pairs])
    assert abs(same - random_rate) <= 0.1 * random_rate, (same, random_rate)
