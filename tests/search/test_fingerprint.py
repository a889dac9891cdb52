"""Evidence keyed by content: a cell's fingerprint follows what it holds, not its name; after a new store version
the fit reuses the rows whose cells are unchanged, names the stranded ones, and mixture reuse re-optimises only
the components no usable row has seen (the others keep the prior's relative weights). No training here: the
reused rows carry results of a known function of their weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from millrace.home import Home
from pipeline.store.format import Store
from testkit.searches import TARGET_SET, known_optimum_home, write_search
from testkit.stores import StoreContents, StoreTokenizer, write_store
from trainer.records import EvalFigures
from trainer.search.fingerprint import cell_fingerprint, components_of, match_rows
from trainer.search.records import (
    PROXIES_FILE,
    Component,
    ComponentWeight,
    PhaseWeights,
    ProxyResults,
    ProxyRow,
    ProxyTable,
    write_search_record,
)
from trainer.search.steps import fit_step, plan_step, propose_step


def _docs(seed: int, count: int) -> list[tuple[np.ndarray, int]]:
    rng = np.random.default_rng(seed)
    return [(np.append(rng.integers(2, 100, size=20), 1).astype(np.uint16), 0) for _ in range(count)]


def _store(home: Home, version: str, cells: dict[str, list]) -> Store:
    contents = StoreContents({c: [d] for c, d in cells.items()}, ["x"])
    return Store(write_store(home, "s", version, contents, StoreTokenizer(vocab_size=100, eos_id=1)))


def test_fingerprints_follow_content_not_names(home: Home) -> None:
    a, b, c = _docs(1, 4), _docs(2, 4), _docs(3, 4)
    old = _store(home, "2026.01.01", {"c00q0": a, "c00q1": b, "c01q0": c})
    # re-bucketed: c01q0's documents now in c01q3; c00q1 gained a document
    new = _store(home, "2026.02.01", {"c00q0": a, "c00q1": b + _docs(4, 1), "c01q3": c})
    assert cell_fingerprint(old, "c00q0") == cell_fingerprint(new, "c00q0")
    assert cell_fingerprint(old, "c01q0") == cell_fingerprint(new, "c01q3")
    assert cell_fingerprint(old, "c00q1") != cell_fingerprint(new, "c00q1")
    before, after = components_of(old, list(old.manifest.cells)), components_of(new, list(new.manifest.cells))

    def row(run: str, weights: dict[str, float]) -> ProxyRow:
        by_name = {c.name: c for c in before}
        phase = [
            ComponentWeight(component=n, fingerprint=by_name[n].fingerprint, weight=w) for n, w in weights.items()
        ]
        return ProxyRow(proxy=run, run=run, revision=run, phases=[PhaseWeights(phase="main", weights=phase)])

    kept, lost = row("r0", {"c00q0": 0.5, "c01q0": 0.5}), row("r1", {"c00q0": 0.5, "c00q1": 0.5})
    reuse = match_rows([kept, lost], after)
    assert [r.run for r in reuse.usable] == ["r0"] and [r.run for r in reuse.stranded] == ["r1"]
    assert reuse.stranded_fingerprints == [cell_fingerprint(old, "c00q1")]
    assert [c.name for c in reuse.changed] == ["c00q1"]  # its new content: no usable row has seen it


def test_small_cells_merge_into_one_tail_keyed_by_its_cells_content(home: Home) -> None:
    store = _store(home, "2026.01.01", {"c00q0": _docs(1, 9), "c01q0": _docs(2, 1), "c02q0": _docs(3, 1)})
    columns = components_of(store, list(store.manifest.cells), tail_tokens=100)
    assert [(c.name, c.cells) for c in columns] == [("c00q0", ["c00q0"]), ("tail", ["c01q0", "c02q0"])]


@pytest.fixture
def reused(tmp_path: Path) -> tuple[Home, Path]:
    """Search `new` reusing search `old`'s rows: 8 over three of today's four cells, 2 over a cell now gone."""
    home = known_optimum_home(tmp_path / "home")
    spec = write_search(tmp_path / "spec", name="new", reuse=["old"])
    _, plan = plan_step(spec, home)
    rng = np.random.default_rng(0)
    rows = []
    for index in range(10):
        weights = rng.dirichlet(np.ones(3))
        columns = [(c.name, c.fingerprint) for c in plan.components[:3]]
        if index >= 8:
            columns[2] = ("c09q0", "sha256:" + "0" * 64)  # a cell whose content no store holds now
        target = 3.0 - weights[1] - 0.5 * weights[2]
        phase = PhaseWeights(
            phase="main",
            weights=[ComponentWeight(component=n, fingerprint=f, weight=w) for (n, f), w in zip(columns, weights)],
        )
        results = ProxyResults(step=20, bpb=EvalFigures(set={TARGET_SET: float(target)}))
        rows.append(
            ProxyRow(
                proxy=f"p{index:03d}",
                run=f"old-p{index:03d}",
                revision="r",
                phases=[phase],
                status="done",
                results=results,
            )
        )
    gone = Component(name="c09q0", fingerprint="sha256:" + "0" * 64, cells=["c09q0"], tokens=1)
    table = ProxyTable(search="old", components=[*plan.components[:3], gone], rows=rows)
    write_search_record(home.search("old"), PROXIES_FILE, table)
    return home, spec


@pytest.mark.slow  # the surrogate imports lightgbm (seconds)
def test_reuse_names_stranded_rows_and_reoptimises_only_what_changed(reused: tuple[Home, Path]) -> None:
    home, spec = reused
    fit = fit_step(spec, home, patterns=["bpb.set.*"])
    assert fit.rows_stranded == ["old-p008", "old-p009"] and len(fit.rows_used) == 8
    assert fit.changed_components == ["c03q0"]
    proposal = propose_step(spec, home)
    assert proposal.fixed == ["c00q0", "c01q0", "c02q0"]
    mine = {w.component: w.weight for w in proposal.phases[0].weights}
    prior = {w.component: w.weight for w in proposal.prior[0].weights}
    fixed = sum(mine[c] for c in proposal.fixed)
    for cell in proposal.fixed:  # the unchanged cells move together, as one virtual domain
        assert mine[cell] == pytest.approx(prior[cell] / sum(prior[c] for c in proposal.fixed) * fixed, abs=1e-6)
