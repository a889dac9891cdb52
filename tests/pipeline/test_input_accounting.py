"""No file and no record goes unaccounted: every format found (mixed in one folder), every WARC record
counted and each page named by its URL, the files no source reads named (odd extensions, dangling links,
links leaving the corpus). The reader's bad-input drills are in tests/drills/test_reader_drills.py."""

from __future__ import annotations

import gzip
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from pipeline.config import SourceConfig, load_pipeline_config
from pipeline.starter import discover_sources, init_config
from pipeline.steps.read.discovery import DANGLING, NO_READER, OUTSIDE, unread_files
from pipeline.steps.read.readers import input_files
from testkit.warc import read_source, write_warc


def test_every_warc_record_is_counted_and_pages_are_named_by_url(tmp_path):
    (tmp_path / "web").mkdir()
    records = write_warc(tmp_path / "web" / "a.warc.gz", gz=True) + write_warc(tmp_path / "web" / "b.warc", gz=False)
    source = SourceConfig(name="web", paths=[str(tmp_path / "web")], format="warc", on_bad_file="skip")
    documents, counts, listing = read_source(tmp_path, source)
    web = counts["sources"]["web"]
    assert web["received"]["documents"] == records  # every record in the files
    removed = {reason: c["documents"] for reason, c in web["removed"].items()}
    assert web["kept"]["documents"] + sum(removed.values()) == records
    assert removed == {"warc_warcinfo": 2, "warc_request": 2, "not_html": 2, "no_target_uri": 2}
    assert sorted(d.id for d in documents) == sorted(
        ["web/https://example.org/csv-sniffed", "web/https://example.org/no-header"] * 2
    )
    assert all(d.metadata["warc_record_id"].startswith("<urn:uuid:") for d in documents)
    assert sorted((r["file"].rsplit("/", 1)[1], r["record"], r["reason"]) for r in listing) == [
        ("a.warc.gz", 5, "no_target_uri"),
        ("b.warc", 5, "no_target_uri"),
    ]
    assert json.loads((tmp_path / "progress" / "web-00000.json").read_text()) == {"records": records}


def test_init_finds_every_format_and_the_files_no_source_reads_are_named(tmp_path):
    corpus = tmp_path / "corpus"
    mixed = corpus / "mixed"
    (mixed / "deeper").mkdir(parents=True)
    record = json.dumps({"id": "1", "text": "a line of prose"}) + "\n"
    (mixed / "a.jsonl").write_text(record)
    (mixed / "b.jsonl.gz").write_bytes(gzip.compress(record.encode()))
    (mixed / "deeper" / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(record.encode()))
    (mixed / "d.json").write_text(record)
    pq.write_table(pa.Table.from_pylist([{"id": "p", "text": "parquet prose"}]), mixed / "e.parquet")
    write_warc(mixed / "f.warc", gz=False, without_uri=False)
    write_warc(mixed / "g.warc.gz", gz=True, without_uri=False)
    (mixed / "notes.txt").write_text("not data")
    (mixed / "table.csv").write_text("a,b\n")
    (tmp_path / "elsewhere.jsonl").write_text(record)
    os.symlink(tmp_path / "elsewhere.jsonl", mixed / "outside.jsonl")
    os.symlink(tmp_path / "missing.jsonl", mixed / "dangling.jsonl")
    (corpus / "loose.jsonl").write_text(record)
    (corpus / "corpus.json").write_text(json.dumps({"kind": "millrace.corpus", "documents": 1}, indent=1))

    found = {name: (fmt, [p.name for p in paths]) for name, paths, fmt in discover_sources(corpus)}
    assert found == {
        "mixed": ("jsonl", ["mixed"]),
        "mixed-parquet": ("parquet", ["mixed"]),
        "mixed-warc": ("warc", ["mixed"]),
        "corpus": ("jsonl", ["loose.jsonl"]),
    }
    (tmp_path / "p.toml").write_text(init_config(corpus))
    assert "# Not a source: corpus.json is one JSON document" in (tmp_path / "p.toml").read_text()
    config = load_pipeline_config(tmp_path / "p.toml")
    read = {s.name: sorted(f for _, files in input_files(s) for f in files) for s in config.sources}
    assert read == {
        "mixed": ["a.jsonl", "b.jsonl.gz", "d.json", "deeper/c.jsonl.zst"],
        "mixed-parquet": ["e.parquet"],
        "mixed-warc": ["f.warc", "g.warc.gz"],
        "corpus": ["loose.jsonl"],
    }
    (unread,) = unread_files(config)
    assert (unread.source, unread.files) == ("mixed", 4)
    assert unread.reasons == {DANGLING: 1, NO_READER: 2, OUTSIDE: 1}


def test_progress_lines_count_the_records_of_every_source(tmp_path):
    """The filter phase's line counts what all its readers read (malformed records too), not the first's."""
    from pipeline.steps.progress import PhaseLines, live_records
    from pipeline.steps.read.readers import ReadStep

    sources = []
    for name, lines in (("a", 3), ("b", 4)):
        (tmp_path / name).mkdir()
        records = [json.dumps({"id": str(i), "text": f"text {i}"}) for i in range(lines - 1)] + ["{not json"]
        (tmp_path / name / "x.jsonl").write_text("\n".join(records) + "\n")
        sources.append(SourceConfig(name=name, paths=[str(tmp_path / name)], format="jsonl"))
    data = None
    for source in sources:
        data = ReadStep(source, 0, tmp_path / "funnel", tmp_path / "malformed", tmp_path / "progress").run(data, 0, 1)
    assert len(list(data)) == 5
    line = PhaseLines("filter", tmp_path / "logs", 1, read=lambda: live_records(tmp_path / "progress")).line()
    assert line == "pipeline: filter, 0/1 tasks done, 7 documents read"


def test_a_stage_without_a_live_count_says_what_its_count_covers(tmp_path):
    """Dedup's rounds read signatures, not documents: no '0 documents read' while they run."""
    from pipeline.steps.progress import PhaseLines

    stats = tmp_path / "logs" / "stats"
    assert PhaseLines("dedup", tmp_path / "logs", 4).line() == "pipeline: dedup, 0/4 tasks done"
    stats.mkdir(parents=True)
    (stats / "00000.json").write_text(json.dumps([{"stats": {"documents": {"total": 12}}}]))
    (tmp_path / "logs" / "completions").mkdir()
    (tmp_path / "logs" / "completions" / "00000").touch()
    assert PhaseLines("dedup", tmp_path / "logs", 4).line() == (
        "pipeline: dedup, 1/4 tasks done, 12 documents read by the finished tasks"
    )


def test_each_filter_task_reads_the_files_the_driver_dealt_it_and_lists_no_source(tmp_path):
    """The driver deals the files once (one inputs file per task): each task reads the documents it would have
    found by listing every source, and a file added since is read by no task (none lists a source)."""
    from pipeline.config import parse_pipeline_config
    from pipeline.steps.read.readers import ReadStep, file_count
    from pipeline.steps.read.task_inputs import write_task_inputs
    from testkit.corpus import make_corpus, write_jsonl_zst

    corpus = make_corpus(tmp_path / "corpus")
    sources = [
        {"name": "articles", "paths": [str(corpus / "articles")]},
        {"name": "notes", "paths": [str(corpus / "notes" / "notes.jsonl.zst")]},
        {"name": "snippets", "paths": [str(corpus / "snippets")]},
    ]
    config = parse_pipeline_config({"sources": sources, "executor": {"tasks": 3}}, "dealt", tmp_path)
    write_task_inputs(config, tmp_path / "inputs", 3)

    def keys(rank: int, inputs: bool) -> list[int]:
        found, offset = [], 0
        for source in config.sources:
            step = ReadStep(
                source,
                offset,
                tmp_path / "funnel",
                tmp_path / "malformed",
                None,
                tmp_path / "inputs" if inputs else None,
            )
            found += [d.metadata["key"] for d in step.run(None, rank, 3)]
            offset += file_count(source)
        return found

    listed = {rank: keys(rank, False) for rank in range(3)}
    assert {rank: keys(rank, True) for rank in range(3)} == listed
    assert sorted(k for ks in listed.values() for k in ks) == sorted(set().union(*listed.values()))  # each once
    assert all(listed.values())  # four files over three tasks: each has one
    write_jsonl_zst(corpus / "articles" / "part-2.jsonl.zst", [{"id": "late", "text": "a file added since"}])
    assert {rank: keys(rank, True) for rank in range(3)} == listed
    assert {rank: keys(rank, False) for rank in range(3)} != listed  # a task that listed would read it
