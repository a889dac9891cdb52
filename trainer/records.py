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
import logging
from pathlib import Path
from typing import Annotated, Final, Literal, TypeVar, cast

import pydantic
from pydantic import JsonValue

from millrace.artifacts import read_artifact, write_artifact
from millrace.config import StrictModel
from millrace.errors import ArtifactError, first_validation_error
from millrace.jsonl import Check, Parse, Repaired, has_step, last_parsed, model_lines, parse_stream
from millrace.names import artifact_name
from millrace.writer_lock import holder_state
from mixtures.manifest import LineageRange
from trainer.config import HealthConfig, PlanConfig, TrainConfig

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
log = logging.getLogger(__name__)
EVAL_GROUPS = ("cell", "domain", "bucket", "source", "set")  # the groups an evaluation reports loss and bpb over


Number = float | None  # a non-finite figure (a diverged loss) is kept as it is and written as null


class Charted:
    """Marks a `MetricsRecord` scalar that the training page draws and TensorBoard gets."""


Scalar = Annotated[float | None, Charted()]


class Record(StrictModel):
    """A trainer record: an artifact, so strict (`millrace.config.StrictModel`'s rule) where a writer constructs
    it too; dumped as written. A figure may be NaN or infinite (a diverged run's loss is a fact to record, not
    a bad input): JSON has no such number, so it is written as null. No Python validator runs per field, so
    that a page reads a 100,000-line stream at pydantic-core's speed."""

    model_config = pydantic.ConfigDict(strict=True, allow_inf_nan=True, ser_json_inf_nan="null")

    def dump(self) -> dict[str, JsonValue]:
        """The record as it goes on disk: the fields its writer set (a field left unset is not written), a
        non-finite figure as null."""
        return cast(dict[str, JsonValue], json.loads(self.line()))

    def line(self) -> str:
        """`dump` as one line of compact JSON (a stream's line)."""
        return self.model_dump_json(by_alias=True, exclude_unset=True)


R = TypeVar("R", bound=Record)
M = TypeVar("M", bound="MetricsRecord")


# ---- run.json

RunStatus = Literal["running", "completed", "stopped", "interrupted", "failed"]  # what the trainer writes
ObservedStatus = Literal["running", "completed", "stopped", "interrupted", "failed", "stale"]  # and what is seen
FINISHED: frozenset[ObservedStatus] = frozenset({"completed", "stopped", "interrupted", "failed", "stale"})


class TrainedRange(LineageRange):
    """The steps [start_step, stop_step) a run trained on one revision: a lineage's range (the revision, its
    steps, the manifest it pinned) and the run that trained them (a run started from another's checkpoint
    keeps that run's ranges)."""

    run: str | None = None


class RunStore(Record):
    """The store version a run trained on."""

    name: str
    version: str


class ConfigChange(Record):
    """A setting changed on resume with --allow-config-change (`trainer.resume.check_settings`)."""

    field: str
    checkpoint: JsonValue = None
    now: JsonValue = None
    step: int | None = None


class RecordedHealthConfig(HealthConfig):
    """`[health]` as a run recorded it: today's settings, and those an earlier version recorded in their place,
    kept so that such a run still reads and is rewritten (a status, a tag) without losing them. Only the
    settings a version wrote are here: any other unknown one is refused, like a misspelt setting."""

    load_window_tokens: int | None = (
        None  # 2026-12-02 to 12-07: the load entropy's window in tokens (`load_window_steps`)
    )
    router_entropy_min: float | None = None  # 2026-12-01: the routing-entropy floor (`load_entropy_min`)


class RecordedPlanConfig(PlanConfig):
    """`[plan]` as a run recorded it, with the field an earlier version recorded (see `RecordedHealthConfig`)."""

    expert_parallel: int | None = None  # to 2026-12-01: the expert-parallel size (`[parallel] expert_parallel`)


class RecordedTrainConfig(TrainConfig):
    """run.json's `config`: the `trainer.config.TrainConfig` a run trained with, as dumped, and its file's `path`.
    Read as recorded: a section or field an earlier version did not write is left unset (`settings` lists what
    the file holds), and a bad value is refused in one line naming the field (`config.schedule.kind`)."""

    path: str | None = None
    health: RecordedHealthConfig = RecordedHealthConfig()
    plan: RecordedPlanConfig = RecordedPlanConfig()

    @classmethod
    def of(cls, config: TrainConfig, path: Path | str) -> RecordedTrainConfig:
        """`config` as run.json records it: every field, defaults included, as `model_dump` writes them."""
        return cls.model_validate({"path": str(path), **config.model_dump()})

    def settings(self) -> dict[str, JsonValue]:
        """Each recorded setting by its dotted name (`schedule.kind`), in run.json's order (sorted): what the
        run page lists and a comparison of runs diffs. A table's entries are settings of their own
        (`health.timing.mfu.end_after`); a list is one value."""
        return _dotted(cast(JsonValue, self.model_dump(mode="json", exclude_unset=True)))


def _dotted(value: JsonValue, prefix: str = "") -> dict[str, JsonValue]:
    """A JSON value's leaves by dotted path, tables' keys sorted (as run.json writes them)."""
    if not isinstance(value, dict):
        return {prefix.rstrip("."): value}
    rows: dict[str, JsonValue] = {}
    for key in sorted(value):
        rows.update(_dotted(value[key], f"{prefix}{key}."))
    return rows


class RunRecord(Record):
    """run.json (kind millrace.run): what runs, on what data, at what size; `status` changes as it goes."""

    run: str | None = None
    config: RecordedTrainConfig | None = None  # None: a run.json written without one
    mixture: str | None = None
    revision: str | None = None
    manifest_hash: str | None = None
    manifest_path: str | None = None
    revisions: list[TrainedRange] = pydantic.Field(default_factory=list)  # what this run trained, in step order
    lineage: list[LineageRange] = pydantic.Field(default_factory=list)  # its manifest's lineage, as built
    store: RunStore | None = None
    planned_tokens_per_cell: dict[str, int] = pydantic.Field(default_factory=dict)
    total_steps: int | None = None
    stop_step: int | None = None
    start_step: int | None = None
    status: RunStatus | None = None
    world_size: int | None = None
    layout: dict[str, int] = pydantic.Field(default_factory=dict)
    params: dict[str, int] = pydantic.Field(default_factory=dict)
    flops_per_token: Number = None
    peak_flops_per_device: Number = None
    peak_flops_source: str | None = None
    config_changes: list[ConfigChange] = pydantic.Field(
        default_factory=list
    )  # settings changed on resume with --allow-config-change
    tags: list[str] = pydantic.Field(default_factory=list)  # `train --tag`, `runs tag`: words to find a run by
    notes: str = ""  # `train --note`, `runs note`: what the run is for, in a person's words


class RunLabels(Record):
    """`train --tag/--note`: tags added to those run.json holds, notes replacing its notes when given."""

    tags: list[str] = pydantic.Field(default_factory=list)
    notes: str | None = None

    def applied(self, before: RunRecord | None) -> tuple[list[str], str]:
        """The tags and notes run.json holds once these are applied to what it held `before`."""
        tags = list(dict.fromkeys([*(before.tags if before else []), *self.tags]))
        notes = self.notes.strip() if self.notes is not None else (before.notes if before else "")
        return tags, notes


def write_run(run_dir: Path, record: RunRecord) -> str:
    """Write run.json (atomically, with its envelope)."""
    return write_artifact(Path(run_dir) / RUN_FILE, RUN_KIND, RUN_SCHEMA_VERSION, record.dump())


def read_run(run_dir: Path) -> RunRecord:
    """run.json (envelope checked and stripped) as its `RunRecord`; the names in it that become paths (the
    run's, its store's) are checked like names on the command line."""
    path = Path(run_dir) / RUN_FILE
    record = read_artifact(path, RUN_KIND, RunRecord, (RUN_SCHEMA_VERSION,))
    if record.run is not None:
        artifact_name(record.run, "run", path)
    if record.store is not None:
        artifact_name(record.store.name, "store.name", path)
        artifact_name(record.store.version, "store.version", path)
    return record


def observed_run_status(run_dir: Path, run: RunRecord) -> ObservedStatus | None:
    """run.json's status, `stale` where it says `running` and its writer is gone (killed without a word)."""
    if run.status == "running" and holder_state(Path(run_dir) / LOCK_FILE) == "gone":
        return "stale"
    return run.status


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
    started: list[AlertEvent] = pydantic.Field(default_factory=list)
    ended: list[str] = pydantic.Field(default_factory=list)
    active: list[str] = pydantic.Field(default_factory=list)  # the alerts active after this step
    # each firing active alert's value at this step (its start value is in `started`)
    values: dict[str, Number] = pydantic.Field(default_factory=dict)


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
    param_norm_per_group: dict[str, Number] = pydantic.Field(
        default_factory=dict
    )  # `trainer.param_groups`: which group moved (`train explain`)
    router_bias: list[RouterBias] = pydantic.Field(default_factory=list)
    expert_load: list[ExpertLoad] = pydantic.Field(default_factory=list)
    loss_per_cell: dict[str, Number] = pydantic.Field(default_factory=dict)
    loss_per_source: dict[str, Number] = pydantic.Field(default_factory=dict)
    realised_tokens_per_cell: dict[str, int] = pydantic.Field(default_factory=dict)
    step_seconds: Scalar = None
    aux_loss: Scalar = None
    z_loss: Scalar = None
    skipped: bool | None = None
    skipped_steps: int | None = None
    memory_rss_bytes: Annotated[int | None, Charted()] = None
    cuda_allocated_bytes: Annotated[int | None, Charted()] = None
    cuda_reserved_bytes: Annotated[int | None, Charted()] = None
    alerts: Alerts | None = None


def charted(model: type[MetricsRecord]) -> tuple[str, ...]:
    """The fields of a metrics record marked `Charted`, in order."""
    return tuple(
        name for name, info in model.model_fields.items() if any(isinstance(mark, Charted) for mark in info.metadata)
    )


SCALARS = charted(MetricsRecord)


def alerts_problem(alerts: object) -> str | None:
    """What is wrong with a metrics record's `alerts` (a hand-edited or foreign record), or None."""
    if alerts is None:
        return None
    if not isinstance(alerts, dict):
        return "'alerts' is not an object"
    for key in ("started", "ended", "active"):
        if not isinstance(alerts.get(key, []), list):
            return f"'alerts.{key}' is not a list"
    if not all(_valid(AlertEvent, a) for a in alerts.get("started", [])):
        return "an 'alerts.started' entry is not an object with a 'name'"
    if not all(isinstance(n, str) for key in ("ended", "active") for n in alerts.get(key, [])):
        return "'alerts.ended' or 'alerts.active' holds something other than a name"
    if not isinstance(alerts.get("values", {}), dict):
        return "'alerts.values' is not an object"
    return None


def _valid(model: type[Record], value: object) -> bool:
    try:
        model.model_validate_json(json.dumps(value))
    except (pydantic.ValidationError, TypeError, ValueError):
        return False
    return True


def _repaired_alerts(alerts: object) -> dict[str, object] | None:
    """The well-formed part of a malformed `alerts`: its started entries that are alert events, its names that
    are names (so an alert still active stays active); None where it is not an object."""
    if not isinstance(alerts, dict):
        return None
    kept: dict[str, object] = {}
    if isinstance(alerts.get("started"), list):
        kept["started"] = [a for a in alerts["started"] if _valid(AlertEvent, a)]
    for key in ("ended", "active"):
        if isinstance(alerts.get(key), list):
            kept[key] = [n for n in alerts[key] if isinstance(n, str)]
    if isinstance(alerts.get("values"), dict):
        kept["values"] = {k: v for k, v in alerts["values"].items() if _valid(Alerts, {"values": {k: v}})}
    return kept


def metrics_lines(model: type[M]) -> Parse[M]:
    """`millrace.jsonl.model_lines` for metrics.jsonl: a record whose only fault is in its `alerts` (a hand or a
    foreign tool spoiled them) keeps its figures, so that the page still draws the step: the malformed alerts
    are dropped (`Repaired`: a warning naming file and line). Any other fault is the line's."""
    parse = model_lines(model)

    def repaired(line: bytes) -> tuple[M, str | None]:
        record, problem = parse(line)
        if problem is None or not isinstance(record, dict) or "alerts" not in record:
            return record, problem
        why = alerts_problem(record["alerts"])
        fixed = {**record, "alerts": _repaired_alerts(record["alerts"])}
        if why is None:
            return record, problem
        try:
            kept = model.model_validate_json(json.dumps(fixed))
        except pydantic.ValidationError:
            return record, problem  # more is wrong than the alerts: the line is skipped
        return kept, Repaired(f"skipped a malformed alert record ({why})")

    return repaired


# ---- eval.jsonl


class EvalFigures(Record):
    """Loss (nats per token) or bits per byte: averages over cells and one figure per name in each group."""

    macro: Number = None  # unweighted mean over cells with held-out data
    micro: Number = None  # token-weighted mean over all their tokens
    cell: dict[str, Number] = pydantic.Field(default_factory=dict)
    domain: dict[str, Number] = pydantic.Field(default_factory=dict)
    bucket: dict[str, Number] = pydantic.Field(default_factory=dict)
    source: dict[str, Number] = pydantic.Field(default_factory=dict)
    set: dict[str, Number] = pydantic.Field(default_factory=dict)  # external evaluation sets (in neither average)


class EvalRecord(Record):
    """One evaluation of eval.jsonl (schema millrace.eval/1)."""

    schema_name: Literal["millrace.eval/1"] = pydantic.Field(alias="schema")
    step: int
    tokens: int | None = None
    seconds: Number = None
    loss: EvalFigures = pydantic.Field(default_factory=EvalFigures)
    bpb: EvalFigures = pydantic.Field(default_factory=EvalFigures)
    sequences: dict[str, dict[str, int]] = pydantic.Field(default_factory=dict)
    # trained cells with no held-out data: in neither average
    without_held_out: list[str] = pydantic.Field(default_factory=list)


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


class CurvePoint(Record):
    """One evaluation on a rung's held-out curve (its macro averages)."""

    step: int
    tokens: int | None = None
    loss: Number = None
    bpb: Number = None


class RungResult(Record):
    """One trained rung (and seed) of a ladder, with its final held-out evaluation and the curve to it."""

    rung: str
    revision: str
    seed: int | None = None
    run: str
    status: RunStatus | None = None
    flops: Number = None
    tokens: int | None = None
    steps: int | None = None
    batch: int | None = None
    seconds: Number = None
    final: EvalRecord | None = None  # the run's last eval.jsonl line, as written
    final_digest: str | None = None  # its sha256 when the rung finished (older ladders: absent)
    curve: list[CurvePoint] = pydantic.Field(default_factory=list)


class RungParams(Record):
    total: int
    active: int  # without embedding and output layers


class PlannedRung(Record):
    """One rung of a ladder's plan (`trainer.ladder.plan.RungPlan`): its shape, budget and learning rate."""

    name: str
    d_model: int
    layers: int
    params: RungParams
    tokens: int
    steps: int
    batch: int
    lr: float
    flops: float
    seconds_here: Number = None
    raised_from: int | None = None  # the rule's tokens, when too few for the store's cells


class LadderPlanRecord(Record):
    """A ladder's plan as ladder.json keeps it (`trainer.ladder.plan.LadderPlan.record`)."""

    ladder: str
    file: str
    mixture: str
    revision: str
    seq_len: int
    store: str | None = None  # "name/version" the rungs were checked against
    rungs: list[PlannedRung] = pydantic.Field(default_factory=list)
    target: PlannedRung | None = None


class LadderRecord(Record):
    """ladder.json (kind millrace.ladder): the plan, the rung results, the fits and a comparison."""

    ladder: str
    file: str | None = None
    metric: str | None = None
    asymptote: Number = None
    plan: LadderPlanRecord
    results: list[RungResult] = pydantic.Field(default_factory=list)
    fits: dict[str, dict[str, JsonValue]] = pydantic.Field(
        default_factory=dict
    )  # per revision, as `ladder fit --json`
    comparison: dict[str, JsonValue] | None = None  # as `ladder compare --json`


# ---- reading


def schema_check(schema: str) -> Check:
    """A stream of one schema: a line of another schema is named as such before any field is checked."""

    def problem(record: object) -> str | None:
        found = record.get("schema") if isinstance(record, dict) else type(record).__name__
        return f"schema {found!r}, expected {schema!r}" if found != schema else has_step(record)

    return problem


def typed_records(
    path: Path, model: type[R], check: Check = has_step, on_bad: Literal["raise", "skip"] = "raise"
) -> list[R]:
    """Every complete record of the stream at `path` as its `model`, by `millrace.jsonl`'s rule (a torn last
    line waits for the next read); a line that breaks the model raises, or with `on_bad="skip"` is left out
    with a warning naming the file and line."""
    return parse_stream(path, model_lines(model, check), on_bad).records


def read_metrics(run_dir: Path | str) -> list[MetricsRecord]:
    """Every complete metrics record of a run, oldest first (a torn last line is left for the next read).

    A record a hand or a foreign tool spoiled is left out with a warning naming file and line, so that a page
    still draws the rest of the run (where only its alerts are spoiled, only they are: `metrics_lines`)."""
    return parse_stream(Path(run_dir) / METRICS_FILE, metrics_lines(MetricsRecord), on_bad="skip").records


def last_metrics(run_dir: Path | str) -> MetricsRecord | None:
    """The last complete metrics record, read from the file's end (a long run's stream is never read whole)."""
    return last_parsed(Path(run_dir) / METRICS_FILE, metrics_lines(MetricsRecord))


def read_eval(run_dir: Path | str) -> list[EvalRecord]:
    """Every evaluation record of a run, oldest first (what the scaling ladder fits on).

    A torn last line (a run killed mid-write) is skipped; a record of another schema is an error
    naming the file and line (`millrace.jsonl`)."""
    return typed_records(Path(run_dir) / EVAL_FILE, EvalRecord, schema_check(EVAL_SCHEMA))


def read_samples(run_dir: Path | str) -> list[SampleRecord]:
    """Every completion of a run, oldest first (a record of another schema is an error naming file and line)."""
    return typed_records(Path(run_dir) / SAMPLES_FILE, SampleRecord, schema_check(SAMPLES_SCHEMA))


def read_ladder_file(path: Path) -> LadderRecord:
    """ladder.json (envelope checked and stripped) as its `LadderRecord`."""
    return read_artifact(path, LADDER_KIND, LadderRecord, (LADDER_SCHEMA_VERSION,))


def write_ladder_file(path: Path, record: LadderRecord) -> str:
    """Write ladder.json (atomically, with its envelope)."""
    return write_artifact(path, LADDER_KIND, LADDER_SCHEMA_VERSION, record.dump())


# ---- explain.json


EXPLANATIONS_FILE = "explain.json"  # `train explain` for a run's notable steps, written when a training call ends


class Explanations(Record):
    """explain.json: `train explain --json` for each of the run's notable steps, by step (a string, as JSON keys
    are); each explanation is passed through to the run's page as `train explain` found it."""

    run: str | None = None
    steps: list[int] = []
    explained: dict[str, dict[str, JsonValue]]


def read_explanations(run_dir: Path | str) -> Explanations:
    """The run's explained steps (`trainer.explain.write_explanations`); none when they were never written."""
    path = Path(run_dir) / EXPLANATIONS_FILE
    if not path.exists():
        return Explanations(explained={})
    try:
        return Explanations.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise ArtifactError(f"{path}: not a JSON explanation file ({exc})") from None
    except pydantic.ValidationError as exc:
        raise ArtifactError(f"{path}: not an explanation file: {first_validation_error(exc)}") from None
