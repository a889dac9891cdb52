"""Real artifacts for the report tests and bench: a small store with shards, built manifests, a run.

Stores are written with the store format's own writers (ShardWriter, write_cell_manifest,
write_store_manifest, write_stats_only_store), manifests with mixtures.manifest.write_manifest,
and the run as run.json + metrics.jsonl per the trainer's metrics contract.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from millrace.artifacts import write_artifact
from millrace.home import Home
from mixtures.manifest import (
    BuiltManifest,
    ManifestCell,
    ManifestPhase,
    PinnedShard,
    StoreRef,
    manifest_path,
    write_manifest,
)
from pipeline.store import (
    CellManifest,
    CellSummary,
    SourceCounts,
    ShardWriter,
    Store,
    StoreManifest,
    TokenizerInfo,
    write_cell_manifest,
    write_stats_only_store,
    write_store_manifest,
)

STORE = "local"
VERSION = "2026.11.30"
SOURCES = ["python-docs", "man-pages", "licenses"]
DOMAIN_LABELS = {"c00": "python api", "c01": "shell commands", "c02": "licence terms"}
SCORE_RANGES = {"q0": [0.0, 0.41], "q1": [0.41, 1.0]}
HOSTILE = '<script>window.__pwned = 1; alert("x")</script></script><b>not bold</b> & done'


def _stage(name: str, per_source: dict[str, tuple[int, int, dict[str, int]]]) -> dict:
    """per_source: received docs, tokens per doc, {reason: docs removed}."""
    sources = {}
    for src, (docs, tok, removed) in per_source.items():
        gone = sum(removed.values())
        sources[src] = {
            "received": {"documents": docs, "tokens": docs * tok, "bytes": docs * tok * 4},
            "kept": {"documents": docs - gone, "tokens": (docs - gone) * tok, "bytes": (docs - gone) * tok * 4},
            "removed": {r: {"documents": n, "tokens": n * tok, "bytes": n * tok * 4} for r, n in removed.items()},
        }
    return {"name": name, "sources": sources}


def make_small_store(home: Home, seed: int = 0) -> Path:
    """3 domains × 2 buckets = 6 cells of real shards, 3 sources, a 4-stage funnel, samples with markup."""
    rng = np.random.default_rng(seed)
    root = home.store(STORE, VERSION)
    cells: dict[str, CellSummary] = {}
    for domain in range(3):
        for bucket in range(2):
            name = f"c{domain:02d}q{bucket}"
            cell_dir = root / "cells" / name
            writer = ShardWriter(cell_dir / "shard-00000", np.uint16)
            per_source: dict[str, SourceCounts] = {}
            samples = []
            for doc in range(20 + 10 * domain + 5 * bucket):
                source_id = (doc + domain) % len(SOURCES) if doc % 4 else domain
                tokens = rng.integers(1, 32000, size=int(rng.integers(50, 400)))
                tokens[-1] = 0  # EOS
                writer.add_document(tokens, source_id)
                counts = per_source.setdefault(SOURCES[source_id], SourceCounts())
                counts.documents += 1
                counts.tokens += tokens.size
                counts.bytes += tokens.size * 4
                if len(samples) < 2:
                    text = HOSTILE if (domain, bucket, doc) == (0, 0, 0) else f"document {doc} of {name}: " + "lorem " * 90
                    samples.append({"id": f"{name}/{doc}", "source": SOURCES[source_id], "text": text[:400]})
            shard = writer.close()
            manifest = CellManifest(
                cell=name, dtype="uint16", tokenizer_fingerprint="sha256:test-tokenizer",
                documents=shard.documents, tokens=shard.tokens, bytes=shard.tokens * 4, shards=[shard],
                sources=per_source,
                stats={"domain": domain, "bucket": bucket, "label": DOMAIN_LABELS[f"c{domain:02d}"],
                       "score_range": SCORE_RANGES[f"q{bucket}"], "samples": samples},
            )
            digest = write_cell_manifest(cell_dir, manifest)
            cells[name] = CellSummary(documents=shard.documents, tokens=shard.tokens, bytes=shard.tokens * 4,
                                      manifest_hash=digest)
    funnel = {"stages": [
        _stage("read", {"python-docs": (80, 300, {}), "man-pages": (70, 250, {}), "licenses": (90, 200, {})}),
        _stage("quality", {"python-docs": (80, 300, {"gopher_repetition": 3}), "man-pages": (70, 250, {"c4": 5}),
                           "licenses": (90, 200, {"gopher_quality": 2, "fineweb": 1})}),
        _stage("exact-dedup", {"python-docs": (77, 300, {"duplicate": 2}), "man-pages": (65, 250, {"duplicate": 4}),
                               "licenses": (87, 200, {"duplicate": 40})}),
        _stage("tokenize", {"python-docs": (75, 300, {}), "man-pages": (61, 250, {}), "licenses": (47, 200, {})}),
    ]}
    write_store_manifest(root, StoreManifest(
        name=STORE, version=VERSION, dtype="uint16",
        tokenizer=TokenizerInfo(fingerprint="sha256:test-tokenizer", vocab_size=32000, eos_id=0),
        cells=cells, sources=SOURCES, funnel=funnel,
        stats={"domains": {"k": 3, "labels": DOMAIN_LABELS}, "quality": {"buckets": 2, "score_ranges": SCORE_RANGES}},
    ))
    return root


def apportion(weights: dict[str, float], total: int) -> dict[str, int]:
    """Largest remainder: integer counts summing to `total`, each within one of its share."""
    exact = {c: w * total for c, w in weights.items()}
    counts = {c: math.floor(x) for c, x in exact.items()}
    left = total - sum(counts.values())
    for c in sorted(exact, key=lambda c: (-(exact[c] - counts[c]), c))[:left]:
        counts[c] += 1
    return counts


def make_manifest(home: Home, store_dir: Path, mixture: str, revision: str, phases: list[tuple[str, int, dict]],
                  *, seq_len: int, global_batch: int, epoch_cap: float = 8.0, seed: int = 7) -> Path:
    """A built manifest: each phase (name, token budget, weights) apportioned into whole batches."""
    store = Store(store_dir)
    cells = {}
    for name, summary in store.manifest.cells.items():
        shards = [] if store.manifest.stats_only else [
            PinnedShard(**s.model_dump(exclude={"bin_bytes"})) for s in store.cell(name).shards
        ]
        cells[name] = ManifestCell(
            name=name, available_tokens=summary.tokens, documents=summary.documents,
            sequences_available=max(0, (summary.tokens - 1) // seq_len),
            cell_manifest_hash=summary.manifest_hash, shards=shards,
        )
    built_phases, position, step = [], 0, 0
    for name, budget, weights in phases:
        total = sum(weights.values())
        weights = {c: w / total for c, w in weights.items() if w > 0}
        steps = max(1, budget // (seq_len * global_batch))
        sequences = steps * global_batch
        built_phases.append(ManifestPhase(
            name=name, token_budget=budget, start_position=position, sequences=sequences, start_step=step,
            steps=steps, counts=apportion(weights, sequences), declared_weights=weights,
        ))
        position += sequences
        step += steps
    manifest = BuiltManifest(
        mixture=mixture, revision=revision, revision_hash=f"sha256:{revision}-revision",
        store=StoreRef(name=store.name, version=store.version, manifest_hash=store.manifest_hash,
                       stats_only=store.manifest.stats_only),
        tokenizer_fingerprint=None if store.manifest.tokenizer is None else store.manifest.tokenizer.fingerprint,
        dtype=store.manifest.dtype, eos_id=None if store.manifest.tokenizer is None else store.manifest.tokenizer.eos_id,
        seed=seed, seq_len=seq_len, global_batch=global_batch, epoch_cap=epoch_cap, cells=cells,
        phases=built_phases, total_sequences=position, total_steps=step,
    )
    path = manifest_path(home, store.name, store.version, mixture, revision)
    write_manifest(path, manifest)
    return path


def natural(tokens: dict[str, int]) -> dict[str, float]:
    return {c: t / sum(tokens.values()) for c, t in tokens.items()}


def uniform_capped(tokens: dict[str, int], budget_tokens: int, cap: float) -> dict[str, float]:
    """Equal weights, water-filled so that no cell is read more than `cap` times."""
    weights, fixed = {}, {}
    free = dict(tokens)
    while True:
        share = (1 - sum(fixed.values())) / len(free)
        over = {c for c, t in free.items() if share * budget_tokens > cap * t}
        if not over:
            weights = {**fixed, **{c: share for c in free}}
            return weights
        for c in over:
            fixed[c] = cap * free.pop(c) / budget_tokens


def make_small_revisions(home: Home, store_dir: Path) -> dict[str, Path]:
    """Two revisions of mixture `default` on the small store: natural and uniform-sampling."""
    tokens = {c: s.tokens for c, s in Store(store_dir).manifest.cells.items()}
    total = sum(tokens.values())
    return {
        "natural": make_manifest(home, store_dir, "default", "natural",
                                 [("main", total, natural(tokens))], seq_len=64, global_batch=4),
        "uniform-sampling": make_manifest(home, store_dir, "default", "uniform-sampling",
                                          [("main", int(total * 0.8), {c: 1.0 for c in tokens}),
                                           ("cooldown", total // 5, {c: 1.0 for c in tokens if c.endswith("q1")})],
                                          seq_len=64, global_batch=4),
    }


def make_run(home: Home, run: str, manifest: Path, steps: int = 30, status: str = "finished",
             layers: int = 2, experts: int = 8) -> Path:
    """run.json + metrics.jsonl of a short run per the trainer's metrics contract."""
    from mixtures.manifest import read_manifest

    built, digest = read_manifest(manifest)
    run_dir = home.run(run)
    run_dir.mkdir(parents=True, exist_ok=True)
    planned = {c: sum(p.counts.get(c, 0) for p in built.phases) * built.seq_len for c in built.cells}
    write_artifact(run_dir / "run.json", "millrace.run", 1, {
        "run": run, "config": {"model": "tiny"}, "mixture": built.mixture, "revision": built.revision,
        "manifest_hash": digest, "store": {"name": built.store.name, "version": built.store.version},
        "planned_tokens_per_cell": planned, "total_steps": steps, "status": status,
    })
    rng = np.random.default_rng(1)
    realised = {c: 0 for c in built.cells}
    cells = sorted(built.cells)
    lines = []
    for step in range(steps):
        drawn = rng.choice(cells, size=built.global_batch)
        for c in drawn:
            realised[str(c)] += built.seq_len
        loss = 10.4 * math.exp(-step / 12) + 2.0 + 0.05 * rng.standard_normal()
        bias = [{"layer": l, "norm": 0.02 * step * (l + 1), "max_abs": 0.01 * step} for l in range(layers)]
        load = []
        for l in range(layers):
            raw = rng.dirichlet(np.full(experts, 2.0 + step))
            load.append({"layer": l, "load": raw.round(5).tolist(), "max_violation": float(raw.max() * experts - 1),
                         "entropy": float(-(raw * np.log(raw)).sum()), "dead_experts": int((raw < 0.01).sum())})
        lines.append(json.dumps({
            "step": step, "time": 1700000000.0 + step, "phase": "main", "loss": loss,
            "lr": 3e-4 * min(1.0, (step + 1) / 5), "tokens": (step + 1) * built.global_batch * built.seq_len,
            "tokens_per_second": 52000 + 500 * rng.standard_normal(), "mfu": 0.031 + 0.001 * rng.standard_normal(),
            "data_wait_fraction": 0.02, "grad_norm": 1.0 / (1 + step / 10), "param_norm": 120.0 + step * 0.1,
            "param_norm_with_router_bias": 120.0 + step * 0.1 + 0.5 * step, "router_bias": bias, "expert_load": load,
            "loss_per_cell": {str(c): loss + 0.1 * i for i, c in enumerate(sorted(set(drawn)))},
            "loss_per_source": {s: loss + 0.2 * i for i, s in enumerate(SOURCES)},
            "realised_tokens_per_cell": dict(realised),
        }))
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


REFERENCE_REVISIONS = ("natural", "uniform-sampling", "temperature-2", "quality-tilt", "cooldown-q34")


def make_reference_store(home: Home, revisions: int = 5, seed: int = 3) -> Path:
    """The reference shape, stats-only: 40 domains × 5 buckets, ~23.1T tokens, 15T + 3.75T revisions."""
    rng = np.random.default_rng(seed)
    names = [f"c{d:02d}q{q}" for d in range(40) for q in range(5)]
    raw = rng.lognormal(mean=0.0, sigma=1.2, size=len(names))
    tokens = {n: int(t) for n, t in zip(names, raw / raw.sum() * 23.1e12)}
    root = home.store("reference", "2026.11.30")
    write_stats_only_store(root, "reference", "2026.11.30", tokens)
    budget0, budget1 = 15 * 10**12, 375 * 10**10
    tilt = {q: f for q, f in zip(range(5), (0.3, 0.6, 1.0, 1.6, 2.5))}
    temp = {c: t ** 0.5 for c, t in tokens.items()}
    specs = {
        "natural": [natural(tokens), natural(tokens)],
        "uniform-sampling": [uniform_capped(tokens, budget0 + budget1, 8.0)] * 2,
        "temperature-2": [temp, temp],
        "quality-tilt": [{c: t * tilt[int(c[-1])] for c, t in tokens.items()}] * 2,
        "cooldown-q34": [natural(tokens), {c: t for c, t in tokens.items() if c[-1] in "34"}],
    }
    for name in REFERENCE_REVISIONS[:revisions]:
        w0, w1 = specs[name]
        make_manifest(home, root, "reference", name, [("pretrain", budget0, w0), ("cooldown", budget1, w1)],
                      seq_len=4096, global_batch=11264)
    return root
