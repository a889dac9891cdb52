"""The site built from real artifacts: files, contents, escaping, sizes and errors."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import markupsafe
import pytest

from millrace.artifacts import read_envelope
from millrace.cli import main
from millrace.errors import ArtifactError
from millrace.home import Home
from millrace.jsonl import last_record
from mixtures.build import build
from mixtures.manifest import read_manifest
from mixtures.new import NewRevision, new_revision
from pipeline.store.format import Store, write_stats_only_store, write_store_manifest
from reports import build_pages, build_site
from reports.composition import load_composition
from reports.composition_page import write_composition_page
from reports.render import embed_json
from reports.run_data import BUCKETS, CHUNK, RunSeries, read_script
from reports.training import MetricsTail, load_run
from testkit import factory
from testkit.factory import page_data
from trainer.records import MetricsRecord, read_metrics


def test_build_site_writes_store_run_and_index_pages(small_home, tmp_path):
    index = build_site(small_home, tmp_path / "site")
    assert index == tmp_path / "site" / "index.html"
    store_page = tmp_path / "site" / factory.STORE / factory.VERSION / "index.html"
    run_page = tmp_path / "site" / "runs" / "tiny-1" / "index.html"
    assert store_page.exists() and run_page.exists()
    text = index.read_text()
    assert f"{factory.STORE}/{factory.VERSION}/index.html?revision=uniform-sampling" in text
    assert "runs/tiny-1/index.html" in text
    for page in (index, store_page, run_page):
        body = page.read_text()
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", body), f"{page} links outside itself"
        assert "<th" in body or page == run_page


def test_every_built_revision_is_embedded_with_its_manifest_numbers(small_home, tmp_path):
    build_site(small_home, tmp_path)
    data = page_data(tmp_path / factory.STORE / factory.VERSION / "index.html")
    assert set(data["revisions"]) == {"natural", "uniform-sampling"}
    names = [c["name"] for c in data["cells"]]
    for key in data["revisions"]:
        manifest, digest = read_manifest(
            small_home.store(factory.STORE, factory.VERSION) / "mixtures" / "default" / key / "manifest.json"
        )
        embedded = data["revisions"][key]
        assert embedded["manifest_hash"] == digest
        for phase, built in zip(embedded["phases"], manifest.phases, strict=True):
            assert dict(zip(names, phase["counts"])) == {n: built.counts.get(n, 0) for n in names}
            assert sum(phase["counts"]) == built.sequences


def test_sample_documents_are_escaped(small_home, tmp_path):
    build_site(small_home, tmp_path)
    body = (tmp_path / factory.STORE / factory.VERSION / "index.html").read_text()
    assert factory.HOSTILE not in body
    assert str(markupsafe.escape(factory.HOSTILE)) in body
    # the only raw <script> tags are the page's own three
    assert len(re.findall(r"<script[\s>]", body)) == 3


def test_embedded_json_cannot_close_its_script_block():
    hostile = {"label": "</script><script>alert(1)</script>", "amp": "a & b", "nan": float("nan")}
    text = embed_json(hostile)
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {**hostile, "nan": None}


def test_funnel_sources_grid_and_cells_are_shown(small_home, tmp_path):
    build_site(small_home, tmp_path)
    body = (tmp_path / factory.STORE / factory.VERSION / "index.html").read_text()
    for step in ("read", "quality", "exact-dedup", "tokenize"):
        assert f"<td>{step}</td>" in body
    assert "duplicate: 46 docs" in body  # what exact-dedup removed, summed over sources
    for source in factory.SOURCES:
        assert f"<td>{source}</td>" in body
    for label in factory.DOMAIN_LABELS.values():
        assert label in body
    assert 'id="cell-c02q1"' in body and "score 0.41 – 1" in body
    languages = body[body.index('id="funnel-languages"') :]
    assert '<td>ko</td><td title="received 40; removed: gopher_quality 2">38 <span class="down">−2</span>' in languages
    assert "3 files under <code>/corpus/man</code> (source man-pages), e.g. a.txt, b.csv, c.log" in body
    data = page_data(tmp_path / factory.STORE / factory.VERSION / "index.html")
    assert data["grid"]["buckets"] == [0, 1] and len(data["grid"]["domains"]) == 3
    store_tokens = sum(c["tokens"] for c in data["cells"])
    assert sum(sum(s["tokens_by_cell"]) for s in data["sources"]) == store_tokens


def test_reference_stats_only_store_with_five_revisions_is_under_3_mb(reference_home, tmp_path):
    pages = build_pages(reference_home, tmp_path / "site")
    (page,) = pages.stores
    size = page.stat().st_size
    assert size < 3 * 1024 * 1024, f"{page}: {size} bytes"
    data = page_data(page)
    assert len(data["cells"]) == 200 and data["grid"] and len(data["grid"]["domains"]) == 40
    assert set(data["revisions"]) == set(factory.REFERENCE_REVISIONS)
    body = page.read_text()
    assert "stats-only" in body and "no funnel" in body


def test_same_revision_name_in_two_mixtures_is_qualified(small_home, tmp_path):
    home = Home.resolve(tmp_path / "home")
    store = factory.make_small_store(home)
    factory.make_small_revisions(home)
    new_revision(
        home,
        NewRevision(
            mixture="other",
            revision="natural",
            store=f"{factory.STORE}/{factory.VERSION}",
            strategy="natural",
            phases=["main:2048"],
            seq_len=32,
            global_batch=8,
        ),
    )
    build(home, "other", "natural")
    keys = set(load_composition(store).revisions)
    assert keys == {"default/natural", "other/natural", "uniform-sampling"}


def test_a_manifest_of_another_store_is_refused_naming_the_file(small_home, tmp_path):
    home = Home.resolve(tmp_path / "home")
    factory.make_small_store(home)
    path = factory.make_small_revisions(home)["natural"]
    moved = home.store(factory.STORE, "2026.12.01")
    write_stats_only_store(moved, factory.STORE, "2026.12.01", {"c00q0": 5000})
    shutil.copytree(path.parent, moved / "mixtures" / "default" / "natural")
    with pytest.raises(ArtifactError, match=r"2026\.12\.01.*manifest\.json: built for store local/2026\.11\.30"):
        load_composition(moved)
    assert path.exists()


def test_a_revision_built_on_an_older_store_json_is_marked_stale(tmp_path):
    home = Home.resolve(tmp_path / "home")
    store_dir = factory.make_small_store(home)
    factory.make_small_revisions(home)
    store = Store(store_dir)
    write_store_manifest(store_dir, store.manifest.model_copy(update={"config_hash": "sha256:rebuilt"}))
    composition = load_composition(store_dir)
    assert sorted(composition.stale) == ["natural", "uniform-sampling"]
    assert page_data(write_composition_page(composition, tmp_path / "site"))["stale"] == composition.stale


def test_metrics_stream_partial_and_malformed_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "loss": 3.0}\n{"step": 1, "loss": null}\n{"step": 2, "loss": "x"}\n{"step": 3, "lo')
    records = read_metrics(tmp_path)  # a spoiled record (step 2) is left out with a warning; the page draws the rest
    assert [(r.step, r.loss) for r in records] == [(0, 3.0), (1, None)]  # the half-written last line waits
    path.write_text('{"step": 0}\nnot json\n{"step": 2}\n')
    with pytest.raises(ArtifactError, match=r"metrics\.jsonl:2"):
        read_metrics(tmp_path)
    assert read_metrics(tmp_path / "absent") == []


def test_run_page_has_every_series_and_polls_only_while_live(small_home, tmp_path):
    view = load_run(small_home.run("tiny-1"))
    data = view.page_data()
    build_site(small_home, tmp_path)
    curves = read_script(tmp_path / "runs" / "tiny-1" / "data" / "overview.js")
    steps = [r.step for r in view.records]
    assert curves["records"] == 24 and curves["stride"] == 1 and curves["clock"]["s"] == steps
    for key in ("loss", "lr", "tokens_per_second", "mfu", "grad_norm", "param_norm", "param_norm_with_router_bias"):
        assert curves["series"][key]["s"] == steps and None not in curves["series"][key]["v"], key
    assert {k for k in curves["series"] if k.startswith("router_bias.norm/")} == {
        "router_bias.norm/layer 0",
        "router_bias.norm/layer 1",
    }
    assert {k for k in curves["series"] if k.startswith("expert_load.max_violation/")} == {
        "expert_load.max_violation/layer 0",
        "expert_load.max_violation/layer 1",
    }
    assert {k.split("/")[1] for k in curves["series"] if k.startswith("loss_per_source/")} == set(factory.SOURCES)
    assert len(data["last_expert_load"]) == 2 and len(data["last_expert_load"][0]["load"]) == 8
    planned = view.run.planned_tokens_per_cell
    assert {c["name"]: c["planned"] for c in data["cells"]} == planned
    # realised against expected-by-now from the manifest: the loader mixes exactly (within one sample)
    assert view.manifest is not None and all(abs(c["off_by"]) < 1 for c in data["cells"])
    assert sum(c["realised"] for c in data["cells"]) == 24 * 8 * 32
    assert abs(sum(c["expected"] for c in data["cells"]) - 24 * 8 * 32) < 1e-6
    page = (tmp_path / "runs" / "tiny-1" / "index.html").read_text()
    assert view.status == "stopped" and 'http-equiv="refresh"' not in page  # ran its --steps
    assert read_script(tmp_path / "runs" / "tiny-1" / "data" / "live.js")["live"] is False
    assert f"{factory.STORE}/{factory.VERSION}/index.html?revision=uniform-sampling" in page
    chunk = read_script(tmp_path / "runs" / "tiny-1" / "data" / "chunk-00000.js")
    records = read_metrics(small_home.run("tiny-1"))
    assert chunk["columns"]["loss"] == [r.loss for r in records]  # full precision, every record
    config = read_envelope(small_home.run("tiny-1") / "run.json", "millrace.run").payload["config"]
    table = page.split("The run's configuration")[1].split("</details>")[0]
    rows = [tuple(map(html.unescape, row)) for row in re.findall(r'<tr><td>(.*?)</td><td class="l">(.*?)</td>', table)]
    assert rows == _dotted(config) and ("health.timing.mfu.end_after", "20") in rows  # every setting run.json holds

    home = Home.resolve(tmp_path / "live")
    factory.make_small_store(home)
    manifest = factory.make_small_revisions(home)["natural"]
    factory.write_contract_metrics(home, "live-1", manifest, steps=3, status="running")
    build_site(home, tmp_path / "live-site")
    assert read_script(tmp_path / "live-site" / "runs" / "live-1" / "data" / "live.js")["live"] is True


def _dotted(value: object, prefix: str = "") -> list[tuple[str, str]]:
    """run.json's config as the page lists it: one `section.key` row per setting, in the file's (sorted) order."""
    if not isinstance(value, dict):
        return [(prefix.rstrip("."), value if isinstance(value, str) else json.dumps(value))]
    return [row for key in sorted(value) for row in _dotted(value[key], f"{prefix}{key}.")]


def test_long_runs_keep_every_extreme_at_its_step_and_every_record_in_chunks():
    records = [
        MetricsRecord(step=s, loss=2.0 + (s % 7) * 0.01, tokens=256 * (s + 1), time=1.7e9 + s) for s in range(5001)
    ]
    records[4006] = records[4006].model_copy(update={"loss": 12.0})
    records[123] = records[123].model_copy(update={"loss": -1.0})
    series = RunSeries(["loss"])
    series.update(records)
    overview = series.overview()
    loss = overview["series"]["loss"]
    assert overview["stride"] == 6 and len(loss["s"]) <= 2 * BUCKETS + 2
    assert dict(zip(loss["s"], loss["v"]))[4006] == 12.0 and dict(zip(loss["s"], loss["v"]))[123] == -1.0
    assert loss["s"][0] == 0 and loss["s"][-1] == 5000 and loss["s"] == sorted(loss["s"])
    means = overview["smooth"]["loss"]
    assert sum(means["k"]) == 5001 and means["s"][-1] == 5000
    assert [len(c.steps) for c in series.chunks] == [CHUNK, CHUNK, 1001]
    # a growing stream recuts only its last chunk; a resume from an earlier step recuts from there
    versions = list(series.versions)
    assert series.update(records + [MetricsRecord(step=5001, loss=2.0)], changed_from=5001) == [2]
    assert series.versions[:2] == versions[:2] and series.versions[2] > versions[2]
    assert series.update(records[:1500], changed_from=1500) == [0]
    assert series.records == 1500 and len(series.versions) == 1


def test_cli_build_json_and_errors(small_home, tmp_path, capsys):
    out = tmp_path / "site"
    assert main(["report", "build", "--home", str(small_home.root), "--out", str(out), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["index"] == str(out / "index.html") and len(payload["stores"]) == 1 and len(payload["runs"]) == 1
    assert main(["report", "build", "--home", str(small_home.root), "--out", str(out), "--store", "nope"]) == 2
    assert "--store nope: no such store version" in capsys.readouterr().err
    assert (
        main(
            [
                "report",
                "build",
                "--home",
                str(small_home.root),
                "--out",
                str(out),
                "--no-runs",
                "--store",
                f"{factory.STORE}/{factory.VERSION}",
            ]
        )
        == 0
    )
    assert "runs/tiny-1/index.html" in (out / "index.html").read_text()  # pages built earlier stay listed
    fresh = tmp_path / "fresh"
    assert main(["report", "build", "--home", str(small_home.root), "--out", str(fresh), "--no-runs"]) == 0
    assert "runs/tiny-1" not in (fresh / "index.html").read_text()  # only pages that exist are linked
    assert main(["report", "watch", "absent", "--home", str(small_home.root), "--out", str(out)]) == 2
    assert "run 'absent': no run.json" in capsys.readouterr().err


@pytest.mark.slow
def test_no_heavy_imports():
    import subprocess
    import sys

    code = (
        "import sys, reports, reports.cli, reports.watch; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'datatrove')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_metrics_tail_reads_only_new_lines_and_follows_resumes(tmp_path):
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    assert tail.poll() == 0  # no file yet
    path.write_text("".join(json.dumps({"step": s, "loss": 5.0 - s / 10}) + "\n" for s in range(1, 6)))
    assert tail.poll() == 5 and tail.poll() == 0
    with open(path, "a") as stream:
        stream.write('{"step": 6, "loss": 4.')  # half a line
        stream.flush()
        assert tail.poll() == 0
        stream.write('3}\n{"step": 4, "loss": 4.7}\n{"step": 5, "loss": 4.6}\n')  # resumed from step 3
    assert tail.poll() == 3
    assert [r.step for r in tail.records] == [1, 2, 3, 4, 5] and tail.records[-1].loss == 4.6
    assert last_record(path) == {"step": 5, "loss": 4.6}
    path.write_text('{"step": 1, "loss": 9.0}\n')  # rewritten shorter: read again from the start
    assert tail.poll() == 1 and tail.records == [MetricsRecord(step=1, loss=9.0)]
    assert last_record(tmp_path / "absent.jsonl") is None


@pytest.mark.slow
def test_report_build_with_two_runs_names_the_compare_page_for_them(tmp_path, capsys):
    home = Home.resolve(tmp_path / "home")
    factory.make_compared_runs(home, {"first": 1200, "second": 600})
    out = tmp_path / "site"
    assert (
        main(
            [
                "report",
                "build",
                "--home",
                str(home.root),
                "--out",
                str(out),
                "--run",
                "first",
                "--run",
                "second",
                "--json",
            ]
        )
        == 0
    )
    payload = json.loads(capsys.readouterr().out)
    assert payload["compare"] == (out / "compare.html").as_uri() + "?runs=first,second"
    data = run_summary_file(out, "first")
    assert data["eval"]["steps"] == [300, 600, 900, 1200] and run_summary_file(out, "second")["eval"]["steps"] == [
        300,
        600,
    ]
    assert data["steps"][-1] == 1199 and len(data["curves"]["loss"]) == len(data["steps"]) == len(data["tokens"])
    assert data["config"] and data["phases"][0]["weights"]
    assert main(["report", "build", "--home", str(home.root), "--out", str(out), "--run", "first", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["compare"] is None
    assert (
        main(["report", "build", "--home", str(home.root), "--out", str(out), "--run", "first", "--run", "second"])
        == 0
    )
    assert "runs/first/index.html" in capsys.readouterr().out  # the text listing, not only --json


def run_summary_file(site: Path, run: str) -> dict:
    """The object `runs/<run>/summary.js` adds to `window.MILLRACE_RUNS`."""
    text = (site / "runs" / run / "summary.js").read_text()
    return json.loads(text[text.index("] = ") + 4 :].rstrip().rstrip(";"))


def test_the_page_says_what_the_quality_score_means_and_each_buckets_language_mix(small_home, tmp_path):
    build_site(small_home, tmp_path)
    page = (tmp_path / factory.STORE / factory.VERSION / "index.html").read_text()
    assert factory.QUALITY_MEANING.meaning in page
    table = re.search(r'<table id="bucket-languages">(.*?)</table>', page, re.DOTALL).group(1)
    rows = re.findall(r"<tr><td class=\"l\">(\w+)</td>(.*?)</tr>", table, re.DOTALL)
    assert [name for name, _ in rows] == ["corpus", "q0", "q1"]
    store = Store(small_home.store(factory.STORE, factory.VERSION))
    german = sum((store.cell(c).stats.languages or {})["de"] for c in store.manifest.cells if c.endswith("q0"))
    q0 = sum(sum((store.cell(c).stats.languages or {}).values()) for c in store.manifest.cells if c.endswith("q0"))
    shares = re.findall(r"<td>([^<]*)</td>", rows[1][1])
    assert shares[2].startswith(f"{100 * german / q0:.0f}") or shares[2].startswith(f"{100 * german / q0:.1f}"), shares


def test_each_alert_is_one_band_from_when_its_condition_held_to_its_end():
    from reports.run_observations import AlertEvents

    alerts = [{"started": [], "ended": [], "active": []} for _ in range(10)]
    alerts[3] = {
        "started": [{"name": "dead_experts", "held_since": 1, "message": "2 dead"}],
        "ended": [],
        "active": ["dead_experts"],
    }
    alerts[6] = {"started": [], "ended": ["dead_experts"], "active": []}
    alerts[8] = {
        "started": [{"name": "loss_jump", "message": "12.0"}],
        "ended": [],
        "active": ["loss_jump"],
    }
    records = [MetricsRecord.model_validate({"step": s, "alerts": a}) for s, a in enumerate(alerts)]
    events = AlertEvents()
    for record in records:
        events.add(record)
    bands = events.view()["bands"]
    assert [(b["name"], b["from"], b["started"], b["to"]) for b in bands] == [
        ("dead_experts", 1, 3, 6),
        ("loss_jump", 8, 8, 9),
    ]


def _without_versions(payload):
    return {k: v for k, v in payload.items() if k not in ("seq", "versions", "version")}


@pytest.mark.slow
def test_the_streamed_build_writes_what_the_held_records_give(tmp_path):
    """`report build` reads the stream record by record (`reports.run_stream`); the page's chunks, overview
    and compare summary are those of the records held in memory (`report watch`'s path), for a run past
    two chunks whose stream a resume cut back (steps 4,000 onwards logged twice: the later ones count)."""
    from reports.compare_data import run_summary
    from reports.run_page import write_run_page

    home = Home.resolve(tmp_path / "home")
    factory.make_small_store(home)
    manifest = factory.make_small_revisions(home)["natural"]
    run_dir = factory.write_contract_metrics(home, "long", manifest, steps=4500, spikes={1234: 12.0})
    lines = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    again = [json.loads(line) | {"loss": 1.0} for line in lines[4000:4100]]
    (run_dir / "metrics.jsonl").write_text("".join(lines + [json.dumps(r) + "\n" for r in again]))
    build_pages(home, tmp_path / "streamed", runs=["long"])
    held = load_run(run_dir)
    assert len(held.records) == 4100 and held.records[-1].step == again[-1]["step"]
    write_run_page(held, tmp_path / "held")
    data = [tmp_path / site / "runs" / "long" / "data" for site in ("streamed", "held")]
    for name in ("chunk-00000.js", "chunk-00001.js", "chunk-00002.js", "overview.js"):
        streamed, kept = (_without_versions(read_script(d / name)) for d in data)
        assert streamed == kept, name
    assert not (data[0] / "chunk-00003.js").exists()
    text = (tmp_path / "streamed" / "runs" / "long" / "summary.js").read_text()
    summary = json.loads(text[text.index("] = ") + 4 : text.rindex(";")])
    assert summary == json.loads(json.dumps(run_summary(held)))
    assert max(summary["bands"]["loss"]["hi"]) == 12.0 and len(summary["steps"]) <= 600


@pytest.mark.slow  # a small store and its revisions built for one page
def test_the_run_page_names_the_cells_without_held_out_data(tmp_path):
    home = Home.resolve(tmp_path / "home")
    factory.make_small_store(home)
    manifest = factory.make_small_revisions(home)["natural"]
    run_dir = factory.write_contract_metrics(home, "short", manifest, steps=5)
    record = {
        "schema": "millrace.eval/1",
        "step": 5,
        "loss": {"macro": 3.0, "micro": 3.0, "cell": {"c00q0": 3.0, "c00q1": 3.0}},
        "bpb": {"macro": 1.0, "micro": 1.0, "cell": {"c00q0": 1.0, "c00q1": 1.0}},
        "without_held_out": ["c01q2", "c01q4"],
    }
    (run_dir / "eval.jsonl").write_text(json.dumps(record) + "\n")
    build_pages(home, tmp_path / "site", runs=["short"])
    page = (tmp_path / "site" / "runs" / "short" / "index.html").read_text()
    assert "over 2 cells with held-out data of 4 trained; no held-out data (in neither average): c01q2, c01q4" in page


def test_a_spoiled_record_leaves_the_streamed_build_equal_to_the_held_one(tmp_path):
    """A record that parses but breaks the record's model is left out by both readers (a warning); the streamed
    build's first pass counts records by their steps alone, so its second pass must not shift the resume's
    superseded records onto their neighbours, nor wait for a last record that never comes (the last chunk)."""
    from reports.run_page import write_run_page

    home = Home.resolve(tmp_path / "home")
    factory.make_small_store(home)
    manifest = factory.make_small_revisions(home)["natural"]
    run_dir = factory.write_contract_metrics(home, "spoiled", manifest, steps=300)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    spoiled = json.loads(lines[99])
    lines[99] = json.dumps(spoiled | {"loss": "x"}) + "\n"
    again = [json.loads(line) | {"loss": 1.0} for line in lines[250:]]  # a resume from step 250
    (run_dir / "metrics.jsonl").write_text("".join(lines + [json.dumps(r) + "\n" for r in again]))
    build_pages(home, tmp_path / "streamed", runs=["spoiled"])
    held = load_run(run_dir)
    assert len(held.records) == 299 and spoiled["step"] not in [r.step for r in held.records]
    write_run_page(held, tmp_path / "held")
    data = [tmp_path / site / "runs" / "spoiled" / "data" for site in ("streamed", "held")]
    for name in ("chunk-00000.js", "overview.js"):
        streamed, kept = (_without_versions(read_script(d / name)) for d in data)
        assert streamed == kept, name
