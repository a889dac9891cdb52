"""The work directory of a run: where each intermediate lives, and what may be resumed from it.

`work.json` (the work state; named `run.json` in work directories written before 2026.12, still read)
records, when a run starts, the task count, the input files (path, size and a cheap fingerprint: xxh64
of the first and last 64 KiB) and one fingerprint per phase (under the key "phases"; work directories written
before 2026.12 keep them under "stages", still read). A phase's
fingerprint hashes its own options and its upstream phase's fingerprint, so a config change
reruns exactly the phase it touches and the ones after it (and says which); `[executor]` touches
none, `[output] shard_tokens` and the evaluation sets only tokenization and the split (assembly always
runs). Input files that differ from the recorded list
are an error naming the first changed file (a resumed run would read some twice, some never),
unless the run is restarted (`restart=True`), which starts the work directory afresh, as does a
changed task count (it fixes which task reads which file).

`PHASES` is the one list of the run's phases, in order: the fingerprints, what a rerun deletes, each phase's
logging folder and the runner's progress labels (`pipeline.runner.PHASE_LABELS`) all come from it. Words: a
*phase* is one entry of it; a *step* is a datatrove `PipelineStep` (a phase runs many); a *funnel step* is a
step that counts what it received, kept and removed (`pipeline.runner.funnel_steps`).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import pydantic
import xxhash
from fsspec.core import url_to_fs

from millrace.artifacts import atomic_write_text, content_hash
from millrace.errors import MillraceError
from millrace.urls import is_url
from pipeline.config import PipelineConfig
from pipeline.remote_work import RemoteWork
from pipeline.steps.filter.sample import sample_budget
from pipeline.steps.read.discovery import folder_of
from pipeline.steps.read.readers import input_files

log = logging.getLogger(__name__)
FINGERPRINT_BYTES = 1 << 16


class FileFingerprint(TypedDict):
    """An input file as work.json records it: its path, size and xxh64 of its first and last 64 KiB."""

    path: str
    size: int
    xxh64: str


class InputsChanged(MillraceError):
    """The input files differ from those the run started with."""


@dataclass(frozen=True)
class WorkLayout:
    """Where each intermediate lives under work/<name>/<version>/."""

    root: Path

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def slurm_scripts(self) -> Path:
        """Where `pipeline run --slurm --dry-run` writes the chain's sbatch scripts by default."""
        return self.root / "slurm-scripts"

    @property
    def funnel(self) -> Path:
        return self.root / "funnel"

    @property
    def removed(self) -> Path:
        return self.root / "removed"

    @property
    def malformed(self) -> Path:
        return self.root / "malformed"

    @property
    def filtered(self) -> Path:
        return self.root / "filtered"

    @property
    def inputs(self) -> Path:
        """Each filter task's input files, dealt by the driver (`pipeline.steps.read.task_inputs`)."""
        return self.root / "inputs"

    @property
    def progress(self) -> Path:
        """Live counts the filter and tokenize tasks' readers write as they go, per phase
        (`pipeline.steps.progress`)."""
        return self.root / "progress"

    @property
    def signatures(self) -> Path:
        return self.root / "signatures"

    @property
    def samples(self) -> Path:
        return self.root / "samples"

    @property
    def deduplicated_samples(self) -> Path:
        """Each filter task's sample sketch less what dedup removed (`DeduplicatedSketch`)."""
        return self.root / "deduplicated-samples"

    @property
    def duplicates(self) -> Path:
        return self.root / "duplicates"

    @property
    def components(self) -> Path:
        return self.root / "components"

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer.json"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def runs(self) -> Path:
        return self.root / "tokens"

    @property
    def staged(self) -> Path:
        """The store's cell shards as the tokenize and split tasks write them; assembly renames it into place."""
        return self.root / "store"

    @property
    def contamination(self) -> Path:
        """The held-out n-gram index, each task's findings and the decision
        (`pipeline.steps.held_out.contamination`)."""
        return self.root / "contamination"

    @property
    def parts(self) -> Path:
        return self.root / "parts"

    @property
    def removed_tokens(self) -> Path:
        return self.root / "removed-tokens"

    @property
    def state(self) -> Path:
        return self.root / "work.json"

    @property
    def legacy_state(self) -> Path:
        """The work state's earlier name (one word for two files: a training run's record is `run.json` too)."""
        return self.root / "run.json"

    def read_state(self) -> dict[str, Any] | None:
        """The recorded work state, under its name or its earlier one; None before the first run."""
        for path in (self.state, self.legacy_state):
            if path.exists():
                state: dict[str, Any] = json.loads(path.read_text())
                return state
        return None

    def phase_logs(self, phase: str) -> Path:
        """Where `phase`'s executor runs log (datatrove's completion markers: what a resumed run skips)."""
        logs = PHASE[phase].logs
        if logs is None:
            raise ValueError(f"phase {phase!r} runs no executor")
        return self.logs / logs

    def outputs(self, phase: str) -> list[Path]:
        """What `phase` writes (what is deleted when it reruns): its logging folder and its own outputs."""
        own = PHASE[phase].outputs(self)
        return own if PHASE[phase].logs is None else [self.phase_logs(phase), *own]


def _file_fingerprint(path: Path | str, storage_options: Mapping[str, object] | None = None) -> FileFingerprint:
    """Size and xxh64 of the first and last 64 KiB: of a local file, or an object at a URL, read by exactly those
    two ranges (no read-ahead: a file opened on a bucket would fetch a whole block, up to the object)."""
    if isinstance(path, str) and is_url(path):
        fs, stripped = url_to_fs(path, **(storage_options or {}))
        size = int(fs.size(stripped))
        ranges = _fingerprint_ranges(size)
        parts = fs.cat_ranges([stripped] * len(ranges), [a for a, _ in ranges], [b for _, b in ranges])
        return _fingerprint(parts, size, path)
    with open(path, "rb") as handle:
        size = Path(path).stat().st_size
        parts = []
        for start, stop in _fingerprint_ranges(size):
            handle.seek(start)
            parts.append(handle.read(stop - start))
        return _fingerprint(parts, size, str(path))


def _fingerprint_ranges(size: int) -> list[tuple[int, int]]:
    """The first 64 KiB, and the last 64 KiB that do not overlap them."""
    ranges = [(0, min(size, FINGERPRINT_BYTES))]
    if size > FINGERPRINT_BYTES:
        ranges.append((max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES), size))
    return ranges


def _fingerprint(parts: list[bytes], size: int, name: str) -> FileFingerprint:
    digest = xxhash.xxh64()
    for part in parts:
        digest.update(part)
    return {"path": name, "size": size, "xxh64": digest.hexdigest()}


def input_listing(config: PipelineConfig) -> list[FileFingerprint]:
    """Every input file of every source, in read order, with its size and fingerprint."""

    listing: list[FileFingerprint] = []
    for source in config.sources:
        for path, files in input_files(source):
            if source.format == "hf-datasets":
                files = sorted(str(p.relative_to(path)) for p in Path(path).rglob("*") if p.is_file())
            if is_url(path):
                folder = folder_of(path, source.storage_options)[0].rstrip("/")
                listing += [_file_fingerprint(f"{folder}/{relative}", source.storage_options) for relative in files]
                continue
            base = Path(path) if Path(path).is_dir() else Path(path).parent
            listing += [_file_fingerprint(base / relative) for relative in files]
    return listing


def phase_fingerprints(config: PipelineConfig, inputs: list[FileFingerprint]) -> dict[str, str]:
    """One fingerprint per fingerprinted phase: its own options and the fingerprint of the phase before it."""
    fingerprints: dict[str, str] = {}
    upstream = ""
    for phase in PHASES:
        if phase.options is not None:
            own = phase.options(config, inputs)
            upstream = fingerprints[phase.name] = content_hash({"upstream": upstream, "options": own})
    return fingerprints


def _filter_options(config: PipelineConfig, inputs: list[FileFingerprint]) -> dict[str, object]:
    d = config.dedup
    signing = {
        "exact": d.exact,
        "fuzzy": d.fuzzy,
        "ngram": d.ngram,
        "bands": d.bands,
        "rows": d.rows,
        "seed": d.seed,
        "parts": d.parts,
    }
    return {
        "sources": [s.model_dump(mode="json") for s in config.sources],
        "filters": config.filters,
        "signing": signing,
        "inputs": inputs,
        "sample_budget": sample_budget(config),
    }


def _tokenize_options(config: PipelineConfig, inputs: list[FileFingerprint]) -> dict[str, object]:
    return {
        "eos": config.tokenizer.eos,
        "split": config.validation.model_dump(mode="json", exclude={"sets"}),
        "shard_tokens": config.output.shard_tokens,
        "sets": _set_listing(config),
    }


def _tokenize_outputs(layout: WorkLayout) -> list[Path]:
    after_dedup = ("exact_dedup", "fuzzy_dedup", "tokenize")  # the funnel steps of the tokenize run
    return [
        layout.runs,
        layout.staged,
        layout.removed_tokens,
        layout.progress / "tokenize",
        *(p for name in after_dedup for p in layout.funnel.glob(f"*-{name}")),
        *(layout.removed / name for name in after_dedup),
    ]


@dataclass(frozen=True)
class Phase:
    """One phase of the run. Its fingerprint hashes `options(config, inputs)` and the previous phase's
    fingerprint (no `options`: not fingerprinted, it always runs); `outputs` is what a rerun deletes besides
    its logging folder `logs/<logs>` (None: it runs no executor); an `announced` phase is a progress label."""

    name: str
    options: Callable[[PipelineConfig, list[FileFingerprint]], object] | None
    outputs: Callable[[WorkLayout], list[Path]] = field(default=lambda layout: [])
    logs: str | None = None
    announced: bool = True


# The run's phases in the order the runner runs them, each depending on the one before.
PHASES: tuple[Phase, ...] = (
    Phase(
        "filter",
        _filter_options,
        lambda layout: [
            layout.inputs,
            layout.filtered,
            layout.signatures,
            layout.samples,
            layout.malformed,
            layout.funnel,
            layout.removed,
            layout.progress / "filter",
        ],
        logs="1-filter",
    ),
    Phase(
        "dedup",
        lambda config, inputs: config.dedup.model_dump(mode="json"),
        lambda layout: [layout.components, layout.duplicates, layout.deduplicated_samples],
        logs="2-dedup",
    ),
    Phase(
        "tokenizer",
        lambda config, inputs: config.tokenizer.model_dump(mode="json", exclude={"batch_size"}),
        lambda layout: [layout.tokenizer],
    ),
    Phase(
        "models",
        lambda config, inputs: {"quality": _dump(config.quality), "domains": _dump(config.domains)},
        lambda layout: [layout.models],
        announced=False,  # fitted within the tokenizer's label, before tokenize
    ),
    Phase("tokenize", _tokenize_options, _tokenize_outputs, logs="3-tokenize"),
    Phase("decontaminate", lambda config, inputs: {}, lambda layout: [layout.contamination], logs="4-decontaminate"),
    Phase("split", lambda config, inputs: {}, lambda layout: [layout.parts], logs="5-split"),
    Phase("assemble", None, logs="6-assemble"),  # a Slurm chain's last job logs there; a local run, nowhere
)
PHASE = {phase.name: phase for phase in PHASES}
FINGERPRINTED = tuple(phase.name for phase in PHASES if phase.options is not None)


def _set_listing(config: PipelineConfig) -> list[dict[str, object]]:
    """The evaluation sets' options and files (the tokenize and split tasks look for their documents in the cells)."""
    listing: list[dict[str, object]] = []
    for eval_set in config.validation.sets:
        files: list[FileFingerprint] = []
        for raw in eval_set.paths:
            path = Path(raw)
            found = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            files += [_file_fingerprint(file) for file in found if file.exists()]
        listing.append({**eval_set.model_dump(mode="json"), "files": files})
    return listing


def _dump(section: pydantic.BaseModel | None) -> dict[str, object] | None:
    return None if section is None else section.model_dump(mode="json")


def _first_change(recorded: list[FileFingerprint], current: list[FileFingerprint]) -> str | None:
    for old, new in zip(recorded, current):
        if old != new:
            what = "changed" if old["path"] == new["path"] else f"replaced by {new['path']}"
            return f"{old['path']} ({what}: size {old['size']} -> {new['size']})"
    if len(recorded) > len(current):
        return f"{recorded[len(current)]['path']} (no longer an input)"
    if len(current) > len(recorded):
        return f"{current[len(recorded)]['path']} (a new input)"
    return None


def prepare_work(
    layout: WorkLayout, config: PipelineConfig, restart: bool = False, remote: RemoteWork | None = None
) -> list[str]:
    """Make `layout` ready for `config`; returns the phases that must (re)run from scratch.

    With `remote` (a work directory on a URL, `layout` its driver's mirror) what is deleted goes on the URL too."""

    def discard(path: Path) -> None:
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        if remote is not None:
            remote.remove(path)

    tasks = config.executor.tasks
    inputs = input_listing(config)
    fingerprints = phase_fingerprints(config, inputs)
    state = layout.read_state()
    if state is not None and not restart and state.get("tasks") == tasks and "inputs" in state:
        changed = _first_change(state["inputs"], inputs)
        if changed:
            raise InputsChanged(
                f"input files changed since this run started in {layout.root}: first changed file {changed};"
                " restore the inputs, or start over with --restart"
            )
        recorded = state.get("phases", state.get("stages", {}))  # "stages": the key's earlier name
        rerun = [p for p in FINGERPRINTED if recorded.get(p) != fingerprints[p]]
        rerun = list(FINGERPRINTED[FINGERPRINTED.index(rerun[0]) :]) if rerun else []
        if rerun:
            kept = [p for p in FINGERPRINTED if p not in rerun]
            log.warning("config changed: rerunning %s (kept: %s)", ", ".join(rerun), ", ".join(kept) or "nothing")
            for phase in rerun:
                for path in layout.outputs(phase):
                    discard(path)
        else:
            log.info("resuming the work in %s", layout.root)
    else:
        if state is not None:
            log.warning("%s: starting %s afresh", "--restart" if restart else "task count changed", layout.root)
            discard(layout.root)
        rerun = list(FINGERPRINTED)
    layout.root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(layout.state, json.dumps({"tasks": tasks, "inputs": inputs, "phases": fingerprints}))
    layout.legacy_state.unlink(missing_ok=True)
    return rerun
