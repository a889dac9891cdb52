"""What a mixture search writes and reads, typed: the search spec (a TOML file a person writes) and the artifacts
under `$MILLRACE_HOME/searches/<name>/`. Torch-free: the search page in `reports/` reads it as a schema module.

    searches/<name>/
      plan.json         the swarm: components (cells keyed by content fingerprint), prior, branch point, proxies
      proxies.jsonl     one row per proxy, appended as it ends: its weights and EVERY per-set result of its last
                        evaluation
      fit.json          the surrogates' out-of-fold quality per eval set and for the target, stranded rows
      proposal.json     the proposed weights, predicted target with an interval, the revision file written
      validation.json   the proposal and the baselines at several seeds, measured differences with intervals
      writer.lock       the one writer (`millrace.writer_lock`): plan, run, fit, propose and validate take it

The .json files are artifacts (`millrace.artifacts`: kind, schema version, content hash, written atomically). A
proxy row keeps the whole of its run's last evaluation (loss and bits per byte per cell, domain, bucket, source and
external set, and the macro and micro averages), so a new target is refitted from the rows without training.
Weights are keyed by each component's content fingerprint (`trainer.search.fingerprint`), so evidence survives a
new store version or a re-bucketing wherever a cell's content is unchanged.

On disk each file names its components (name, fingerprint, cells) once and stores each weight as a float by
component index per phase (plan.json schema 2; proxies.jsonl's components line, again after a re-plan), not a
name and a fingerprint beside every weight. proxies.jsonl is a `millrace.jsonl` stream, appended one line per
finished proxy (`ProxyLog`), never rewritten whole: a torn last line (a kill) is left out and the last row per
proxy wins. In memory every weight names its component and fingerprint again
(`PhaseWeights`). The previous release's files (plan.json schema 1, proxies.json rewritten whole) are still read.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import pydantic

from millrace.artifacts import atomic_write_bytes, read_artifact, read_envelope, validated, write_artifact
from millrace.config import StrictModel, load_config
from millrace.errors import ArtifactError, ConfigError, first_validation_error
from millrace.jsonl import append_line, collector_paused, drop_torn_tail, parse_stream
from millrace.names import NAME_PATTERN
from trainer.records import EvalFigures, Number, Record

PLAN_FILE = "plan.json"
PROXIES_FILE = "proxies.jsonl"
LEGACY_PROXIES_FILE = "proxies.json"  # the previous release's table, rewritten whole: read, never written
FIT_FILE = "fit.json"
PROPOSAL_FILE = "proposal.json"
VALIDATION_FILE = "validation.json"
SEARCH_LOCK_FILE = "writer.lock"
PLAN_KIND = "millrace.search.plan"
PROXIES_KIND = "millrace.search.proxies"
FIT_KIND = "millrace.search.fit"
PROPOSAL_KIND = "millrace.search.proposal"
VALIDATION_KIND = "millrace.search.validation"
SCHEMA_VERSION = 1
PLAN_SCHEMA_VERSION = 2  # 2: weights packed by component index (1, each weight named, is still read)
PROXIES_SCHEMA_VERSION = 2  # proxies.jsonl; 1 was proxies.json
R = TypeVar("R", bound=Record)
TAIL = "tail"  # the component that merges the cells below `components.tail_tokens`


# ---- the search spec (TOML, written by a person)


class SearchBase(StrictModel):
    config: str = pydantic.Field(description="the train config (relative to the spec file, else a shipped one)")


class SearchMixture(StrictModel):
    mixture: str = pydantic.Field(pattern=NAME_PATTERN)
    revision: str = pydantic.Field(pattern=NAME_PATTERN, description="the baseline revision the proxies continue")


class BranchSpec(StrictModel):
    """The shared checkpoint: the baseline trained once to here, every proxy restores it."""

    fraction: float = pydantic.Field(0.1, gt=0, lt=1, description="share of the baseline's steps before the branch")
    at_step: int | None = pydantic.Field(None, ge=1, description="or an exact step (wins over fraction)")


class ProxySpec(StrictModel):
    tokens: int = pydantic.Field(gt=0, description="each proxy's budget after the branch point")
    count: int | None = pydantic.Field(None, gt=0, description="proxies; default per_component x components")
    per_component: float = pydantic.Field(2.0, gt=0, description="the swarm grows as O(components)")


class SamplingSpec(StrictModel):
    concentrations: list[float] = pydantic.Field([0.1, 0.3, 1.0, 3.0, 5.0], min_length=1)
    prior: Literal["baseline", "natural", "uniform"] = pydantic.Field(
        "baseline", description="the Dirichlet's centre: the baseline revision's weights, natural or uniform"
    )
    seed: int = pydantic.Field(0, ge=0)

    @pydantic.field_validator("concentrations")
    @classmethod
    def _positive(cls, value: list[float]) -> list[float]:
        if any(c <= 0 for c in value):
            raise ValueError(f"concentrations must be positive (got {value})")
        return value


class PhasesSpec(StrictModel):
    count: int = pydantic.Field(1, ge=1, le=2, description="1, or 2 (a main phase and a cooldown)")
    switch: float = pydantic.Field(0.8, gt=0, lt=1, description="share of the budget before the second phase")
    names: list[str] = pydantic.Field(["main", "cooldown"], min_length=1)


class ComponentsSpec(StrictModel):
    tail_tokens: int = pydantic.Field(0, ge=0, description="cells with fewer tokens merge into one 'tail'")


class TargetMetricSpec(StrictModel):
    """What the search minimises: macro held-out BPB over cells, one external set, or a weighted sum of metrics
    (`bpb.macro`, `bpb.set.NAME`, `bpb.cell.c00q0`, `loss.domain.c03` ...)."""

    kind: Literal["macro", "set", "weighted"] = "macro"
    set: str | None = None
    weights: dict[str, float] = {}

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> TargetMetricSpec:
        if self.kind == "set" and not self.set:
            raise ValueError("kind 'set' needs 'set', the external set's name")
        if self.kind == "weighted" and not self.weights:
            raise ValueError("kind 'weighted' needs 'weights', metric -> weight")
        if self.kind == "weighted" and any(w < 0 for w in self.weights.values()):
            raise ValueError("target weights must be non-negative")
        return self

    def terms(self) -> dict[str, float]:
        """The target as metric path -> weight (a path into a row's results, see `ProxyResults.metric`)."""
        if self.kind == "macro":
            return {"bpb.macro": 1.0}
        if self.kind == "set":
            return {f"bpb.set.{self.set}": 1.0}
        return dict(self.weights)


class ConstraintsSpec(StrictModel):
    epoch_cap: float = pydantic.Field(8.0, gt=0, description="per-cell epochs over the whole planned run")
    planned_tokens: float | None = pydantic.Field(
        None, gt=0, description="tokens of the whole run the proposal is for; default: the baseline revision's"
    )
    min_share: float = pydantic.Field(0.0, ge=0, lt=1)
    max_share: float = pydantic.Field(1.0, gt=0, le=1)
    max_distance: float | None = pydantic.Field(None, gt=0, description="closeness to the prior (total variation)")


class ValidationSpec(StrictModel):
    seeds: list[int] = pydantic.Field([1, 2, 3], min_length=3, description="at least 3 seeds per arm")
    baselines: list[Literal["natural", "current", "uniform"]] = ["natural", "current"]
    confidence: float = pydantic.Field(0.95, gt=0, lt=1)


class SearchEvalSpec(StrictModel):
    max_sequences: int = pydantic.Field(8, gt=0, description="held-out windows per cell at each proxy's end")


class SearchSpec(StrictModel):
    """The search file (`millrace mix search plan SPEC`)."""

    search: str = pydantic.Field(pattern=NAME_PATTERN)
    description: str = ""
    base: SearchBase
    mixture: SearchMixture
    branch: BranchSpec = BranchSpec()
    proxies: ProxySpec
    sampling: SamplingSpec = SamplingSpec()
    phases: PhasesSpec = PhasesSpec()
    components: ComponentsSpec = ComponentsSpec()
    target: TargetMetricSpec = TargetMetricSpec()
    constraints: ConstraintsSpec = ConstraintsSpec()
    validation: ValidationSpec = ValidationSpec()
    eval: SearchEvalSpec = SearchEvalSpec()
    reuse: list[Annotated[str, pydantic.Field(pattern=NAME_PATTERN)]] = pydantic.Field(
        [], description="earlier searches whose rows count where their cells' content is unchanged (Olmix reuse)"
    )
    # `trainer.fleet.FleetConfig`'s fields, validated by `trainer.search.spec.load_search` (reports import this
    # module, and it imports no fleet machinery)
    fleet: dict[str, pydantic.JsonValue] = pydantic.Field(
        {}, description="how proxies run: trainer.fleet.FleetConfig's fields"
    )

    @pydantic.model_validator(mode="after")
    def _phase_names(self) -> SearchSpec:
        if len(self.phases.names) < self.phases.count:
            raise ValueError(f"phases.names has {len(self.phases.names)} names for {self.phases.count} phases")
        if self.constraints.min_share >= self.constraints.max_share:
            raise ValueError("constraints.min_share must be below max_share")
        return self


def load_search_spec(path: Path | str) -> SearchSpec:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: search file not found")
    return load_config(path, SearchSpec)


# ---- shared pieces


class Component(Record):
    """One column of the search: a cell, or the merged tail; keyed by what it holds, not by its name."""

    name: str
    fingerprint: str
    cells: list[str]
    tokens: int


class ComponentWeight(Record):
    component: str
    fingerprint: str
    weight: float


class PhaseWeights(Record):
    phase: str
    weights: list[ComponentWeight]

    def by_fingerprint(self) -> dict[str, float]:
        return {w.fingerprint: w.weight for w in self.weights}


class StoreRef(Record):
    name: str
    version: str
    manifest_hash: str


# ---- plan.json


class BranchPoint(Record):
    run: str
    revision: str
    at_step: int
    total_steps: int
    flops: Number = None


class ProxyBudget(Record):
    tokens: int
    steps: int
    phase_steps: list[int]
    seq_len: int
    global_batch: int
    flops: Number = None


class EpochCheck(Record):
    """Whether the epoch caps allow the swarm (every proxy within the baseline's cap over its lineage) and the
    planned run (some mixture within `constraints.epoch_cap` over the whole run from the branch on)."""

    feasible: bool
    planned_feasible: bool = True
    worst_cell: str | None = None
    worst_epochs: Number = None
    epoch_cap: float
    note: str = ""


class ProxyName(Record):
    proxy: str
    run: str
    revision: str


class PlannedProxy(ProxyName):
    phases: list[PhaseWeights]


class PlanSampling(Record):
    """How the proxies' mixtures were drawn (`trainer.search.sampling.sample_mixtures`)."""

    distribution: str  # "dirichlet"
    centre: str  # the spec's `sampling.prior`
    concentrations: list[float]
    seed: int
    bounded_by: str


class PlanHead(Record):
    """What plan.json holds besides the weights (the same in memory and on disk)."""

    search: str
    spec_file: str
    # The search file as it was planned, kept for the record: a `SearchSpec` now would refuse one planned
    # before a change to the search file's options, so it is kept as the JSON it is.
    spec: dict[str, pydantic.JsonValue]
    store: StoreRef
    components: list[Component]
    sampling: PlanSampling | None = None  # None: a plan written without it
    branch: BranchPoint
    budget: ProxyBudget
    total_flops: Number = None
    epochs: EpochCheck


class SwarmPlan(PlanHead):
    prior: list[PhaseWeights]
    proxies: list[PlannedProxy]


# ---- proxies.jsonl


class ProxyResults(Record):
    """A run's last evaluation, whole: loss and bits per byte per cell, domain, bucket, source and external set."""

    step: int
    tokens: int | None = None
    loss: EvalFigures = EvalFigures()
    bpb: EvalFigures = EvalFigures()
    digest: str | None = None  # sha256 of the eval.jsonl line it was read from

    def metric(self, path: str) -> float | None:
        """`bpb.macro`, `bpb.set.NAME`, `loss.cell.c00q0` ...; None where the run has no such figure."""
        parts = path.split(".", 2)
        if len(parts) < 2 or parts[0] not in ("loss", "bpb"):
            return None
        figures = self.loss if parts[0] == "loss" else self.bpb
        if len(parts) == 2:
            value = getattr(figures, parts[1], None) if parts[1] in ("macro", "micro") else None
            return value if isinstance(value, float) else None
        group = getattr(figures, parts[1], None) if parts[1] in ("cell", "domain", "bucket", "source", "set") else None
        return group.get(parts[2]) if isinstance(group, dict) else None

    def metric_names(self) -> list[str]:
        """Every metric path this row can be fitted on."""
        names = []
        for kind, figures in (("loss", self.loss), ("bpb", self.bpb)):
            names += [f"{kind}.{avg}" for avg in ("macro", "micro") if getattr(figures, avg) is not None]
            for group in ("cell", "domain", "bucket", "source", "set"):
                names += [f"{kind}.{group}.{key}" for key, v in getattr(figures, group).items() if v is not None]
        return names


class RowHead(Record):
    """What a proxy row holds besides its weights (the same in memory and on disk)."""

    proxy: str
    run: str
    revision: str
    seed: int = 0
    store: StoreRef | None = None
    status: Literal["planned", "running", "done", "failed"] = "planned"
    error: str | None = None
    results: ProxyResults | None = None
    seconds: Number = None  # wall time of the run, start-up to last evaluation
    train_seconds: Number = None  # of which in training steps
    flops: Number = None


class ProxyRow(RowHead):
    phases: list[PhaseWeights]


class ProxyTable(Record):
    """The swarm's rows as read (one per proxy, the last written wins) and the components they are keyed by
    (the table's last components line; a row read back names each weight's component and fingerprint)."""

    search: str
    components: list[Component] = []
    rows: list[ProxyRow] = []


# ---- fit.json


class SetFit(Record):
    """One surrogate's out-of-fold quality on one metric."""

    metric: str
    kind: str
    folds: int
    rows: int
    spearman: Number = None
    rmse: Number = None
    regret_at_1: Number = None
    measured: list[float] = []
    oof_predictions: list[float] = []
    proxies: list[str] = []  # the rows' runs, in the order of `measured`


class FitReport(Record):
    search: str
    surrogate: str  # log-linear or lightgbm (not `kind`: that is the artifact envelope's)
    target: dict[str, float]
    components: list[Component]
    rows_used: list[str]
    rows_stranded: list[str] = []
    stranded_fingerprints: list[str] = []
    changed_components: list[str] = []  # components whose content no row has seen (reuse re-optimises them)
    target_fit: SetFit
    sets: list[SetFit] = []


# ---- proposal.json


class Provenance(Record):
    search: str
    plan_hash: str
    fit_hash: str
    surrogate: str
    rows: int
    target: dict[str, float]
    predicted: float
    interval: tuple[float, float]
    prior_predicted: Number = None


class ProposalConstraints(Record):
    """The constraints the proposal was optimised under (the spec's, and each phase's planned tokens)."""

    epoch_cap: float
    min_share: float
    max_share: float
    max_distance: float | None = None
    phase_tokens: list[int]


class ProposalRecord(Record):
    search: str
    mixture: str
    revision: str
    revision_file: str
    continues: str
    at_step: int
    phases: list[PhaseWeights]
    prior: list[PhaseWeights]
    cells: dict[str, dict[str, float]] = {}  # phase -> cell -> weight, as the revision file has it
    fixed: list[str] = []  # components kept at the prior (mixture reuse)
    constraints: ProposalConstraints | None = None  # None: a record written without them
    provenance: Provenance


# ---- validation.json


class ValidationRun(Record):
    arm: str
    revision: str
    seed: int
    run: str
    status: Literal["planned", "running", "done", "failed"] = "planned"
    results: ProxyResults | None = None


class Comparison(Record):
    metric: str
    against: str
    difference: float  # mean(proposal) - mean(against): negative is better
    low: float
    high: float
    distinguishable: bool
    n_a: int
    n_b: int
    verdict: str


class ValidationRecord(Record):
    search: str
    proposal: str
    seeds: list[int]
    confidence: float
    runs: list[ValidationRun] = []
    comparisons: list[Comparison] = []


# ---- on disk: each component once per file, each weight a float by component index


Packed = dict[str, list[float]]  # phase -> its weight of each component, in the file's components' order
PHASES = pydantic.TypeAdapter(list[PhaseWeights])


class PackedProxy(ProxyName):
    weights: Packed


class PlanFile(PlanHead):
    """plan.json as written (schema 2): the components once, the prior and every proxy's weights packed."""

    prior: Packed
    proxies: list[PackedProxy]


class PackedRow(RowHead):
    """A proxies.jsonl row: weights by index into the components line above it."""

    weights: Packed


class ComponentsLine(Record):
    """A proxies.jsonl line naming the components the rows after it are packed by (the first line, and again
    wherever a re-plan changed them)."""

    kind: Literal["millrace.search.proxies"]
    schema_version: Literal[2]
    search: str
    components: list[Component]


class LegacyRow(ProxyRow):
    cells: dict[str, list[str]] = {}  # the previous release kept each row's cell names; its components hold them


class LegacyTable(Record):
    """proxies.json as the previous release wrote it (schema 1, rewritten whole after each proxy): read, never
    written."""

    search: str
    rows: list[LegacyRow] = []


def pack(phases: list[PhaseWeights], index: dict[str, int], where: str) -> Packed:
    """Records keyed by fingerprint -> a list per phase by component index (a component a phase lacks is 0)."""
    out: Packed = {}
    for phase in phases:
        vector = [0.0] * len(index)
        for entry in phase.weights:
            at = index.get(entry.fingerprint)
            if at is None:
                raise ArtifactError(
                    f"{where}: component {entry.component!r} ({entry.fingerprint}) is not one of the file's components"
                )
            vector[at] = entry.weight
        out[phase.phase] = vector
    return out


def unpack(packed: Packed, components: list[Component], where: str) -> list[PhaseWeights]:
    """A packed row back as records naming each component and its fingerprint, built by one validation of the
    row's phases in pydantic-core (a model constructed in Python per weight cost most of a swarm's read)."""
    named = [(c.name, c.fingerprint) for c in components]
    phases = []
    for name, vector in packed.items():
        if len(vector) != len(components):
            raise ArtifactError(f"{where}: phase {name!r} has {len(vector)} weights for {len(components)} components")
        weights = [{"component": n, "fingerprint": f, "weight": w} for (n, f), w in zip(named, vector)]
        phases.append({"phase": name, "weights": weights})
    try:
        return PHASES.validate_python(phases)
    except pydantic.ValidationError as exc:
        raise ArtifactError(f"{where}: {first_validation_error(exc)}") from None


def set_fields(record: Record, head: type[Record]) -> dict[str, Any]:
    """The fields of `head` (a base of `record`'s model) that `record`'s writer set: a file dumps only those."""
    return {name: getattr(record, name) for name in head.model_fields if name in record.model_fields_set}


def index_of(components: list[Component]) -> dict[str, int]:
    return {c.fingerprint: i for i, c in enumerate(components)}


def plan_file(plan: SwarmPlan, where: str) -> PlanFile:
    index = index_of(plan.components)
    head = set_fields(plan, PlanHead)
    proxies = [
        PackedProxy(
            proxy=p.proxy, run=p.run, revision=p.revision, weights=pack(p.phases, index, f"{where}: {p.proxy}")
        )
        for p in plan.proxies
    ]
    return PlanFile(**head, prior=pack(plan.prior, index, f"{where}: prior"), proxies=proxies)


def plan_of(packed: PlanFile, where: str) -> SwarmPlan:
    components = packed.components
    head = set_fields(packed, PlanHead)
    proxies = [
        PlannedProxy.model_construct(
            proxy=p.proxy, run=p.run, revision=p.revision, phases=unpack(p.weights, components, f"{where}: {p.proxy}")
        )
        for p in packed.proxies
    ]
    return SwarmPlan(**head, prior=unpack(packed.prior, components, f"{where}: prior"), proxies=proxies)


def packed_row(row: ProxyRow, index: dict[str, int], where: str) -> PackedRow:
    head = set_fields(row, RowHead)
    return PackedRow(**head, weights=pack(row.phases, index, f"{where}: {row.proxy}"))


def row_of(packed: PackedRow, components: list[Component], where: str) -> ProxyRow:
    head = set_fields(packed, RowHead)
    return ProxyRow(**head, phases=unpack(packed.weights, components, where))


# ---- proxies.jsonl: appended as proxies end, read with a torn last line left out and the last row per proxy


def proxy_line(line: bytes) -> tuple[ComponentsLine | PackedRow | object, str | None]:
    """A proxies.jsonl line as a packed row or a components line (it has `kind`) (`millrace.jsonl.Parse`): read
    as a row straight from the bytes; only a line that is no row is parsed as JSON to say what it is."""
    try:
        return PackedRow.model_validate_json(line), None
    except pydantic.ValidationError as exc:
        error = exc
    data = json.loads(line)
    if not isinstance(data, dict):
        return data, "expected a JSON object"
    if "kind" not in data:
        return data, first_validation_error(error)
    try:
        return ComponentsLine.model_validate_json(line), None
    except pydantic.ValidationError as exc:
        return data, first_validation_error(exc)


def read_proxy_lines(path: Path, search: str) -> ProxyTable:
    """Every row of proxies.jsonl, each unpacked by the components line above it; the last row per proxy."""
    stream = parse_stream(path, proxy_line)
    components: list[Component] | None = None
    rows: dict[str, ProxyRow] = {}
    with collector_paused():  # a swarm's rows are hundreds of thousands of acyclic weights
        for number, record in zip(stream.numbers, stream.records):
            if isinstance(record, ComponentsLine):
                search, components = record.search, record.components
            elif isinstance(record, PackedRow):
                if components is None:
                    raise ArtifactError(f"{path}:{number}: a proxy row before the file's components line")
                rows.pop(record.proxy, None)
                rows[record.proxy] = row_of(record, components, f"{path}:{number}")
    return ProxyTable(search=search, components=components or [], rows=list(rows.values()))


def read_legacy_proxies(path: Path) -> ProxyTable:
    """The previous release's proxies.json (rows as they were, each weight naming its component)."""
    legacy = read_artifact(path, PROXIES_KIND, LegacyTable, (1,))
    rows = [ProxyRow(**set_fields(r, RowHead), phases=r.phases) for r in legacy.rows]
    return ProxyTable(search=legacy.search, rows=rows)


def has_proxies(directory: Path) -> bool:
    directory = Path(directory)
    return (directory / PROXIES_FILE).exists() or (directory / LEGACY_PROXIES_FILE).exists()


def read_proxies(directory: Path) -> ProxyTable:
    """The swarm's rows: the previous release's proxies.json (when there is one) beneath proxies.jsonl's rows
    (a row of the same proxy there wins); an empty table when neither exists."""
    directory = Path(directory)
    legacy = directory / LEGACY_PROXIES_FILE
    older = read_legacy_proxies(legacy) if legacy.exists() else ProxyTable(search=directory.name)
    newer = read_proxy_lines(directory / PROXIES_FILE, older.search)
    rows = {r.proxy: r for r in older.rows if all(n.proxy != r.proxy for n in newer.rows)}
    return ProxyTable(search=newer.search, components=newer.components, rows=[*rows.values(), *newer.rows])


def components_line(search: str, components: list[Component]) -> bytes:
    line = ComponentsLine(kind="millrace.search.proxies", schema_version=2, search=search, components=components)
    return line.line().encode()


def write_proxy_table(directory: Path, table: ProxyTable) -> str:
    """proxies.jsonl written whole (atomically): the components line, then every row; returns its sha256."""
    path = Path(directory) / PROXIES_FILE
    index = index_of(table.components)
    lines = [components_line(table.search, table.components)]
    lines += [packed_row(row, index, str(path)).line().encode() for row in table.rows]
    data = b"".join(line + b"\n" for line in lines)
    atomic_write_bytes(path, data)
    return "sha256:" + hashlib.sha256(data).hexdigest()


class ProxyLog:
    """Appends each proxy's row to proxies.jsonl as it ends (one flushed line, never the table again): a kill
    leaves at most a torn last line, which readers leave out and the next `ProxyLog` cuts away. Rows are packed
    by `components`; a components line is written first where the file's last one differs (a new file, a
    re-plan). Hold the search's writer lock."""

    def __init__(self, directory: Path, search: str, components: list[Component], table: ProxyTable):
        self.path = Path(directory) / PROXIES_FILE
        self.index = index_of(components)
        drop_torn_tail(self.path)
        if table.components != components or not self.path.exists():
            append_line(self.path, components_line(search, components))

    def append(self, row: ProxyRow) -> None:
        append_line(self.path, packed_row(row, self.index, str(self.path)).line().encode())


# ---- reading and writing


MODELS: dict[str, tuple[str, type[Record]]] = {
    PLAN_FILE: (PLAN_KIND, SwarmPlan),
    PROXIES_FILE: (PROXIES_KIND, ProxyTable),
    FIT_FILE: (FIT_KIND, FitReport),
    PROPOSAL_FILE: (PROPOSAL_KIND, ProposalRecord),
    VALIDATION_FILE: (VALIDATION_KIND, ValidationRecord),
}
VERSIONS = {PLAN_FILE: (1, PLAN_SCHEMA_VERSION)}  # files whose schema changed: every version still read


def write_search_record(directory: Path, filename: str, record: Record) -> str:
    """Write one of the search's files (atomically; an artifact with its envelope, or proxies.jsonl whole);
    returns its content hash."""
    kind, model = MODELS[filename]
    if not isinstance(record, model):
        raise TypeError(f"{filename} holds a {model.__name__}, not a {type(record).__name__}")
    path = Path(directory) / filename
    if isinstance(record, ProxyTable):
        return write_proxy_table(directory, record)
    if isinstance(record, SwarmPlan):
        return write_artifact(path, kind, PLAN_SCHEMA_VERSION, plan_file(record, str(path)).dump(), compact=True)
    return write_artifact(path, kind, SCHEMA_VERSION, record.dump())


def read_search_record(directory: Path, filename: str, model: type[R]) -> R:
    """One of the search's artifacts, envelope and content hash checked, as its model; errors name the file."""
    kind, expected = MODELS[filename]
    if model is not expected or filename in (PLAN_FILE, PROXIES_FILE):
        raise TypeError(f"{filename} holds a {expected.__name__}, read by read_plan / read_proxies, not as {model}")
    path = Path(directory) / filename
    return read_artifact(path, kind, model, (SCHEMA_VERSION,))


def record_hash(directory: Path, filename: str) -> str:
    """The content hash of one of the search's artifacts (provenance pins the plan and fit it came from)."""
    kind, _ = MODELS[filename]
    versions = VERSIONS.get(filename, (SCHEMA_VERSION,))
    return read_envelope(Path(directory) / filename, kind, versions).content_hash


def read_plan(directory: Path) -> SwarmPlan:
    """plan.json: schema 2 (packed) unpacked; schema 1, the previous release's (each weight named), as it is."""
    path = Path(directory) / PLAN_FILE
    envelope = read_envelope(path, PLAN_KIND, VERSIONS[PLAN_FILE])
    if envelope.schema_version == 1:
        return envelope.model(SwarmPlan)
    with collector_paused():  # every proxy's weights: hundreds of thousands of acyclic records
        return plan_of(envelope.model(PlanFile), str(path))


def read_plan_head(directory: Path) -> PlanHead:
    """plan.json without its weights (the spec file, store, budget ...): what a step that names the search reads
    before it reads the whole plan."""
    path = Path(directory) / PLAN_FILE
    envelope = read_envelope(path, PLAN_KIND, VERSIONS[PLAN_FILE])
    head = {k: v for k, v in envelope.payload.items() if k in PlanHead.model_fields}
    return validated(PlanHead, head, f"{path}: not a valid {PLAN_KIND} artifact")


def read_fit(directory: Path) -> FitReport:
    return read_search_record(directory, FIT_FILE, FitReport)


def read_proposal(directory: Path) -> ProposalRecord:
    return read_search_record(directory, PROPOSAL_FILE, ProposalRecord)


def read_validation(directory: Path) -> ValidationRecord:
    return read_search_record(directory, VALIDATION_FILE, ValidationRecord)
