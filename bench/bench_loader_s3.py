"""The loader over object storage against local disk, measured in the same run, each reader in its own process,
at two store sizes.

`bench_loader`'s mixture (6 cells, one shard each, 32 x 4096 tokens a step) at two sizes: its own store (27M
uint16 tokens, 54 MB) and one with SCALE times the tokens in every cell (generated once and kept under
`$MILLRACE_BENCH_CACHE`, default `~/.cache/millrace-bench`), each copied to moto's S3 server on 127.0.0.1 (its
own process: `testkit.s3`) and read with s3fs over MEASURE_STEPS x size steps (the larger store is read 16
times as far, so what the reader holds is seen not to grow with the bytes read either). For each size and each
read-ahead budget (none, 16 MiB, 128 MiB), REPEATS fresh processes, each with an empty chunk cache:
- cold: the first pass (every chunk fetched), against a local-disk pass of the same steps;
- warm: ROUNDS passes alternated with local-disk passes in the same process (a shared machine's load drifts);
  the chunk cache on local disk now holds what the cold pass fetched;
- peak resident memory growth of each reader alone in a process of its own (two passes: for S3 cold, then
  warm), against the local-disk reader's over the same steps: what reading from S3 adds is the difference;
- every S3 pass's batches checked against local disk's (a digest of every batch's ids, labels, segments,
  positions and sources): the same batches, or the bench fails.
Figures are medians: of the rounds within a process, then of the processes. At the small size the server's floor
for a cold pass is measured too: moto serving every shard once in 4 MiB ranges, 16 at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import xxhash

import bench.bench_loader as loader_bench
from bench.bench_loader import GLOBAL_BATCH, MEASURE_STEPS, SEQ_LEN, build_mixture
from bench.result import Result, memory_mb
from bench.result import run_child as child

BUDGETS = (16 << 20, 128 << 20)  # read-ahead byte budgets: the small one shows the bound, the large one the speed
BUCKET = "bench"
SCALE = 16  # the larger store: this many times the tokens of every cell
REPEATS = 3  # fresh processes per size and budget (median)
ROUNDS = 3  # alternated local / warm S3 passes in each process (median)
VERSION = "2026.01.01"


def run_child(kind: str, *args: str) -> dict:
    return child("bench.bench_loader_s3", (kind, *args), {**os.environ, "OMP_NUM_THREADS": "1"})


def _timed(batches: Iterator) -> tuple[float, str]:
    """Seconds to draw every batch, and a digest of every batch's ids, labels, segments, positions and sources."""
    digest = xxhash.xxh3_128()
    start = time.perf_counter()
    for batch in batches:
        for array in (batch.input_ids, batch.labels, batch.segment_ids, batch.positions, batch.segment_sources):
            if array is not None:
                digest.update(array.tobytes())
    return time.perf_counter() - start, digest.hexdigest()


def child_remote(manifest: str, url: str, endpoint: str, cache: str, readahead: str, steps: str, floor: str) -> dict:
    """A cold S3 pass, then ROUNDS rounds of a local pass and a warm S3 pass, alternated in this one process;
    medians."""
    from loader import MixtureStream
    from loader.files import ReadOptions, StoreAccess

    options = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}}
    local = MixtureStream(manifest, prefetch=0)
    remote = MixtureStream(
        manifest,
        prefetch=0,
        store=StoreAccess(
            url=url,
            storage_options=options,
            read=ReadOptions(cache_dir=Path(cache), cache_bytes=4 << 30, readahead_bytes=int(readahead)),
        ),
    )
    end = int(steps) + 1
    next(local.iterate(0, 1))
    server_floor = _serve_every_shard(remote, ReadOptions().fetch_bytes) if floor == "1" else None
    cold, remote_digest = _timed(remote.iterate(1, end))
    local_cold, local_digest = _timed(local.iterate(1, end))
    same = remote_digest == local_digest
    warm, disk = [], []
    for _ in range(ROUNDS):
        seconds, digest = _timed(local.iterate(1, end))
        disk.append(seconds)
        seconds, digest_remote = _timed(remote.iterate(1, end))
        warm.append(seconds)
        same = same and digest == digest_remote == local_digest
    return {
        "cold_ratio": local_cold / cold,
        "warm_ratio": statistics.median(d / w for d, w in zip(disk, warm)),
        "cold_s": cold,
        "local_s": statistics.median(disk),
        "floor_s": server_floor,
        "same_batches": same,
    }


def child_memory(manifest: str, url: str, endpoint: str, cache: str, readahead: str, steps: str) -> dict:
    """One reader alone in this process (local disk when `url` is "-"): its peak resident memory growth over
    two passes (for S3: cold, then warm), over the process's resident memory once the stream is open."""
    from loader import MixtureStream
    from loader.files import ReadOptions, StoreAccess

    if url == "-":
        stream = MixtureStream(manifest, prefetch=0)
    else:
        stream = MixtureStream(
            manifest,
            prefetch=0,
            store=StoreAccess(
                url=url,
                storage_options={"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}},
                read=ReadOptions(cache_dir=Path(cache), cache_bytes=4 << 30, readahead_bytes=int(readahead)),
            ),
        )
    base = memory_mb("VmRSS")
    for _ in range(2):
        _timed(stream.iterate(1, int(steps) + 1))
    return {"peak_mb": memory_mb("VmHWM") - base}


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


@contextlib.contextmanager
def _scaled_cells(scale: int) -> Iterator[None]:
    """`bench_loader`'s cells with `scale` times the tokens, same shares (its builder reads the module's CELLS)."""
    cells = loader_bench.CELLS
    loader_bench.CELLS = {cell: (tokens * scale, share) for cell, (tokens, share) in cells.items()}
    try:
        yield
    finally:
        loader_bench.CELLS = cells


def _home(scale: int, tmp: Path):
    """A home holding the bench store at `scale` and its manifest: the small one built afresh, the large one
    built once and kept (a few minutes and about 0.9 GB)."""
    from millrace.home import Home

    if scale == 1:
        home = Home.resolve(tmp / "home")
        return home, build_mixture(home)[0]
    kept = Path(os.environ.get("MILLRACE_BENCH_CACHE", Path.home() / ".cache" / "millrace-bench"))
    root = kept / f"loader-s3-x{scale}"
    home = Home.resolve(root)
    done = root / "built.json"
    if not done.exists():
        shutil.rmtree(root, ignore_errors=True)
        with _scaled_cells(scale):
            manifest = build_mixture(home)[0]
        done.write_text(json.dumps({"manifest": str(manifest)}))
    return home, Path(json.loads(done.read_text())["manifest"])


def measure() -> tuple[dict[int, dict[int, list[dict]]], dict[int, dict]]:
    """{scale: {budget: [each process's figures]}} and {scale: {budget or "local": peak memory growth, MB}}."""
    from pipeline.store.remote import copy_store
    from testkit.s3 import s3_server

    figures: dict[int, dict[int, list[dict]]] = {}
    memory: dict[int, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-loader-s3-") as tmp:
        for scale in (1, SCALE):
            home, manifest = _home(scale, Path(tmp))
            with s3_server(BUCKET) as server:
                url = f"s3://{BUCKET}/stores/bench/{VERSION}"
                copy_store(home.store("bench", VERSION), url, server.storage_options)
                steps = str(MEASURE_STEPS * scale)
                for budget in ("local", 0, *BUDGETS):  # memory: each reader alone in its process
                    cache = Path(tmp) / f"s3-cache-memory-{scale}-{budget}"
                    where = "-" if budget == "local" else url
                    found = run_child("memory", str(manifest), where, server.endpoint, str(cache), str(budget), steps)
                    memory.setdefault(scale, {})[budget] = found["peak_mb"]
                    shutil.rmtree(cache, ignore_errors=True)
                for budget in (0, *BUDGETS):
                    for repeat in range(REPEATS):
                        cache = Path(tmp) / f"s3-cache-{scale}-{budget}-{repeat}"
                        args = (str(manifest), url, server.endpoint, str(cache), str(budget))
                        floor = "1" if scale == 1 and repeat == 0 else "0"
                        figures.setdefault(scale, {}).setdefault(budget, []).append(
                            run_child("remote", *args, steps, floor)
                        )
                        shutil.rmtree(cache, ignore_errors=True)
    return figures, memory


def _label(budget: int) -> str:
    return f"read-ahead {budget >> 20} MiB" if budget else "no read-ahead"


def main() -> list[Result]:
    figures, memory = measure()
    for scale, budgets in figures.items():
        for budget, runs in budgets.items():
            if not all(run["same_batches"] for run in runs):
                raise RuntimeError(f"S3 batches (store x{scale}, {_label(budget)}) differ from local disk's")
    return throughput_results(figures) + memory_results(memory)


def _median(figures: dict[int, dict[int, list[dict]]], scale: int, budget: int, key: str) -> float:
    """The median over the processes of one figure (each process's figure is already a median of its rounds)."""
    return statistics.median(run[key] for run in figures[scale][budget])


def throughput_results(figures: dict[int, dict[int, list[dict]]]) -> list[Result]:
    """S3 against local disk at each size and read-ahead budget, cache cold and warm; the cold pass against the
    server's floor at the small size."""
    local_name = "local disk, same steps, same process (same batches; median of processes)"
    results = []
    for scale in figures:
        size = f"store x{scale}, {MEASURE_STEPS * scale} steps"
        for budget in (0, *BUDGETS):
            tokens = MEASURE_STEPS * scale * GLOBAL_BATCH * SEQ_LEN
            cold_s, local_s = _median(figures, scale, budget, "cold_s"), _median(figures, scale, budget, "local_s")
            results += [
                Result(
                    f"S3 (moto, loopback) / local disk, {_label(budget)}, {size}, cache cold: throughput",
                    tokens / cold_s,
                    tokens / cold_s / _median(figures, scale, budget, "cold_ratio"),
                    local_name,
                    "tokens/s",
                ),
                Result(
                    f"S3 (moto, loopback) / local disk, {_label(budget)}, {size}, cache warm: throughput",
                    tokens / local_s * _median(figures, scale, budget, "warm_ratio"),
                    tokens / local_s,
                    local_name,
                    "tokens/s",
                    target=0.5 if budget == BUDGETS[-1] else None,
                ),
            ]
    results.append(
        Result(
            "S3 cold pass, no read-ahead, store x1: time",
            _median(figures, 1, 0, "cold_s"),
            figures[1][0][0]["floor_s"],
            "moto sending every shard once in 4 MiB ranges (the server's floor)",
            "s",
            higher_is_better=False,
        )
    )
    return results


def memory_results(memory: dict[int, dict]) -> list[Result]:
    """Each S3 reader's peak memory growth against the local-disk reader's, and what S3 adds at the large size
    against the small one (it must not grow with the bytes read)."""
    from loader.files import ReadOptions

    results = []
    for scale in memory:
        for budget in (0, *BUDGETS):
            results.append(
                Result(
                    f"peak resident memory growth, S3 reader alone, {_label(budget)}, store x{scale} "
                    f"({MEASURE_STEPS * scale} steps, cold then warm)",
                    memory[scale][budget],
                    memory[scale]["local"],
                    "the local-disk reader alone, same steps",
                    "MB",
                    higher_is_better=False,
                )
            )
    flying = ReadOptions().fetch_threads * ReadOptions().fetch_bytes / 2**20
    for budget in (0, *BUDGETS):
        results.append(
            Result(
                f"what reading from S3 adds to memory ({_label(budget)}), store x{SCALE} against x1 "
                f"(bound: {flying:g} MB of ranges in flight; the read-ahead's chunks are on disk)",
                memory[SCALE][budget] - memory[SCALE]["local"],
                memory[1][budget] - memory[1]["local"],
                "the same at store x1",
                "MB",
                higher_is_better=False,
            )
        )
    return results


if __name__ == "__main__":
    kind, rest = sys.argv[1], sys.argv[2:]
    children: dict[str, Callable[..., dict]] = {"remote": child_remote, "memory": child_memory}
    print(json.dumps(children[kind](*rest)))
