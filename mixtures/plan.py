"""What a built revision draws, per cell and phase, and how two revisions differ.

`realised_weight` is what is sampled (sequences / phase sequences), next to the
declared weight, so a log never reports the declaration as if it were the draw.
A revision that continues another shows its lineage (which revision draws which
steps) and, per cell, the sequences drawn before and after the switch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mixtures.cells import CellTable
from mixtures.manifest import BuiltManifest, lineage_of


def plan_of(manifest: BuiltManifest, digest: str, store_tokens: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The plan as a JSON-ready dict; cells of the store that draw nothing are listed with zeros."""
    cells = _cells(manifest, CellTable(dict(store_tokens or {}), manifest.seq_len))
    return {
        "mixture": manifest.mixture,
        "revision": manifest.revision,
        "revision_hash": manifest.revision_hash,
        "manifest_hash": digest,
        "store": manifest.store.model_dump(mode="json"),
        "seed": manifest.seed,
        "seq_len": manifest.seq_len,
        "global_batch": manifest.global_batch,
        "epoch_cap": manifest.epoch_cap,
        "total_sequences": manifest.total_sequences,
        "total_steps": manifest.total_steps,
        "total_tokens": manifest.total_sequences * manifest.seq_len,
        "max_epochs": max((c["epochs"] for c in cells.values()), default=0.0),
        "at_step": manifest.at_step,
        "lineage": [r.model_dump() for r in lineage_of(manifest, digest)],
        "phases": [
            {
                "name": phase.name,
                "token_budget": phase.token_budget,
                "sequences": phase.sequences,
                "tokens": phase.sequences * manifest.seq_len,
                "start_step": phase.start_step,
                "steps": phase.steps,
                "cells_drawn": sum(1 for count in phase.counts.values() if count > 0),
                "revision": phase.revision or manifest.revision,
            }
            for phase in manifest.phases
        ],
        "cells": cells,
    }


def _cells(manifest: BuiltManifest, table: CellTable) -> dict[str, Any]:
    """Per cell (the manifest's and the store's), what it draws: in all (`BuiltManifest.cell_plan`), before and
    after a lineage's switch, per revision and per phase, against what it holds."""
    planned = manifest.cell_plan()
    switch = manifest.at_step
    before_switch = manifest.cell_plan(switch) if switch is not None else {}
    cells: dict[str, Any] = {}
    for cell in sorted(set(manifest.cells) | set(table.tokens)):
        info = manifest.cells.get(cell)
        held = info.sequences_available if info else table.sequences(cell)
        drawn = int(planned.get(cell, 0))
        before = int(before_switch.get(cell, 0))  # the switch is a phase boundary: whole phases, exact
        by_revision: dict[str, int] = {}
        for phase in manifest.phases:
            name = phase.revision or manifest.revision
            by_revision[name] = by_revision.get(name, 0) + phase.counts.get(cell, 0)
        cells[cell] = {
            "before_switch": before,
            "after_switch": drawn - before,
            "by_revision": by_revision,
            "available_tokens": info.available_tokens if info else table.tokens[cell],
            "sequences_available": held,
            "epochs": drawn / held if held else 0.0,
            "sequences": drawn,
            "tokens": drawn * manifest.seq_len,
            "phases": {
                phase.name: {
                    "declared_weight": phase.declared_weights.get(cell, 0.0),
                    "realised_weight": phase.counts.get(cell, 0) / phase.sequences,
                    "sequences": phase.counts.get(cell, 0),
                    "tokens": phase.counts.get(cell, 0) * manifest.seq_len,
                }
                for phase in manifest.phases
            },
        }
    return cells


def diff_of(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Per-cell weight and epoch changes from plan `a` to plan `b` (phases matched by name; when `b`
    continues `a`, its inherited phase `<a>/<name>` is matched with `a`'s phase `<name>`)."""
    inherited = {f"{a['revision']}/{p['name']}": p["name"] for p in a["phases"]}
    names_a = {p["name"] for p in a["phases"]}
    phase_names = [p["name"] for p in a["phases"]] + [
        p["name"] for p in b["phases"] if inherited.get(p["name"], p["name"]) not in names_a
    ]
    empty = {"declared_weight": 0.0, "realised_weight": 0.0, "sequences": 0, "tokens": 0}
    cells: dict[str, Any] = {}
    for cell in sorted(set(a["cells"]) | set(b["cells"])):
        ca, cb = a["cells"].get(cell), b["cells"].get(cell)
        epochs_a = ca["epochs"] if ca else 0.0
        epochs_b = cb["epochs"] if cb else 0.0
        phases = {}
        for name in phase_names:
            pa = (ca or {}).get("phases", {}).get(name, empty)
            in_b = (cb or {}).get("phases", {})
            pb = in_b.get(name) or in_b.get(f"{a['revision']}/{name}", empty)
            phases[name] = {
                "weight_a": pa["declared_weight"],
                "weight_b": pb["declared_weight"],
                "weight_change": pb["declared_weight"] - pa["declared_weight"],
                "realised_weight_a": pa["realised_weight"],
                "realised_weight_b": pb["realised_weight"],
            }
        changed = epochs_a != epochs_b or any(p["weight_a"] != p["weight_b"] for p in phases.values())
        cells[cell] = {
            "epochs_a": epochs_a,
            "epochs_b": epochs_b,
            "epochs_change": epochs_b - epochs_a,
            "changed": changed,
            "phases": phases,
        }
    return {
        "mixture": a["mixture"],
        "a": {k: a[k] for k in ("revision", "revision_hash", "manifest_hash", "store", "total_steps")},
        "b": {k: b[k] for k in ("revision", "revision_hash", "manifest_hash", "store", "total_steps")},
        "phases": phase_names,
        "lineage": {
            "b_continues_a": any(r["revision"] == a["revision"] for r in b.get("lineage", [])[:-1]),
            "a": a.get("lineage", []),
            "b": b.get("lineage", []),
        },
        "changed_cells": sum(1 for c in cells.values() if c["changed"]),
        "cells": cells,
    }
