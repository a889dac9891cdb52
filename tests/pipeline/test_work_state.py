"""The work state's file: `work.json`, and a work directory written under its earlier name (`run.json`, the
name of a training run's record too, its phases' fingerprints under "stages") still resumes instead of starting
over."""

import json

from pipeline.config import PipelineConfig
from pipeline.work import WorkLayout, prepare_work


def test_a_work_directory_with_the_earlier_state_name_resumes(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.jsonl").write_text('{"text": "one document"}\n')
    config = PipelineConfig.model_validate(
        {"sources": [{"name": "docs", "paths": [str(tmp_path / "docs")], "format": "jsonl"}]}
    )
    layout = WorkLayout(tmp_path / "work")
    assert prepare_work(layout, config)[0] == "filter"  # a new directory: everything runs
    assert layout.state.name == "work.json" and layout.state.exists()
    written = json.loads(layout.state.read_text())
    assert set(written["phases"]) >= {"filter", "tokenize"}
    written["stages"] = written.pop("phases")  # as a run before the renames left it
    layout.legacy_state.write_text(json.dumps(written))
    layout.state.unlink()
    layout.filtered.mkdir()
    (layout.filtered / "00000.jsonl.zst").write_bytes(b"kept")
    assert prepare_work(layout, config) == []  # resumed: nothing reruns, the filter output is kept
    assert (layout.filtered / "00000.jsonl.zst").exists()
    assert layout.state.exists() and not layout.legacy_state.exists()
    assert json.loads(layout.state.read_text())["phases"] == written["stages"]
