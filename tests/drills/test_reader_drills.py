"""Reader drills: a WARC response without a target URI, a truncated `.warc.gz`, a 200 MB line and a zstd
bomb under a memory bound, a byte order mark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import zstandard

from pipeline.config import SourceConfig
from pipeline.steps.read.readers import BadInputFile
from testkit.warc import read_source, write_warc


@pytest.mark.slow
def test_a_response_without_a_target_uri_is_an_error_naming_file_and_record(tmp_path):
    (tmp_path / "web").mkdir()
    write_warc(tmp_path / "web" / "a.warc.gz", gz=True)
    source = SourceConfig(name="web", paths=[str(tmp_path / "web")], format="warc")
    with pytest.raises(
        BadInputFile, match=r"a\.warc\.gz: record 5 \(<urn:uuid:.*\): a response without WARC-Target-URI"
    ):
        read_source(tmp_path, source)


def test_a_truncated_warc_gz_is_a_bad_file(tmp_path):
    (tmp_path / "web").mkdir()
    whole = tmp_path / "web" / "a.warc.gz"
    write_warc(whole, gz=True, without_uri=False)
    whole.write_bytes(whole.read_bytes()[: whole.stat().st_size * 3 // 4])
    with pytest.raises(BadInputFile, match=r"a\.warc\.gz: cannot read source 'web' file to its end"):
        read_source(tmp_path, SourceConfig(name="web", paths=[str(tmp_path / "web")], format="warc"))
    _, counts, listing = read_source(
        tmp_path, SourceConfig(name="web", paths=[str(tmp_path / "web")], format="warc", on_bad_file="skip")
    )
    assert [b["file"] for b in counts["bad_files"]] == [str(whole)]
    assert listing[-1]["reason"] == "bad_file"


def test_a_utf8_bom_does_not_make_the_first_record_malformed(tmp_path):
    (tmp_path / "d").mkdir()
    lines = [json.dumps({"id": str(i), "text": f"record {i}"}) for i in range(3)]
    (tmp_path / "d" / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode())
    documents, _counts, listing = read_source(
        tmp_path, SourceConfig(name="d", paths=[str(tmp_path / "d")], format="jsonl")
    )
    assert [d.id for d in documents] == ["d/0", "d/1", "d/2"] and listing == []


MEMORY_PROBE = textwrap.dedent("""
    import json, resource, sys
    from pipeline.config import SourceConfig
    from pipeline.steps.read.readers import ReadStep
    source = SourceConfig(name="d", paths=[sys.argv[1]], format="jsonl", max_document_bytes=100_000)
    step = ReadStep(source, 0, sys.argv[2] + "/funnel", sys.argv[2] + "/malformed")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kept = [d.id for d in step.run(None, 0, 1)]
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"kept": kept, "grew_mib": (after - before) / 1024}))
""")


@pytest.mark.slow
@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_a_huge_line_is_dropped_while_reading_in_bounded_memory(tmp_path, compression):
    """A 200 MB line (plain) or a 400 MB line from a few KB of zstd: the reader's peak memory grows < 64 MiB."""
    (tmp_path / "d").mkdir()
    size = 200 << 20 if compression == "none" else 400 << 20
    path = tmp_path / "d" / ("a.jsonl" if compression == "none" else "a.jsonl.zst")
    with open(path, "wb") as raw:
        out = zstandard.ZstdCompressor().stream_writer(raw) if compression == "zstd" else raw
        out.write(b'{"id": "small", "text": "kept"}\n{"id": "huge", "text": "')
        block = b"x" * (1 << 20)
        for _ in range(size >> 20):
            out.write(block)
        out.write(b'"}\n{"id": "after", "text": "kept too"}\n')
        if compression == "zstd":
            out.flush(zstandard.FLUSH_FRAME)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(tmp_path / "d"), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["kept"] == ["d/small", "d/after"]
    assert result["grew_mib"] < 64, result
    listing = [json.loads(line) for line in (tmp_path / "malformed" / "d" / "00000.jsonl").read_text().splitlines()]
    assert listing == [{"file": str(path), "line": 2, "reason": "too_long"}]
