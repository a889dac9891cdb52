"""What a mixture search writes and reads, typed: the search spec (a TOML file a person writes) and the artifacts
under `$MILLRACE_HOME/searches/<name>/`. Torch-free: the search page in `reports/` reads it as a schema module.

    searches/<name>/
      plan.json         the swarm: components (cells keyed by content fingerprint), prior, branch point, proxies
      proxies.json      one row per proxy: its sampled weights and EVERY per-set result of its last evaluation
      fit.json          the surrogates' out-of-fold quality per eval set and for the target, stranded rows
      proposal.json     the proposed weights, predicted target with an interval, the revision file written
      validation.json   the proposal and the baselines at several seeds, measured differences with intervals
      writer.lock       the one writer (`millrace.writer_lock`): plan, run, fit, propose and validate take it

Each is an artifact (`millrace.artifacts`: kind, schema version, content hash, written atomically). A proxy row
keeps the whole of its run's last evaluation (loss and bits per byte per cell, domain, bucket, source and external
set, and the macro and micro averages), so a new target is refitted from the rows without training anything.
Weights are keyed by each component's content fingerprint (`trainer.search.fingerprint`) beside its cell names,
so evidence survives a new store version or a re-bucketing wherever a cell's content is unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

import pydantic

from millrace.artifacts import payload_model, read_artifact, write_artifact
from millrace.config import StrictModel, load_config
from millrace.errors import ConfigError
from millrace.names import NAME_PATTERN
from trainer.records import EvalFigures, Number, Record

PLAN_FILE = "plan.json"
PROXIES_FILE = "proxies.json"
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


class TargetSpec(StrictModel):
    """What the search minimises: macro held-out BPB over cells, one external set, or a weighted sum of metrics
    (`bpb.macro`, `bpb.set.NAME`, `bpb.cell.c00q0`, `loss.domain.c03` ...)."""

    kind: Literal["macro", "set", "weighted"] = "macro"
    set: str | None = None
    weights: dict[str, float] = {}

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> TargetSpec:
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
    target: TargetSpec = TargetSpec()
    constraints: ConstraintsSpec = ConstraintsSpec()
    validation: ValidationSpec = ValidationSpec()
    eval: SearchEvalSpec = SearchEvalSpec()
    reuse: list[str] = pydantic.Field(
        [], description="earlier searches whose rows count where their cells' content is unchanged (Olmix reuse)"
    )
    fleet: dict[str, Any] = pydantic.Field({}, description="how proxies run: trainer.fleet.FleetConfig's fields")

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


class PlannedProxy(Record):
    proxy: str
    run: str
    revision: str
    phases: list[PhaseWeights]


class SwarmPlan(Record):
    search: str
    spec_file: str
    spec: dict[str, Any]
    store: StoreRef
    components: list[Component]
    prior: list[PhaseWeights]
    sampling: dict[str, Any] = {}
    branch: BranchPoint
    budget: ProxyBudget
    proxies: list[PlannedProxy]
    total_flops: Number = None
    epochs: EpochCheck


# ---- proxies.json


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


class ProxyRow(Record):
    proxy: str
    run: str
    revision: str
    seed: int = 0
    phases: list[PhaseWeights]
    cells: dict[str, list[str]] = {}  # fingerprint -> the cell names it held when the row was trained
    store: StoreRef | None = None
    status: Literal["planned", "running", "done", "failed"] = "planned"
    error: str | None = None
    results: ProxyResults | None = None
    seconds: Number = None  # wall time of the run, start-up to last evaluation
    train_seconds: Number = None  # of which in training steps
    flops: Number = None


class ProxyTable(Record):
    search: str
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
    constraints: dict[str, Any] = {}
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


# ---- reading and writing


MODELS: dict[str, tuple[str, type[Record]]] = {
    PLAN_FILE: (PLAN_KIND, SwarmPlan),
    PROXIES_FILE: (PROXIES_KIND, ProxyTable),
    FIT_FILE: (FIT_KIND, FitReport),
    PROPOSAL_FILE: (PROPOSAL_KIND, ProposalRecord),
    VALIDATION_FILE: (VALIDATION_KIND, ValidationRecord),
}


def write_search_record(directory: Path, filename: str, record: Record) -> str:
    """Write one of the search's artifacts (atomically, with its envelope); returns its content hash."""
    kind, model = MODELS[filename]
    if not isinstance(record, model):
        raise TypeError(f"{filename} holds a {model.__name__}, not a {type(record).__name__}")
    return write_artifact(Path(directory) / filename, kind, SCHEMA_VERSION, record.dump())


def read_search_record(directory: Path, filename: str, model: type[R]) -> R:
    """One of the search's artifacts, envelope and content hash checked, as its model; errors name the file."""
    kind, expected = MODELS[filename]
    if model is not expected:
        raise TypeError(f"{filename} holds a {expected.__name__}, not a {model.__name__}")
    path = Path(directory) / filename
    return payload_model(read_artifact(path, kind, (SCHEMA_VERSION,)), model, str(path))


def record_hash(directory: Path, filename: str) -> str:
    """The content hash of one of the search's artifacts (provenance pins the plan and fit it came from)."""
    kind, _ = MODELS[filename]
    return str(read_artifact(Path(directory) / filename, kind, (SCHEMA_VERSION,))["content_hash"])


def read_plan(directory: Path) -> SwarmPlan:
    return read_search_record(directory, PLAN_FILE, SwarmPlan)


def read_proxies(directory: Path) -> ProxyTable:
    return read_search_record(directory, PROXIES_FILE, ProxyTable)


def read_fit(directory: Path) -> FitReport:
    return read_search_record(directory, FIT_FILE, FitReport)


def read_proposal(directory: Path) -> ProposalRecord:
    return read_search_record(directory, PROPOSAL_FILE, ProposalRecord)


def read_validation(directory: Path) -> ValidationRecord:
    return read_search_record(directory, VALIDATION_FILE, ValidationRecord)
