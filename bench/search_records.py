"""What a mixture search's records cost as the swarm grows (`python -m bench mix_search --part records`).

At 200 cells (the reference store's) and two phases, a plan of N proxies and N finished rows (each with a
whole last evaluation: loss and bits per byte per cell, domain, bucket, source and 52 external sets) are written
as `millrace mix search run` writes them and read back as `fit` and the search page read them, in two layouts:

- ours: plan.json with the components once and each proxy's weights as floats by component index; each row
  appended to proxies.jsonl as its proxy ends (`trainer.search.records.ProxyLog`);
- the previous release's, reproduced here as it wrote them: plan.json and proxies.json with a name and a
  fingerprint beside every weight (and the cells of every component in every row), the whole proxies.json
  rewritten (atomically) after each proxy.

Reported at 100 and 800 proxies: bytes on disk, bytes written over the swarm, and CPU seconds writing and
reading. Our files are also read by the reader they had before (`reader_before`, reproduced here: each line
parsed as JSON and again by its model, each weight a model constructed in Python, the cyclic collector running),
against today's (one pydantic-core validation per row's weights, a line parsed once, the collector paused).

The old layout's rewrites grow with the table, so only 20 of its N rewrites are made and timed (evenly spread,
the last included); its bytes and CPU over the swarm are those 20 interpolated over every table size (the size
and the cost of a rewrite are linear in its rows).
"""

from __future__ import annotations

import functools
import hashlib
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pydantic

from bench.result import Result
from millrace.artifacts import read_envelope, write_artifact
from millrace.errors import first_validation_error
from millrace.jsonl import parse_stream
from trainer.records import EvalFigures
from trainer.search.records import (
    LEGACY_PROXIES_FILE,
    PLAN_FILE,
    PLAN_KIND,
    PROXIES_FILE,
    PROXIES_KIND,
    BranchPoint,
    Component,
    ComponentsLine,
    ComponentWeight,
    EpochCheck,
    PackedRow,
    PhaseWeights,
    PlanFile,
    PlanHead,
    PlannedProxy,
    ProxyBudget,
    ProxyResults,
    ProxyRow,
    RowHead,
    StoreRef,
    SwarmPlan,
    read_plan,
    read_proxies,
    set_fields,
    write_search_record,
)

STATS = Path(__file__).parents[1] / "mixtures" / "examples" / "reference" / "available_tokens.json"
SIZES = (100, 800)
PHASES = ("main", "cooldown")
SETS = 52  # the reference run's per-task sets
SAMPLED_REWRITES = 20
MB = 1e6


def components() -> list[Component]:
    available = json.loads(STATS.read_text())["available_tokens"]
    return [
        Component(name=n, fingerprint="sha256:" + hashlib.sha256(n.encode()).hexdigest(), cells=[n], tokens=int(t))
        for n, t in available.items()
    ]


def phases(columns: list[Component], weights: np.ndarray) -> list[PhaseWeights]:
    return [
        PhaseWeights(
            phase=name,
            weights=[
                ComponentWeight(component=c.name, fingerprint=c.fingerprint, weight=float(w))
                for c, w in zip(columns, row)
            ],
        )
        for name, row in zip(PHASES, weights)
    ]


def figures(rng: np.random.Generator, columns: list[Component]) -> EvalFigures:
    """A last evaluation as a proxy writes it: every cell, its domains, buckets, sources and the external sets."""
    cell: dict[str, float | None] = {c.name: float(v) for c, v in zip(columns, rng.uniform(0.5, 2.0, len(columns)))}
    return EvalFigures(
        macro=1.25,
        micro=1.25,
        cell=cell,
        domain={f"c{d:02d}": float(v) for d, v in enumerate(rng.uniform(0.5, 2.0, 24))},
        bucket={f"q{b}": float(v) for b, v in enumerate(rng.uniform(0.5, 2.0, 5))},
        source={f"s{s}": float(v) for s, v in enumerate(rng.uniform(0.5, 2.0, 8))},
        set={f"task{t:02d}": float(v) for t, v in enumerate(rng.uniform(0.5, 2.0, SETS))},
    )


def swarm(count: int) -> tuple[SwarmPlan, list[ProxyRow]]:
    """A plan of `count` two-phase proxies over the 200 cells, and each proxy's finished row."""
    columns = components()
    rng = np.random.default_rng(count)
    tokens = np.array([c.tokens for c in columns], dtype=float)
    prior = np.tile(tokens / tokens.sum(), (len(PHASES), 1))
    weights = rng.dirichlet(np.ones(len(columns)), (count, len(PHASES)))
    planned = [
        PlannedProxy(proxy=f"p{i:03d}", run=f"s-p{i:03d}", revision=f"s-p{i:03d}", phases=phases(columns, w))
        for i, w in enumerate(weights)
    ]
    store = StoreRef(name="reference", version="2026.01.01", manifest_hash="sha256:" + "0" * 64)
    plan = SwarmPlan(
        search="s",
        spec_file="s.toml",
        spec={},
        store=store,
        components=columns,
        prior=phases(columns, prior),
        branch=BranchPoint(run="s-shared", revision="r", at_step=100, total_steps=1000),
        budget=ProxyBudget(tokens=1 << 20, steps=64, phase_steps=[51, 13], seq_len=256, global_batch=64),
        proxies=planned,
        epochs=EpochCheck(feasible=True, epoch_cap=8.0),
    )
    rows = [
        ProxyRow(
            proxy=p.proxy,
            run=p.run,
            revision=p.revision,
            phases=p.phases,
            store=store,
            status="done",
            results=ProxyResults(step=164, tokens=1 << 20, loss=figures(rng, columns), bpb=figures(rng, columns)),
            seconds=60.0,
            train_seconds=55.0,
        )
        for p in planned
    ]
    return plan, rows


def cpu(run: Callable[[], object]) -> float:
    start = time.process_time()
    run()
    return time.process_time() - start


def ours(directory: Path, plan: SwarmPlan, rows: list[ProxyRow]) -> dict[str, float]:
    """The plan once, then each row appended as its proxy ends, then both read back."""
    from trainer.search.records import ProxyLog

    spent = cpu(lambda: write_search_record(directory, PLAN_FILE, plan))

    def append() -> None:
        log = ProxyLog(directory, plan.search, plan.components, read_proxies(directory))
        for row in rows:
            log.append(row)

    spent += cpu(append)
    disk = (directory / PLAN_FILE).stat().st_size + (directory / PROXIES_FILE).stat().st_size
    read = cpu(lambda: (read_plan(directory), read_proxies(directory)))
    before = cpu(lambda: reader_before(directory))
    plan_read, table = read_plan(directory), read_proxies(directory)
    if (plan_read, table.rows) != reader_before(directory):
        raise AssertionError("today's reader and the reader before read different records")
    return {"disk": disk, "written": disk, "write_cpu": spent, "read_cpu": read, "read_before": before}


def unpack_before(packed: dict[str, list[float]], columns: list[Component]) -> list[PhaseWeights]:
    """A packed row's weights as the reader before built them: a model constructed in Python per weight."""
    return [
        PhaseWeights.model_construct(
            phase=name,
            weights=[
                ComponentWeight.model_construct(component=c.name, fingerprint=c.fingerprint, weight=w)
                for c, w in zip(columns, vector)
            ],
        )
        for name, vector in packed.items()
    ]


def line_before(line: bytes) -> tuple[object, str | None]:
    """A proxies.jsonl line as the reader before parsed it: as JSON first, then again by its model."""
    data = json.loads(line)
    model: type[ComponentsLine | PackedRow] = ComponentsLine if "kind" in data else PackedRow
    try:
        return model.model_validate_json(line), None
    except pydantic.ValidationError as exc:
        return data, first_validation_error(exc)


def reader_before(directory: Path) -> tuple[SwarmPlan, list[ProxyRow]]:
    """plan.json and proxies.jsonl (ours) read as they were before this release's reader."""
    packed = read_envelope(directory / PLAN_FILE, PLAN_KIND, (2,)).model(PlanFile)
    proxies = [
        PlannedProxy.model_construct(
            proxy=p.proxy, run=p.run, revision=p.revision, phases=unpack_before(p.weights, packed.components)
        )
        for p in packed.proxies
    ]
    head = set_fields(packed, PlanHead)
    plan = SwarmPlan(**head, prior=unpack_before(packed.prior, packed.components), proxies=proxies)
    columns, rows = [], {}
    for record in parse_stream(directory / PROXIES_FILE, line_before).records:
        if isinstance(record, ComponentsLine):
            columns = record.components
        elif isinstance(record, PackedRow):
            rows[record.proxy] = ProxyRow(**set_fields(record, RowHead), phases=unpack_before(record.weights, columns))
    return plan, list(rows.values())


def previous(directory: Path, plan: SwarmPlan, rows: list[ProxyRow]) -> dict[str, float]:
    """The previous release's layout: every weight named, the whole table rewritten after each proxy (20 of the
    rewrites made and timed, the rest interpolated)."""
    spent = cpu(lambda: write_artifact(directory / PLAN_FILE, PLAN_KIND, 1, plan.dump()))
    plan_bytes = (directory / PLAN_FILE).stat().st_size
    cells = {c.fingerprint: c.cells for c in plan.components}
    legacy = [{**row.dump(), "cells": cells} for row in rows]
    path = directory / LEGACY_PROXIES_FILE
    sizes = sorted({max(1, round(len(rows) * (i + 1) / SAMPLED_REWRITES)) for i in range(SAMPLED_REWRITES)})
    sampled_cpu, sampled_bytes = [], []
    for size in sizes:
        payload = {"search": plan.search, "rows": legacy[:size]}
        sampled_cpu.append(cpu(functools.partial(write_artifact, path, PROXIES_KIND, 1, payload)))
        sampled_bytes.append(path.stat().st_size)
    every = np.arange(1, len(rows) + 1)
    written = float(np.interp(every, sizes, sampled_bytes).sum())
    spent += float(np.interp(every, sizes, sampled_cpu).sum())
    read = cpu(lambda: (read_plan(directory), read_proxies(directory)))
    disk = plan_bytes + path.stat().st_size
    return {"disk": disk, "written": plan_bytes + written, "write_cpu": spent, "read_cpu": read}


def results_at(count: int) -> list[Result]:
    plan, rows = swarm(count)
    with tempfile.TemporaryDirectory() as new, tempfile.TemporaryDirectory() as old:
        a, b = ours(Path(new), plan, rows), previous(Path(old), plan, rows)
    where = f"200 cells x {count} proxies x 2 phases"
    baseline = "the previous layout (named weights, table rewritten per proxy)"
    return [
        Result(f"search records on disk, {where}", a["disk"] / MB, b["disk"] / MB, baseline, "MB", False),
        Result(
            f"search records written over the swarm, {where}",
            a["written"] / MB,
            b["written"] / MB,
            baseline,
            "MB",
            False,
        ),
        Result(
            f"search records, CPU writing plan + rows, {where}", a["write_cpu"], b["write_cpu"], baseline, "s", False
        ),
        Result(
            f"search records, CPU reading plan + rows, {where}", a["read_cpu"], b["read_cpu"], baseline, "s", False
        ),
        Result(
            f"search records, CPU reading our plan + rows, {where}",
            a["read_cpu"],
            a["read_before"],
            "the reader before (each weight a model built in Python, each line parsed twice)",
            "s",
            False,
        ),
    ]


def main() -> list[Result]:
    return [result for count in SIZES for result in results_at(count)]
