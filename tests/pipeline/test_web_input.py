"""Web-like input as a new user has it: repeated ids, broken files, bad bytes, WARC/HTML, changing inputs."""

from __future__ import annotations

import gzip
import io
import json
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from millrace.home import Home
from pipeline.config import load_pipeline_config, parse_pipeline_config
from pipeline.runner import PipelineError, run_pipeline
from pipeline.steps.funnel import bad_files
from pipeline.steps.read.readers import BadInputFile, ReadStep
from pipeline.steps.tokenize.tokenization import load_tokenizer
from pipeline.store.format import ShardReader, Store
from testkit.corpus import prose
from testkit.warc import write_pages_warc

HTML = """<html><head><title>Mill notes</title></head><body><nav>Home | About | Contact</nav>
<article><h1>The mill race</h1><p>{body}</p></article><footer>Copyright 2026</footer></body></html>"""


def _lines(records) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def _warc(path, pages: list[tuple[str, str]]) -> None:
    """The pages' HTML, UTF-8 as its header says, in a gzipped WARC."""
    write_pages_warc(path, [(url, html.encode(), "text/html; charset=utf-8") for url, html in pages])


def _stored_texts(path) -> list[str]:
    store = Store(path)
    tokenizer = load_tokenizer(path / "tokenizer" / "tokenizer.json")
    texts = []
    for cell in store.manifest.cells:
        manifest = store.cell(cell)
        for shard in [*manifest.shards.rows(), *manifest.validation.shards]:  # dedup is judged on both
            reader = ShardReader(store.shard_prefix(cell, shard))
            texts += [tokenizer.decode(reader.document(i)[:-1].tolist()) for i in range(reader.documents)]
    return texts


@pytest.fixture(scope="module")
def web_run(tmp_path_factory):
    """One run over web-like sources; each test below checks one defect of real web input against it
    (repeated ids, truncated archives, invalid UTF-8, HTML sniffed as another type)."""
    root = tmp_path_factory.mktemp("web")
    rng = random.Random(11)
    texts = [prose(rng) for _ in range(6)]
    (root / "crawl").mkdir()
    records = [
        {"id": "https://a.example/page", "text": texts[0]},  # the same URL, re-crawled with new text
        {"id": "https://a.example/page", "text": texts[1]},
        {"id": "https://b.example/x", "text": texts[2]},  # the same text under two ids
        {"id": "https://b.example/y", "text": texts[2]},
        {"id": "https://c.example/z", "text": texts[3]},  # the same id and the same text twice
        {"id": "https://c.example/z", "text": texts[3]},
        {"id": "zw", "text": "\u200b\u200c\u200d\ufeff \u2060"},
        {"id": "huge", "text": prose(rng) * 200},
    ]  # over max_document_bytes below
    raw = (
        _lines(records[:3])
        + b'{"id": "bad-bytes", "text": "caf'
        + b"\xed\xa0\x81\x00\xff" * 40
        + b'"}\n'
        + _lines(records[3:])
    )
    (root / "crawl" / "part-0.jsonl").write_bytes(raw)
    (root / "zst").mkdir()
    good = zstandard.ZstdCompressor().compress(_lines([{"id": f"g{i}", "text": prose(rng)} for i in range(3)]))
    (root / "zst" / "a.jsonl.zst").write_bytes(good)
    whole = zstandard.ZstdCompressor().compress(_lines([{"id": f"t{i}", "text": prose(rng)} for i in range(40)]))
    (root / "zst" / "b.jsonl.zst").write_bytes(whole[: len(whole) // 2])  # truncated mid-frame
    (root / "web").mkdir()
    _warc(
        root / "web" / "crawl.warc.gz",
        [
            ("https://mill.example/race", HTML.format(body=texts[4])),
            ("https://mill.example/wheel", HTML.format(body=texts[5])),
        ],
    )
    (root / "p.toml").write_text(
        '[[sources]]\nname = "crawl"\npaths = ["crawl"]\nformat = "jsonl"\nmax_document_bytes = 20000\n'
        '[[sources]]\nname = "zst"\npaths = ["zst"]\nformat = "jsonl.zst"\non_bad_file = "skip"\n'
        '[[sources]]\nname = "web"\npaths = ["web"]\nformat = "warc"\n'
        '[dedup]\nfuzzy = false\n[tokenizer]\nvocab_size = 300\n[output]\nversion = "2026.03.01"\n'
        "[executor]\ntasks = 2\nworkers = 1\n"
    )
    home = Home.resolve(root / "home")
    path = run_pipeline(load_pipeline_config(root / "p.toml"), home)
    return root, home, path, texts


@pytest.mark.slow
def test_a_repeated_id_keeps_every_distinct_text_and_one_of_identical_ones(web_run):
    _, _, path, texts = web_run
    stored = _stored_texts(path)
    for text in texts[:4]:
        assert stored.count(text) == 1, text[:40]
    crawl = Store(path).cell("crawl")
    # texts 0-3 (some held out for validation); the duplicates of texts 2 and 3 removed, not the re-crawl
    assert crawl.documents + crawl.validation.documents == 4


@pytest.mark.slow
def test_bytes_no_encoding_decodes_are_one_undecodable_record_with_its_file_and_line(web_run):
    from pipeline.runner import WorkLayout, malformed_report

    root, home, path, _ = web_run
    funnel = Store(path).manifest.funnel
    read = funnel.stages[0].sources["crawl"]
    assert read.removed["undecodable"].documents == 1
    report = malformed_report(WorkLayout(home.work("local", "2026.03.01")))
    assert {"file": str(root / "crawl" / "part-0.jsonl"), "line": 4, "reason": "undecodable"} in report


@pytest.mark.slow
def test_a_truncated_zst_file_is_skipped_and_listed_when_the_source_says_skip(web_run):
    root, _, path, _ = web_run
    funnel = Store(path).manifest.funnel
    assert [(b.source, b.file) for b in funnel.bad_files] == [("zst", str(root / "zst" / "b.jsonl.zst"))]
    assert "truncated" in funnel.bad_files[0].error


@pytest.mark.slow
def test_zero_width_only_and_over_long_documents_are_counted_not_stored(web_run):
    _, _, path, _ = web_run
    stages = {s.name: s.sources for s in Store(path).manifest.funnel.stages}
    assert stages["read"]["crawl"].removed["too_long"].documents == 1
    assert stages["normalise"]["crawl"].removed["empty"].documents == 1
    assert not any(t.strip("\u200b\u200c\u200d\ufeff\u2060 ") == "" for t in _stored_texts(path))


@pytest.mark.slow
def test_warc_pages_are_extracted_by_trafilatura_and_keep_their_url(web_run):
    from pipeline.runner import WorkLayout
    from pipeline.steps.intermediate import read_jsonl_zst

    _, home, path, texts = web_run
    stored = _stored_texts(path)
    web = [t for t in stored if "mill race" in t.lower() or texts[4][:30] in t or texts[5][:30] in t]
    assert len(web) == 2 and not any("<" in t or "Home | About" in t for t in web)
    layout = WorkLayout(home.work("local", "2026.03.01"))
    origins = {
        r["metadata"]["origin"]
        for p in sorted(layout.filtered.glob("*.jsonl.zst"))
        for r in read_jsonl_zst(p)
        if r["metadata"]["source"] == "web"
    }
    assert origins == {"https://mill.example/race", "https://mill.example/wheel"}


def _read_step(tmp_path, fmt: str, name: str, data: bytes, **options):
    (tmp_path / "in").mkdir(exist_ok=True)
    (tmp_path / "in" / name).write_bytes(data)
    source = {"name": "s", "paths": [str(tmp_path / "in")], "format": fmt, **options}
    config = parse_pipeline_config({"sources": [source]}, "test", tmp_path)
    return ReadStep(config.sources[0], 0, tmp_path / "funnel", tmp_path / "malformed")


ZST = zstandard.ZstdCompressor().compress(_lines([{"id": i, "text": "x " * 50} for i in range(200)]))
GZ = gzip.compress(_lines([{"id": i, "text": "y " * 50} for i in range(2000)]))


@pytest.mark.parametrize(
    "fmt,name,data,options",
    [
        ("jsonl.zst", "a.jsonl.zst", ZST[:-40], {}),
        ("jsonl.zst", "a.jsonl.zst", b"this is not zstd at all", {}),
        ("jsonl", "a.jsonl.gz", GZ[:-500], {"glob": "*.jsonl.gz"}),
        ("parquet", "a.parquet", b"PAR1 not really a parquet file PAR1", {}),
    ],
)
def test_a_truncated_or_corrupt_file_is_an_error_naming_it(tmp_path, fmt, name, data, options):
    step = _read_step(tmp_path, fmt, name, data, **options)
    with pytest.raises(BadInputFile, match=f"{tmp_path / 'in' / name}: cannot read source 's'"):
        list(step.run(None, 0, 1))


def test_a_skipped_bad_file_is_listed_in_the_funnel_files(tmp_path):
    step = _read_step(tmp_path, "jsonl.zst", "a.jsonl.zst", b"garbage", on_bad_file="skip")
    assert list(step.run(None, 0, 1)) == []
    assert [b.file for b in bad_files(tmp_path / "funnel")] == [str(tmp_path / "in" / "a.jsonl.zst")]


def test_a_corrupt_run_writes_nothing_to_the_store(tmp_path):
    (tmp_path / "d").mkdir()
    data = zstandard.ZstdCompressor().compress(_lines([{"id": i, "text": prose(random.Random(i))} for i in range(30)]))
    (tmp_path / "d" / "a.jsonl.zst").write_bytes(data[: len(data) // 2])
    (tmp_path / "p.toml").write_text(
        '[[sources]]\nname = "d"\npaths = ["d"]\n[output]\nversion = "2026.03.02"\n'
        "[executor]\ntasks = 1\nworkers = 1\n"
    )
    home = Home.resolve(tmp_path / "home")
    with pytest.raises(PipelineError, match=r"a\.jsonl\.zst: cannot read source 'd' file to its end"):
        run_pipeline(load_pipeline_config(tmp_path / "p.toml"), home)
    assert not home.store("local", "2026.03.02").exists()


def test_parquet_problems_name_their_row(tmp_path):
    rows = [
        {"id": "a", "text": "fine text"},
        {"id": "b", "text": ""},
        {"id": "c", "text": "more text"},
        {"id": "d", "text": None},
    ]
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    step = _read_step(tmp_path, "parquet", "a.parquet", buffer.getvalue())
    docs = list(step.run(None, 0, 1))
    assert [d.metadata["position"] for d in docs] == [0, 2]
    listing = [json.loads(line) for line in (tmp_path / "malformed" / "s" / "00000.jsonl").read_text().splitlines()]
    assert [(r["row"], r["reason"]) for r in listing] == [(1, "empty"), (3, "empty")]


def test_long_documents_can_be_cut_at_a_character_boundary(tmp_path):
    step = _read_step(
        tmp_path,
        "jsonl",
        "a.jsonl",
        _lines([{"id": "x", "text": "é" * 100}]),
        max_document_bytes=51,
        long_documents="cut",
    )
    (doc,) = list(step.run(None, 0, 1))
    assert doc.text == "é" * 25
    counts = json.loads(next((tmp_path / "funnel").glob("*.json")).read_text())["sources"]["s"]
    assert counts["cut"] == {"documents": 1, "bytes": 150}  # 200 bytes cut to 50


def test_keys_are_file_ordinal_and_position_whatever_the_ids(tmp_path):
    from pipeline.steps.read.readers import document_key

    step = _read_step(
        tmp_path, "jsonl", "a.jsonl", _lines([{"id": "same", "text": "one"}, {"id": "same", "text": "two"}])
    )
    docs = list(step.run(None, 0, 1))
    assert [d.metadata["key"] for d in docs] == [document_key(0, 1), document_key(0, 2)]
    assert np.unique([d.metadata["key"] for d in docs]).size == 2


def _work_config(tmp_path, extra: str = ""):
    (tmp_path / "d").mkdir(exist_ok=True)
    for i in range(2):
        path = tmp_path / "d" / f"{i}.jsonl"
        if not path.exists():
            path.write_text(json.dumps({"id": i, "text": prose(random.Random(i))}) + "\n")
    (tmp_path / "p.toml").write_text('[[sources]]\nname = "d"\npaths = ["d"]\nformat = "jsonl"\n' + extra)
    return load_pipeline_config(tmp_path / "p.toml")


def test_inputs_changed_since_the_run_started_are_an_error_naming_the_first_one(tmp_path):
    from pipeline.work import InputsChanged, WorkLayout, prepare_work

    layout = WorkLayout(tmp_path / "work")
    assert prepare_work(layout, _work_config(tmp_path)) == [
        "filter",
        "dedup",
        "tokenizer",
        "models",
        "tokenize",
        "decontaminate",
        "split",
    ]
    (layout.filtered).mkdir()
    (tmp_path / "d" / "1.jsonl").write_text(json.dumps({"id": 1, "text": "rewritten after the kill"}) + "\n")
    with pytest.raises(InputsChanged, match=f"first changed file {tmp_path / 'd' / '1.jsonl'} \\(changed"):
        prepare_work(layout, _work_config(tmp_path))
    (tmp_path / "d" / "2.jsonl").write_text(json.dumps({"id": 2, "text": "a new file"}) + "\n")
    assert prepare_work(layout, _work_config(tmp_path), restart=True)[0] == "filter"
    assert not layout.filtered.exists()
    assert prepare_work(layout, _work_config(tmp_path)) == []


@pytest.mark.parametrize(
    "change,rerun",
    [
        ("[executor]\nworkers = 1\n", []),
        ("[output]\nshard_tokens = 1000\n", ["tokenize", "decontaminate", "split"]),
        ("[validation]\nfraction = 0.01\n", ["tokenize", "decontaminate", "split"]),
        ("[tokenizer]\nvocab_size = 500\n", ["tokenizer", "models", "tokenize", "decontaminate", "split"]),
        ("[dedup]\nthreshold = 0.7\n", ["dedup", "tokenizer", "models", "tokenize", "decontaminate", "split"]),
        (
            "[filters.gopher_quality]\nmin_doc_words = 10\n",
            ["filter", "dedup", "tokenizer", "models", "tokenize", "decontaminate", "split"],
        ),
    ],
)
def test_a_config_change_reruns_only_its_stage_and_the_later_ones(tmp_path, change, rerun, caplog):
    from pipeline.work import WorkLayout, prepare_work

    layout = WorkLayout(tmp_path / "work")
    prepare_work(layout, _work_config(tmp_path))
    for path in (
        layout.filtered,
        layout.runs,
        layout.models,
        layout.staged,
        layout.logs / "1-filter",
        layout.logs / "3-tokenize",
    ):
        path.mkdir(parents=True)
    layout.tokenizer.write_text("{}")
    layout.duplicates.write_bytes(b"")
    assert prepare_work(layout, _work_config(tmp_path, change)) == rerun
    assert layout.filtered.exists() == ("filter" not in rerun)
    assert layout.duplicates.exists() == ("dedup" not in rerun)
    assert layout.tokenizer.exists() == ("tokenizer" not in rerun)
    assert layout.runs.exists() == ("tokenize" not in rerun)
    assert layout.staged.exists() == ("tokenize" not in rerun)
    if rerun:
        assert f"rerunning {', '.join(rerun)}" in caplog.text


@pytest.mark.slow
def test_each_cell_has_a_sidecar_from_stored_document_to_its_origin(web_run):
    from millrace.artifacts import sha256_file
    from pipeline.store.trace import read_trace

    root, _, path, _texts = web_run
    store = Store(path)
    cell_dir = store.cell_dir("crawl")
    trace = read_trace(cell_dir).to_pylist()
    listed = store.cell("crawl").stats.trace
    parts = listed.parts if listed is not None else None
    assert parts and all(part.sha256 == sha256_file(cell_dir / part.file) for part in parts)
    # rows in store order (a keyed hash of the internal key, so sort them back by input position here)
    # the sidecar covers the training shards (what the loader reads), not the held-out documents
    stored = {
        (1, "crawl/https://a.example/page"),
        (2, "crawl/https://a.example/page"),
        (3, "crawl/https://b.example/x"),
        (6, "crawl/https://c.example/z"),
    }  # line 4 is the invalid UTF-8 record
    rows = [(r["position"], r["id"]) for r in trace]
    assert len(rows) == len(set(rows)) == store.cell("crawl").documents and set(rows) <= stored
    assert {r["origin"] for r in trace} == {str(root / "crawl" / "part-0.jsonl")}
    web = read_trace(store.cell_dir("web")).to_pylist()
    origins = [r["origin"] for r in web]
    assert len(origins) == store.cell("web").documents and set(origins) <= {
        "https://mill.example/race",
        "https://mill.example/wheel",
    }


def test_the_sample_drawn_in_the_filter_tasks_does_not_depend_on_the_task_count(tmp_path):
    from datatrove.data import Document

    from pipeline.steps.filter.sample import SampleSketch, merged_sample, sample_rank

    rng = random.Random(5)
    docs = [Document(text=prose(rng), id=f"d{i}", metadata={"key": i * 7 + 3}) for i in range(120)]
    budget = sum(len(d.text) for d in docs) // 4
    samples = {}
    removed = {0: {docs[0].metadata["key"]}}  # a document dedup removed never enters the sample
    for tasks in (1, 3):
        for rank in range(tasks):
            list(SampleSketch(tmp_path / str(tasks), 2 * budget).run(iter(docs[rank::tasks]), rank, tasks))
        samples[tasks] = [
            d.metadata["key"]
            for d in merged_sample(tmp_path / str(tasks), lambda rank: removed.get(rank, set()), budget)
        ]
    assert samples[1] == samples[3]
    by_rank = sorted((d for d in docs if d is not docs[0]), key=lambda d: sample_rank(d.metadata["key"]))
    expected, held = [], 0
    for doc in by_rank:
        if held >= budget:
            break
        expected.append(doc.metadata["key"])
        held += len(doc.text.encode())
    assert samples[1] == sorted(expected) and 10 < len(expected) < 60


def test_the_sample_tasks_drop_dedups_removals_so_the_driver_reads_no_removal_list(tmp_path):
    import numpy as np
    from datatrove.data import Document

    from pipeline.steps.dedup.duplicates import REASON_CODES, REMOVAL, removal_file
    from pipeline.steps.dedup.signing import save_array
    from pipeline.steps.dedup.sorted_runs import sorted_records
    from pipeline.steps.filter.sample import DeduplicatedSketch, SampleSketch, merged_sample, sample_rank

    rng = random.Random(7)
    docs = [Document(text=prose(rng), id=f"d{i}", metadata={"key": i * 5 + 1}) for i in range(90)]
    budget = sum(len(d.text) for d in docs) // 4
    first = sorted(docs, key=lambda d: sample_rank(d.metadata["key"]))[:9]  # what the sample would hold first
    removed = {rank: {d.metadata["key"] for d in first if d in docs[rank::3]} for rank in range(3)}
    rows = [(rank, key, REASON_CODES["exact"], 1) for rank, keys in removed.items() for key in keys]
    records = np.array(rows, dtype=REMOVAL)
    (tmp_path / "duplicates").mkdir()
    save_array(removal_file(tmp_path / "duplicates", "exact", 0), sorted_records(records))
    step = DeduplicatedSketch(tmp_path / "samples", tmp_path / "duplicates", tmp_path / "kept")
    for rank in range(3):
        list(SampleSketch(tmp_path / "samples", 2 * budget).run(iter(docs[rank::3]), rank, 3))
        list(step.run(None, rank, 3))
    ours = merged_sample(tmp_path / "kept", None, budget)
    expected = merged_sample(tmp_path / "samples", lambda rank: removed[rank], budget)
    assert [d.metadata["key"] for d in ours] == [d.metadata["key"] for d in expected]
    assert not {d.metadata["key"] for d in ours} & set().union(*removed.values()) and len(ours) > 10


@pytest.mark.slow
def test_two_runs_over_the_same_warc_files_give_byte_identical_stores(web_run, tmp_path):
    from testkit.corpus import store_files

    root, _, _, _ = web_run
    rng = random.Random(12)
    shared = "Every page of this manual describes one command, its options and the files it writes. " * 2
    pages = [(f"https://docs.example/{i}", HTML.format(body=f"{shared}</p><p>{prose(rng)}")) for i in range(6)]
    (tmp_path / "web").mkdir()
    _warc(tmp_path / "web" / "docs.warc.gz", pages)
    (tmp_path / "web" / "crawl.warc.gz").write_bytes((root / "web" / "crawl.warc.gz").read_bytes())
    (tmp_path / "p.toml").write_text(
        f'[[sources]]\nname = "web"\npaths = ["{tmp_path / "web"}"]\nformat = "warc"\nfilters = []\n'
        '[dedup]\nfuzzy = false\n[tokenizer]\nvocab_size = 300\n[output]\nversion = "2026.03.02"\n'
        "[executor]\ntasks = 1\nworkers = 1\n"
    )
    config = load_pipeline_config(tmp_path / "p.toml")
    first = run_pipeline(config, Home.resolve(tmp_path / "a"))
    second = run_pipeline(config, Home.resolve(tmp_path / "b"))
    assert Store(first).manifest.cells["web"].documents + Store(first).manifest.cells["web"].validation_documents == 8
    assert store_files(first) == store_files(second)


@pytest.mark.slow
def test_held_out_documents_are_traced_to_their_file_or_url(web_run):
    from pipeline.store.trace import read_trace

    root, _, path, _ = web_run
    store = Store(path)
    held = {cell: read_trace(store.cell_dir(cell), held_out=True).to_pylist() for cell in store.manifest.cells}
    assert {cell: len(rows) for cell, rows in held.items()} == {
        cell: summary.validation_documents for cell, summary in store.manifest.cells.items()
    }
    assert sum(len(rows) for rows in held.values()) > 0
    inputs = {str(p) for p in root.rglob("*") if p.is_file()} | {
        "https://mill.example/race",
        "https://mill.example/wheel",
    }
    assert all(row["origin"] in inputs and row["source"] == cell for cell, rows in held.items() for row in rows)
    assert store.verify_pinned_files() == []
