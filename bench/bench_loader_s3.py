"""The loader over object storage against local disk, measured in the same run, each reader in its own process.

`bench_loader`'s mixture and steps (its store: 6 cells, 27M uint16 tokens, 32 x 4096 per step), the store
copied to moto's S3 server on 127.0.0.1 (its own process: `testkit.s3`) and read with s3fs:
- local disk: `MixtureStream(prefetch=0).iterate` over MEASURE_STEPS steps, best of ROUNDS passes, alternated
  with the S3 reader's warm passes in the same process (a shared machine's load drifts);
- S3, cold: the first pass with an empty local chunk cache; warm: the best of the next passes (the chunk
  cache on local disk and in memory holds what the first pass fetched), both with the read-ahead
  (`ReadOptions.readahead_bytes`: the chunks of the next batches fetched concurrently) and without it
  (the reader as it was: each chunk group fetched when a batch first needs it);
- the server's floor for a cold pass: moto serving every shard once in the same 4 MiB ranges (16 at once);
- peak resident memory growth of each S3 reader over the process's resident memory once both streams are
  open, at two read-ahead budgets: what the read-ahead holds is bounded by its budget, not by the store.
- every S3 reader's batches are checked against local disk's (a digest of every batch's ids, labels,
  segments, positions and sources): the same batches, or the bench fails.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import xxhash

from bench.bench_loader import GLOBAL_BATCH, MEASURE_STEPS, SEQ_LEN, build_mixture
from bench.result import Result, memory_mb
from bench.result import run_child as child

BUDGETS = (16 << 20, 128 << 20)  # read-ahead byte budgets: the small one shows the bound, the large one the speed
BUCKET = "bench"
ROUNDS = 5  # alternated local / warm S3 passes, best of each


def run_child(kind: str, *args: str) -> dict:
    return child("bench.bench_loader_s3", (kind, *args), {**os.environ, "OMP_NUM_THREADS": "1"})


def child_remote(manifest: str, url: str, endpoint: str, cache: str, readahead: str) -> dict:
    """The S3 reader's cold pass (digested), then ROUNDS rounds of a local pass and a warm S3 pass, alternated in this
    one process so that both see the same machine (the load of a shared machine drifts); best of each. Peak
    memory growth is the S3 reader's, over the process's resident memory with both streams open."""
    from loader import MixtureStream
    from loader.files import ReadOptions

    options = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}}
    local = MixtureStream(manifest, prefetch=0)
    remote = MixtureStream(
        manifest,
        prefetch=0,
        store_url=url,
        storage_options=options,
        read_options=ReadOptions(cache_dir=Path(cache), cache_bytes=1 << 30, readahead_bytes=int(readahead)),
    )
    next(local.iterate(0, 1))
    floor = _serve_every_shard(remote, ReadOptions().fetch_bytes)
    base = memory_mb("VmRSS")
    digests: dict[str, str] = {}
    start = time.perf_counter()
    digests["remote"] = _digest(remote.iterate(1, MEASURE_STEPS + 1))
    cold = time.perf_counter() - start
    digests["local"] = _digest(local.iterate(1, MEASURE_STEPS + 1))
    best = {"local": float("inf"), "remote": float("inf")}
    for _ in range(ROUNDS):
        for name, stream in (("local", local), ("remote", remote)):
            begin = time.perf_counter()
            for _ in stream.iterate(1, MEASURE_STEPS + 1):
                pass
            best[name] = min(best[name], time.perf_counter() - begin)
    tokens = MEASURE_STEPS * GLOBAL_BATCH * SEQ_LEN
    return {
        "local_tokens_per_s": tokens / best["local"],
        "cold_tokens_per_s": tokens / cold,
        "cold_s": cold,
        "floor_s": floor,
        "tokens_per_s": tokens / best["remote"],
        "peak_mb": memory_mb("VmHWM") - base,
        "same_batches": digests["remote"] == digests["local"],
    }


def _serve_every_shard(stream, fetch_bytes: int) -> float:
    """Seconds for the server to send every shard's bytes once, in ranges of `fetch_bytes`, 16 at once."""
    from concurrent.futures import ThreadPoolExecutor

    files = stream._space.files
    paths = files.fs.glob(f"{files.root}/cells/*/*.bin")
    ranges = [
        (p, a, min(a + fetch_bytes, files.fs.size(p))) for p in paths for a in range(0, files.fs.size(p), fetch_bytes)
    ]
    start = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        sent = sum(pool.map(lambda r: len(files.fs.cat_file(r[0], start=r[1], end=r[2])), ranges))
    assert sent == sum(files.fs.size(p) for p in paths)
    return time.perf_counter() - start


def _digest(batches) -> str:
    """A digest of every batch's ids, labels, segments, positions and sources."""
    digest = xxhash.xxh3_128()
    for batch in batches:
        for array in (batch.input_ids, batch.labels, batch.segment_ids, batch.positions, batch.segment_sources):
            if array is not None:
                digest.update(array.tobytes())
    return digest.hexdigest()


def main() -> list[Result]:
    from loader.files import ReadOptions
    from millrace.home import Home
    from pipeline.store.format import CHUNK_BYTES
    from pipeline.store.remote import copy_store
    from testkit.s3 import s3_server

    with tempfile.TemporaryDirectory(prefix="bench-loader-s3-") as tmp:
        home = Home.resolve(Path(tmp) / "home")
        manifest, _, _ = build_mixture(home)
        remote: dict[int, dict] = {}
        with s3_server(BUCKET) as server:
            url = f"s3://{BUCKET}/stores/bench/2026.01.01"
            copy_store(home.store("bench", "2026.01.01"), url, server.storage_options)
            for budget in (0, *BUDGETS):
                cache = str(Path(tmp) / f"s3-cache-{budget}")
                remote[budget] = run_child("remote", str(manifest), url, server.endpoint, cache, str(budget))
    for budget, figures in remote.items():
        if not figures["same_batches"]:
            raise RuntimeError(f"S3 batches (read-ahead {budget} bytes) differ from local disk's")
    local_name = "the same store on local disk, same process, alternated (same batches)"
    results = []
    for budget, figures in remote.items():
        label = f"read-ahead {budget >> 20} MiB" if budget else "no read-ahead"
        results += [
            Result(
                f"S3 (moto, loopback), {label}, cache cold: throughput",
                figures["cold_tokens_per_s"],
                figures["local_tokens_per_s"],
                local_name,
                "tokens/s",
            ),
            Result(
                f"S3 (moto, loopback), {label}, cache warm: throughput",
                figures["tokens_per_s"],
                figures["local_tokens_per_s"],
                local_name,
                "tokens/s",
                target=0.5 if budget == BUDGETS[-1] else None,
            ),
        ]
    results += [
        Result(
            f"S3 cold pass, {label}: time",
            figures["cold_s"],
            figures["floor_s"],
            "moto sending every shard once in 4 MiB ranges (the server's floor)",
            "s",
            higher_is_better=False,
        )
        for budget, figures in remote.items()
        for label in [f"read-ahead {budget >> 20} MiB" if budget else "no read-ahead"]
    ]
    defaults = ReadOptions()
    for budget, figures in remote.items():
        flying = defaults.fetch_threads * defaults.fetch_bytes if budget else defaults.fetch_bytes
        bound = defaults.memory_chunks * CHUNK_BYTES + budget + flying
        label = f"read-ahead {budget >> 20} MiB" if budget else "no read-ahead"
        results.append(
            Result(
                f"S3 reader peak resident memory growth, {label}",
                figures["peak_mb"],
                bound / 2**20,
                "memory chunks + read-ahead budget + ranges in flight (batch arrays, buffers of s3fs not counted)",
                "MB",
                higher_is_better=False,
            )
        )
    return results


if __name__ == "__main__":
    kind, rest = sys.argv[1], sys.argv[2:]
    children: dict[str, Callable[..., dict]] = {"remote": child_remote}
    print(json.dumps(children[kind](*rest)))
