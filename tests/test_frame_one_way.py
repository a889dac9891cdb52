"""The frame's one way of doing each thing: the envelope of an artifact, the last record of a stream, the first
validation error, the strict base model."""

import json
from pathlib import Path

import pydantic
import pytest

from millrace.artifacts import parse_artifact, read_artifact, read_envelope, write_artifact
from millrace.config import StrictModel, load_config
from millrace.errors import ArtifactError, first_validation_error
from millrace.jsonl import Follower, json_lines, last_record, read_records


class Payload(StrictModel):
    size: int
    names: list[str] = []


def test_the_envelope_is_stripped_and_checked_in_one_place(tmp_path):
    path = tmp_path / "a.json"
    digest = write_artifact(path, "millrace.test", 1, {"size": 3})
    envelope = read_envelope(path, "millrace.test")
    assert (envelope.payload, envelope.content_hash, envelope.schema_version) == ({"size": 3}, digest, 1)
    assert read_artifact(path, "millrace.test", Payload) == Payload(size=3) == envelope.model(Payload)
    assert parse_artifact(path.read_bytes(), "there", "millrace.test", Payload) == Payload(size=3)
    assert envelope.pinned(digest, "the pin") is envelope
    with pytest.raises(ArtifactError, match=r"a\.json: hash sha256:\w+ differs from the pin \(sha256:0+\); rebuild"):
        envelope.pinned("sha256:" + "0" * 64, "the pin", "rebuild")
    write_artifact(path, "millrace.test", 1, {"size": "3"})
    with pytest.raises(ArtifactError, match=r"a\.json: not a valid millrace.test artifact: field 'size': .*'3'"):
        read_artifact(path, "millrace.test", Payload)


def test_the_first_validation_error_names_field_value_and_how_many_more():
    with pytest.raises(pydantic.ValidationError) as info:
        Payload.model_validate({"size": "256", "names": "x", "colour": 1}, strict=True)
    message = first_validation_error(info.value)
    assert message.startswith("field 'size': ") and "(got '256')" in message and message.endswith("(and 2 more)")
    with pytest.raises(pydantic.ValidationError) as info:
        Payload.model_validate({"size": 1, "colour": 1})
    assert first_validation_error(info.value) == "field 'colour': unknown option"


class Shapes(StrictModel):
    lr: float
    steps: int
    betas: tuple[float, float] = (0.9, 0.95)
    files: list[Path] = []


def test_one_base_strict_for_artifacts_and_as_toml_spells_for_configs(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('lr = 3\nsteps = 1e3\nbetas = [0.8, 0.9]\nfiles = ["a.txt"]\n')
    config = load_config(path, Shapes)
    assert (config.lr, config.steps, config.betas, config.files) == (3.0, 1000, (0.8, 0.9), [Path("a.txt")])
    artifact = tmp_path / "a.json"
    write_artifact(artifact, "millrace.test", 1, {"lr": 3, "steps": 10, "betas": [0.8, 0.9], "files": ["a.txt"]})
    assert read_artifact(artifact, "millrace.test", Shapes) == config.model_copy(update={"steps": 10})
    for bad, field in (
        ({"steps": "256"}, "steps"),
        ({"steps": 1.5}, "steps"),
        ({"steps": True}, "steps"),
        ({"lr": "3"}, "lr"),
    ):
        write_artifact(artifact, "millrace.test", 1, {"lr": 3, "steps": 10, **bad})
        with pytest.raises(ArtifactError, match=f"a.json: not a valid millrace.test artifact: field '{field}'"):
            read_artifact(artifact, "millrace.test", Shapes)


def test_the_last_record_leaves_a_torn_line_out_and_reads_only_the_end(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert last_record(path) is None
    path.write_text("")
    assert last_record(path) is None
    lines = [json.dumps({"step": s, "text": "x" * 300}) for s in range(1, 400)]
    path.write_text("\n".join(lines) + "\n" + '{"step": 400, "te')  # a crash's torn last line
    assert last_record(path, window=1024)["step"] == 399  # a window shorter than two lines grows
    assert [r["step"] for r in read_records(path)][-1] == 399  # the same rule as the whole-file reader
    path.write_text(lines[0] + "\nnot json\n" + '{"step": 3, "te')
    with pytest.raises(ArtifactError, match=r"metrics\.jsonl: not a JSON line before the torn last one"):
        last_record(path)
    path.write_text('{"step": "one"}\n')
    with pytest.raises(ArtifactError, match=r"metrics\.jsonl: last record: expected a JSON object with an integer"):
        last_record(path)


def test_the_follower_reads_a_line_once_its_newline_is_written(tmp_path):
    path = tmp_path / "eval.jsonl"
    follower = Follower(path, json_lines())
    assert follower.poll() == ([], False)
    path.write_text('{"step": 1}\n{"step": 2')
    assert follower.poll() == ([(1, {"step": 1})], False)
    with open(path, "a") as handle:
        handle.write('}\n\n{"step": 3}\n')
    assert follower.poll() == ([(2, {"step": 2}), (4, {"step": 3})], False)
    path.write_text('{"step": 9}\n')
    assert follower.poll() == ([(1, {"step": 9})], True)  # rewritten shorter: read again from the start
    path.write_text('{"step": 9}\n{"step": "x"}\n')
    with pytest.raises(ArtifactError, match=r"eval.jsonl:2: expected a JSON object with an integer 'step'"):
        follower.poll()
