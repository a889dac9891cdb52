"""The training loop: batches from the loader, AdamW steps, the bias rule, metrics, checkpoints.

`train(...)` is the one entry point (the CLI, `millrace demo` and the ladder call it). It
runs named steps, each a hook point: `prepare_run` (config, runtime, loader) ->
`build_training` (model, optimizer, counters) -> `restore` (a checkpoint into every
`Stateful` part) -> per step `train_step`, `log_metrics`, `maybe_checkpoint` -> `finish`. Step
semantics: the learning-rate horizon is the config's `steps`, else the manifest's
total steps (the mixture's token budget); the `steps` argument is where this
invocation stops. So `--steps 20` then `--resume --steps 40` reproduces one
40-step run exactly.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from loader import Batch, MixtureStream
from loader.files import StoreAccess
from loader.held_out import fetch_held_out
from millrace.errors import ArtifactError, ConfigError, DiskFull, Interrupted, Terminated, disk_full_cause
from millrace.home import Home
from millrace.signals import StopRequest, TerminateSignal
from millrace.writer_lock import WriterLock
from mixtures.manifest import find_manifest, store_dir_of
from pipeline.store.format import Store
from trainer import checkpoint as ckpt
from trainer.balance import LayerLoad, balance_step
from trainer.branch import branch_checkpoint
from trainer.checkpoint_digest import verify_digests
from trainer.config import TrainConfig, load_train_config, resolve_train_config, with_vocab
from trainer.distributed import Runtime, close_runtime, init_runtime
from trainer.flops import count_params, flops_per_token
from trainer.layout import check_batch
from trainer.lr_schedule import learning_rate
from trainer.metrics import MetricsWriter
from trainer.model import Transformer
from trainer.model_build import build_model, build_optimizer, check_fits, compute_in_bf16
from trainer.moe import MoE
from trainer.norms import clip_gradients, group_squared_norms, router_bias_stats
from trainer.observers import ObservedRun, RunObservers, with_memory
from trainer.peak import peak_flops
from trainer.preemption import kept_checkpoint, lost_peer, lost_peer_error, preempted, resume_command, stop_agreed
from trainer.record_uploads import RecordUploads
from trainer.records import (
    LOCK_FILE,
    RUN_FILE,
    MetricsRecord,
    RunLabels,
)
from trainer.resume import recorded_settings
from trainer.run_record import (
    adopt_history,
    check_resumable,
    set_status,
    write_run_record,
    write_step_explanations,
)
from trainer.run_url import RemoteDir, pull_records, run_location
from trainer.samples import prompts_path
from trainer.state import LoaderPart, ModelState, OptimizerState, RngState, TrainerState
from trainer.step_progress import StepReporter
from trainer.train_request import TrainRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    run: str
    run_dir: Path
    start_step: int
    end_step: int
    losses: list[float]  # one per step run in this invocation
    seconds: float
    rank: int = 0  # the global rank that ran this invocation: only rank 0 writes the run's files
    files: str = ""  # where the run's files are: its directory on rank 0's node, or its `[run] url`


class StepAccumulator:
    """Loss sums and counts per cell and per source for one step, reduced over ranks."""

    def __init__(self, n_cells: int, n_sources: int, device: torch.device):
        self.loss = torch.zeros(2, dtype=torch.float64, device=device)  # sum, tokens
        self.cells = torch.zeros(2, n_cells, dtype=torch.float64, device=device)
        self.sources = torch.zeros(2, max(n_sources, 1), dtype=torch.float64, device=device)

    def add(
        self, token_losses: torch.Tensor, cell_ids: torch.Tensor, sources: tuple[torch.Tensor, torch.Tensor] | None
    ) -> None:
        """`sources`: (the batch's [b, S] source of each row's segments, its [b, L] segment ids), or None."""
        losses = token_losses.detach().double()
        self.loss[0] += losses.sum()
        self.loss[1] += losses.numel()
        per_row = losses.sum(1)
        self.cells[0].index_add_(0, cell_ids, per_row)
        self.cells[1].index_add_(0, cell_ids, torch.full_like(per_row, losses.shape[1]))
        if sources is not None:
            segment_sources, segment_ids = sources
            flat = torch.gather(segment_sources.long(), 1, segment_ids.long()).reshape(-1)
            self.sources[0].index_add_(0, flat, losses.reshape(-1))
            self.sources[1].index_add_(0, flat, torch.ones_like(losses.reshape(-1)))

    def reduce(self, runtime: Runtime) -> None:
        for tensor in (self.loss, self.cells, self.sources):
            runtime.all_reduce(tensor)


def to_device(batch: Batch, device: torch.device, rows: slice = slice(None)) -> dict[str, torch.Tensor]:
    """This rank's `rows` of the data-parallel batch (its share inside the expert group) as tensors. The ids and
    labels travel as the batch's one `tokens` buffer and are its views on the device (they share memory)."""
    tensors = {
        "tokens": torch.from_numpy(batch.tokens),
        "segment_ids": torch.from_numpy(batch.segment_ids),
        "positions": torch.from_numpy(batch.positions),
        "cell_ids": torch.from_numpy(batch.cell_ids.astype(np.int64)),
    }
    if batch.segment_sources is not None:
        tensors["segment_sources"] = torch.from_numpy(batch.segment_sources)
    if device.type != "cuda":
        moved = {k: v[rows] for k, v in tensors.items()}
    else:
        # A non-blocking copy is asynchronous only from pinned memory (from the loader's pageable arrays it
        # is a synchronous one): stage each array in pinned memory (torch's caching host allocator) first.
        moved = {k: v[rows].pin_memory().to(device, non_blocking=True) for k, v in tensors.items()}
    tokens = moved.pop("tokens")
    return {"input_ids": tokens[:, :-1], "labels": tokens[:, 1:], **moved}


@dataclass
class RunPlan:
    """What one invocation of `train` will do, resolved and validated before any model is built."""

    config_path: Path
    config: TrainConfig
    home: Home
    mixture: str
    revision: str
    run: str
    manifest_path: Path
    runtime: Runtime
    stream: MixtureStream
    store: Store
    horizon: int  # the learning-rate schedule's length
    stop: int  # where this invocation stops
    checkpoint_every: int
    allow_config_change: bool = False
    from_run: str | None = None  # branch: start from this run's checkpoint (`trainer.branch`)
    trust_unverified: bool = False  # load a checkpoint without digests.json (`--trust-unverified`)
    labels: RunLabels = field(default_factory=RunLabels)  # `--tag` / `--note`, into run.json

    @property
    def run_dir(self) -> Path:
        return self.home.run(self.run)

    @property
    def remote(self) -> RemoteDir | None:
        """The run at `[run] url` (`trainer.run_url`), or None when it lives in its home directory only."""
        return self.remote_of(self.run)

    def remote_of(self, run: str) -> RemoteDir | None:
        return run_location(self.config.run.url, self.config.run.storage_options, run)

    @property
    def checkpoints(self) -> ckpt.Place:
        return self.checkpoints_of(self.run)

    def checkpoints_of(self, run: str) -> ckpt.Place:
        """Where run `run`'s checkpoints are: at the URL when the config names one, else in its home directory."""
        remote = self.remote_of(run)
        return remote / "checkpoints" if remote is not None else self.home.run(run) / "checkpoints"

    def record_uploads(self) -> RecordUploads | None:
        """Rank 0's uploader of the run's records to the URL (`trainer.record_uploads`); None without one."""
        if self.remote is None or self.runtime.rank != 0:
            return None
        return RecordUploads(self.run_dir, self.remote)


@dataclass
class Training:
    """The live objects of one run: what a step reads and updates, and what a checkpoint holds."""

    plan: RunPlan
    model: Transformer
    optimizer: torch.optim.AdamW
    state: TrainerState
    start: int = 0
    uploads: RecordUploads | None = None  # rank 0's background copies of the records to `[run] url`

    def push_records(self) -> None:
        """Queue the run's records for its URL (after a checkpoint, at the end), the previous push done first so
        the URL's records cover the checkpoint before last; nothing without a URL or off rank 0."""
        if self.uploads is not None:
            self.uploads.flush()
            self.uploads.submit()

    @property
    def parts(self) -> dict[str, Any]:
        """The checkpointed `Stateful` parts, in load order (the cheap counters refuse a wrong checkpoint first)."""
        return {
            "trainer": self.state,
            "model": ModelState(self.model),
            "optim": OptimizerState(self.model, self.optimizer),
            "loader": LoaderPart(self.plan.stream),
            "rng": RngState(),
        }

    @property
    def moe_layers(self) -> list[tuple[int, MoE]]:
        return self.model.indexed_moe_layers()


@dataclass
class StepResult:
    step: int  # the step just completed (1-based count of optimizer steps)
    phase: str
    loss: float
    lr: float
    grad_norm: float
    global_tokens: int
    waited: float  # seconds spent waiting for the batch
    elapsed: float
    loads: list[LayerLoad]
    acc: StepAccumulator
    skipped: bool = False  # non-finite loss or gradient: no update, no bias rule


def default_run_name(config_path: Path, mixture: str, revision: str) -> str:
    return f"{config_path.stem}-{mixture}-{revision}"


def prepare_run(config_path: Path | str, home: Home | Path | str | None, request: TrainRequest) -> RunPlan:
    """Config, runtime, loader and store; refuses bad step counts and an existing run without `resume`."""
    config_path = resolve_train_config(config_path)  # a file, or a shipped config by name
    config = load_train_config(config_path)
    home = home if isinstance(home, Home) else Home.resolve(home)
    if config.samples.enabled and config.samples.prompts != "auto":  # refused before anything is written
        prompts_path(config.samples.prompts, config_path, home.root)
    mixture = request.mixture or config.data.mixture
    revision = request.revision or config.data.revision
    run = request.run or default_run_name(config_path, mixture, revision)
    manifest_path = find_manifest(home, mixture, revision)
    runtime = init_runtime(config.parallel, config.moe.n_routed_experts)
    stream = open_stream(config, runtime, manifest_path)
    store = Store(store_dir_of(manifest_path))
    config = _with_store_vocab(config, store, config_path)
    horizon, stop = step_range(config, config_path, stream, request.steps)
    try:
        check_batch(runtime.layout, stream.manifest.global_batch, config.data.micro_batches)
    except ConfigError as exc:
        raise ConfigError(f"{config_path}: {exc}") from None
    plan = RunPlan(
        config_path=config_path,
        config=config,
        home=home,
        mixture=mixture,
        revision=revision,
        run=run,
        manifest_path=manifest_path,
        runtime=runtime,
        stream=stream,
        store=store,
        horizon=horizon,
        stop=stop,
        checkpoint_every=config.checkpoint.every if request.checkpoint_every is None else request.checkpoint_every,
        allow_config_change=request.allow_config_change,
        from_run=request.from_run,
        trust_unverified=request.trust_unverified,
        labels=request.labels,
    )
    own = ckpt.latest_checkpoint(plan.checkpoints)
    if own and not request.resume:
        raise ConfigError(
            f"run {run!r} already has checkpoints in {plan.checkpoints}; pass --resume or choose another --run"
        )
    if request.from_run and not own:
        branch_source(plan)  # refused here, before anything is written
    return plan


def open_stream(config: TrainConfig, runtime: Runtime, manifest_path: Path) -> MixtureStream:
    """This rank's loader over the manifest (the held-out shards fetched first when the store is remote)."""
    data = config.data
    if data.store_url and (config.eval.enabled or config.samples.enabled):
        fetch_held_out(manifest_path, data.store_url, data.storage_options)
    return MixtureStream(
        manifest_path,
        rank=runtime.data_rank,
        world=runtime.layout.data_parallel,
        prefetch=data.prefetch,
        store=StoreAccess(url=data.store_url or None, storage_options=data.storage_options),
    )


def step_range(config: TrainConfig, config_path: Path, stream: MixtureStream, steps: int | None) -> tuple[int, int]:
    """The learning-rate horizon and where this invocation stops; neither past the mixture's steps, nor the
    stop past the horizon."""
    horizon = config.steps or stream.steps
    stop = steps or horizon
    manifest = stream.manifest
    for name, value in (("steps", horizon), ("--steps", stop)):
        if value > stream.steps:
            raise ConfigError(
                f"{name} = {value} exceeds the {stream.steps} steps of {manifest.mixture}/{manifest.revision} "
                f"({stream.path})"
            )
    if stop > horizon:
        raise ConfigError(f"--steps {stop} is past the learning-rate horizon of {horizon} steps set in {config_path}")
    return horizon, stop


def _with_store_vocab(config: TrainConfig, store: Store, config_path: Path) -> TrainConfig:
    if store.manifest.tokenizer is None:
        raise ArtifactError(f"{store.path / 'store.json'}: the store names no tokenizer; cannot size the vocabulary")
    config = with_vocab(config, store.manifest.tokenizer.vocab_size)
    if config.model.vocab_size < store.manifest.tokenizer.vocab_size:
        raise ConfigError(
            f"{config_path}: field 'model.vocab_size': {config.model.vocab_size} is smaller than the store's "
            f"vocabulary ({store.manifest.tokenizer.vocab_size})"
        )
    return config


def build_training(plan: RunPlan) -> Training:
    """The model (sharded over ranks), its optimizer and fresh counters."""
    check_fits(plan.config, plan.runtime, plan.config_path)
    model = build_model(plan.config, plan.runtime)
    optimizer = build_optimizer(model, plan.config)
    state = TrainerState(
        horizon=plan.horizon,
        manifest_hash=plan.stream.manifest_hash,
        cell_names=plan.stream.cell_names,
        settings=recorded_settings(plan.config),
        manifest=plan.stream.manifest,
        allow_config_change=plan.allow_config_change,
    )
    return Training(plan=plan, model=model, optimizer=optimizer, state=state)


def restore(training: Training, resume: bool) -> int:
    """Load the run's latest checkpoint into every part when resuming; returns the step to start at."""
    plan = training.plan
    resume = resume or plan.from_run is not None
    source, latest = resume_source(plan) if resume else (plan.run, None)
    if resume and latest:
        remote = plan.remote_of(source)
        if remote is not None and plan.runtime.rank == 0:  # a node that never saw the run: its records first
            pull_records(remote, plan.home.run(source), keep_longer=True)
        began = time.perf_counter()
        verify_digests(latest[1], plan.trust_unverified)
        training.state.expect_cells(ckpt.saved_keys(latest[1], "trainer.realised_tokens_per_cell."))
        ckpt.load(latest[1], training.parts)
        seconds = time.perf_counter() - began  # a swarm's proxies restore one checkpoint each (bench/proxy_swarm.py)
        log.info("resumed run %s at step %d from %s in %.3f s", plan.run, training.state.step, latest[1], seconds)
        if source != plan.run:
            adopt_history(plan, source, training.state.step)
    elif resume:
        log.info("run %s has no checkpoint yet; starting at step 0", plan.run)
    training.start = training.state.step
    if training.start > plan.stop:
        raise ConfigError(f"--steps {plan.stop} is before the checkpoint of run {plan.run!r} at step {training.start}")
    return training.start


def resume_source(plan: RunPlan) -> tuple[str, tuple[int, ckpt.Place] | None]:
    """The run whose latest checkpoint a resume loads: this run's own; for a run not started yet on a
    revision that continues another, the ancestor's run of the same config (`<config>-<mixture>-<parent>`):
    the mixture switch under a new run id, as the reference run did."""
    latest = ckpt.latest_checkpoint(plan.checkpoints)
    if latest:
        return plan.run, latest
    if plan.from_run:
        return plan.from_run, branch_source(plan)
    for ancestor in plan.stream.manifest.ancestors:
        run = default_run_name(plan.config_path, plan.mixture, ancestor.revision)
        found = ckpt.latest_checkpoint(plan.checkpoints_of(run))
        if found:
            log.info(
                "run %s starts from run %s's checkpoint at step %d (revision %s continues %s)",
                plan.run,
                run,
                found[0],
                plan.revision,
                ancestor.revision,
            )
            return run, found
    return plan.run, None


def branch_source(plan: RunPlan) -> tuple[int, ckpt.Place]:
    """`--from-run`: the source run's newest checkpoint this run may start from (`trainer.branch`)."""
    assert plan.from_run is not None
    remote = plan.remote_of(plan.from_run)
    held = (plan.home.run(plan.from_run) / RUN_FILE).exists()
    if remote is not None and plan.runtime.rank == 0 and not held:  # its run.json names the revision it trained
        # only on a node that never saw the source: here its own records are newer than the URL's while it
        # trains (they go up after each checkpoint), and copying over them would drop its latest lines
        pull_records(remote, plan.home.run(plan.from_run))
    manifest, digest = plan.stream.manifest, plan.stream.manifest_hash
    places = plan.checkpoints_of(plan.from_run)
    return branch_checkpoint(plan.home, plan.from_run, plan.run, places, manifest, digest, plan.stop)


def forward_backward(
    training: Training, data: dict[str, torch.Tensor], global_tokens: float, observers: RunObservers
) -> StepAccumulator:
    """Every micro-batch's share of the global mean loss, back-propagated; returns the step's loss sums."""
    plan = training.plan
    runtime, micro, local_batch = plan.runtime, plan.config.data.micro_batches, len(data["labels"])
    autocast = compute_in_bf16(plan.config, runtime)
    acc = StepAccumulator(len(plan.stream.cell_names), len(plan.stream.source_names), runtime.device)
    for chunk in range(micro):
        rows = slice(chunk * local_batch // micro, (chunk + 1) * local_batch // micro)
        with torch.autocast(runtime.device.type, dtype=torch.bfloat16, enabled=autocast):
            token_losses, aux = training.model(
                data["input_ids"][rows], data["positions"][rows], data["segment_ids"][rows], data["labels"][rows]
            )
        objective = token_losses.sum() / global_tokens + aux / (runtime.world * micro)
        objective.backward()
        observers.forwarded(training.model)
        sources = data.get("segment_sources")
        acc.add(
            token_losses,
            data["cell_ids"][rows],
            None if sources is None else (sources[rows], data["segment_ids"][rows]),
        )
    return acc


def train_step(training: Training, batches: Iterator[Batch], step: int, observers: RunObservers) -> StepResult:
    """One optimizer step at 0-based `step`: batch, forward/backward, clip, AdamW, the bias rule, counters.

    A step whose loss or gradient is not finite is skipped: no AdamW update and no bias rule (`observers`
    counts it and stops the run after too many in a row)."""
    plan, model, optimizer = training.plan, training.model, training.optimizer
    runtime, config, stream = plan.runtime, plan.config, plan.stream
    t0 = time.perf_counter()
    batch = next(batches)
    waited = time.perf_counter() - t0
    data = to_device(batch, runtime.device, runtime.rows(stream.local_batch))
    lr = learning_rate(step, plan.horizon, config.optimizer, config.schedule)
    for group in optimizer.param_groups:
        group["lr"] = lr
    global_tokens = float(data["labels"].numel() * runtime.world)
    acc = forward_backward(training, data, global_tokens, observers)
    norm = clip_gradients(model, config.optimizer.grad_clip, runtime)
    acc.reduce(runtime)
    # The step's one device-to-host read (the balance figures are another): loss, gradient norm, cell tokens.
    loss_sum, loss_tokens, grad_norm, *cell_tokens = torch.cat([acc.loss, norm[None], acc.cells[1]]).tolist()
    loss = loss_sum / loss_tokens
    skipped = observers.skip(step + 1, loss, grad_norm)
    if not skipped:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    loads = balance_step(training.moe_layers, 0.0 if skipped else config.moe.bias_update_rate)
    observers.loaded(step + 1, loads)
    # The reduced per-cell token counts (rows x seq_len per cell) are the step's realised tokens per cell.
    training.state.advance(int(global_tokens), cell_tokens)
    return StepResult(
        step=step + 1,
        phase=batch.phase,
        loss=loss,
        lr=lr,
        grad_norm=grad_norm,
        global_tokens=int(global_tokens),
        waited=waited,
        elapsed=time.perf_counter() - t0,
        loads=loads,
        acc=acc,
        skipped=skipped,
    )


def log_metrics(
    training: Training, result: StepResult, writer: MetricsWriter | None, peak: float, observers: RunObservers
) -> None:
    """Every `log_every` steps, at a skipped step and at the stop: one metrics line with the health alerts
    that start and end there (norms and aux terms are reduced on every rank)."""
    plan = training.plan
    if result.step % plan.config.metrics.log_every and result.step != plan.stop and not result.skipped:
        return
    group_squared = group_squared_norms(training.model, plan.runtime)
    param_squared = sum(group_squared.values())
    bias_stats, bias_squared = router_bias_stats(training.model)
    tokens_per_second = result.global_tokens / result.elapsed
    per_token = flops_per_token(plan.config, plan.stream.seq_len)
    aux_loss, z_loss = observers.aux_losses()
    record = MetricsRecord(
        step=result.step,
        time=time.time(),
        phase=result.phase,
        loss=result.loss,
        lr=result.lr,
        tokens=training.state.tokens,
        tokens_per_second=tokens_per_second,
        mfu=per_token * tokens_per_second / (peak * plan.runtime.world),
        data_wait_fraction=result.waited / result.elapsed,
        grad_norm=result.grad_norm,
        param_norm=math.sqrt(param_squared),
        param_norm_with_router_bias=math.sqrt(param_squared + bias_squared),
        param_norm_per_group={group: math.sqrt(value) for group, value in group_squared.items()},
        router_bias=bias_stats,
        expert_load=[load.record() for load in result.loads],
        loss_per_cell=_means(plan.stream.cell_names, result.acc.cells),
        loss_per_source=_means(plan.stream.source_names, result.acc.sources),
        realised_tokens_per_cell=dict(training.state.realised_tokens_per_cell),
        step_seconds=result.elapsed,
        aux_loss=aux_loss,
        z_loss=z_loss,
        skipped=result.skipped,
        skipped_steps=observers.health.skipped_total,
    )
    record = observers.with_alerts(with_memory(record, plan.runtime.device))
    if writer is not None:
        writer.write(record)


def maybe_checkpoint(training: Training, step: int) -> ckpt.Place | None:
    """Checkpoint after `step` on the cadence, and at the stop when the config asks for it (with the run's
    records copied to its URL, when it has one)."""
    plan = training.plan
    every, at_end = plan.checkpoint_every, plan.config.checkpoint.at_end
    if (every and step % every == 0) or (step == plan.stop and at_end):
        written = ckpt.save(plan.checkpoints, step, training.parts, plan.config.checkpoint.keep)
        training.push_records()
        return written
    return None


def finish(training: Training) -> None:
    """The run's end on rank 0: its step explanations, then every record at its URL, and only then its status,
    completed (the horizon reached) or stopped (a later `--resume` continues it), pushed again. A run killed
    before the status is written is still `running` (SIGKILL) or `interrupted` (SIGTERM, Ctrl-C), so a rerun
    (`--resume`, the fleet, which skips only finished runs) finishes it: a finished run's records are all at
    its URL."""
    plan = training.plan
    if plan.runtime.rank != 0:
        return
    try:
        write_step_explanations(plan)
        training.push_records()
        if training.uploads is not None:
            training.uploads.flush()
    except KeyboardInterrupt as exc:  # SIGTERM too: the loop's `StopRequest` has ended
        set_status(plan.run_dir, "interrupted")
        stopped = Terminated if isinstance(exc, TerminateSignal) else Interrupted
        raise stopped(
            f"run {plan.run} stopped after its last step {plan.stop}, before its end was recorded "
            f"({kept_checkpoint(plan)}); finish it with: {resume_command(plan)}"
        ) from None
    except Exception:  # a failed upload: not finished, so a rerun ends it again
        set_status(plan.run_dir, "failed")
        raise
    set_status(plan.run_dir, "completed" if plan.stop == plan.horizon else "stopped")
    training.push_records()  # run.json with its status; the uploader is flushed and joined on the way out


def train(
    config_path: Path | str, home: Home | Path | str | None = None, request: TrainRequest | None = None
) -> RunResult:
    """Train the config's model on a built mixture as `request` asks (`TrainRequest`: which mixture, where
    to stop, resume or branch); returns the losses of the steps run here. A run branched `from_run` that
    already has its own checkpoint continues from that."""
    request = request or TrainRequest()
    plan = prepare_run(config_path, home, request)
    try:
        with run_writer_lock(plan):
            return _train(plan, request.resume, request.progress)
    finally:
        close_runtime(plan.runtime)


def run_writer_lock(plan: RunPlan) -> contextlib.AbstractContextManager[object]:
    """One writer per run (rank 0 holds it; torchrun ends the other ranks if it is refused); its heartbeat
    tells `train status` and `runs list` a live run from a killed one (`stale`)."""
    if plan.runtime.rank != 0:
        return contextlib.nullcontext()
    return WriterLock(plan.run_dir / LOCK_FILE, f"run {plan.run!r}")


def _train(plan: RunPlan, resume: bool, progress: bool) -> RunResult:
    training = build_training(plan)
    start = restore(training, resume)
    uploads = plan.record_uploads()
    with uploads if uploads is not None else contextlib.nullcontext():  # flushed and joined on every way out
        training.uploads = uploads
        return _train_from(training, start, progress)


def _train_from(training: Training, start: int, progress: bool) -> RunResult:
    plan = training.plan
    runtime = plan.runtime
    peak, peak_source = peak_flops(plan.config.metrics.peak_flops_per_device, runtime.device)
    # the streams first: a damaged one is refused before run.json says `running`, and before any is cut
    if runtime.rank == 0:
        check_resumable(plan.run_dir, start)
    writer = MetricsWriter(plan.run_dir, start, plan.config.metrics.tensorboard) if runtime.rank == 0 else None
    observers = _observers(plan, start, peak_source)
    if runtime.rank == 0:
        write_run_record(training, peak, peak_source)
    _log_start(training, peak, peak_source)
    reporter = StepReporter(training, progress)
    losses: list[float] = []
    began = time.perf_counter()
    training.model.train()
    try:
        _run_steps(training, observers, writer, peak, reporter, losses)
    except KeyboardInterrupt:
        if runtime.rank == 0:
            set_status(plan.run_dir, "interrupted")
        raise Interrupted(
            f"run {plan.run} stopped after step {training.state.step} ({kept_checkpoint(plan)}); continue it "
            f"with: {resume_command(plan)}"
        ) from None
    except Terminated:
        raise
    except BaseException as exc:
        if runtime.rank == 0:
            set_status(plan.run_dir, "failed")
        full = disk_full_cause(exc)
        if full is not None:
            raise DiskFull(
                f"no space left on device writing {full.filename or plan.run_dir}: run {plan.run} failed "
                f"after step {training.state.step} ({kept_checkpoint(plan)}); free space, then continue it with: "
                f"{resume_command(plan)}"
            ) from None
        if (peer := lost_peer(exc)) is not None:
            raise lost_peer_error(plan, training.state.step, peer) from None
        raise
    finally:
        reporter.close()
        if writer is not None:
            writer.close()
        observers.close()
    finish(training)
    return RunResult(
        run=plan.run,
        run_dir=plan.run_dir,
        start_step=start,
        end_step=plan.stop,
        losses=losses,
        seconds=time.perf_counter() - began,
        rank=runtime.rank,
        files=str(plan.remote.url if plan.remote is not None else plan.run_dir),
    )


def _observers(plan: RunPlan, start: int, peak_source: str) -> RunObservers:
    """Health, evaluation and samples for this invocation's steps (MFU alerts only against a published peak)."""
    observed = ObservedRun(
        config=plan.config,
        config_path=plan.config_path,
        manifest_path=plan.manifest_path,
        home=plan.home.root,
        run_dir=plan.run_dir,
        start=start,
        stop=plan.stop,
        horizon=plan.horizon,
        checkpoint_every=plan.checkpoint_every,
        source_names=plan.stream.source_names,
        tokenizer_store=plan.stream.tokenizer_store,
    )
    runtime = plan.runtime
    published = runtime.device.type == "cuda" and not peak_source.startswith("measured")
    return RunObservers(observed, runtime, compute_in_bf16(plan.config, runtime), published)


def _run_steps(
    training: Training,
    observers: RunObservers,
    writer: MetricsWriter | None,
    peak: float,
    reporter: StepReporter,
    losses: list[float],
) -> None:
    """The steps from the start to the stop, each logged, observed and checkpointed on its cadence; a SIGTERM
    on any rank stops every rank after the same step (`trainer.preemption`)."""
    plan = training.plan
    with StopRequest() as stop:
        batches = plan.stream.iterate(start_step=training.start, end_step=plan.stop)
        for step in range(training.start, plan.stop):
            result = train_step(training, batches, step, observers)
            losses.append(result.loss)
            observers.after_step(training.model, result.step, training.state.tokens)
            log_metrics(training, result, writer, peak, observers)
            reporter.step(result)
            written = maybe_checkpoint(training, result.step)
            if stop_agreed(stop, plan.runtime) and result.step < plan.stop:
                raise preempted(training, written)


def _log_start(training: Training, peak: float, peak_source: str) -> None:
    plan = training.plan
    params = count_params(plan.config)
    log.info(
        "run %s: %s total / %s active parameters, %.3g FLOPs/token, steps %d..%d of %d, world %d, peak %.3g (%s)",
        plan.run,
        f"{params.total:,}",
        f"{params.active:,}",
        flops_per_token(plan.config, plan.stream.seq_len),
        training.start,
        plan.stop,
        plan.horizon,
        plan.runtime.world,
        peak,
        peak_source,
    )


def _means(names: list[str], sums: torch.Tensor) -> dict[str, float | None]:
    totals, counts = sums.tolist()  # one device read, not two per name
    return {name: totals[i] / counts[i] for i, name in enumerate(names) if i < len(totals) and counts[i] > 0}
