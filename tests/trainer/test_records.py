"""The trainer's records: what its writers construct is what `train status`, the ladder and the reports read
(that reports import them without torch: tests/reports/test_ladder_page.py)."""

import json
import math
from pathlib import Path

import pytest

from millrace.artifacts import canonical_json, read_envelope, write_artifact
from millrace.errors import ArtifactError
from trainer.config import load_train_config
from trainer.records import (
    EVAL_SCHEMA,
    SCALARS,
    EvalRecord,
    LadderRecord,
    MetricsRecord,
    RecordedTrainConfig,
    RunRecord,
    RunStore,
    SampleRecord,
    read_eval,
    read_run,
    read_samples,
    write_run,
)


def test_a_metrics_record_writes_non_finite_as_null_and_refuses_an_unknown_or_mistyped_field():
    alerts = {"started": [{"name": "grad_norm", "value": 9.0}], "active": []}
    record = MetricsRecord.model_validate(
        {"step": 3, "loss": math.nan, "mfu": math.inf, "loss_per_cell": {"c": math.nan}, "alerts": alerts}
    )
    assert record.dump() == {"step": 3, "loss": None, "mfu": None, "loss_per_cell": {"c": None}, "alerts": alerts}
    json.dumps(record.dump(), allow_nan=False)  # strict JSON: what a browser's JSON.parse reads
    with pytest.raises(ValueError, match="data_wait_fractoin"):
        MetricsRecord.model_validate({"step": 3, "data_wait_fractoin": 0.1})
    with pytest.raises(ValueError, match="tokens"):
        MetricsRecord.model_validate({"step": 3, "tokens": "256"})


def test_the_charted_scalars_come_from_the_record():
    assert {"loss", "data_wait_fraction", "mfu", "tokens", "memory_rss_bytes"} <= set(SCALARS)
    assert not {"step", "phase", "time", "alerts", "loss_per_cell"} & set(SCALARS)
    assert set(SCALARS) <= set(MetricsRecord.model_fields)


def test_a_run_json_written_before_a_field_existed_still_reads(tmp_path):
    write_artifact(tmp_path / "run.json", "millrace.run", 1, {"run": "old", "status": "completed", "total_steps": 4})
    assert read_run(tmp_path) == RunRecord(run="old", status="completed", total_steps=4)
    write_artifact(tmp_path / "run.json", "millrace.run", 1, {"run": "old", "total_steps": "4"})
    with pytest.raises(ArtifactError, match=r"run.json: not a valid millrace.run artifact: field 'total_steps'"):
        read_run(tmp_path)
    write_artifact(tmp_path / "run.json", "millrace.run", 1, {"run": "old", "status": "done"})  # no trainer wrote it
    with pytest.raises(ArtifactError, match=r"run.json: not a valid millrace.run artifact: field 'status'"):
        read_run(tmp_path)
    write_run(tmp_path, RunRecord(run="new", status="running", flops_per_token=math.nan))
    assert read_run(tmp_path).dump() == {"run": "new", "status": "running", "flops_per_token": None}


def test_a_status_change_rewrites_only_the_status(tmp_path):
    record = RunRecord(run="r", status="running", store=RunStore(name="s", version="v1"), total_steps=4)
    write_run(tmp_path, record)
    write_run(tmp_path, read_run(tmp_path).model_copy(update={"status": "interrupted"}))
    assert read_run(tmp_path).dump() == record.dump() | {"status": "interrupted"}


def test_run_json_records_the_config_as_dumped_and_reads_it_into_its_model(tmp_path):
    """The writer's record of a config is the file's config as `model_dump` writes it, every default included
    (run.json's bytes as before the record was typed); read back, it is the typed config."""
    config = load_train_config("tiny")
    write_run(tmp_path, RunRecord(run="r", config=RecordedTrainConfig.of(config, "tiny.toml")))
    written = read_envelope(tmp_path / "run.json", "millrace.run").payload["config"]
    assert canonical_json(written) == canonical_json({"path": "tiny.toml", **config.model_dump(mode="json")})
    recorded = read_run(tmp_path).config
    assert recorded is not None and recorded.path == "tiny.toml" and recorded.schedule == config.schedule
    assert recorded.optimizer.betas == config.optimizer.betas  # a tuple, read from a JSON list
    assert recorded.settings()["schedule.warmup_steps"] == config.schedule.warmup_steps
    assert recorded.settings()["health.timing.mfu.end_after"] == config.health.timing["mfu"].end_after


OLD_CONFIG = {  # what earlier trainers recorded: fewer sections, and settings renamed since
    "path": "old.toml",
    "schedule": {"kind": "wsd", "warmup_steps": 3},
    "health": {"grad_norm_max": 2.0, "load_window_tokens": 65536},  # 2026-12-02 to 12-07
    "plan": {"gpus": 8, "expert_parallel": 64},  # 2026-11-30
}


def test_a_config_an_earlier_trainer_recorded_reads_and_is_rewritten_unchanged(tmp_path):
    write_artifact(tmp_path / "run.json", "millrace.run", 1, {"run": "old", "config": OLD_CONFIG})
    run = read_run(tmp_path)
    assert run.config is not None and run.config.schedule.kind == "wsd" and run.config.schedule.decay_fraction == 0.2
    assert run.config.health.load_window_tokens == 65536 and run.config.plan.expert_parallel == 64
    assert "load_entropy_min" not in run.config.health.model_fields_set  # not recorded: no default claimed
    assert run.config.settings() == {
        "health.grad_norm_max": 2.0,
        "health.load_window_tokens": 65536,
        "path": "old.toml",
        "plan.expert_parallel": 64,
        "plan.gpus": 8,
        "schedule.kind": "wsd",
        "schedule.warmup_steps": 3,
    }
    write_run(tmp_path, run.model_copy(update={"status": "stopped"}))  # a status change, a tag: the config stays
    assert read_envelope(tmp_path / "run.json", "millrace.run").payload["config"] == OLD_CONFIG
    write_artifact(tmp_path / "run.json", "millrace.run", 1, {"run": "older"})
    assert read_run(tmp_path).config is None


RECORDED = sorted((Path(__file__).parents[2] / "testkit" / "data" / "run-configs").glob("*.json"))


@pytest.mark.parametrize("recorded", RECORDED, ids=lambda path: path.stem)
def test_the_config_every_earlier_trainer_recorded_reads_typed_and_is_rewritten_byte_for_byte(tmp_path, recorded):
    """run.json's `config` as the trainer of a past commit wrote it for trainer/configs/tiny.toml (the file's
    name: the commit and its date; made by that commit's `TrainConfig(...).model_dump(mode="json")`)."""
    config = json.loads(recorded.read_text())
    write_artifact(tmp_path / "run.json", "millrace.run", 1, {"run": "old", "config": config})
    before = (tmp_path / "run.json").read_bytes()
    run = read_run(tmp_path)
    assert run.config is not None and run.config.model.d_model == config["model"]["d_model"]
    assert set(run.config.settings()) == set(_dotted(config))
    write_run(tmp_path, run)
    assert (tmp_path / "run.json").read_bytes() == before


def _dotted(value, prefix=""):
    if not isinstance(value, dict):
        return {prefix.rstrip("."): value}
    return {key: inner for name in value for key, inner in _dotted(value[name], f"{prefix}{name}.").items()}


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"schedule": {"warmup_steps": "ten"}}, "config.schedule.warmup_steps"),
        ({"schedule": {"kind": "linear"}}, "config.schedule.kind"),
        ({"health": {"load_window": 3}}, "config.health.load_window"),
        ({"optimizer": {"betas": [0.9]}}, "config.optimizer.betas"),
        ({"model": "tiny"}, "config.model"),
        ([], "config"),
    ],
)
def test_a_bad_config_section_is_one_line_naming_the_file_and_field(tmp_path, config, field):
    write_artifact(tmp_path / "run.json", "millrace.run", 1, {"run": "bad", "config": config})
    with pytest.raises(ArtifactError) as error:
        read_run(tmp_path)
    message = str(error.value)
    assert "\n" not in message and str(tmp_path / "run.json") in message and f"field '{field}" in message


def test_streams_of_another_schema_or_a_broken_field_are_errors_naming_file_and_line(tmp_path):
    good = {"schema": EVAL_SCHEMA, "step": 5, "tokens": 640, "loss": {"macro": 3.1, "cell": {"c00q0": 3.1}}}
    EvalRecord.model_validate(good)
    (tmp_path / "eval.jsonl").write_text(json.dumps(good) + "\n" + '{"schema": "millrace.eval/1", "st')
    assert [r.step for r in read_eval(tmp_path)] == [5]  # the torn last line waits
    broken = {**good, "step": 6, "loss": {"macro": "low"}}
    (tmp_path / "eval.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(broken) + "\n")
    with pytest.raises(ArtifactError, match=r"eval.jsonl:2: field 'loss.macro'"):
        read_eval(tmp_path)
    sample = SampleRecord(schema="millrace.samples/1", step=2, prompt_id="p00", completion="…", mean_logprob=-1.5)
    (tmp_path / "samples.jsonl").write_text(
        json.dumps(sample.dump(), ensure_ascii=False) + "\n" + json.dumps({**good, "step": 3}) + "\n"
    )
    with pytest.raises(ArtifactError, match=r"samples.jsonl:2: schema 'millrace.eval/1', expected 'millrace.samples"):
        read_samples(tmp_path)


def test_a_ladder_record_keeps_its_fields_and_refuses_a_mistyped_result():
    result = {"rung": "d8", "revision": "r", "run": "x", "seed": 0, "batch": 4, "curve": []}
    plan = {"ladder": "l", "file": "l.toml", "mixture": "m", "revision": "r", "seq_len": 32, "rungs": []}
    body = {"ladder": "l", "plan": plan, "results": [result], "fits": {}, "comparison": None}
    assert LadderRecord.model_validate(body).dump() == body
    with pytest.raises(ValueError, match=r"results\.0\.seed"):
        LadderRecord.model_validate({**body, "results": [{**body["results"][0], "seed": "0"}]})
