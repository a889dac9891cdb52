"""Sources at S3 URLs (moto's server on loopback, its own process, stopped by its PID): listed and read through
datatrove's DataFolder with the source's storage_options, mixed formats in one folder, the same documents and
input fingerprints as the same files on disk, and the file no source reads named."""

from __future__ import annotations

import json
import random
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.config import SourceConfig, parse_pipeline_config
from pipeline.steps.read.discovery import unread_files
from pipeline.steps.read.fields import first_record
from pipeline.steps.read.readers import ReadStep, file_count
from pipeline.work import input_listing
from testkit.corpus import write_mixed_folder
from testkit.counting_proxy import counting_proxy
from testkit.s3 import s3_server, upload_tree

pytest.importorskip("s3fs")
pytest.importorskip("moto")
pytestmark = pytest.mark.slow  # a moto server (one per module) and s3fs reads


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


@pytest.fixture(scope="module")
def server():
    with s3_server("corpus") as running:
        yield running


def test_sources_at_s3_urls_read_like_the_same_files_on_disk(server, tmp_path):
    folder = write_mixed_folder(tmp_path / "mixed")
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


def test_the_first_record_of_a_parquet_reads_its_first_pages_not_its_row_group(server):
    """A row group can be hundreds of MB: the driver reads the footer and each column's first pages of it."""
    rows, text = 30_000, random.Random(3).randbytes(30_000 * 480).hex().encode()  # ~1 KB of text each: ~30 MB
    offsets = pa.py_buffer(np.arange(0, len(text) + 1, 960, dtype=np.int32))
    table = pa.table(
        {
            "doc_id": [f"d{i}" for i in range(rows)],
            "body": pa.StringArray.from_buffers(rows, offsets, pa.py_buffer(text)),
            "lang": ["en"] * rows,
            "score": [i / rows for i in range(rows)],
        }
    )
    with fsspec.filesystem("s3", **server.storage_options).open("corpus/export/part-0.parquet", "wb") as out:
        pq.write_table(table, out, row_group_size=rows)
    size = fsspec.filesystem("s3", **server.storage_options).size("corpus/export/part-0.parquet")
    with counting_proxy(server.endpoint) as proxy:
        options = {**server.storage_options, "client_kwargs": {"endpoint_url": proxy.endpoint}}
        source = SourceConfig(name="export", format="parquet", paths=["s3://corpus/export"], storage_options=options)
        found = first_record(source)
        read = proxy.read_by_path("unnamed").get("/corpus/export/part-0.parquet", 0)
    assert found == ("s3://corpus/export/part-0.parquet", table.slice(0, 1).to_pylist()[0])
    assert 0 < read < size / 8, (read, size)  # the old whole-row-group read took all of `size` and more
