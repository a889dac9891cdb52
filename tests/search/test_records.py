"""The search's records: the spec file's errors name the field, artifacts round-trip and refuse tampering, and a
proxy row answers any metric path of its run's last evaluation (a new target needs no new training)."""

from __future__ import annotations

from pathlib import Path

import pytest

from millrace.artifacts import write_artifact
from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from testkit.search_records import TWO_COMPONENTS, two_component_plan, two_component_row
from trainer.search.records import (
    LEGACY_PROXIES_FILE,
    PLAN_FILE,
    PLAN_KIND,
    PROXIES_FILE,
    PROXIES_KIND,
    ProxyLog,
    ProxyTable,
    load_search_spec,
    read_plan,
    read_plan_head,
    read_proxies,
    record_hash,
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


def test_rows_round_trip_and_answer_any_metric(home: Home) -> None:
    directory = home.search("demo")
    write_search_record(
        directory, PROXIES_FILE, ProxyTable(search="demo", components=TWO_COMPONENTS, rows=[two_component_row()])
    )
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
    text = (directory / PROXIES_FILE).read_text()
    assert text.count("sha256:aa") == 1 and '"weights":{"main":[0.25,0.75]}' in text  # components once, floats
    write_search_record(directory, PROXIES_FILE, read_proxies(directory))  # the rows read back write the same bytes
    assert (directory / PROXIES_FILE).read_text() == text


def test_rows_are_appended_and_a_killed_append_loses_only_its_line(home: Home) -> None:
    directory = home.search("demo")
    table = read_proxies(directory)
    assert table.rows == []
    rows = ProxyLog(directory, "demo", TWO_COMPONENTS, table)
    rows.append(two_component_row("p000"))
    rows.append(two_component_row("p001"))
    path = directory / PROXIES_FILE
    size = path.stat().st_size
    rows.append(two_component_row("p002"))
    with open(path, "r+b") as handle:  # a kill mid-write: p002's line cut short, no newline
        handle.truncate(size + 40)
    assert [r.proxy for r in read_proxies(directory).rows] == ["p000", "p001"]
    again = ProxyLog(directory, "demo", TWO_COMPONENTS, read_proxies(directory))  # the resumed run cuts the torn line
    again.append(two_component_row("p000", macro=1.5))  # a proxy trained again: its last row wins
    table = read_proxies(directory)
    assert [(r.proxy, r.results.bpb.macro if r.results else None) for r in table.rows] == [
        ("p001", 2.5),
        ("p000", 1.5),
    ]
    assert path.read_text().count('"kind"') == 1  # the same components: no second components line


def test_a_replan_writes_a_components_line_and_older_rows_keep_theirs(home: Home) -> None:
    directory = home.search("demo")
    ProxyLog(directory, "demo", TWO_COMPONENTS, read_proxies(directory)).append(two_component_row("p000"))
    moved = [TWO_COMPONENTS[1], TWO_COMPONENTS[0]]  # another order: each row is read by the line above it
    ProxyLog(directory, "demo", moved, read_proxies(directory)).append(two_component_row("p001"))
    rows = read_proxies(directory).rows
    assert [r.phases[0].by_fingerprint() for r in rows] == [{"sha256:aa": 0.25, "sha256:bb": 0.75}] * 2


def test_damage_before_the_last_line_is_named(home: Home) -> None:
    directory = home.search("demo")
    write_search_record(
        directory, PROXIES_FILE, ProxyTable(search="demo", components=TWO_COMPONENTS, rows=[two_component_row()])
    )
    path = directory / PROXIES_FILE
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[1][:30], lines[1]]) + "\n")
    with pytest.raises(ArtifactError, match=r"proxies\.jsonl:2: not a JSON line"):
        read_proxies(directory)
    path.write_text(lines[1] + "\n")
    with pytest.raises(ArtifactError, match=r"proxies\.jsonl:1: a proxy row before the file's components line"):
        read_proxies(directory)
    path.write_text(lines[0].replace('"schema_version":2', '"schema_version":3') + "\n" + lines[1] + "\n")
    with pytest.raises(ArtifactError, match=r"proxies\.jsonl:1: .*schema_version"):
        read_proxies(directory)


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ("[0.25,0.75]", '["0.25",0.75]', r"proxies\.jsonl:3: field 'weights\.main\.0'"),
        ('"status":"done"', '"status":"finished"', r"proxies\.jsonl:3: field 'status'"),
        ("[0.25,0.75]", "[0.25]", r"proxies\.jsonl:3: phase 'main' has 1 weights for 2 components"),
    ],
)
def test_a_malformed_row_is_one_line_naming_file_line_and_field(home: Home, old: str, new: str, named: str) -> None:
    directory = home.search("demo")
    table = ProxyTable(
        search="demo", components=TWO_COMPONENTS, rows=[two_component_row("p000"), two_component_row("p001")]
    )
    write_search_record(directory, PROXIES_FILE, table)
    path = directory / PROXIES_FILE
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:2], lines[2].replace(old, new), ""]))
    with pytest.raises(ArtifactError, match=named) as caught:
        read_proxies(directory)
    assert "\n" not in str(caught.value)


def test_a_row_naming_a_component_the_table_lacks_is_refused(home: Home) -> None:
    table = ProxyTable(search="demo", components=TWO_COMPONENTS[:1], rows=[two_component_row()])
    with pytest.raises(ArtifactError, match=r"p000: component 'c01q0' \(sha256:bb\) is not one of the file's"):
        write_search_record(home.search("demo"), PROXIES_FILE, table)
    assert not (home.search("demo") / PROXIES_FILE).exists()


def test_the_previous_release_table_is_read_beneath_new_rows(home: Home) -> None:
    """A search written by the previous release (proxies.json rewritten whole, each weight named, cells per row)
    reads as it was; rows appended since win for their proxy."""
    directory = home.search("demo")
    old = [
        {**two_component_row(p).dump(), "cells": {"sha256:aa": ["c00q0"], "sha256:bb": ["c01q0"]}}
        for p in ("p000", "p001")
    ]
    write_artifact(directory / LEGACY_PROXIES_FILE, PROXIES_KIND, 1, {"search": "demo", "rows": old})
    table = read_proxies(directory)
    assert [r.proxy for r in table.rows] == ["p000", "p001"]
    assert table.rows[0].phases[0].by_fingerprint() == {"sha256:aa": 0.25, "sha256:bb": 0.75}
    ProxyLog(directory, "demo", TWO_COMPONENTS, table).append(two_component_row("p001", macro=1.0))
    rows = read_proxies(directory).rows
    assert [(r.proxy, r.results.bpb.macro if r.results else None) for r in rows] == [("p000", 2.5), ("p001", 1.0)]
    legacy = directory / LEGACY_PROXIES_FILE
    legacy.write_text(legacy.read_text().replace("2.5", "1.5"))
    with pytest.raises(ArtifactError, match=r"proxies\.json: content hash mismatch"):
        read_proxies(directory)


def test_the_plan_packs_weights_and_the_previous_release_plan_still_reads(home: Home) -> None:
    directory, plan = home.search("demo"), two_component_plan(3)
    digest = write_search_record(directory, PLAN_FILE, plan)
    assert read_plan(directory) == plan and record_hash(directory, PLAN_FILE) == digest
    assert read_plan_head(directory).spec_file == "demo.toml"
    text = (directory / PLAN_FILE).read_text()
    assert text.count("sha256:aa") == 1 and text.count("[0.25,0.75]") == 4  # the prior and 3 proxies
    old = write_artifact(directory / PLAN_FILE, PLAN_KIND, 1, plan.dump())  # as the previous release wrote it
    assert read_plan(directory) == plan and record_hash(directory, PLAN_FILE) == old
    assert read_plan_head(directory).budget == plan.budget


def test_search_names_are_plain(home: Home) -> None:
    assert home.search("demo") == home.searches / "demo"
    with pytest.raises(ConfigError, match=r"search '\.\./x'"):
        home.search("../x")
