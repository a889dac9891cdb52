"""The work directory of a run: where each intermediate lives, and what may be resumed from it.

`work.json` (the work state; named `run.json` in work directories written before 2026.12, still read)
records, when a run starts, the task count, the input files (path, size and a cheap fingerprint: xxh64
of the first and last 64 KiB) and one fingerprint per stage. A stage's
fingerprint hashes its own options and its upstream stage's fingerprint, so a config change
reruns exactly the stage it touches and the ones after it (and says which); `[executor]` touches
none, `[output] shard_tokens` and the evaluation sets only tokenization and the split (assembly always
runs). Input files that differ from the recorded list
are an error naming the first changed file (a resumed run would read some twice, some never),
unless the run is restarted (`restart=True`), which starts the work directory afresh, as does a
changed task count (it fixes which task reads which file).
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import xxhash

from millrace.artifacts import atomic_write_text, content_hash
from millrace.errors import MillraceError
from pipeline.config import PipelineConfig, is_url
from pipeline.remote_work import RemoteWork
from pipeline.stages.filter.sample import sample_budget
from pipeline.stages.read.discovery import folder_of
from pipeline.stages.read.readers import input_files

log = logging.getLogger(__name__)
FINGERPRINT_BYTES = 1 << 16
# A run's phases, in order, each depending on the one before (the one list: the runner announces them, the
# work state fingerprints all but assembly, which always runs). Words: a "phase" is one of these; a funnel
# "stage" (`pipeline.runner.stage_names`) counts what one step removed; a "step" is a datatrove PipelineStep.
PHASES = ("filter", "dedup", "tokenizer", "models", "tokenize", "decontaminate", "split", "assemble")
STAGES = PHASES[:-1]  # the fingerprinted ones (the work state's "stages", kept by that name on disk)


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
    def progress(self) -> Path:
        """Live counts the filter and tokenize tasks' readers write as they go, per stage
        (`pipeline.stages.progress`)."""
        return self.root / "progress"

    @property
    def signatures(self) -> Path:
        return self.root / "signatures"

    @property
    def samples(self) -> Path:
        return self.root / "samples"

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
        (`pipeline.stages.held_out.contamination`)."""
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

    def read_state(self) -> dict | None:
        """The recorded work state, under its name or its earlier one; None before the first run."""
        for path in (self.state, self.legacy_state):
            if path.exists():
                return json.loads(path.read_text())
        return None

    def outputs(self, stage: str) -> list[Path]:
        """What `stage` writes (what is deleted when it reruns)."""
        after_dedup = ("exact_dedup", "fuzzy_dedup", "tokenize")
        if stage == "filter":
            return [
                self.logs / "1-filter",
                self.filtered,
                self.signatures,
                self.samples,
                self.malformed,
                self.funnel,
                self.removed,
                self.progress / "filter",
            ]
        if stage == "dedup":
            return [self.logs / "2-dedup", self.components, self.duplicates]
        if stage == "tokenizer":
            return [self.tokenizer]
        if stage == "models":
            return [self.models]
        if stage == "decontaminate":
            return [self.logs / "4-decontaminate", self.contamination]
        if stage == "split":
            return [self.logs / "5-split", self.parts]
        return [
            self.logs / "3-tokenize",
            self.runs,
            self.staged,
            self.removed_tokens,
            self.progress / "tokenize",
            *(p for name in after_dedup for p in self.funnel.glob(f"*-{name}")),
            *(self.removed / name for name in after_dedup),
        ]


def _file_fingerprint(path: Path | str, storage_options: dict | None = None) -> dict:
    """Size and xxh64 of the first and last 64 KiB: of a local file, or an object at a URL (read by range)."""
    if isinstance(path, str) and is_url(path):
        from fsspec.core import url_to_fs

        fs, stripped = url_to_fs(path, **(storage_options or {}))
        with fs.open(stripped, "rb") as handle:
            return _fingerprint(handle, fs.size(stripped), path)
    with open(path, "rb") as handle:
        return _fingerprint(handle, Path(path).stat().st_size, str(path))


def _fingerprint(handle, size: int, name: str) -> dict:
    digest = xxhash.xxh64()
    digest.update(handle.read(FINGERPRINT_BYTES))
    if size > FINGERPRINT_BYTES:
        handle.seek(max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES))
        digest.update(handle.read(FINGERPRINT_BYTES))
    return {"path": name, "size": size, "xxh64": digest.hexdigest()}


def input_listing(config: PipelineConfig) -> list[dict]:
    """Every input file of every source, in read order, with its size and fingerprint."""

    listing = []
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


def stage_fingerprints(config: PipelineConfig, inputs: list[dict]) -> dict[str, str]:
    """One fingerprint per stage: its own options and the fingerprint of the stage before it."""

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
    own = {
        "filter": {
            "sources": [s.model_dump(mode="json") for s in config.sources],
            "filters": config.filters,
            "signing": signing,
            "inputs": inputs,
            "sample_budget": sample_budget(config),
        },
        "dedup": d.model_dump(mode="json"),
        "tokenizer": config.tokenizer.model_dump(mode="json", exclude={"batch_size"}),
        "models": {"quality": _dump(config.quality), "domains": _dump(config.domains)},
        "tokenize": {
            "eos": config.tokenizer.eos,
            "split": config.validation.model_dump(mode="json", exclude={"sets"}),
            "shard_tokens": config.output.shard_tokens,
            "sets": _set_listing(config),
        },
        "decontaminate": {},
        "split": {},
    }
    fingerprints: dict[str, str] = {}
    upstream = ""
    for stage in STAGES:
        upstream = fingerprints[stage] = content_hash({"upstream": upstream, "options": own[stage]})
    return fingerprints


def _set_listing(config: PipelineConfig) -> list[dict]:
    """The evaluation sets' options and files (the tokenize and split tasks look for their documents in the cells)."""
    listing = []
    for eval_set in config.validation.sets:
        files = []
        for raw in eval_set.paths:
            path = Path(raw)
            found = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            files += [_file_fingerprint(file) for file in found if file.exists()]
        listing.append({**eval_set.model_dump(mode="json"), "files": files})
    return listing


def _dump(section) -> dict | None:
    return None if section is None else section.model_dump(mode="json")


def _first_change(recorded: list[dict], current: list[dict]) -> str | None:
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
    """Make `layout` ready for `config`; returns the stages that must (re)run from scratch.

    With `remote` (a work directory on a URL, `layout` its driver's mirror) what is deleted goes on the URL too."""

    def discard(path: Path) -> None:
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        if remote is not None:
            remote.remove(path)

    tasks = config.executor.tasks
    inputs = input_listing(config)
    fingerprints = stage_fingerprints(config, inputs)
    state = layout.read_state()
    if state is not None and not restart and state.get("tasks") == tasks and "inputs" in state:
        changed = _first_change(state["inputs"], inputs)
        if changed:
            raise InputsChanged(
                f"input files changed since this run started in {layout.root}: first changed file {changed};"
                " restore the inputs, or start over with --restart"
            )
        rerun = [s for s in STAGES if state.get("stages", {}).get(s) != fingerprints[s]]
        rerun = list(STAGES[STAGES.index(rerun[0]) :]) if rerun else []
        if rerun:
            kept = [s for s in STAGES if s not in rerun]
            log.warning("config changed: rerunning %s (kept: %s)", ", ".join(rerun), ", ".join(kept) or "nothing")
            for stage in rerun:
                for path in layout.outputs(stage):
                    discard(path)
        else:
            log.info("resuming the work in %s", layout.root)
    else:
        if state is not None:
            log.warning("%s: starting %s afresh", "--restart" if restart else "task count changed", layout.root)
            discard(layout.root)
        rerun = list(STAGES)
    layout.root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(layout.state, json.dumps({"tasks": tasks, "inputs": inputs, "stages": fingerprints}))
    layout.legacy_state.unlink(missing_ok=True)
    return rerun
