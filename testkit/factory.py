"""Real artifacts for the report tests and bench: a small store with shards, built revisions, a trained run.

The store is written with the store format's own writers (ShardWriter, write_cell_manifest,
write_store_manifest; write_stats_only_store for the reference shape); revisions are written
and built by the mixtures room (`mix new` + `mix build` as Python calls); the run is trained
by the trainer on the tiny config, fed by the loader. `write_contract_metrics` writes a
metrics stream per the trainer's contract for what a real run of seconds can't show (a
1,500-step stream).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tomllib
from pathlib import Path

import numpy as np
import tomli_w
from pydantic import JsonValue

from millrace.home import Home
from mixtures.build import build
from mixtures.manifest import BuiltManifest, read_manifest
from mixtures.new import NewRevision, new_revision
from pipeline.store.format import write_stats_only_store
from pipeline.store.manifest_records import DomainStats, Funnel, QualityStats, StoreStats
from testkit.stores import Document, StoreContents, StoreFacts, StoreTokenizer, learnable_document, write_store
from trainer.records import (
    AlertEvent,
    Alerts,
    ExpertLoad,
    MetricsRecord,
    RecordedHealthConfig,
    RecordedTrainConfig,
    RouterBias,
    RunRecord,
    RunStatus,
    RunStore,
    read_run,
    write_run,
)

TINY_CONFIG = Path(__file__).parents[1] / "trainer" / "configs" / "tiny.toml"
VOCAB, EOS = 512, 1
SEQ_LEN, GLOBAL_BATCH = 32, 8
STORE = "local"
VERSION = "2026.11.30"
SOURCES = ["python-docs", "man-pages", "licenses"]
DOMAIN_LABELS = {"c00": "python api", "c01": "shell commands", "c02": "licence terms"}
SCORE_RANGES = {"q0": [0.0, 0.41], "q1": [0.41, 1.0]}
UNIFORM_DESCRIPTION = "Every cell alike in the main phase, then a cooldown on the q1 bucket."
HOSTILE = '<script>window.__pwned = 1; alert("x")</script></script><b>not bold</b> & done'


def _stage(name: str, per_source: dict[str, tuple[int, int, dict[str, int]]]) -> dict[str, object]:
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
    documents, cell_stats = {}, {}
    for domain in range(3):
        for bucket in range(2):
            name = f"c{domain:02d}q{bucket}"
            documents[name], cell_stats[name] = _small_cell(rng, name, domain, bucket)
    facts = StoreFacts(
        cell_stats=cell_stats,
        store_stats=StoreStats(
            domains=DomainStats(k=3, labels=DOMAIN_LABELS),
            quality=QUALITY_MEANING.model_copy(update={"buckets": 2, "score_ranges": {"*": SCORE_RANGES}}),
        ),
        funnel=_small_funnel(),
    )
    tokenizer = StoreTokenizer(VOCAB, EOS, "sha256:test-tokenizer")
    return write_store(home, STORE, VERSION, StoreContents(documents, SOURCES), tokenizer, facts=facts)


def _small_cell(
    rng: np.random.Generator, name: str, domain: int, bucket: int
) -> tuple[list[list[Document]], dict[str, object]]:
    """One cell of the small store: its one shard of documents, and its stats with two samples (the very first
    sample is hostile markup, so the pages' escaping is tested on real data)."""
    docs: list[Document] = []
    samples: list[dict[str, str]] = []
    for doc in range(20 + 10 * domain + 5 * bucket):
        source_id = (doc + domain) % len(SOURCES) if doc % 4 else domain
        # Zipf unigrams with a per-cell bigram rule: a tiny model's loss can fall
        tokens = learnable_document(rng, int(rng.integers(50, 400)), 2 * domain + bucket + 1, VOCAB, EOS)
        docs.append((tokens, source_id))
        if len(samples) < 2:
            text = HOSTILE if (domain, bucket, doc) == (0, 0, 0) else f"document {doc} of {name}: " + "lorem " * 90
            samples.append({"id": f"{name}/{doc}", "source": SOURCES[source_id], "text": text[:400]})
    stats: dict[str, object] = {
        "domain": domain,
        "bucket": bucket,
        "label": DOMAIN_LABELS[f"c{domain:02d}"],
        "score_range": SCORE_RANGES[f"q{bucket}"],
        "samples": samples,
        "languages": {"en": len(docs) - len(docs) // 3, "de": len(docs) // 3},
    }
    return [docs], stats


def _small_funnel() -> Funnel:
    """The small store's funnel: four steps with removals per source, per-language counts from language id
    on, and one folder of files no source reads, so every part of the funnel page has something to show."""
    funnel = {
        "stages": [
            _stage("read", {"python-docs": (80, 300, {}), "man-pages": (70, 250, {}), "licenses": (90, 200, {})}),
            _stage(
                "quality",
                {
                    "python-docs": (80, 300, {"gopher_repetition": 3}),
                    "man-pages": (70, 250, {"c4": 5}),
                    "licenses": (90, 200, {"gopher_quality": 2, "fineweb": 1}),
                },
            ),
            _stage(
                "exact-dedup",
                {
                    "python-docs": (77, 300, {"duplicate": 2}),
                    "man-pages": (65, 250, {"duplicate": 4}),
                    "licenses": (87, 200, {"duplicate": 40}),
                },
            ),
            _stage("tokenize", {"python-docs": (75, 300, {}), "man-pages": (61, 250, {}), "licenses": (47, 200, {})}),
        ]
    }
    funnel["stages"][1]["languages"] = {  # from language id on, stages count per language too
        "en": {
            "received": {"documents": 200, "bytes": 0},
            "kept": {"documents": 191, "bytes": 0},
            "removed": {
                "gopher_repetition": {"documents": 3, "bytes": 0},
                "c4": {"documents": 5, "bytes": 0},
                "fineweb": {"documents": 1, "bytes": 0},
            },
        },
        "ko": {
            "received": {"documents": 40, "bytes": 0},
            "kept": {"documents": 38, "bytes": 0},
            "removed": {"gopher_quality": {"documents": 2, "bytes": 0}},
        },
    }
    funnel["not_read"] = [
        {
            "source": "man-pages",
            "path": "/corpus/man",
            "files": 3,
            "reasons": {"no source reads its extension": 3},
            "examples": ["a.txt", "b.csv", "c.log"],
        }
    ]
    return Funnel.model_validate(funnel)


QUALITY_MEANING = QualityStats(
    buckets=0,
    good=["python-docs"],
    other="documents drawn at random from the rest of the corpus",
    calibrated_by="language",
    meaning="P(good): how much a document resembles python-docs rather than a random corpus document",
)


def make_small_revisions(home: Home, store_dir: Path | None = None) -> dict[str, Path]:
    """Two revisions of mixture `default` on the small store, written and built by the mixtures room."""
    store = f"{STORE}/{VERSION}"
    new_revision(
        home,
        NewRevision(
            mixture="default",
            revision="natural",
            store=store,
            strategy="natural",
            phases=["main:12288"],
            seq_len=SEQ_LEN,
            global_batch=GLOBAL_BATCH,
        ),
    )
    new_revision(
        home,
        NewRevision(
            mixture="default",
            revision="uniform-sampling",
            store=store,
            strategy="uniform",
            phases=["main:10240", "cooldown:2048:uniform@c*q1"],
            seq_len=SEQ_LEN,
            global_batch=GLOBAL_BATCH,
            description=UNIFORM_DESCRIPTION,
        ),
    )
    return {name: build(home, "default", name) for name in ("natural", "uniform-sampling")}


def tiny_config(path: Path) -> Path:
    """trainer/configs/tiny.toml without TensorBoard and with a fixed peak (no matmul timing at start)."""
    data = tomllib.loads(TINY_CONFIG.read_text())
    data["metrics"]["tensorboard"] = False
    data["metrics"]["peak_flops_per_device"] = 1e11
    path.write_text(tomli_w.dumps(data))
    return path


def train_run(home: Home, run: str, revision: str = "uniform-sampling", steps: int = 24) -> Path:
    """A short real training run of the tiny MoE on a built revision: run.json + metrics.jsonl."""
    from trainer.loop import train
    from trainer.train_request import TrainRequest

    config = tiny_config(home.root / "tiny.toml")
    train(config, home, TrainRequest(mixture="default", revision=revision, steps=steps, run=run, progress=False))
    return home.run(run)


def copy_as_live(source: Home, root: Path, run: str = "tiny-1", lines: int | None = None) -> tuple[Home, list[str]]:
    """A new home holding `source`'s stores and a copy of its trained `run` named "live", marked running,
    with only its first `lines` metrics lines; returns the home and every line of the real stream."""
    home = Home.resolve(root)
    shutil.copytree(source.stores, home.stores)
    run_dir = home.run("live")
    run_dir.mkdir(parents=True)
    every = (source.run(run) / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "metrics.jsonl").write_text("".join(every[:lines]))
    set_status(home, "live", "running", base=source.run(run) / "run.json")
    return home, every


def set_status(home: Home, run: str, status: RunStatus, base: Path | None = None) -> None:
    """Rewrite run.json with another status, as the trainer does when a run ends."""
    record = read_run(base.parent if base is not None else home.run(run))
    write_run(home.run(run), record.model_copy(update={"run": run, "status": status}))


CONTRACT_LAYERS, CONTRACT_EXPERTS = 2, 8  # the MoE shape of the runs `write_contract_metrics` writes


def write_contract_metrics(
    home: Home,
    run: str,
    manifest: Path,
    steps: int,
    status: RunStatus = "completed",
    spikes: dict[int, float] | None = None,
) -> Path:
    """run.json + metrics.jsonl written per the trainer's metrics contract (for streams longer than a test can train).

    `spikes[step]` replaces that step's loss, and the record says a loss_jump alert starts there (ending
    at the next step), as the trainer's health rules write it."""
    built, digest = read_manifest(manifest)
    run_dir = home.run(run)
    run_dir.mkdir(parents=True, exist_ok=True)
    planned = {c: sum(p.counts.get(c, 0) for p in built.phases) * built.seq_len for c in built.cells}
    write_run(
        run_dir,
        RunRecord(
            run=run,
            config=RecordedTrainConfig(health=RecordedHealthConfig(load_entropy_min=0.995)),
            mixture=built.mixture,
            revision=built.revision,
            manifest_hash=digest,
            store=RunStore(name=built.store.name, version=built.store.version),
            planned_tokens_per_cell=planned,
            total_steps=steps,
            status=status,
        ),
    )
    rng = np.random.default_rng(1)
    realised = dict.fromkeys(built.cells, 0)
    cells = sorted(built.cells)
    with open(run_dir / "metrics.jsonl", "w") as stream:
        for step in range(steps):
            drawn = [str(c) for c in rng.choice(cells, size=built.global_batch)]
            for c in drawn:
                realised[c] += built.seq_len
            loss = 6.2 * math.exp(-step / 200) + 2.0 + 0.05 * rng.standard_normal()
            loss, alerts = _contract_alerts(step, loss, spikes or {})
            record = _contract_record(built, step, loss, alerts, sorted(set(drawn)), realised)
            stream.write(record.line() + "\n")
    return run_dir


def _contract_alerts(step: int, loss: float, spikes: dict[int, float]) -> tuple[float, Alerts]:
    """A step's loss and alerts as the trainer's health rules write them: a spike replaces the loss and starts a
    loss_jump alert, which ends at the next step."""
    if step in spikes:
        loss = spikes[step]
        started = AlertEvent(
            name="loss_jump", value=loss, threshold=3.0, message=f"loss {loss} above its recent floor"
        )
        return loss, Alerts(started=[started], active=["loss_jump"])
    if step - 1 in spikes:
        return loss, Alerts(ended=["loss_jump"])
    return loss, Alerts()


def _contract_record(
    built: BuiltManifest, step: int, loss: float, alerts: Alerts, drawn: list[str], realised: dict[str, int]
) -> MetricsRecord:
    """One step's metrics record with every field of the contract set, on a balanced MoE of the contract's
    shape, so that each chart of the training page has data."""
    load = [
        ExpertLoad(
            layer=layer,
            load=[1 / CONTRACT_EXPERTS] * CONTRACT_EXPERTS,
            max_violation=0.0,
            entropy=math.log(CONTRACT_EXPERTS),
            window_entropy=0.999 - 0.01 * (step % 3 == 0),
            dead_experts=int(step % 50 == 0),
        )
        for layer in range(CONTRACT_LAYERS)
    ]
    return MetricsRecord(
        step=step,
        time=1.7e9 + step,
        phase="main",
        loss=loss,
        lr=3e-4,
        tokens=(step + 1) * built.global_batch * built.seq_len,
        tokens_per_second=5e4,
        mfu=0.03,
        data_wait_fraction=0.02,
        grad_norm=1.0,
        param_norm=120.0,
        param_norm_with_router_bias=120.5,
        param_norm_per_group={"experts": 100.0, "attention": 60.0 + step * 1e-3},
        router_bias=[
            RouterBias(layer=layer, norm=0.01 * step, max_abs=0.001 * step) for layer in range(CONTRACT_LAYERS)
        ],
        expert_load=load,
        loss_per_cell=dict.fromkeys(drawn, loss),
        loss_per_source=dict.fromkeys(SOURCES, loss),
        realised_tokens_per_cell=dict(realised),
        alerts=alerts,
        skipped_steps=0,
    )


def _eval_block(cell: dict[str, float], base: float, scale: float) -> dict[str, object]:
    """One evaluation group block (loss or bits per byte) of an eval.jsonl record, scaled."""
    return {
        "macro": scale * sum(cell.values()) / len(cell),
        "micro": scale * base,
        "cell": {c: scale * v for c, v in cell.items()},
        "domain": {c[:3]: scale * v for c, v in cell.items()},
        "bucket": {c[3:]: scale * v for c, v in cell.items()},
        "source": dict.fromkeys(SOURCES, scale * base),
        "set": {"wiki": scale * (base + 0.5)},
    }


def write_observations(home: Home, run: str, manifest: Path, steps: int, every: int) -> None:
    """eval.jsonl and samples.jsonl per the trainer's schemas ("millrace.eval/1", "millrace.samples/1")."""
    built, _ = read_manifest(manifest)
    cells = sorted(built.cells)
    run_dir = home.run(run)
    with open(run_dir / "eval.jsonl", "w") as evals, open(run_dir / "samples.jsonl", "w") as samples:
        for step in range(every, steps + 1, every):
            base = 2.0 + 4.0 * math.exp(-step / (steps / 4))
            cell = {c: base + 0.1 * i for i, c in enumerate(cells)}
            evals.write(
                json.dumps(
                    {
                        "schema": "millrace.eval/1",
                        "step": step,
                        "tokens": step * 1000,
                        "seconds": 0.5,
                        "loss": _eval_block(cell, base, 1.0),
                        "bpb": _eval_block(cell, base, 1 / math.log(2) / 4),
                        "sequences": {"cell": dict.fromkeys(cells, 4), "set": {"wiki": 4}},
                    }
                )
                + "\n"
            )
            for prompt in ("c00:c00q0", "c01:c01q0"):
                for temperature in (0.0, 0.2):
                    samples.write(
                        json.dumps(
                            {
                                "schema": "millrace.samples/1",
                                "step": step,
                                "prompt_id": prompt,
                                "prompt": f"about {prompt}",
                                "temperature": temperature,
                                "seed": 0,
                                "completion": f"step {step} says {prompt} at {temperature}",
                                "completion_tokens": 5,
                                "mean_logprob": -1.5,
                            }
                        )
                        + "\n"
                    )


def make_compared_runs(home: Home, runs: dict[str, int]) -> None:
    """The small store and its revisions, and per run (name: steps) metrics and observations on "natural"."""
    make_small_store(home)
    manifest = make_small_revisions(home)["natural"]
    for run, steps in runs.items():
        write_contract_metrics(home, run, manifest, steps=steps)
        write_observations(home, run, manifest, steps=steps, every=300)


REFERENCE_REVISIONS = ("natural", "uniform-sampling", "temperature-2", "quality-tilt", "cooldown-q34")


def make_reference_store(home: Home, revisions: int = 5, seed: int = 3) -> Path:
    """The reference shape, stats-only: 40 domains × 5 buckets, ~23.1T tokens (synthetic, lognormal cell sizes),
    and up to five 15T + 3.75T revisions written and built by the mixtures room."""
    rng = np.random.default_rng(seed)
    names = [f"c{d:02d}q{q}" for d in range(40) for q in range(5)]
    raw = rng.lognormal(mean=0.0, sigma=1.2, size=len(names))
    tokens = {n: int(t) for n, t in zip(names, raw / raw.sum() * 23.1e12)}
    root = home.store("reference", "2026.11.30")
    write_stats_only_store(root, "reference", "2026.11.30", tokens)
    two_phases = ["pretrain:15T", "cooldown:3.75T"]
    specs: dict[str, tuple[str, dict[str, object], list[str]]] = {  # strategy, its options, phases
        "natural": ("natural", {}, two_phases),
        "uniform-sampling": ("uniform", {}, two_phases),
        "temperature-2": ("temperature", {"temperature": 2.0}, two_phases),
        "quality-tilt": ("quality-tilt", {"tilt": {"q0": 0.3, "q1": 0.6, "q3": 1.6, "q4": 2.5}}, two_phases),
        "cooldown-q34": ("natural", {}, ["pretrain:15T", "cooldown:3.75T:natural@c*q3,c*q4"]),
    }
    for name in REFERENCE_REVISIONS[:revisions]:
        strategy, options, phases = specs[name]
        new_revision(
            home,
            NewRevision(
                mixture="reference",
                revision=name,
                store="reference/2026.11.30",
                seq_len=4096,
                global_batch=2048,
                strategy=strategy,
                options=options,
                phases=phases,
            ),
        )
        build(home, "reference", name)
    return root


def page_data(page: Path) -> dict[str, JsonValue]:
    """The JSON a built page embeds for its scripts."""
    match = re.search(r'<script type="application/json" id="page-data">(.*?)</script>', page.read_text(), re.DOTALL)
    assert match, f"{page} embeds no page data"
    data: dict[str, JsonValue] = json.loads(match.group(1))
    return data
