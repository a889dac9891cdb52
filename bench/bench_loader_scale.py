"""Loader start-up and memory against the number of documents, and open files against the number of shards.

1. Synthetic stores of 1M, 10M and 100M tiny documents (1-3 tokens and EOS; 8 cells x 2 shards each, so that
   only the documents grow), written with numpy through the store's own `ShardWriter` under
   /tmp/millrace-loader-scale and
   deleted after. Each store is opened in a fresh process: time to open + first batch (global batch 64,
   seq_len 2048, per-token sources on: the trainer's path) and the process's peak resident memory growth
   (VmHWM after minus VmRSS before open). Targets: open(100M) / open(1M) <= 1.5 and
   memory(100M) - memory(1M) <= 64 MB.
2. A store of 10,000 shards (20 cells x 500 shards of 8 tiny documents, hard links of one shard per cell),
   60 steps of 64 windows (each window from a random shard) streamed in a process whose `ulimit -n` is 256:
   it must finish, with at most 128 shard files open at once.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from bench.result import Result, memory_mb
from bench.result import run_child as child

SCRATCH = Path("/tmp/millrace-loader-scale")
SIZES = (1_000_000, 10_000_000, 100_000_000)
CELLS, SHARDS = 8, 2
SEQ_LEN, BATCH, EOS, VOCAB = 2048, 64, 0, 50_000
STREAM_STEPS = 60  # of the 10,000-shard store: 3,840 windows, most from a shard not yet open


def write_store(home, name: str, documents: int, cells: int, shards: int) -> Path:
    """`documents` documents of 2-4 tokens (EOS last), spread evenly over cells x shards."""
    from pipeline.store.format import (
        CellManifest,
        CellSummary,
        ShardTable,
        ShardWriter,
        StoreManifest,
        TokenizerInfo,
        write_cell_manifest,
        write_store_manifest,
    )

    rng = np.random.default_rng(0)
    root = home.store(name, "2026.01.01")
    per_shard = documents // (cells * shards)
    summaries = {}
    for c in range(cells):
        cell = f"c{c:02d}q0"
        infos = []
        for s in range(shards):
            lengths = rng.integers(2, 5, size=per_shard, dtype=np.int32)
            tokens = rng.integers(1, VOCAB, size=int(lengths.sum()), dtype=np.uint16)
            tokens[np.cumsum(lengths) - 1] = EOS
            writer = ShardWriter(root / "cells" / cell / f"shard-{s:05d}", np.dtype(np.uint16), durable=False)
            writer.add_documents(tokens, lengths, rng.integers(0, 4, size=per_shard, dtype=np.uint16))
            infos.append(writer.close())
        manifest = CellManifest(
            cell=cell,
            dtype="uint16",
            tokenizer_fingerprint="bench",
            documents=sum(i.documents for i in infos),
            tokens=sum(i.tokens for i in infos),
            bytes=0,
            shards=ShardTable.of(infos),
        )
        summaries[cell] = CellSummary(
            documents=manifest.documents,
            tokens=manifest.tokens,
            manifest_hash=write_cell_manifest(root / "cells" / cell, manifest),
        )
    write_store_manifest(
        root,
        StoreManifest(
            name=name,
            version="2026.01.01",
            dtype="uint16",
            cells=summaries,
            sources=["a", "b", "c", "d"],
            tokenizer=TokenizerInfo(fingerprint="bench", vocab_size=VOCAB, eos_id=EOS, path=None),
        ),
    )
    return root


def write_linked_store(home, name: str, cells: int, shards: int, documents: int = 8) -> Path:
    """`cells` x `shards` shards of `documents` tiny documents; within a cell every shard is a hard link of the
    first one's files (identical contents, separate paths: each still needs its own descriptors and maps)."""
    from pipeline.store.format import (
        CellManifest,
        CellSummary,
        ShardInfo,
        ShardTable,
        ShardWriter,
        StoreManifest,
        TokenizerInfo,
        write_cell_manifest,
        write_store_manifest,
    )

    rng = np.random.default_rng(1)
    root = home.store(name, "2026.01.01")
    summaries = {}
    for c in range(cells):
        cell, directory = f"c{c:02d}q0", root / "cells" / f"c{c:02d}q0"
        lengths = rng.integers(2, 5, size=documents, dtype=np.int32)
        tokens = rng.integers(1, VOCAB, size=int(lengths.sum()), dtype=np.uint16)
        tokens[np.cumsum(lengths) - 1] = EOS
        writer = ShardWriter(directory / "shard-00000", np.dtype(np.uint16), durable=False)
        writer.add_documents(tokens, lengths, np.zeros(documents, dtype=np.uint16))
        first = writer.close()
        infos = [first]
        for s in range(1, shards):
            for suffix in (".bin", ".idx", ".src", ".xxh"):
                os.link(directory / f"shard-00000{suffix}", directory / f"shard-{s:05d}{suffix}")
            infos.append(ShardInfo(f"shard-{s:05d}", first.documents, first.tokens, first.digest))
        manifest = CellManifest(
            cell=cell,
            dtype="uint16",
            tokenizer_fingerprint="bench",
            documents=first.documents * shards,
            tokens=first.tokens * shards,
            bytes=0,
            shards=ShardTable.of(infos),
        )
        summaries[cell] = CellSummary(
            documents=manifest.documents,
            tokens=manifest.tokens,
            manifest_hash=write_cell_manifest(directory, manifest),
        )
    write_store_manifest(
        root,
        StoreManifest(
            name=name,
            version="2026.01.01",
            dtype="uint16",
            cells=summaries,
            sources=["a"],
            tokenizer=TokenizerInfo(fingerprint="bench", vocab_size=VOCAB, eos_id=EOS, path=None),
        ),
    )
    return root


def build(home, name: str, seq_len: int, batch: int, every_window: bool = False) -> Path:
    """The mixtures room's own `mix new` + `mix build`: uniform over the cells (or each window once)."""
    from mixtures.build import build as build_revision
    from mixtures.new import NewRevision, new_revision
    from pipeline.store.format import Store

    store = Store(home.store(name, "2026.01.01"))
    tokens = sum(c.tokens for c in store.manifest.cells.values())
    budget = tokens - len(store.manifest.cells) * seq_len if every_window else batch * seq_len * 16
    phases = [f"main:{budget}:natural" if every_window else f"main:{budget}:uniform"]
    new_revision(
        home,
        NewRevision(
            mixture=name,
            revision="r1",
            store=name,
            strategy="natural" if every_window else "uniform",
            phases=phases,
            seq_len=seq_len,
            global_batch=batch,
        ),
    )
    return build_revision(home, name, "r1")


def child_open(manifest: str) -> dict:
    from loader import MixtureStream

    base = memory_mb("VmRSS")
    start = time.perf_counter()
    stream = MixtureStream(manifest, prefetch=0)
    opened = time.perf_counter()
    batch = stream.batch(0)
    first = time.perf_counter()
    assert batch.segment_sources is not None
    return {
        "open_s": opened - start,
        "open_first_s": first - start,
        "peak_mb": memory_mb("VmHWM") - base,
        "documents": sum(c.documents for c in stream.manifest.cells.values()),
    }


def child_stream(manifest: str) -> dict:
    import resource

    from loader import MixtureStream

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    stream = MixtureStream(manifest, prefetch=2)
    start, most = time.perf_counter(), 0
    for _ in stream.iterate(0, min(stream.steps, STREAM_STEPS)):
        most = max(most, stream.open_files)
    shards = sum(c.shards for c in stream.manifest.cells.values())
    return {"stream_s": time.perf_counter() - start, "most_open": most, "steps": stream.steps, "shards": shards}


def run_child(*args: str) -> dict:
    return child("bench.bench_loader_scale", args, {**os.environ, "OMP_NUM_THREADS": "1"})


def main() -> list[Result]:
    from millrace.home import Home

    SCRATCH.mkdir(parents=True, exist_ok=True)
    home = Home.resolve(SCRATCH / "bench-loader-scale")
    shutil.rmtree(home.root, ignore_errors=True)
    try:
        opened = {size: open_store_of(home, size) for size in SIZES}
        write_linked_store(home, "shards10k", 20, 500)
        streamed = run_child("stream", str(build(home, "shards10k", 16, 64, every_window=True)))
    finally:
        shutil.rmtree(home.root, ignore_errors=True)
    results = open_results(opened) + memory_results(opened[SIZES[0]], opened[SIZES[-1]])
    results.append(
        Result(
            f"{streamed['shards']:,} shards streamed under ulimit -n 256: most shard files open",
            streamed["most_open"],
            128,
            "max_open_files",
            "files",
            higher_is_better=False,
            target=1.0,
        )
    )
    print(f"  10,000 shards: {STREAM_STEPS} steps in {streamed['stream_s']:.1f}s", flush=True)
    return results


def open_store_of(home, size: int) -> dict:
    """A store of `size` documents written and built, opened in three fresh processes (the fastest kept), then
    deleted: the disk holds one size at a time."""
    name = f"docs{size // 1_000_000}m"
    started = time.perf_counter()
    write_store(home, name, size, CELLS, SHARDS)
    manifest = build(home, name, SEQ_LEN, BATCH)
    print(f"  wrote {size:,} documents in {time.perf_counter() - started:.1f}s", flush=True)
    fastest = min((run_child("open", str(manifest)) for _ in range(3)), key=lambda r: r["open_first_s"])
    shutil.rmtree(home.store(name, "2026.01.01"))
    return fastest


def open_results(opened: dict[int, dict]) -> list[Result]:
    """Open + first batch at each larger size against 1M documents; the largest against its 1.5x limit."""
    small, large = opened[SIZES[0]], opened[SIZES[-1]]
    results = [
        Result(
            f"open + first batch, {size // 1_000_000}M documents",
            opened[size]["open_first_s"] * 1000,
            small["open_first_s"] * 1000,
            "1M documents",
            "ms",
            higher_is_better=False,
        )
        for size in SIZES[1:]
    ]
    results[-1] = Result(
        "open + first batch, 100M documents",
        large["open_first_s"] * 1000,
        small["open_first_s"] * 1000,
        "1M documents",
        "ms",
        higher_is_better=False,
        target=1 / 1.5,
    )
    return results


def memory_results(small: dict, large: dict) -> list[Result]:
    """Peak memory growth at 100M against 1M documents, and the difference against the 64 MB limit."""
    return [
        Result(
            "peak memory growth, 100M documents",
            large["peak_mb"],
            small["peak_mb"],
            "1M documents",
            "MB",
            higher_is_better=False,
        ),
        Result(
            "peak memory, 100M minus 1M documents",
            max(large["peak_mb"] - small["peak_mb"], 1e-3),
            64.0,
            "the 64 MB limit",
            "MB",
            higher_is_better=False,
            target=1.0,
        ),
    ]


if __name__ == "__main__":
    kind, rest = sys.argv[1], sys.argv[2:]
    print(json.dumps({"open": child_open, "stream": child_stream}[kind](*rest)))
