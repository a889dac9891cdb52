"""The loader against its baselines, measured in the same run, each system in its own process.

1. Throughput on one core: `MixtureStream.iterate` without the prefetch thread (index + gather + int64 ids and
   labels + segments + positions + sources per segment) vs a raw numpy memmap gather of
   the same windows into int64 inputs and labels, written as nanoGPT's `get_batch`
   does it (`np.stack([data[i:i+L].astype(np.int64) ...])`), and nothing else.
2. megatron-core's `GPTDataset` blended by `BlendedDataset` (built by
   `BlendedMegatronDatasetBuilder`, torch.distributed gloo world 1) over the same
   `.bin/.idx` shards, weights and sample count: index build time, time to first
   batch, throughput, and peak memory growth over the process's post-import RSS;
   then again with the index cache it saved (warm: its usual start).
3. The same mixture and steps read from the store's copy on moto's S3 server on loopback (s3fs), first
   with a cold local chunk cache, then warm, against local disk.
4. The reference-scale stats-only manifest (18.75T tokens, 200 cells, built by the
   mixtures room's `build` from its shipped synthetic stats): open + first batch,
   resident memory, `peek` at step 390,000, against the limits: open + first batch under 1 s, resident memory
   under 256 MB, `peek` under 100 ms, whatever the corpus size.
5. The peers users would pick instead (`bench.loader_peers`): MosaicML streaming and litdata on copies of the
   same cells' tokens in their formats, megatron-core, and millrace, at 0 and WORKERS DataLoader workers: open,
   first batch, tokens/s, peak memory, resume at RESUME_STEP (exact or not), mixing error. Printed as a table
   on stderr; millrace's full output against the faster of MosaicML and litdata are results.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.result import ROOT, Result, best_of, memory_mb
from bench.result import run_child as child

EOS = 0
VOCAB = 48_001
SEQ_LEN = 4096
GLOBAL_BATCH = 32
SEED = 7
# cell -> (available tokens, share of the schedule). Each cell's tokens come from its own slice of the vocabulary
# (`cell_of`), so every system's batches say which cell each row came from. Sized so that no cell runs out in the
# steps litdata's weighted mix reads (it stops when any of its datasets does).
CELLS = {
    "web": (13_000_000, 0.50),
    "code": (5_500_000, 0.20),
    "books": (4_200_000, 0.15),
    "math": (2_800_000, 0.10),
    "wiki": (1_200_000, 0.04),
    "tiny": (400_000, 0.01),
}
SLICE = (VOCAB - 1) // len(CELLS)
SCHEDULE_STEPS = 5_000
MEASURE_STEPS = 30
ROUNDS = 2
RESUME_STEP = 150  # the late step every system resumes at (MosaicML and litdata must read up to it once)
WORKERS = 2
REFERENCE_STEP = 390_000
ONE_CORE = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def cell_of(rows: np.ndarray) -> np.ndarray:
    """The cell index of each row of token windows (any system's), from its slice of the vocabulary."""
    return (np.asarray(rows).max(axis=1) - 1) // SLICE


# ---- the bench store and manifest ------------------------------------------------------


def build_mixture(home) -> tuple[Path, list[str], list[int]]:
    """A real store (one shard per cell) and a manifest drawing CELLS' shares; returns shard prefixes too."""
    from mixtures.manifest import manifest_path, write_manifest

    store_hash, summaries, prefixes = _write_store(home)
    manifest, counts = _manifest(store_hash, summaries)
    path = manifest_path(home, "bench", "2026.01.01", "bench", "r1")
    write_manifest(path, manifest)
    return path, prefixes, [counts[c] for c in CELLS]


def _write_store(home) -> tuple[str, dict, list[str]]:
    """The bench store: one shard per cell of geometric-length documents from the cell's own vocabulary slice
    (written with the store's ShardWriter in bulk: 27M tokens); returns its hash, cell summaries and prefixes."""
    from pipeline.store.format import StoreManifest, TokenizerInfo, write_store_manifest

    rng = np.random.default_rng(0)
    root = home.store("bench", "2026.01.01")
    summaries, prefixes = {}, []
    for number, (cell, (tokens, _)) in enumerate(CELLS.items()):
        summaries[cell] = _write_cell(root, rng, number, cell, tokens)
        prefixes.append(str(root / "cells" / cell / "shard_00000"))
    store_hash = write_store_manifest(
        root,
        StoreManifest(
            name="bench",
            version="2026.01.01",
            dtype="uint16",
            cells=summaries,
            sources=["bench"],
            tokenizer=TokenizerInfo(fingerprint="bench", vocab_size=VOCAB, eos_id=EOS, path=None),
        ),
    )
    return store_hash, summaries, prefixes


def _write_cell(root: Path, rng: np.random.Generator, number: int, cell: str, tokens: int):
    """One cell's shard and cell.json: `tokens` ids from the cell's slice, documents ended by EOS."""
    from pipeline.store.format import CellManifest, CellSummary, ShardTable, ShardWriter, write_cell_manifest

    writer = ShardWriter(root / "cells" / cell / "shard_00000", np.dtype(np.uint16), durable=False)
    stream = rng.integers(1 + number * SLICE, 1 + (number + 1) * SLICE, size=tokens, dtype=np.uint16)
    lengths = np.minimum(rng.geometric(1 / 600, size=tokens // 100 + 1), 20_000)
    ends = np.cumsum(lengths)
    ends = np.append(ends[ends < tokens], tokens)
    stream[ends - 1] = EOS
    writer.add_documents(stream, np.diff(np.concatenate([[0], ends])), np.zeros(ends.size, dtype=np.uint16))
    info = writer.close()
    cell_manifest = CellManifest(
        cell=cell,
        dtype="uint16",
        tokenizer_fingerprint="bench",
        documents=info.documents,
        tokens=info.tokens,
        bytes=0,
        shards=ShardTable.of([info]),
    )
    return CellSummary(
        documents=info.documents,
        tokens=info.tokens,
        manifest_hash=write_cell_manifest(root / "cells" / cell, cell_manifest),
    )


def _manifest(store_hash: str, summaries: dict) -> tuple[Any, dict[str, int]]:
    """The built manifest over the bench store: one phase of SCHEDULE_STEPS at CELLS' shares (the rounding
    remainder to the largest cell), so that every system reads the same mixture; and its counts per cell."""
    from mixtures.manifest import DOCUMENT_RUN, BuiltManifest, ManifestCell, ManifestPhase, StoreRef

    total = SCHEDULE_STEPS * GLOBAL_BATCH
    counts = {cell: int(share * total) for cell, (_, share) in CELLS.items()}
    counts["web"] += total - sum(counts.values())
    cells = {
        cell: ManifestCell(
            name=cell,
            available_tokens=summary.tokens,
            documents=summary.documents,
            sequences_available=(summary.tokens - 1) // SEQ_LEN,
            cell_manifest_hash=summary.manifest_hash,
            shards=1,
        )
        for cell, summary in summaries.items()
    }
    phase = ManifestPhase(
        name="main",
        token_budget=total * SEQ_LEN,
        start_position=0,
        sequences=total,
        start_step=0,
        steps=SCHEDULE_STEPS,
        counts=counts,
        declared_weights={c: s for c, (_, s) in CELLS.items()},
    )
    manifest = BuiltManifest(
        mixture="bench",
        revision="r1",
        revision_hash="sha256:bench",
        store=StoreRef(name="bench", version="2026.01.01", manifest_hash=store_hash, stats_only=False),
        tokenizer_fingerprint="bench",
        dtype="uint16",
        eos_id=EOS,
        seed=SEED,
        seq_len=SEQ_LEN,
        global_batch=GLOBAL_BATCH,
        epoch_cap=100.0,
        document_run=DOCUMENT_RUN,
        cells=cells,
        phases=[phase],
        total_sequences=total,
        total_steps=SCHEDULE_STEPS,
    )
    return manifest, counts


# ---- children: one system per process ----------------------------------------------------


def child_millrace(manifest: str) -> dict:
    from loader import MixtureStream

    base, anon = memory_mb("VmRSS"), memory_mb("RssAnon")
    start = time.perf_counter()
    stream = MixtureStream(manifest, prefetch=0)
    opened = time.perf_counter()
    next(stream.iterate(0, 1))
    first = time.perf_counter()
    index_mb = memory_mb("RssAnon") - anon

    def stream_batches() -> None:  # the trainer's path, on this one thread (prefetch=0)
        for _ in stream.iterate(1, MEASURE_STEPS + 1):
            pass

    elapsed = best_of(stream_batches)
    return {
        "build_s": opened - start,
        "first_batch_s": first - start,
        "tokens_per_s": MEASURE_STEPS * GLOBAL_BATCH * SEQ_LEN / elapsed,
        "peak_mb": memory_mb("VmHWM") - base,
        "anon_mb": index_mb,
    }


def child_remote(manifest: str, url: str, endpoint: str, cache: str) -> dict:
    """The same mixture and steps read from the store's copy on an S3 server on loopback (moto, via s3fs):
    the first pass fetches every chunk (cache cold), the best of the next passes reads the local cache."""
    from loader import MixtureStream
    from loader.files import ReadOptions, StoreAccess

    options = {"key": "bench", "secret": "bench", "client_kwargs": {"endpoint_url": endpoint}}
    stream = MixtureStream(
        manifest,
        prefetch=0,
        store=StoreAccess(
            url=url, storage_options=options, read=ReadOptions(cache_dir=Path(cache), cache_bytes=1 << 30)
        ),
    )

    def stream_batches() -> None:
        for _ in stream.iterate(1, MEASURE_STEPS + 1):
            pass

    start = time.perf_counter()
    stream_batches()
    cold = time.perf_counter() - start
    tokens = MEASURE_STEPS * GLOBAL_BATCH * SEQ_LEN
    return {"cold_tokens_per_s": tokens / cold, "tokens_per_s": tokens / best_of(stream_batches)}


def start_s3(store: Path) -> tuple[Any, str, str]:  # moto's ThreadedMotoServer
    """moto's S3 server on 127.0.0.1 with the bench store copied to it; (server, store URL, endpoint)."""
    from moto.server import ThreadedMotoServer

    from pipeline.store.remote import copy_store

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    options = {"key": "bench", "secret": "bench", "client_kwargs": {"endpoint_url": endpoint}}
    import boto3

    boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench", aws_secret_access_key="bench"
    ).create_bucket(Bucket="bench")
    url = "s3://bench/stores/bench/2026.01.01"
    copy_store(store, url, options)
    return server, url, endpoint


def child_raw(manifest: str) -> dict:
    """The floor: nanoGPT's `get_batch`, a raw numpy memmap gather of the same windows into int64 x and y."""
    from loader import MixtureStream

    stream = MixtureStream(manifest, prefetch=0)
    maps = {
        name: np.memmap(str(Path(manifest).parents[3] / "cells" / name / "shard_00000.bin"), dtype=np.uint16, mode="r")
        for name in stream.cell_names
    }
    plan = []
    for step in range(1, MEASURE_STEPS + 1):
        index = stream.index(step)
        plan.append([(maps[stream.cell_names[c]], s * SEQ_LEN) for c, s in zip(index.cell_ids, index.sequences)])

    def get_batches() -> None:
        for rows in plan:
            np.stack([data[offset : offset + SEQ_LEN].astype(np.int64) for data, offset in rows])
            np.stack([data[offset + 1 : offset + 1 + SEQ_LEN].astype(np.int64) for data, offset in rows])

    elapsed = best_of(get_batches)
    # For scale, not a target: the bare copy of the uint16 windows, nothing converted or derived.
    views = {id(data): np.asarray(data) for data in maps.values()}

    def copy_windows() -> None:
        for rows in plan:
            out = np.empty((len(rows), SEQ_LEN + 1), dtype=np.uint16)
            for row, (data, offset) in enumerate(rows):
                out[row] = views[id(data)][offset : offset + SEQ_LEN + 1]

    copy_elapsed = best_of(copy_windows)
    tokens = MEASURE_STEPS * GLOBAL_BATCH * SEQ_LEN
    return {"tokens_per_s": tokens / elapsed, "copy_tokens_per_s": tokens / copy_elapsed}


def megatron_dataset(manifest: str, cache: str):
    """megatron-core's GPTDataset blend over the bench store's shards at the cells' shares, built by
    `BlendedMegatronDatasetBuilder` (its indices cached under `cache`; torch.distributed gloo, world 1)."""
    import torch.distributed as dist
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.tokenizers import MegatronTokenizerBase

    class Tokenizer(MegatronTokenizerBase):
        def __init__(self) -> None:
            super().__init__("bench", {})
            self.unique_identifiers = {"class": "bench", "vocab_size": VOCAB, "eod": EOS}

        tokenize = detokenize = vocab = apply_chat_template = lambda self, *a, **k: None
        vocab_size = VOCAB
        eod = EOS
        pad = -1

    Path(cache).mkdir(parents=True, exist_ok=True)
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{cache}/pg-{os.getpid()}", rank=0, world_size=1)
    store = Path(manifest).parents[3]
    prefixes = [str(store / "cells" / cell / "shard_00000") for cell in CELLS]
    config = GPTDatasetConfig(
        random_seed=SEED,
        sequence_length=SEQ_LEN,
        blend=(prefixes, [share for _, share in CELLS.values()]),
        split="1,0,0",
        path_to_cache=cache,
        tokenizer=Tokenizer(),
        reset_position_ids=True,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
    )
    return BlendedMegatronDatasetBuilder(
        GPTDataset, [SCHEDULE_STEPS * GLOBAL_BATCH, 0, 0], lambda: True, config
    ).build()[0]


def child_megatron(manifest: str, cache: str) -> dict:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    base, anon = memory_mb("VmRSS"), memory_mb("RssAnon")
    import megatron.core.datasets.gpt_dataset  # noqa: F401  (imported before the clock starts, as for the others)

    base, anon = memory_mb("VmRSS"), memory_mb("RssAnon")
    start = time.perf_counter()
    train = megatron_dataset(manifest, cache)
    built = time.perf_counter()

    def batch(step: int) -> dict:
        samples = [train[i] for i in range(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH)]
        return {
            key: torch.stack([s[key] for s in samples])
            if torch.is_tensor(samples[0][key])
            else torch.tensor(np.asarray([s[key] for s in samples]))
            for key in samples[0]
        }

    batch(0)
    first = time.perf_counter()
    index_mb = memory_mb("RssAnon") - anon

    def megatron_batches() -> None:
        for step in range(1, MEASURE_STEPS + 1):
            batch(step)

    elapsed = best_of(megatron_batches)
    result = {
        "build_s": built - start,
        "first_batch_s": first - start,
        "tokens_per_s": MEASURE_STEPS * GLOBAL_BATCH * SEQ_LEN / elapsed,
        "peak_mb": memory_mb("VmHWM") - base,
        "anon_mb": index_mb,
    }
    dist.destroy_process_group()
    return result


def child_reference(home: str) -> dict:
    """Open the 18.75T-token / 200-cell stats-only manifest and look at step 390,000."""
    from loader import MixtureStream
    from loader.peek import peek

    path = next(Path(home).glob("stores/*/*/mixtures/reference/two-phase/manifest.json"))
    start = time.perf_counter()
    stream = MixtureStream(path)
    stream.index(0)
    opened = time.perf_counter() - start
    start = time.perf_counter()
    report = peek(stream, REFERENCE_STEP)
    peeked = time.perf_counter() - start
    tokens = stream.manifest.total_sequences * stream.manifest.seq_len
    return {
        "open_first_s": opened,
        "peek_s": peeked,
        "rss_mb": memory_mb("VmHWM"),
        "tokens": tokens,
        "cells": len(stream.cell_names),
        "steps": stream.steps,
        "samples": len(report["samples"]),
    }


def build_reference(home) -> None:
    """The mixtures room's shipped synthetic 200-cell stats and its two-phase revision, built for real."""
    from mixtures.build import build
    from pipeline.store.format import write_stats_only_store

    stats = json.loads((ROOT / "mixtures/examples/reference/available_tokens.json").read_text())["available_tokens"]
    write_stats_only_store(home.store("reference", "2025.06.01"), "reference", "2025.06.01", stats)
    build(home, "reference", "two-phase")


def best_run(results: list[dict]) -> dict:
    """Each figure at its best over the rounds: highest rates, lowest times and memory."""
    return {key: (max if key.endswith("_per_s") else min)(r[key] for r in results) for key in results[0]}


def run_child(*args: str) -> dict:
    return child("bench.bench_loader", args, {**os.environ, **ONE_CORE, "PYTHONWARNINGS": "ignore"})


def peer_table(root: Path, manifest: Path) -> dict[tuple[str, int], dict]:
    """Every system at 0 and WORKERS workers (`bench.loader_peers`): the best of ROUNDS runs, then a resume."""
    from bench.loader_peers import SYSTEMS

    cases = [
        (system, workers)
        for system in SYSTEMS
        for workers in (0, WORKERS)
        if not (system == "millrace-lean" and workers)
    ]
    runs: dict[tuple[str, int], list[dict]] = {case: [] for case in cases}
    for _ in range(ROUNDS):  # alternate the systems: the machine's load drifts
        for system, workers in cases:
            runs[system, workers].append(peer_child("run", system, str(workers), str(root), str(manifest)))
    table = {}
    for case, results in runs.items():
        best = best_run([{k: v for k, v in r.items() if k != "digest"} for r in results])
        resumed = peer_child("resume", case[0], str(case[1]), str(root), str(manifest))
        straight = results[-1]["digest"]
        exact = (
            "yes"
            if resumed["digest"] == straight
            else "rows reordered"
            if resumed["digest"][1] == straight[1]
            else "no"
        )
        table[case] = {**best, "resume_s": resumed["resume_s"], "exact": exact}
    return table


def print_table(table: dict[tuple[str, int], dict], converted: dict) -> None:
    """Every system's row, on stderr (stdout carries the results, JSON lines with --json)."""
    names = {
        "millrace": "millrace, full output (ids, labels, segments, positions, sources)",
        "millrace-lean": "millrace, without sources",
        "mosaicml": "MosaicML streaming (MDS, py1e, proportions)",
        "litdata": "litdata (CombinedStreamingDataset weights, TokensLoader)",
        "megatron": "megatron-core GPTDataset blend (warm index cache)",
    }
    print(
        f"  {'system':<66} {'workers':>7} {'open s':>7} {'first s':>8} {'tokens/s':>9} {'peak MB':>8} "
        f"{'resume s':>9} {'exact resume':>14} {'mix err':>8}",
        file=sys.stderr,
    )
    for (system, workers), row in table.items():
        print(
            f"  {names[system]:<66} {workers:>7} {row['open_s']:>7.3f} {row['first_batch_s']:>8.3f} "
            f"{row['tokens_per_s']:>9.3g} {row['peak_mb']:>8.0f} {row['resume_s']:>9.3f} {row['exact']:>14} "
            f"{row['mix_error']:>8.1f}",
            file=sys.stderr,
        )
    print(
        f"  (resume at step {RESUME_STEP}; mixing error: the largest |rows drawn - share x rows| over the cells in "
        f"steps [0, {RESUME_STEP}); converting the store to MDS took {converted['mds_s']:.1f} s, to litdata "
        f"{converted['litdata_s']:.1f} s)",
        file=sys.stderr,
    )


def peer_child(*args: str) -> dict:
    return child("bench.loader_peers", args, {**os.environ, **ONE_CORE, "PYTHONWARNINGS": "ignore"})


def main() -> list[Result]:
    from millrace.home import Home

    with tempfile.TemporaryDirectory(prefix="bench-loader-") as tmp:
        home = Home.resolve(Path(tmp) / "home")
        manifest, prefixes, _ = build_mixture(home)
        for prefix in prefixes:  # warm the page cache for every system alike
            with open(prefix + ".bin", "rb") as handle:
                while handle.read(1 << 24):
                    pass
        peers = Path(tmp) / "peers"
        converted = peer_child("convert", str(home.store("bench", "2026.01.01")), str(peers))
        raw, ours, megatron, warm = local_rounds(manifest, peers, Path(tmp))
        table = peer_table(peers, manifest)
        print_table(table, converted)
        server, url, endpoint = start_s3(home.store("bench", "2026.01.01"))
        try:
            remote = run_child("remote", str(manifest), url, endpoint, str(Path(tmp) / "s3-cache"))
        finally:
            server.stop()
        build_reference(home)
        reference = run_child("reference", str(home.root))
    return (
        peer_results(table)
        + raw_results(ours, raw)
        + megatron_results(ours, megatron, warm)
        + remote_results(ours, remote)
        + reference_results(reference)
    )


def local_rounds(manifest: Path, peers: Path, tmp: Path) -> tuple[dict, dict, dict, dict]:
    """The raw gather, millrace and Megatron (cold, then warm index cache), alternated over ROUNDS (the
    machine's load drifts); each at its best. Round 0's Megatron cache is left under `peers` for their table."""
    runs: dict[str, list[dict]] = {"raw": [], "ours": [], "megatron": [], "megatron-warm": []}
    for round_index in range(ROUNDS):
        runs["raw"].append(run_child("raw", str(manifest)))
        runs["ours"].append(run_child("millrace", str(manifest)))
        # a fresh cache: Megatron builds its indices (round 0's stays, warm, for the peers' table)
        cache = peers / "megatron" if round_index == 0 else tmp / f"megatron-cache-{round_index}"
        runs["megatron"].append(run_child("megatron", str(manifest), str(cache)))
        # the same cache again: Megatron's usual start, loading the indices it saved
        runs["megatron-warm"].append(run_child("megatron", str(manifest), str(cache)))
    raw, ours, megatron, warm = (best_run(runs[name]) for name in ("raw", "ours", "megatron", "megatron-warm"))
    return raw, ours, megatron, warm


def peer_results(table: dict[tuple[str, int], dict]) -> list[Result]:
    """millrace's full output against the faster of MosaicML and litdata, at 0 and WORKERS workers."""
    against_peers = []
    for workers in (0, WORKERS):
        faster = max(("mosaicml", "litdata"), key=lambda name: table[name, workers]["tokens_per_s"])
        against_peers.append(
            Result(
                f"full output, {workers} DataLoader workers: throughput",
                table["millrace", workers]["tokens_per_s"],
                table[faster, workers]["tokens_per_s"],
                f"{faster} (the faster of MosaicML and litdata)",
                "tokens/s",
                target=1.5,
            )
        )
    return against_peers


def raw_results(ours: dict, raw: dict) -> list[Result]:
    """Throughput on one core against the floor: nanoGPT's gather, and the bare window copy for scale."""
    return [
        Result(
            "throughput, 1 core",
            ours["tokens_per_s"],
            raw["tokens_per_s"],
            "raw numpy memmap gather (nanoGPT get_batch)",
            "tokens/s",
            target=0.5,
        ),
        Result(
            "throughput, 1 core (for scale: ours writes 16 bytes per token, a copy 2)",
            ours["tokens_per_s"],
            raw["copy_tokens_per_s"],
            "bare uint16 window copy",
            "tokens/s",
        ),
    ]


def megatron_results(ours: dict, megatron: dict, warm: dict) -> list[Result]:
    """Start-up, throughput and memory against megatron-core's blend (its index cache cold, then warm)."""
    mega = "megatron-core GPTDataset+BlendedDataset"
    lower = {"higher_is_better": False}
    return [
        Result("index build", ours["build_s"], megatron["build_s"], mega, "s", **lower, target=1.0),
        Result(
            "time to first batch", ours["first_batch_s"], megatron["first_batch_s"], mega, "s", **lower, target=1.0
        ),
        Result(
            "index build, Megatron's cache warm",
            ours["build_s"],
            warm["build_s"],
            mega + " (warm index cache)",
            "s",
            **lower,
        ),
        Result(
            "time to first batch, Megatron's cache warm",
            ours["first_batch_s"],
            warm["first_batch_s"],
            mega + " (warm index cache)",
            "s",
            **lower,
        ),
        Result("throughput, 1 core", ours["tokens_per_s"], megatron["tokens_per_s"], mega, "tokens/s", target=1.0),
        Result(
            "peak resident memory growth (incl. mapped shard pages)",
            ours["peak_mb"],
            megatron["peak_mb"],
            mega,
            "MB",
            **lower,
            target=1.0,
        ),
        Result(
            "anonymous memory after open + first batch (indices)",
            ours["anon_mb"],
            megatron["anon_mb"],
            mega,
            "MB",
            **lower,
            target=1.0,
        ),
    ]


def remote_results(ours: dict, remote: dict) -> list[Result]:
    """The same steps from moto's S3 on loopback, chunk cache cold then warm, against local disk."""
    return [
        Result(
            "object store (moto S3 on loopback, cache cold): throughput",
            remote["cold_tokens_per_s"],
            ours["tokens_per_s"],
            "the same store on local disk",
            "tokens/s",
        ),
        Result(
            "object store, local chunk cache warm: throughput",
            remote["tokens_per_s"],
            ours["tokens_per_s"],
            "the same store on local disk",
            "tokens/s",
        ),
    ]


def reference_results(reference: dict) -> list[Result]:
    """The reference-scale manifest against the start-up limits, which hold whatever the corpus size."""
    limit = "the start-up limit (O(1) in corpus size)"
    return [
        Result(
            f"reference {reference['tokens'] / 1e12:.2f}T tokens / {reference['cells']} cells: open + first batch",
            reference["open_first_s"],
            1.0,
            limit,
            "s",
            higher_is_better=False,
            target=1.0,
        ),
        Result(
            "reference: resident memory", reference["rss_mb"], 256.0, limit, "MB", higher_is_better=False, target=1.0
        ),
        Result(
            f"reference: peek at step {REFERENCE_STEP:,} ({reference['samples']} samples)",
            reference["peek_s"] * 1000,
            100.0,
            limit,
            "ms",
            higher_is_better=False,
            target=1.0,
        ),
    ]


if __name__ == "__main__":
    kind, rest = sys.argv[1], sys.argv[2:]
    children: dict[str, Callable[..., dict]] = {
        "millrace": child_millrace,
        "raw": child_raw,
        "megatron": child_megatron,
        "reference": child_reference,
        "remote": child_remote,
    }
    print(json.dumps(children[kind](*rest)))
