"""What the trainer leaves for other rooms to read, typed: run.json, metrics.jsonl, eval.jsonl, samples.jsonl and
ladder.json. Torch-free: the reports and the ladder's fit import it without paying for torch.

The trainer's writers construct these records and the readers (`train status`, the ladder, `reports/`) check what
they read with them, so a field is named once, here. The models carry the field names already on disk; every field
a record gained after its first run is optional, so old runs still read. A non-finite number is written as null
(JSON has no NaN). Streams follow `millrace.jsonl` (one rule for a torn last line); run.json and ladder.json are
artifacts (`millrace.artifacts`: kind, schema version, content hash).

Adding a metric: a field on `MetricsRecord` (marked `Charted` to draw it on the training page), set where
`trainer/loop.py` builds the record.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import pydantic

from millrace.artifacts import read_payload, validated, write_artifact
from millrace.config import StrictModel
from millrace.errors import ArtifactError, first_validation_error
from millrace.jsonl import Check, has_step, last_record, read_stream
from millrace.writer_lock import observed_status

RUN_FILE = "run.json"
RUN_KIND = "millrace.run"
RUN_SCHEMA_VERSION = 1
METRICS_FILE = "metrics.jsonl"
EVAL_FILE = "eval.jsonl"
EVAL_SCHEMA: Final = "millrace.eval/1"
SAMPLES_FILE = "samples.jsonl"
SAMPLES_SCHEMA: Final = "millrace.samples/1"
LOCK_FILE = "writer.lock"  # held by a run's (or a ladder's) writer (`millrace.writer_lock`); its mtime: the heartbeat
LADDER_FILE = "ladder.json"
LADDER_KIND = "millrace.ladder"
LADDER_SCHEMA_VERSION = 1
EVAL_GROUPS = ("cell", "domain", "bucket", "source", "set")  # the groups an evaluation reports loss and bpb over


def _finite_or_none(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


Number = Annotated[float | None, pydantic.BeforeValidator(_finite_or_none)]  # NaN and inf are written as null


class Charted:
    """Marks a `MetricsRecord` scalar that the training page draws and TensorBoard gets."""


Scalar = Annotated[float | None, pydantic.BeforeValidator(_finite_or_none), Charted()]


class Record(StrictModel):
    """A trainer record: an artifact, so strict (`millrace.config.StrictModel`'s rule) where a writer constructs
    it too; dumped as written."""

    model_config = pydantic.ConfigDict(strict=True)

    def dump(self) -> dict[str, Any]:
        """The record as it goes on disk: the fields its writer set (a field left unset is not written)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


# ---- run.json


class RevisionRange(Record):
    revision: str
    manifest_hash: str
    start_step: int
    stop_step: int
    run: str | None = None


class RunRecord(Record):
    """run.json (kind millrace.run): what runs, on what data, at what size; `status` changes as it goes."""

    run: str | None = None
    config: dict[str, Any] = {}
    mixture: str | None = None
    revision: str | None = None
    manifest_hash: str | None = None
    manifest_path: str | None = None
    revisions: list[RevisionRange] = []
    lineage: list[dict[str, Any]] = []
    store: dict[str, Any] = {}
    planned_tokens_per_cell: dict[str, int] = {}
    total_steps: int | None = None
    stop_step: int | None = None
    start_step: int | None = None
    status: str | None = None
    world_size: int | None = None
    layout: dict[str, int] = {}
    params: dict[str, Any] = {}
    flops_per_token: Number = None
    peak_flops_per_device: Number = None
    peak_flops_source: str | None = None
    config_changes: list[dict[str, Any]] = []  # settings changed on resume with --allow-config-change


def write_run(run_dir: Path, record: RunRecord | dict[str, Any]) -> str:
    """Write run.json (atomically, with its envelope); a dict is checked as a `RunRecord` first."""
    if not isinstance(record, RunRecord):
        record = validated(RunRecord, record, str(Path(run_dir) / RUN_FILE))
    return write_artifact(Path(run_dir) / RUN_FILE, RUN_KIND, RUN_SCHEMA_VERSION, record.dump())


def read_run(run_dir: Path) -> dict[str, Any]:
    """run.json's payload (envelope checked and stripped), checked against `RunRecord`."""
    path = Path(run_dir) / RUN_FILE
    payload = read_payload(path, RUN_KIND, (RUN_SCHEMA_VERSION,))
    validated(RunRecord, payload, str(path))
    return payload


def observed_run_status(run_dir: Path, run: dict[str, Any]) -> str | None:
    """run.json's status, `stale` where it says `running` and its writer is gone (killed without a word)."""
    return observed_status(run.get("status"), Path(run_dir) / LOCK_FILE)


def run_record(run_dir: Path) -> RunRecord:
    path = Path(run_dir) / RUN_FILE
    return validated(RunRecord, read_payload(path, RUN_KIND, (RUN_SCHEMA_VERSION,)), str(path))


# ---- metrics.jsonl


class ExpertLoad(Record):
    layer: int
    load: list[Number]  # fraction of routed token slots per expert
    max_violation: Number = None
    entropy: Number = None
    dead_experts: int | None = None
    router_entropy: Number = None
    window_entropy: Number = None  # the load entropy over the health rule's window of steps (what it alerts on)


class RouterBias(Record):
    layer: int
    norm: Number = None
    max_abs: Number = None


class AlertEvent(Record):
    """An alert that started at a step (`trainer.health`): the rule, its value and threshold, its streak."""

    name: str
    value: Number = None
    threshold: Number = None
    message: str = ""
    held_since: int | None = None


class Alerts(Record):
    started: list[AlertEvent] = []
    ended: list[str] = []
    active: list[str] = []  # the alerts active after this step
    values: dict[str, Number] = {}  # each active alert's value at this step (its start value is in `started`)


class MetricsRecord(Record):
    """One logged step of metrics.jsonl."""

    step: int
    time: Number = None
    phase: str | None = None  # the mixture phase the step drew from
    loss: Scalar = None
    lr: Scalar = None
    tokens: Annotated[int | None, Charted()] = None
    tokens_per_second: Scalar = None
    mfu: Scalar = None
    data_wait_fraction: Scalar = None  # share of the step spent waiting for the loader
    grad_norm: Scalar = None
    param_norm: Scalar = None
    param_norm_with_router_bias: Scalar = None
    param_norm_per_group: dict[str, Number] = {}  # `trainer.param_groups`: which group moved (`train explain`)
    router_bias: list[RouterBias] = []
    expert_load: list[ExpertLoad] = []
    loss_per_cell: dict[str, Number] = {}
    loss_per_source: dict[str, Number] = {}
    realised_tokens_per_cell: dict[str, int] = {}
    step_seconds: Scalar = None
    aux_loss: Scalar = None
    z_loss: Scalar = None
    skipped: bool | None = None
    skipped_steps: int | None = None
    memory_rss_bytes: Annotated[int | None, Charted()] = None
    cuda_allocated_bytes: Annotated[int | None, Charted()] = None
    cuda_reserved_bytes: Annotated[int | None, Charted()] = None
    alerts: Alerts | None = None


SCALARS = tuple(
    name
    for name, info in MetricsRecord.model_fields.items()
    if any(isinstance(mark, Charted) for mark in info.metadata)
)


# ---- eval.jsonl


class EvalFigures(Record):
    """Loss (nats per token) or bits per byte: averages over cells and one figure per name in each group."""

    macro: Number = None  # unweighted mean over cells with held-out data
    micro: Number = None  # token-weighted mean over all their tokens
    cell: dict[str, Number] = {}
    domain: dict[str, Number] = {}
    bucket: dict[str, Number] = {}
    source: dict[str, Number] = {}
    set: dict[str, Number] = {}  # external evaluation sets (in neither average)


class EvalRecord(Record):
    """One evaluation of eval.jsonl (schema millrace.eval/1)."""

    schema_name: Literal["millrace.eval/1"] = pydantic.Field(alias="schema")
    step: int
    tokens: int | None = None
    seconds: Number = None
    loss: EvalFigures = EvalFigures()
    bpb: EvalFigures = EvalFigures()
    sequences: dict[str, dict[str, int]] = {}
    without_held_out: list[str] = []  # trained cells with no held-out data: in neither average


# ---- samples.jsonl


class SampleRecord(Record):
    """One completion of samples.jsonl (schema millrace.samples/1): a fixed prompt at a temperature."""

    schema_name: Literal["millrace.samples/1"] = pydantic.Field(alias="schema")
    step: int
    prompt_id: str
    prompt: str = ""
    prompt_source: str | None = None  # where the prompt came from (absent in samples written before it was)
    temperature: Number = None
    seed: int | None = None
    completion: str = ""
    completion_tokens: int | None = None
    mean_logprob: Number = None


# ---- ladder.json


class RungResult(Record):
    """One trained rung (and seed) of a ladder, with its final held-out evaluation and the curve to it."""

    rung: str
    revision: str
    seed: int | None = None
    run: str
    status: str | None = None
    flops: Number = None
    tokens: int | None = None
    steps: int | None = None
    batch: int | None = None
    seconds: Number = None
    final: dict[str, Any] | None = None  # the run's last eval.jsonl line, as written
    final_digest: str | None = None  # its sha256 when the rung finished (older ladders: absent)
    curve: list[dict[str, Any]] = []


class LadderRecord(Record):
    """ladder.json (kind millrace.ladder): the plan, the rung results, the fits and a comparison."""

    ladder: str
    file: str | None = None
    metric: str | None = None
    asymptote: Number = None
    plan: dict[str, Any] = {}
    results: list[RungResult] = []
    fits: dict[str, dict[str, Any]] = {}
    comparison: dict[str, Any] | None = None


# ---- reading


def check_of(model: type[pydantic.BaseModel]) -> Check:
    """The `millrace.jsonl` check of a stream whose lines are `model` records."""

    def problem(record: Any) -> str | None:
        if found := has_step(record):
            return found
        try:
            model.model_validate(record)
        except pydantic.ValidationError as exc:
            return first_validation_error(exc)
        return None

    return problem


def check_schema(model: type[EvalRecord] | type[SampleRecord], schema: str) -> Check:
    """A stream of one schema: another schema is named as such before any field is checked."""
    fields = check_of(model)

    def problem(record: Any) -> str | None:
        found = record.get("schema") if isinstance(record, dict) else type(record).__name__
        return f"schema {found!r}, expected {schema!r}" if found != schema else fields(record)

    return problem


metrics_problem = check_of(MetricsRecord)
eval_problem = check_schema(EvalRecord, EVAL_SCHEMA)
samples_problem = check_schema(SampleRecord, SAMPLES_SCHEMA)


def read_metrics(run_dir: Path | str) -> list[dict[str, Any]]:
    """Every complete metrics record of a run, oldest first (a torn last line is left for the next read).

    Each line was a `MetricsRecord` when written; readers ask only for an integer step, so that a page still
    draws a run whose one record a hand or a foreign tool spoiled (`metrics_problem` checks the whole record)."""
    return read_stream(Path(run_dir) / METRICS_FILE).records


def last_metrics(run_dir: Path | str) -> dict[str, Any] | None:
    """The last complete metrics record, read from the file's end (a long run's stream is never read whole)."""
    return last_record(Path(run_dir) / METRICS_FILE)


def read_eval(run_dir: Path | str) -> list[dict[str, Any]]:
    """Every evaluation record of a run, oldest first (what the scaling ladder fits on).

    A torn last line (a run killed mid-write) is skipped; a record of another schema is an error
    naming the file and line (`millrace.jsonl`)."""
    return read_stream(Path(run_dir) / EVAL_FILE, eval_problem).records


def read_samples(run_dir: Path | str) -> list[dict[str, Any]]:
    return read_stream(Path(run_dir) / SAMPLES_FILE, samples_problem).records


def read_ladder_file(path: Path) -> dict[str, Any]:
    """ladder.json's payload (envelope checked and stripped), checked against `LadderRecord`."""
    payload = read_payload(path, LADDER_KIND, (LADDER_SCHEMA_VERSION,))
    validated(LadderRecord, payload, str(path))
    return payload


# ---- explain.json


EXPLANATIONS_FILE = "explain.json"  # `train explain` for a run's notable steps, written when a training call ends


def read_explanations(run_dir: Path | str) -> dict[str, Any]:
    """The run's explained steps (`trainer.explain.write_explanations`); none when they were never written."""
    path = Path(run_dir) / EXPLANATIONS_FILE
    if not path.exists():
        return {"steps": [], "explained": {}}
    try:
        payload = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path}: not a JSON explanation file ({exc})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("explained"), dict):
        raise ArtifactError(f"{path}: an explanation file needs an 'explained' object")
    return payload
