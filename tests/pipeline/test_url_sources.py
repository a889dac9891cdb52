"""Sources at S3 URLs (moto's server on loopback, its own process, stopped by its PID): listed and read through
datatrove's DataFolder with the source's storage_options, mixed formats in one folder, the same documents and
input fingerprints as the same files on disk, and the file no source reads named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.config import parse_pipeline_config
from pipeline.steps.read.discovery import unread_files
from pipeline.steps.read.readers import ReadStep, file_count
from pipeline.work import input_listing
from testkit.corpus import write_mixed_folder
from testkit.s3 import s3_server, upload_tree

pytest.importorskip("s3fs")
pytest.importorskip("moto")
pytestmark = pytest.mark.slow  # 10-13 s measured on this shared machine (load 11-15): a moto server and s3fs reads


def config(base: str, options: dict):
    sources = [
        {"name": "pq", "paths": [base], "format": "parquet"},
        {"name": "js", "paths": [f"{base}/b.jsonl"], "format": "jsonl"},
    ]
    data = {"sources": [{**s, "storage_options": options} for s in sources], "executor": {"tasks": 1}}
    return parse_pipeline_config(data, "url sources", Path.cwd())


def documents(config, tmp: Path) -> list[tuple]:
    read, offset = [], 0
    for source in config.sources:
        step = ReadStep(source, offset, tmp / "funnel", tmp / "malformed")
        read += [(d.id, d.text, d.metadata["key"], d.metadata["origin"]) for d in step.run(None, 0, 1)]
        offset += file_count(source)
    return read


def test_sources_at_s3_urls_read_like_the_same_files_on_disk(tmp_path):
    folder = write_mixed_folder(tmp_path / "mixed")
    with s3_server("corpus") as server:
        options = server.storage_options
        upload_tree(folder, "s3://corpus/mixed", options)
        on_disk, on_s3 = config(str(folder), {}), config("s3://corpus/mixed", options)
        local, remote = documents(on_disk, tmp_path / "local"), documents(on_s3, tmp_path / "remote")
        assert [d[:3] for d in remote] == [d[:3] for d in local] and len(remote) == 9
        assert {d[3] for d in remote} == {"s3://corpus/mixed/a.parquet", "s3://corpus/mixed/b.jsonl"}
        assert [(e.path, e.examples) for e in unread_files(on_s3)] == [("s3://corpus/mixed", ["c.csv"])]
        listed = input_listing(on_s3)
        assert [e["path"] for e in listed] == ["s3://corpus/mixed/a.parquet", "s3://corpus/mixed/b.jsonl"]
        assert [(e["size"], e["xxh64"]) for e in listed] == [(e["size"], e["xxh64"]) for e in input_listing(on_disk)]
    malformed = (tmp_path / "remote" / "malformed" / "js" / "00000.jsonl").read_text()
    assert json.loads(malformed) == {"file": "s3://corpus/mixed/b.jsonl", "line": 5, "reason": "malformed"}
