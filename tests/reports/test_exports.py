"""The run page's exports hold every field a metrics record can carry (the chunks the CSV and JSON are
assembled from, and the per-expert loads CSV beside them), on both ways a page is written."""

from __future__ import annotations

import csv
import json
import typing
from pathlib import Path

import pydantic
import pytest

from reports.expert_loads import LOADS_FILE, LOADS_SCRIPT
from reports.run_data import DATA_DIR, read_script
from reports.run_page import write_run_page, write_streamed_run_page
from reports.training import load_run, open_run
from testkit.metrics_records import every_field_record, write_recorded_run
from trainer.records import MetricsRecord

# each field's column prefix in the chunks ("" where it is one of the export's fixed columns)
FIXED = {"step": "steps", "time": "seconds", "phase": "phase", "tokens": "tokens"}
# fields that name a column rather than fill it, and an alert's message (text, on the page's alert list)
NAMING = {("alerts", "started", "name"), ("expert_load", "layer"), ("router_bias", "layer")}
TEXT = {("alerts", "started", "message")}


def _leaves(model: type[pydantic.BaseModel], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every field of `model` and of the records nested in it (a list or optional of them), as paths."""
    out: list[tuple[str, ...]] = []
    for name, info in model.model_fields.items():
        models = [
            kind for kind in _kinds(info.annotation) if isinstance(kind, type) and issubclass(kind, pydantic.BaseModel)
        ]
        out += [leaf for kind in models for leaf in _leaves(kind, (*path, name))] or [(*path, name)]
    return out


def _kinds(annotation: object) -> list[object]:
    return [annotation, *(kind for arg in typing.get_args(annotation) for kind in _kinds(arg))]


def _exported(leaf: tuple[str, ...], columns: set[str]) -> bool:
    """Whether the chunks hold a column for this field (`reports.run_data.flatten`'s keys)."""
    first, last = leaf[0], leaf[-1]
    if len(leaf) == 1:
        return any(c == first or c.startswith(first + "/") for c in columns)
    if first == "alerts":
        part = {"value": "started", "values": "value"}.get(last, last)
        return any(c.startswith(f"alerts/{part}/") or c == f"alerts/{part}" for c in columns)
    return any(c.startswith(f"{first}.{last}/") for c in columns)


def _check(site: Path, records: list[MetricsRecord]) -> None:
    data = site / "runs" / "r" / DATA_DIR
    chunk = read_script(data / "chunk-00000.js")
    columns = set(chunk["columns"])
    missing = [
        ".".join(leaf)
        for leaf in _leaves(MetricsRecord)
        if leaf not in NAMING | TEXT
        and leaf != ("expert_load", "load")
        and not (leaf[0] in FIXED and chunk[FIXED[leaf[0]]])
        and not _exported(leaf, columns)
    ]
    assert missing == []
    assert chunk["columns"]["skipped"] == [0.0, 1.0, 0.0]
    assert chunk["columns"]["alerts/held_since/loss_jump"] == [0.0, 1.0, 2.0]
    with open(data / LOADS_FILE) as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["step", "layer", *(f"expert {e}" for e in range(8))] and len(rows) == 1 + 3 * 2
    for step, layer, *loads in rows[1:]:
        expected = records[int(step)].expert_load[int(layer)].load
        assert [float(x) for x in loads] == pytest.approx(expected, rel=1e-12)
    assert read_script_rows(data / LOADS_SCRIPT) == [[float(x) for x in row] for row in rows[1:]]
    page = (site / "runs" / "r" / "index.html").read_text()
    assert f'href="{DATA_DIR}/{LOADS_FILE}"' in page


def read_script_rows(path: Path) -> list[list[float]]:
    """The rows of `expert-loads.js` (`millraceLoads({rows: [...]});`), as the page's JSON export reads them."""
    text = path.read_text()
    return json.loads(text[text.index("[") : text.rindex("]") + 1])


def test_every_metrics_field_is_in_the_exports_streamed_and_held(tmp_path):
    records = [every_field_record(step) for step in range(3)]
    run_dir = write_recorded_run(tmp_path / "runs" / "r", records)
    write_streamed_run_page(open_run(run_dir), tmp_path / "streamed")
    _check(tmp_path / "streamed", records)
    write_run_page(load_run(run_dir), tmp_path / "held")
    _check(tmp_path / "held", records)
