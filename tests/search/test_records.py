"""The search's records: the spec file's errors name the field, artifacts round-trip and refuse tampering, and a
proxy row answers any metric path of its run's last evaluation (a new target needs no new training)."""

from __future__ import annotations

from pathlib import Path

import pytest

from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from trainer.records import EvalFigures
from trainer.search.records import (
    PROXIES_FILE,
    ComponentWeight,
    PhaseWeights,
    ProxyResults,
    ProxyRow,
    ProxyTable,
    load_search_spec,
    read_proxies,
    write_search_record,
)

SHIPPED = Path(__file__).resolve().parents[2] / "trainer" / "configs" / "micro-search.toml"


def test_shipped_spec_loads_with_macro_target() -> None:
    spec = load_search_spec(SHIPPED)
    assert spec.target.terms() == {"bpb.macro": 1.0}
    assert spec.constraints.epoch_cap == 8
    assert len(spec.validation.seeds) >= 3


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        ('[target]\nkind = "set"\n', "target"),
        ("[validation]\nseeds = [1, 2]\n", "validation.seeds"),
        ("[sampling]\nconcentrations = [0.0]\n", "sampling.concentrations"),
        ("[proxies]\ntokens = 0\n", "proxies.tokens"),
    ],
)
def test_bad_spec_names_the_field(tmp_path: Path, edit: str, named: str) -> None:
    text = SHIPPED.read_text()
    table = edit.split("\n", 1)[0]
    start = text.index(table)
    end = text.find("\n[", start + 1)
    path = tmp_path / "bad.toml"
    path.write_text(text[:start] + edit + (text[end + 1 :] if end >= 0 else ""))
    with pytest.raises(ConfigError, match=rf"bad\.toml: field '{named}"):
        load_search_spec(path)


def _row() -> ProxyRow:
    weights = [ComponentWeight(component="c00q0", fingerprint="sha256:aa", weight=0.25)]
    weights.append(ComponentWeight(component="c01q0", fingerprint="sha256:bb", weight=0.75))
    results = ProxyResults(step=4, bpb=EvalFigures(macro=2.5, cell={"c00q0": 2.0}, set={"code": 3.0}))
    return ProxyRow(
        proxy="p000",
        run="s-p000",
        revision="s-p000",
        phases=[PhaseWeights(phase="main", weights=weights)],
        status="done",
        results=results,
    )


def test_rows_round_trip_and_answer_any_metric(home: Home) -> None:
    directory = home.search("demo")
    write_search_record(directory, PROXIES_FILE, ProxyTable(search="demo", rows=[_row()]))
    row = read_proxies(directory).rows[0]
    assert row.phases[0].by_fingerprint() == {"sha256:aa": 0.25, "sha256:bb": 0.75}
    assert row.results is not None
    assert [row.results.metric(m) for m in ("bpb.macro", "bpb.set.code", "bpb.cell.c00q0", "loss.macro")] == [
        2.5,
        3.0,
        2.0,
        None,
    ]
    assert set(row.results.metric_names()) == {"bpb.macro", "bpb.cell.c00q0", "bpb.set.code"}


def test_tampered_rows_are_refused(home: Home) -> None:
    directory = home.search("demo")
    write_search_record(directory, PROXIES_FILE, ProxyTable(search="demo", rows=[_row()]))
    path = directory / PROXIES_FILE
    path.write_text(path.read_text().replace("2.5", "1.5"))
    with pytest.raises(ArtifactError, match=r"proxies\.json: content hash mismatch"):
        read_proxies(directory)


def test_search_names_are_plain(home: Home) -> None:
    assert home.search("demo") == home.searches / "demo"
    with pytest.raises(ConfigError, match=r"search '\.\./x'"):
        home.search("../x")
