"""Run the pipeline's phases (`pipeline.work.PHASES`): five datatrove executor runs, four driver steps, one assembly.

    1. filter     (tasks = executor.tasks)  read → normalise → language id → heuristic filters
                  (each with its language's rules) → dedup signatures → filtered/<rank>.jsonl.zst
    2. dedup      (tasks = dedup.parts)     `find_duplicates`: candidates, component rounds, verification
                                            → duplicates/{exact,fuzzy}-<part>.npy (rows by filter task)
       tokenizer  (driver)                  tokenizer.json: the configured one, or a byte-level BPE
                                            trained on a sample of the deduplicated documents
       seam       (driver)                  `post_dedup_steps()`: see below
    3. tokenize   (tasks = executor.tasks)  filtered/<rank> → drop exact dups → drop fuzzy dups
                  → [post-dedup steps] → TokenizeCells (tokens streamed to tokens/<rank>/<cell>.tokens,
                  then written to the final shards store/cells/<cell>/shard-<r>-<n>, but for the
                  task's few held-out candidates) → RemovedTokens
       cutoffs    (driver)                  one held-out cutoff per cell from the tasks' candidates;
                                            the held-out documents' n-gram index
    4. decontaminate (tasks = executor.tasks) FindContainedNgrams: task r's training documents
                                            against the index; the driver then gives back to
                                            training the held-out documents mostly found there
    5. split      (tasks = executor.tasks)  WriteHeldOut: task r's candidates → validation-<r>-<n>
                                            or its next shard-<r>-<n>; trace parts, parts/<r>.json
    6. assemble   (driver)                  rename store/ to a staging directory, write manifests
                                            and funnel from parts/ (no token read or copied),
                                            rename into $MILLRACE_HOME/stores/<name>/<version>

Intermediates live under $MILLRACE_HOME/work/<name>/<version>/, or with `[executor] work_url` under
<work_url>/<name>/<version>/ on a bucket, each task staged in its own scratch directory and the local
directory holds only the few small files the driver reads (`pipeline.remote_work`). Each executor run has its
own logging directory, so datatrove's per-task completion markers make every phase
resumable: a run killed at any point and started again with the same command skips the
finished tasks, redoes the unfinished ones (every task output is written atomically and
overwritten whole) and yields the same store, byte for byte. A changed config reruns the
phases it touches and those after them; changed input files are an error (see `pipeline.work`).
Executors are datatrove's own:
`LocalPipelineExecutor` (forkserver processes) or `RayPipelineExecutor` (set RAY_ADDRESS to
use a running cluster, e.g. one started inside a Slurm allocation, otherwise a local Ray
runtime starts); the driver runs the phases in order, only the tasks go to the workers.

THE POST-DEDUP SEAM (quality scoring, domain clustering): `post_dedup_steps()` is the one
place where, after dedup, a deterministic sample of the deduplicated documents is drawn
(`DeduplicatedSample`), models are fitted once into `work/.../models/` (reused on a rerun)
and steps are returned that the tokenize run inserts between fuzzy dedup and tokenization.
A step that sets `doc.metadata["cell"]` decides the document's cell (else its source); the
returned `collect_stats()` gives `StoreManifest.stats` and per-cell `CellManifest.stats`.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from datatrove.data import Document
from datatrove.io import DataFolder
from datatrove.pipeline.base import PipelineStep
from loguru import logger

from millrace.artifacts import atomic_write_text, content_hash, parse_artifact, read_artifact
from millrace.errors import ArtifactError, ConfigError, MillraceError, disk_full_cause
from millrace.home import Home
from millrace.logs import loguru_to_logging
from millrace.ray_cluster import connect_ray
from millrace.signals import TerminateSignal, sigterm_received
from millrace.writer_lock import WriterLock
from pipeline.config import EXTRACTED_FORMATS, PipelineConfig
from pipeline.filters import FILTER_NAMES
from pipeline.remote_work import DRIVER_READS, RemoteWork, StagedTask
from pipeline.steps.assemble import StoreContents, assemble_store, staging_dir
from pipeline.steps.dedup.duplicates import DropDuplicates, find_duplicates
from pipeline.steps.dedup.signing import DedupSignatures
from pipeline.steps.filter.filtering import ExtractStep, FilterStep, LanguageStep, NormaliseStep
from pipeline.steps.filter.sample import DeduplicatedSketch, SampleSketch, merged_sample, sample_budget
from pipeline.steps.funnel import bad_files, build_funnel, encodings, merge_step, removed_tokens_from, step_dir
from pipeline.steps.held_out.contamination import (
    ContaminationDecision,
    FindContainedNgrams,
    contaminated,
    save_decision,
    write_held_out_index,
)
from pipeline.steps.held_out.split import WriteHeldOut
from pipeline.steps.in_place import reading_in_place
from pipeline.steps.intermediate import TaskDocumentReader, TaskDocumentWriter
from pipeline.steps.progress import PhaseLines, live_records
from pipeline.steps.read.discovery import listed_once, unread_files
from pipeline.steps.read.fields import check_text_fields
from pipeline.steps.read.readers import ReadStep, file_count
from pipeline.steps.read.task_inputs import write_task_inputs
from pipeline.steps.tokenize.cell_shards import CellShardsConfig, held_out_cutoffs
from pipeline.steps.tokenize.tokenization import RemovedTokens, TokenizeCells, load_tokenizer, train_byte_level_bpe
from pipeline.store.config_record import PipelineRecord
from pipeline.store.format import SCHEMA_VERSION, STORE_KIND, StoreManifest, dtype_for_vocab
from pipeline.store.manifest_records import Funnel, NotRead, StoreStats
from pipeline.store.remote import (
    PublishShards,
    check_target,
    copy_store,
    publish_store,
    published,
    remote_fs,
)
from pipeline.work import FINGERPRINTED, PHASES, WorkLayout, prepare_work

if TYPE_CHECKING:
    from datatrove.executor.base import PipelineExecutor
    from datatrove.utils.stats import PipelineStats

log = logging.getLogger(__name__)
# what `on_phase` is called with, in order: the announced phases ("models" is fitted within "tokenizer")
PHASE_LABELS = tuple(phase.name for phase in PHASES if phase.announced)


class PipelineError(MillraceError):
    """A phase failed; the message names the phase and where its task logs are."""


@dataclass(frozen=True)
class FilterRunStep:
    """A funnel step of the filter run, after reading: whether a config uses it, and its datatrove step
    (given the config, the work layout and the step's funnel directory)."""

    name: str
    used: Callable[[PipelineConfig], bool]
    step: Callable[[PipelineConfig, WorkLayout, Path], PipelineStep]


def _filter_step(name: str) -> FilterRunStep:
    """A registered filter (`pipeline.filters`) as a funnel step, for the sources that list it."""

    def users(config: PipelineConfig) -> list[str]:
        return [s.name for s in config.sources if name in s.filters]

    return FilterRunStep(
        name,
        lambda config: bool(users(config)),
        lambda config, layout, funnel: FilterStep(name, config.filters[name], funnel, layout.removed, users(config)),
    )


# The filter run's funnel steps in order (the one list: `funnel_steps` and `filter_pipeline` read it). Language
# id comes before the filters: each filter applies the document's language's rules.
FILTER_RUN_STEPS: tuple[FilterRunStep, ...] = (
    FilterRunStep(
        "extract",
        lambda config: bool(extracted_sources(config)),
        lambda config, layout, funnel: ExtractStep(funnel, layout.removed, extracted_sources(config)),
    ),
    FilterRunStep(
        "normalise",
        lambda config: True,
        lambda config, layout, funnel: NormaliseStep(
            funnel, layout.removed, [s.name for s in config.sources if s.normalise]
        ),
    ),
    FilterRunStep(
        "language",
        lambda config: any(s.language_id for s in config.sources),
        lambda config, layout, funnel: LanguageStep(
            funnel, layout.removed, {s.name: s.languages for s in config.sources if s.language_id}
        ),
    ),
    *(_filter_step(name) for name in FILTER_NAMES),
)


def funnel_steps(config: PipelineConfig) -> list[str]:
    """The funnel's steps, in order, for this config (each counts what it received, kept and removed)."""
    names = ["read"] + [step.name for step in FILTER_RUN_STEPS if step.used(config)]
    if config.dedup.exact:
        names.append("exact_dedup")
    if config.dedup.fuzzy:
        names.append("fuzzy_dedup")
    return names + ["tokenize"]


def extracted_sources(config: PipelineConfig) -> list[str]:
    """The sources whose documents are HTML, extracted to text before normalising."""
    return [s.name for s in config.sources if s.format in EXTRACTED_FORMATS]


def stored_config(config: PipelineConfig) -> PipelineRecord:
    """The config as the store records it: `executor` left out, since how it ran does not change what it made,
    and the output's copy URL and its options recorded as unset (where a copy goes changes nothing in it, and
    storage options may hold credentials): a store built on a bucket is byte for byte the one built locally."""
    local = config.model_copy(update={"output": config.output.model_copy(update={"url": None, "storage_options": {}})})
    return PipelineRecord.model_validate(local.model_dump(mode="json", exclude={"executor"}))


def stored_config_hash(config: PipelineConfig) -> str:
    """`StoreManifest.config_hash` of a store built from `config`: the same config gives the same store version."""
    return content_hash(stored_config(config).model_dump(mode="json"))


class DeduplicatedSample:
    """A deterministic sample of the documents that survive dedup: a pure function of their keys.

    Drawn inside the filter tasks (`pipeline.steps.filter.sample`: a bottom-k sketch by key hash per
    task), less what dedup removed (dropped by the dedup phase's `sample` tasks); no pass over the corpus.
    Returned in key order.
    """

    def __init__(self, config: PipelineConfig, layout: WorkLayout):
        self.layout = layout
        self.deduplicated = config.dedup.exact or config.dedup.fuzzy

    def documents(self, max_bytes: int) -> list[Document]:
        sketches = self.layout.deduplicated_samples if self.deduplicated else self.layout.samples
        return merged_sample(sketches, None, max_bytes)


@dataclass
class PostDedupSteps:
    """What the seam contributes: steps before tokenization, and the stats they leave behind."""

    steps: list[PipelineStep] = field(default_factory=list)
    collect_stats: Callable[[], tuple[StoreStats, dict[str, dict[str, object]]]] = lambda: (StoreStats(), {})


def post_dedup_steps(config: PipelineConfig, layout: WorkLayout) -> PostDedupSteps:
    """THE SEAM. Fit post-dedup models on `DeduplicatedSample(config, layout)` (once, under
    `layout.models`) and return the steps to run before tokenization. Without a `quality` or
    `domains` section nothing runs and cells are sources."""
    if not config.fits_cells:
        return PostDedupSteps()
    from pipeline.steps.tokenize.cell_steps import CellSteps  # lazy: heavy (sklearn)

    cells = CellSteps(config.quality, config.domains, layout.models)
    cells.fit(DeduplicatedSample(config, layout).documents(cells.sample_bytes))
    return PostDedupSteps(steps=cells.steps(), collect_stats=cells.collect_stats)


def _executor(
    kind: str, pipeline: list[PipelineStep], tasks: int, workers: int, logging_dir: Path | DataFolder
) -> PipelineExecutor:
    if kind == "slurm":  # a chain of jobs submitted at once, not a phase run from here
        raise ConfigError("field 'executor.kind': slurm runs through pipeline.slurm.submit (millrace pipeline run)")
    if kind == "ray":
        from datatrove.executor import RayPipelineExecutor  # lazy: heavy (datatrove)

        connect_ray(workers)
        return RayPipelineExecutor(
            pipeline, tasks=tasks, workers=workers, logging_dir=_folder(logging_dir), cpus_per_task=1, mem_per_cpu_gb=1
        )
    return _local_executor(pipeline, tasks, min(workers, tasks), logging_dir)


def _folder(logging_dir: Path | DataFolder) -> str | DataFolder:
    """What datatrove's executors take as their logging folder: a local path, or a folder on a URL."""
    return str(logging_dir) if isinstance(logging_dir, Path) else logging_dir


def _file_task_logger(logging_dir: DataFolder, rank: int, local_rank: int = 0, node_rank: int = -1) -> TextIO:
    """datatrove's task logger, but the console gets a task's errors as one line in millrace's log format; its
    file keeps everything."""
    logger.remove()
    logfile: TextIO = logging_dir.open(f"logs/task_{rank:05d}.log", "w")

    def to_file(message: str) -> None:
        with contextlib.suppress(OSError):  # a full disk: the task's one console line says so, not a traceback
            logfile.write(message)

    logger.add(
        to_file,
        level="DEBUG",
        format="{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | {name}:{function}:{line} - {message}",
    )
    logger.add(functools.partial(loguru_to_logging, prefix=f"task {rank}: "), level="ERROR", format="{message}")
    logger.info(f"Launching pipeline for {rank=}")
    return logfile


def _local_executor(
    pipeline: list[PipelineStep], tasks: int, workers: int, logging_dir: Path | DataFolder
) -> PipelineExecutor:
    """datatrove's local executor; unless --verbose, its tasks log to their files and only errors to the console."""
    # lazy: heavy (datatrove)
    import datatrove.executor.base as executor_base
    from datatrove.executor import LocalPipelineExecutor

    verbose = logging.getLogger().isEnabledFor(logging.DEBUG)

    class TaskFileLoggingExecutor(LocalPipelineExecutor):
        # datatrove has no setting for a task's logger: `_run_for_rank` calls the module global
        # `add_task_logger`. Replaced here, in the worker process that runs the task (never the driver's).
        def _run_for_rank(self, rank: int, local_rank: int = 0, node_rank: int = -1) -> PipelineStats:
            executor_base.add_task_logger = _file_task_logger
            try:
                return super()._run_for_rank(rank, local_rank, node_rank)
            finally:  # datatrove puts back its own console sink: the worker's later lines go through logging too
                _route_datatrove_logs()

    if workers > 1:
        _start_forkserver_deaf_to_ctrl_c()
        shutdown_past_dead_workers()
    _route_datatrove_logs("DEBUG" if verbose else "WARNING")
    cls = LocalPipelineExecutor if verbose else TaskFileLoggingExecutor
    return cls(pipeline, tasks=tasks, workers=workers, logging_dir=_folder(logging_dir))


POOL_LOCK_SECONDS = 2.0  # how long a pool's shutdown waits for its task queue's lock


def shutdown_past_dead_workers() -> None:
    """A pool's shutdown that does not wait forever for a lock a dead worker held.

    An idle worker waits for its next task holding the task queue's read lock. A batch system's SIGTERM to the
    process group ends the workers on the spot, that one included, and the lock is never released: the pool's
    shutdown (`_help_stuff_finish`, which takes the lock to drain the queue) then waits forever in the main
    thread, under `LocalPipelineExecutor.run`, holding the store's writer lock. Here it waits `POOL_LOCK_SECONDS`
    and goes on without draining (the workers it would hand the queue to are gone)."""
    from multiprocess import pool  # lazy: heavy (multiprocess): the local executor's pool only

    if getattr(pool.Pool._help_stuff_finish, "bounded", False):
        return

    def help_stuff_finish(inqueue: Any, task_handler: Any, size: int) -> None:
        if not inqueue._rlock.acquire(timeout=POOL_LOCK_SECONDS):
            log.debug("a pool worker died holding its task queue's lock; shutting the pool down without it")
            return
        while task_handler.is_alive() and inqueue._reader.poll():
            inqueue._reader.recv()

    # The shutdown then puts a sentinel on the result queue, under its write lock: a worker killed between
    # sending its result and releasing that lock holds it forever. Only workers and the shutdown write there,
    # so a lock not had within `POOL_LOCK_SECONDS` is a dead worker's, released for it (any process may
    # release a non-recursive SemLock).
    terminate_pool = pool.Pool._terminate_pool.__func__

    def terminate_pool_past_dead_writer(cls: Any, taskqueue: Any, inqueue: Any, outqueue: Any, *rest: Any) -> None:
        wlock = getattr(outqueue, "_wlock", None)
        if wlock is not None:
            if not wlock.acquire(timeout=POOL_LOCK_SECONDS):
                log.debug("a pool worker died holding its result queue's lock; released for it")
            wlock.release()
        terminate_pool(cls, taskqueue, inqueue, outqueue, *rest)

    help_stuff_finish.bounded = True  # type: ignore[attr-defined]
    pool.Pool._help_stuff_finish = staticmethod(help_stuff_finish)
    pool.Pool._terminate_pool = classmethod(terminate_pool_past_dead_writer)


def _route_datatrove_logs(level: str = "WARNING") -> None:
    """datatrove's own console log (its merged stats tables, per-task INFO lines) says again what the
    progress lines and the funnel say; this process keeps only its warnings and errors, one line each, in
    millrace's log format (`millrace.logs.loguru_to_logging`)."""
    logger.remove()
    logger.add(loguru_to_logging, level=level, format="{message}")


def _start_forkserver_deaf_to_ctrl_c() -> None:
    """Start datatrove's forkserver (the `multiprocess` one) with SIGINT ignored, which its workers inherit.

    A terminal's Ctrl-C reaches every process in its group; only this process should act on it
    (stop the pool, say how to resume). Workers that raised KeyboardInterrupt too would each
    print a traceback. `pipeline.forkserver_hook` quiets the one a worker forked during the shutdown prints;
    `pipeline.worker_preload` loads what every task needs, once.
    """
    import multiprocess.forkserver  # lazy: heavy (multiprocess): the local executor's pool only

    multiprocess.forkserver.set_forkserver_preload(["__main__", "pipeline.forkserver_hook", "pipeline.worker_preload"])
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        multiprocess.forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass(frozen=True)
class Executors:
    """How a pipeline run's executor runs go (the store does not depend on it): datatrove's executor `kind`, its
    `workers`, whether each phase logs steady progress `lines`, and the run's work URL (`remote`; None: the local
    work directory)."""

    kind: str
    workers: int
    lines: bool = False
    remote: RemoteWork | None = None

    def run(
        self,
        label: str,
        pipeline: list[PipelineStep],
        tasks: int,
        logging_dir: Path,
        *,
        read: Callable[[], int] | None = None,
        part: str | None = None,
    ) -> None:
        """One executor run to completion. With `remote`, each task runs staged (`pipeline.remote_work`): the
        driver uploads what it wrote first, markers and logs go on the URL, and what the driver reads of the
        tasks' outputs comes back (`DRIVER_READS[label]`). `read` counts the documents read so far, for the
        progress lines; `part` names which run of a phase of several this is (a dedup round), in its progress
        and log lines."""
        shown = f"{label} {part}" if part else label
        where: Path | DataFolder = logging_dir
        remote, lines = self.remote, self.lines
        if remote is not None:
            remote.publish()
            pipeline = [StagedTask(label, pipeline, remote, part)]
            where, lines = remote.folder(logging_dir), False  # the progress lines read a local logging folder
        executor = _executor(self.kind, pipeline, tasks, self.workers, where)
        logs = remote.url_of(logging_dir / "logs") if remote is not None else f"{logging_dir}/logs"
        if not executor.get_incomplete_ranks():
            log.info("%s: all %d tasks already complete", shown, tasks)
        else:
            with PhaseLines(shown, logging_dir, tasks, read=read) if lines else contextlib.nullcontext():
                _run_to_completion(executor, shown, logging_dir, logs)
        if remote is not None:
            remote.pull(DRIVER_READS[label])


def _run_to_completion(executor: PipelineExecutor, shown: str, logging_dir: Path, logs: str) -> None:
    """Run `executor`; a task's failure becomes one line naming the phase and where its task logs are."""
    try:
        executor.run()
    except Exception as exc:  # a task's exception, re-raised by the executor
        if sigterm_received():  # the workers died of the group's SIGTERM: a stop, not a failed phase
            raise TerminateSignal() from exc
        if (full := disk_full_cause(exc)) is not None:  # one line naming the path (the work dir if none)
            work = next((p.parent for p in logging_dir.parents if p.name == "logs"), logging_dir)
            raise OSError(full.errno, full.strerror, full.filename or str(work)) from exc
        raise PipelineError(f"phase {shown!r} failed ({type(exc).__name__}: {exc}); task logs in {logs}") from exc
    incomplete = executor.get_incomplete_ranks()
    if incomplete:
        raise PipelineError(f"phase {shown!r}: tasks {incomplete} did not complete; task logs in {logs}")


def remote_work(config: PipelineConfig, layout: WorkLayout) -> RemoteWork | None:
    """The run's work directory on `[executor] work_url`, with `layout` as the driver's mirror; None without one."""
    e = config.executor
    if e.work_url is None:
        return None
    url = f"{e.work_url.rstrip('/')}/{layout.root.parent.name}/{layout.root.name}"
    return RemoteWork(url, e.work_storage_options, layout.root, e.scratch)


def filter_pipeline(config: PipelineConfig, layout: WorkLayout) -> list[PipelineStep]:
    """The filter run's steps; writes each task's inputs file (which files it reads, dealt here once)."""
    names = funnel_steps(config)
    funnel = {name: step_dir(layout.funnel, index, name) for index, name in enumerate(names)}
    steps: list[PipelineStep] = []
    offset = 0
    for index, source in enumerate(config.sources):
        read = ReadStep(source, offset, funnel["read"], layout.malformed, layout.progress / "filter", layout.inputs)
        steps.append(read)
        files = file_count(source)
        if not files:
            raise ConfigError(f"field 'sources.{index}.paths': no {source.files_read} under {source.paths}")
        offset += files
    write_task_inputs(config, layout.inputs, config.executor.tasks)
    steps += [step.step(config, layout, funnel[step.name]) for step in FILTER_RUN_STEPS if step.name in funnel]
    d = config.dedup
    if d.exact or d.fuzzy:
        steps.append(DedupSignatures(layout.signatures, d))
    if budget := sample_budget(config):  # the sketch the tokenizer and the cell models are fitted on
        steps.append(SampleSketch(layout.samples, budget))
    steps.append(TaskDocumentWriter(layout.filtered))
    return steps


def run_dedup(config: PipelineConfig, layout: WorkLayout, executors: Executors) -> None:
    """Duplicate finding: several executor runs of `dedup.parts` tasks each, logged under logs/2-dedup/<run>;
    then, where a sample is drawn, one task per filter task drops dedup's removals from its sketch."""

    def run(name: str, pipeline: list[PipelineStep], tasks: int) -> None:
        executors.run("dedup", pipeline, tasks, layout.phase_logs("dedup") / name, part=name)

    find_duplicates(config.dedup, layout.signatures, layout.components, layout.duplicates, run)
    if sample_budget(config):
        step = DeduplicatedSketch(layout.samples, layout.duplicates, layout.deduplicated_samples)
        executors.run("sample", [step], config.executor.tasks, layout.phase_logs("dedup") / "sample")


def tokenize_pipeline(config: PipelineConfig, layout: WorkLayout, extra: list[PipelineStep]) -> list[PipelineStep]:
    names = funnel_steps(config)
    funnel = {name: step_dir(layout.funnel, index, name) for index, name in enumerate(names)}
    steps: list[PipelineStep] = [TaskDocumentReader(layout.filtered, layout.progress / "tokenize")]
    if config.dedup.exact or config.dedup.fuzzy:
        reasons = {"exact_dedup": ("exact",), "fuzzy_dedup": ("fuzzy",)}
        for step in ("exact_dedup", "fuzzy_dedup"):
            if step in funnel:
                steps.append(DropDuplicates(step, reasons[step], layout.duplicates, funnel[step], layout.removed))
    steps += extra
    steps.append(
        TokenizeCells(cell_shards(config, layout), funnel["tokenize"], config.tokenizer.batch_size, config.validation)
    )
    steps.append(RemovedTokens(layout.tokenizer, layout.removed, layout.removed_tokens, config.tokenizer.batch_size))
    return steps


def decontaminate(
    config: PipelineConfig, layout: WorkLayout, cutoffs: dict[str, list[int] | None], executors: Executors
) -> ContaminationDecision | None:
    """The held-out documents whose n-grams are mostly found in training (`pipeline.steps.held_out.contamination`),
    saved as the phase's decision; None when `[validation] decontaminate` is off."""
    v = config.validation
    if not v.decontaminate:
        return None
    dtype = dtype_for_vocab(load_tokenizer(layout.tokenizer).get_vocab_size(with_added_tokens=True))
    if not (layout.contamination / "held-out.npz").exists():  # only the chosen candidates' tokens are read
        with _in_place(layout, executors.remote):
            write_held_out_index(layout.runs, layout.contamination, cutoffs, dtype, v.contamination_ngram)
    step = FindContainedNgrams(
        layout.runs, layout.staged / "cells", layout.contamination, cutoffs, str(dtype), v.contamination_ngram
    )
    executors.run("decontaminate", [step], config.executor.tasks, layout.phase_logs("decontaminate"))
    decision = contaminated(layout.contamination, v.contamination_threshold, v.contamination_ngram)
    save_decision(layout.contamination, decision)
    return decision


def _in_place(layout: WorkLayout, remote: RemoteWork | None) -> contextlib.AbstractContextManager[object]:
    """Where the work directory is on a work URL, the driver's reads of it go there in place."""
    return contextlib.nullcontext() if remote is None else reading_in_place(layout.root, remote.fs, remote.root)


def split_pipeline(
    config: PipelineConfig,
    layout: WorkLayout,
    cutoffs: dict[str, list[int] | None],
    given_back: dict[str, list[list[int]]],
) -> list[PipelineStep]:
    return [WriteHeldOut(cell_shards(config, layout), layout.parts, cutoffs, config.validation, given_back)]


def cell_shards(config: PipelineConfig, layout: WorkLayout) -> CellShardsConfig:
    """What the tokenize and split tasks share: tokenizer, sources, runs and cells directories, shard size."""
    return CellShardsConfig(
        tokenizer_path=layout.tokenizer,
        eos=config.tokenizer.eos,
        sources=tuple(s.name for s in config.sources),
        runs_dir=layout.runs,
        cells_dir=layout.staged / "cells",
        shard_tokens=config.output.shard_tokens,
    )


def ensure_tokenizer(config: PipelineConfig, layout: WorkLayout) -> Path:
    """The configured tokenizer.json, copied; or a byte-level BPE trained on the deduplicated sample."""

    if layout.tokenizer.exists():
        return layout.tokenizer
    if config.tokenizer.path:  # checked at load time: readable, and it has the EOS token
        atomic_write_text(layout.tokenizer, Path(config.tokenizer.path).read_text())
        return layout.tokenizer
    sample = DeduplicatedSample(config, layout).documents(config.tokenizer.sample_bytes)
    log.info("training a byte-level BPE (vocab %d) on %d sampled documents", config.tokenizer.vocab_size, len(sample))
    return train_byte_level_bpe(
        (d.text for d in sample), config.tokenizer.vocab_size, config.tokenizer.eos, layout.tokenizer
    )


def tokenized_documents(layout: WorkLayout) -> int:
    """How many documents the tokenize tasks placed in cells, from their candidates files (`held-out.json`)."""
    found = sorted(layout.runs.glob("*/held-out.json"))
    return sum(entry["documents"] for path in found for entry in json.loads(path.read_text())["cells"].values())


def malformed_report(layout: WorkLayout) -> list[dict[str, object]]:
    """Every record that produced no document: file, line and reason."""
    records: list[dict[str, object]] = []
    for path in sorted(layout.malformed.glob("*/*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line]
    return records


def _built_from(home: Home, name: str, version: str) -> str | None:
    """The config hash of store name/version, or None where there is no such store yet."""
    path = home.store(name, version) / "store.json"
    return read_artifact(path, STORE_KIND, StoreManifest, (SCHEMA_VERSION,)).config_hash if path.exists() else None


def store_version(config: PipelineConfig, home: Home, config_hash: str) -> str:
    """The version this run writes: the config's; without one, today's, or the next free `.N` of today
    when another config already built today's (with a notice, since the name differs from the date)."""
    name, version = config.output.name, config.output.resolved_version
    found = _built_from(home, name, version)
    if found in (None, config_hash):
        return version
    if config.output.version is not None:
        raise ConfigError(
            f"field 'output.version': store {name}/{version} already exists at {home.store(name, version)}, built "
            f'from another config; name this one, e.g. version = "{version}.1" in [output]'
        )
    for n in itertools.count(1):
        candidate = f"{version}.{n}"
        found = _built_from(home, name, candidate)
        if found in (None, config_hash):
            if found is None:
                log.warning(
                    "store %s/%s was built today from another config; this one is %s/%s",
                    name,
                    version,
                    name,
                    candidate,
                )
            return candidate
    return version  # unreachable: the count is endless


def run_pipeline(
    config: PipelineConfig,
    home: Home,
    executor: str | None = None,
    workers: int | None = None,
    on_phase: Callable[[str], None] | None = None,
    progress_lines: bool = False,
    restart: bool = False,
) -> Path:
    """Run `config` into `home.store(name, version)` and return that directory.

    `executor` and `workers` override the config's `[executor]`; the store does not depend on them.
    `progress_lines`: log a steady line per phase (tasks done, documents read), for runs without a terminal.
    `restart` starts the work directory afresh (needed when the input files changed).
    """
    executors = Executors(executor or config.executor.kind, workers or config.executor.workers, progress_lines)
    name = config.output.name
    config_hash = stored_config_hash(config)
    version = store_version(config, home, config_hash)
    final = home.store(name, version)
    if _finished(config, final):
        log.info("store %s/%s already built from this config: %s", name, version, final)
        return final
    check_text_fields(config)  # a source whose text field is not in its files: refused before any task starts
    # each source is listed once a run (`listed_once`): fingerprints, unread files and the task plan share it
    with WriterLock(store_lock(final), f"store {name}/{version}"), listed_once():  # one writer per store version
        if _finished(config, final):  # the writer before us finished it
            log.info("store %s/%s already built from this config: %s", name, version, final)
            return final
        if not (final / "store.json").exists():
            refuse_published(config, final, config_hash)
            _build_store(StoreBuild.start(config, home, final, executors, restart), on_phase or (lambda label: None))
        if config.output.url:
            publish(config, home, final, executors)
        return final


def output_url(config: PipelineConfig, final: Path) -> str:
    """Where `[output] url` publishes store version `final`: <url>/<name>/<version>."""
    return f"{(config.output.url or '').rstrip('/')}/{final.parent.name}/{final.name}"


def _finished(config: PipelineConfig, final: Path) -> bool:
    """Built here, and with `[output] url` published there: the URL holds its `store.json` (the publishing
    phase's completion marker, written last), byte for byte; another store version there is refused."""
    if not (final / "store.json").exists():
        return False
    if not config.output.url:
        return True

    return check_target(final, *remote_fs(output_url(config, final), config.output.storage_options))


def refuse_published(config: PipelineConfig, final: Path, config_hash: str) -> None:
    """Before building: a store version published at the URL from another config is refused in one line (the
    build would end in a publication that must not overwrite it)."""
    if not config.output.url:
        return

    url = output_url(config, final)
    there = published(*remote_fs(url, config.output.storage_options))
    if there is not None and _config_hash_of(there) != config_hash:
        raise ConfigError(
            f"field 'output.url': {url} already holds store version {final.parent.name}/{final.name} built from "
            "another config; refusing to overwrite it (name this one: version in [output])"
        )


def _config_hash_of(manifest: bytes) -> str | None:
    """The config hash a published store.json records (None for one that is not a store's manifest)."""
    try:
        return parse_artifact(
            manifest, "the published store.json", STORE_KIND, StoreManifest, (SCHEMA_VERSION,)
        ).config_hash
    except ArtifactError:
        return None


def publish(config: PipelineConfig, home: Home, final: Path, executors: Executors) -> None:
    """The publishing phase: store version `final` copied to `[output] url`, `store.json` last. A rerun after a
    failed publication resumes it (the objects already there are kept). With `[executor] work_url` each task
    publishes its own shards from the work URL (`PublishShards`: on the server where one storage profile holds
    both URLs), so no shard passes through this disk or process and this process lists none; it uploads the
    manifests it wrote."""
    url, options = output_url(config, final), config.output.storage_options
    log.info("publishing %s to %s", final, url)
    layout = WorkLayout(home.work(final.parent.name, final.name))
    remote = remote_work(config, layout)
    if remote is None:
        copy_store(final, url, options)
        return
    remote.reset_mirror()  # an executor run of its own; the driver's copy of the work directory has nothing to upload
    step = PublishShards(remote.url_of(layout.staged), remote.storage_options, url, options)
    staged = replace(executors, lines=False, remote=remote)
    staged.run("publish", [step], config.executor.tasks, layout.logs / "7-publish")
    publish_store(final, url, options)


def nothing_left(config: PipelineConfig, layout: WorkLayout) -> str | None:
    """When the funnel steps run so far kept no document: one line that says what removed them and what to change
    (before the tokenizer and the cell models are fitted on an empty sample); None while documents are left."""
    counted = [
        (name, merge_step(step_dir(layout.funnel, index, name))) for index, name in enumerate(funnel_steps(config))
    ]
    counted = [(name, sources) for name, sources in counted if sources]
    # each source as the last funnel step that counted it left it (a filter counts only the sources that list it)
    last = {source: counts.kept.documents for _, sources in counted for source, counts in sources.items()}
    if not counted or any(last.values()):
        return None
    read = sum(c.received.documents for c in counted[0][1].values())
    removals = []
    for name, sources in counted:
        reasons: dict[str, int] = {}
        for counts in sources.values():
            for reason, removed in counts.removed.items():
                reasons[reason] = reasons.get(reason, 0) + removed.documents
        if reasons:
            detail = ", ".join(f"{reason} {n:,}" for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]))
            removals.append(f"{name} {sum(reasons.values()):,} ({detail})")
    return (
        f"no document is left after {counted[-1][0]}: {read:,} read, removed by {'; '.join(removals) or 'none'} "
        f"(details in {layout.funnel}); give the pipeline documents that pass its filters, or loosen them "
        "([filters.<name>] options, or a source's `filters` list)"
    )


def store_lock(final: Path) -> Path:
    """The lock a store version's writer holds: beside the version's directory, which appears only at the end."""
    return final.with_name(f".{final.name}.lock")


@dataclass(frozen=True)
class StoreBuild:
    """One store version being built: its config, its work directory, where it goes, and how its executor runs
    go. `_build_store` passes it from phase to phase, and each phase's function takes it."""

    config: PipelineConfig
    layout: WorkLayout
    final: Path
    executors: Executors

    @classmethod
    def start(cls, config: PipelineConfig, home: Home, final: Path, executors: Executors, restart: bool) -> StoreBuild:
        """The work directory readied (fingerprints checked, a changed phase's outputs removed; its mirror of a
        work URL started afresh)."""
        layout = WorkLayout(home.work(final.parent.name, final.name))
        remote = remote_work(config, layout)
        if remote is not None:
            remote.reset_mirror()
            remote.pull(DRIVER_READS["start"])
        prepare_work(layout, config, restart, remote)
        return cls(config, layout, final, replace(executors, remote=remote))

    @property
    def remote(self) -> RemoteWork | None:
        return self.executors.remote

    def run(self, label: str, pipeline: list[PipelineStep], read: Callable[[], int] | None = None) -> None:
        """Phase `label`'s executor run of `executor.tasks` tasks, logged in its own folder."""
        self.executors.run(label, pipeline, self.config.executor.tasks, self.layout.phase_logs(label), read=read)


def _build_store(build: StoreBuild, notify: Callable[[str], None]) -> Path:
    """Every phase and the assembly into `build.final`, under the version's writer lock; `notify` is told each
    announced phase (`PHASE_LABELS`) as it starts. The phases are called in order, written out, so that what
    passes between them (cutoffs, decisions, stats) stays visible."""
    unread = _filter(build, notify)
    notify("tokenizer")
    tokenizer, post = _fit_tokenizer_and_models(build)
    notify("tokenize")
    _tokenize(build, post)
    funnel = store_funnel(build.config, build.layout, unread)
    _check_tokenized(build.layout, funnel)
    cutoffs = held_out_cutoffs(build.layout.runs, build.config.validation)
    notify("decontaminate")
    decision = decontaminate(build.config, build.layout, cutoffs, build.executors)
    notify("split")
    given_back = decision.cells if decision is not None else {}
    build.run("split", split_pipeline(build.config, build.layout, cutoffs, given_back))
    notify("assemble")
    stats, cell_stats = post.collect_stats()
    if decision is not None:
        stats = stats.model_copy(update={"decontamination": decision.record()})
    return _assemble(build, tokenizer, funnel, stats, cell_stats)


def _filter(build: StoreBuild, notify: Callable[[str], None]) -> list[NotRead]:
    """The filter run and duplicate finding; refused in one line when no document is left. Returns the files
    under the sources' folders that no source reads (logged, and kept in the funnel)."""
    config, layout = build.config, build.layout
    unread = unread_files(config)
    for entry in unread:
        log.warning("%s", entry.describe())
    notify("filter")
    build.run("filter", filter_pipeline(config, layout), read=lambda: live_records(layout.progress / "filter"))
    if config.dedup.exact or config.dedup.fuzzy:
        notify("dedup")
        run_dedup(config, layout, build.executors)
    if problem := nothing_left(config, layout):
        raise PipelineError(problem)
    return unread


def _fit_tokenizer_and_models(build: StoreBuild) -> tuple[Path, PostDedupSteps]:
    """The tokenizer and the post-dedup models. The sample (the tasks' deduplicated sketches up to the budget,
    only to fit) is read in place on a work URL."""
    with _in_place(build.layout, build.remote):
        return ensure_tokenizer(build.config, build.layout), post_dedup_steps(build.config, build.layout)


def _tokenize(build: StoreBuild, post: PostDedupSteps) -> None:
    """The tokenize run, after clearing its outputs and every later phase's when the staged store is gone
    (a finished store deleted since, say)."""
    layout, remote = build.layout, build.remote
    staged = layout.staged.exists() if remote is None else remote.exists(layout.staged)
    if not staged and not staging_dir(build.final).exists():
        for phase in FINGERPRINTED[FINGERPRINTED.index("tokenize") :]:
            for path in layout.outputs(phase):
                shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
                if remote is not None:
                    remote.remove(path)
    pipeline = tokenize_pipeline(build.config, layout, post.steps)
    build.run("tokenize", pipeline, read=lambda: live_records(layout.progress / "tokenize"))


def store_funnel(config: PipelineConfig, layout: WorkLayout, unread: list[NotRead]) -> Funnel:
    """The funnel steps' per-task counts summed into the store's funnel (tokens filled backwards from the last
    step), with the input files skipped, read in another encoding or not read, each logged."""
    names = funnel_steps(config)
    steps = build_funnel(
        [(n, merge_step(step_dir(layout.funnel, i, n))) for i, n in enumerate(names)],
        removed_tokens_from(list(layout.removed_tokens.glob("*.json"))),
    )
    for index, step in enumerate(steps):
        step.languages = merge_step(step_dir(layout.funnel, index, step.name), "languages")
    read = step_dir(layout.funnel, 0, "read")
    funnel = Funnel(stages=steps, bad_files=bad_files(read), not_read=unread, encodings=encodings(read))
    for bad in funnel.bad_files:
        log.warning("skipped unreadable input file %s (%s)", bad.file, bad.error)
    for read_as in funnel.encodings:
        log.warning("%s: not UTF-8, read as %s", read_as.file, read_as.encoding)
    _log_malformed(layout)
    return funnel


def _log_malformed(layout: WorkLayout, shown: int = 20) -> None:
    problems = malformed_report(layout)
    for malformed in problems[:shown]:
        where = next((f"{label} {malformed[label]}" for label in ("line", "row", "record") if label in malformed), "")
        log.warning("malformed input: %s %s (%s)", malformed["file"], where, malformed["reason"])
    if len(problems) > shown:
        log.warning("... and %d more malformed records, listed under %s", len(problems) - shown, layout.malformed)


def _check_tokenized(layout: WorkLayout, funnel: Funnel) -> None:
    """No document reached tokenization: one line with what each funnel step removed."""
    if tokenized_documents(layout):
        return
    removed = {step.name: sum(c.removed_documents() for c in step.sources.values()) for step in funnel.stages}
    raise PipelineError(
        f"no document reached tokenization; removed per funnel step: {removed} (details in {layout.funnel})"
    )


def _assemble(
    build: StoreBuild, tokenizer: Path, funnel: Funnel, stats: StoreStats, cell_stats: dict[str, dict[str, object]]
) -> Path:
    """The assembly phase: the store's files come down from a work URL (unless they go on to `[output] url`
    from there), then the manifests are written and the staged store renamed into place."""
    config, layout, remote = build.config, build.layout, build.remote
    if remote is not None:
        if config.output.url:  # the shards go from the work URL to the store URL, never through this disk
            layout.staged.mkdir(exist_ok=True)
        else:  # the store is built here: its files come down
            remote.pull(DRIVER_READS["assemble"])
        log.info("the driver read %d bytes from the work URL", remote.pulled_bytes)
    contents = StoreContents(
        name=build.final.parent.name,
        version=build.final.name,
        tokenizer=tokenizer,
        eos=config.tokenizer.eos,
        sources=[s.name for s in config.sources],
        shard_tokens=config.output.shard_tokens,
        pipeline_config=stored_config(config),
        funnel=funnel,
        stats=stats,
        cell_stats=cell_stats,
        models_dir=layout.models,
        validation=config.validation,
    )
    return assemble_store(build.final, layout.staged, layout.parts, contents)
