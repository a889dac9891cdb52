"""The training loop: batches from the loader, AdamW steps, the bias rule, metrics, checkpoints.

`train(...)` is the one entry point (the CLI and `millrace demo` call it). Step
semantics: the learning-rate horizon is the config's `steps`, else the manifest's
total steps (the mixture's token budget); the `steps` argument is where this
invocation stops. So `--steps 20` then `--resume --steps 40` reproduces one
40-step run exactly.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from loader import Batch, MixtureStream
from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from mixtures.manifest import find_manifest, store_dir_of
from pipeline.store import Store
from trainer import checkpoint as ckpt
from trainer.balance import balance_step
from trainer.config import TrainConfig, load_train_config, with_vocab
from trainer.distributed import Runtime, init_runtime, parallelize
from trainer.flops import count_params, flops_per_token
from trainer.metrics import MetricsWriter, read_run, write_run
from trainer.model import Transformer
from trainer.moe import local_tensor
from trainer.peak import peak_flops
from trainer.schedule import learning_rate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    run: str
    run_dir: Path
    start_step: int
    end_step: int
    losses: list[float]  # one per step run in this invocation
    seconds: float


def check_fits(config: TrainConfig, runtime: Runtime, config_path: Path) -> None:
    """Every rank builds the whole model before sharding it: refuse a model that cannot fit (535B on a laptop)."""
    needed = count_params(config).total * 4
    if runtime.device.type == "cuda":
        available = torch.cuda.mem_get_info(runtime.device)[0]
    else:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // max(runtime.world, 1)
    if needed > available // 2:
        raise ConfigError(
            f"{config_path}: the model needs {needed / 2**30:,.1f} GiB of fp32 weights per rank before sharding, "
            f"{available / 2**30:,.1f} GiB is free here; size it on paper with `millrace train plan {config_path}`"
        )


def build_model(config: TrainConfig, runtime: Runtime) -> Transformer:
    torch.manual_seed(config.parallel.seed)
    model = Transformer(config.model, config.moe)
    model.init_weights(config.parallel.seed)
    if config.parallel.param_dtype == "bfloat16":
        model = model.to(torch.bfloat16)
        for layer in model.moe_layers():  # balancing state stays in full precision (bf16 cannot count past 256)
            layer.router.expert_bias.data = layer.router.expert_bias.data.float()
            layer.router.step_entropy.data = layer.router.step_entropy.data.double()
            layer.step_counts.data = layer.step_counts.data.float()
    model = model.to(runtime.device)
    return parallelize(model, runtime, config.parallel)


def build_optimizer(model: Transformer, config: TrainConfig) -> torch.optim.AdamW:
    """Weight decay on matrices only; the router bias is a buffer and never reaches the optimizer."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = config.optimizer
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": opt.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=opt.lr, betas=opt.betas, eps=opt.eps, foreach=True,
    )


def squared_norm(tensors, runtime: Runtime) -> float:
    """Σ x² over tensors whose elements each live on exactly one rank (FSDP or expert shards)."""
    total = torch.zeros((), dtype=torch.float64, device=runtime.device)
    for tensor in tensors:
        total += local_tensor(tensor).detach().double().pow(2).sum()
    return float(runtime.all_reduce(total))


def clip_gradients(model: Transformer, max_norm: float, runtime: Runtime) -> float:
    """Gradient norm over gradient-trained parameters only (the bias has no gradient), then clip."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = math.sqrt(squared_norm(grads, runtime))
    if max_norm > 0 and norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for grad in grads:
            local_tensor(grad).mul_(scale)
    return norm


def router_bias_stats(model: Transformer) -> tuple[list[dict], float]:
    stats, squared = [], 0.0
    for index, block in enumerate(model.layers):
        if block.is_moe:
            bias = block.ffn.router.expert_bias.detach().double()
            squared += float(bias.pow(2).sum())
            stats.append({"layer": index, "norm": float(bias.norm()), "max_abs": float(bias.abs().max())})
    return stats, squared


def planned_tokens_per_cell(stream: MixtureStream) -> dict[str, int]:
    manifest = stream.manifest
    planned = {name: 0 for name in sorted(manifest.cells)}
    for phase in manifest.phases:
        for cell, count in phase.counts.items():
            planned[cell] += count * manifest.seq_len
    return planned


class StepAccumulator:
    """Loss sums and counts per cell and per source for one step, reduced over ranks."""

    def __init__(self, n_cells: int, n_sources: int, device: torch.device):
        self.loss = torch.zeros(2, dtype=torch.float64, device=device)  # sum, tokens
        self.cells = torch.zeros(2, n_cells, dtype=torch.float64, device=device)
        self.sources = torch.zeros(2, max(n_sources, 1), dtype=torch.float64, device=device)

    def add(self, token_losses: torch.Tensor, cell_ids: torch.Tensor, sources: torch.Tensor | None) -> None:
        losses = token_losses.detach().double()
        self.loss[0] += losses.sum()
        self.loss[1] += losses.numel()
        per_row = losses.sum(1)
        self.cells[0].index_add_(0, cell_ids, per_row)
        self.cells[1].index_add_(0, cell_ids, torch.full_like(per_row, losses.shape[1]))
        if sources is not None:
            flat = sources.reshape(-1).long()
            self.sources[0].index_add_(0, flat, losses.reshape(-1))
            self.sources[1].index_add_(0, flat, torch.ones_like(losses.reshape(-1)))

    def reduce(self, runtime: Runtime) -> None:
        for tensor in (self.loss, self.cells, self.sources):
            runtime.all_reduce(tensor)


def to_device(batch: Batch, device: torch.device) -> dict[str, torch.Tensor]:
    tensors = {
        "input_ids": torch.from_numpy(batch.input_ids),
        "labels": torch.from_numpy(batch.labels),
        "segment_ids": torch.from_numpy(batch.segment_ids),
        "positions": torch.from_numpy(batch.positions),
        "cell_ids": torch.from_numpy(batch.cell_ids.astype(np.int64)),
    }
    if batch.sources is not None:
        tensors["sources"] = torch.from_numpy(batch.sources)
    return {k: v.to(device, non_blocking=True) for k, v in tensors.items()}


def train(
    config_path: Path | str,
    home: Home | Path | str | None = None,
    mixture: str | None = None,
    revision: str | None = None,
    steps: int | None = None,
    run: str | None = None,
    checkpoint_every: int | None = None,
    resume: bool = False,
    progress: bool = False,
) -> RunResult:
    """Train the config's model on a built mixture; returns the losses of the steps run here."""
    config_path = Path(config_path)
    config = load_train_config(config_path)
    home = home if isinstance(home, Home) else Home.resolve(home)
    mixture = mixture or config.data.mixture
    revision = revision or config.data.revision
    run = run or f"{config_path.stem}-{mixture}-{revision}"
    manifest_path = find_manifest(home, mixture, revision)
    runtime = init_runtime()
    stream = MixtureStream(manifest_path, rank=runtime.rank, world=runtime.world, prefetch=config.data.prefetch)
    store = Store(store_dir_of(manifest_path))
    if store.manifest.tokenizer is None:
        raise ArtifactError(f"{store.path / 'store.json'}: the store names no tokenizer; cannot size the vocabulary")
    config = with_vocab(config, store.manifest.tokenizer.vocab_size)
    if config.model.vocab_size < store.manifest.tokenizer.vocab_size:
        raise ConfigError(
            f"{config_path}: field 'model.vocab_size': {config.model.vocab_size} is smaller than the store's "
            f"vocabulary ({store.manifest.tokenizer.vocab_size})"
        )
    horizon = config.steps or stream.steps
    stop = steps or horizon
    for name, value in (("steps", horizon), ("--steps", stop)):
        if value > stream.steps:
            raise ConfigError(f"{name} = {value} exceeds the {stream.steps} steps of {mixture}/{revision} ({manifest_path})")
    if stop > horizon:
        raise ConfigError(f"--steps {stop} is past the learning-rate horizon of {horizon} steps set in {config_path}")
    local_batch = stream.local_batch
    micro = config.data.micro_batches
    if local_batch % micro:
        raise ConfigError(f"{config_path}: field 'data.micro_batches': {micro} does not divide the per-rank batch {local_batch}")

    run_dir = home.run(run)
    checkpoints = run_dir / "checkpoints"
    latest = ckpt.latest_checkpoint(checkpoints)
    if latest and not resume:
        raise ConfigError(f"run {run!r} already has checkpoints in {checkpoints}; pass --resume or choose another --run")

    check_fits(config, runtime, config_path)
    model = build_model(config, runtime)
    optimizer = build_optimizer(model, config)
    cell_names = stream.cell_names
    trainer_state: dict[str, Any] = {
        "step": 0,
        "tokens": 0,
        "horizon": horizon,
        "manifest_hash": stream.manifest_hash,
        "realised_tokens_per_cell": {name: 0 for name in cell_names},
    }
    start = 0
    if resume and latest:
        loaded, rank_state = ckpt.load(latest[1], model, optimizer, dict(trainer_state), {"loader": stream.state_dict()})
        if loaded["manifest_hash"] != stream.manifest_hash:
            raise ArtifactError(f"{latest[1]}: checkpoint is from manifest {loaded['manifest_hash']}, not {stream.manifest_hash}")
        if loaded["horizon"] != horizon:
            raise ConfigError(f"{latest[1]}: checkpoint's learning-rate horizon is {loaded['horizon']} steps, this run's is {horizon}")
        stream.load_state_dict(rank_state["loader"])
        trainer_state = loaded
        start = int(loaded["step"])
        log.info("resumed run %s at step %d from %s", run, start, latest[1])
    elif resume:
        log.info("run %s has no checkpoint yet; starting at step 0", run)
    if start > stop:
        raise ConfigError(f"--steps {stop} is before the checkpoint of run {run!r} at step {start}")

    params = count_params(config)
    per_token = flops_per_token(config, stream.seq_len)
    peak, peak_source = peak_flops(config.metrics.peak_flops_per_device, runtime.device)
    if runtime.rank == 0:
        write_run(run_dir, {
            "run": run,
            "config": {"path": str(config_path), **config.model_dump(mode="json")},
            "mixture": mixture,
            "revision": revision,
            "manifest_hash": stream.manifest_hash,
            "manifest_path": str(manifest_path),
            "store": {"name": store.name, "version": store.version},
            "planned_tokens_per_cell": planned_tokens_per_cell(stream),
            "total_steps": horizon,
            "stop_step": stop,
            "start_step": start,
            "status": "running",
            "world_size": runtime.world,
            "params": params.as_dict(),
            "flops_per_token": per_token,
            "peak_flops_per_device": peak,
            "peak_flops_source": peak_source,
        })
    writer = MetricsWriter(run_dir, start, config.metrics.tensorboard) if runtime.rank == 0 else None
    every = config.checkpoint.every if checkpoint_every is None else checkpoint_every
    moe_layers = [(i, block.ffn) for i, block in enumerate(model.layers) if block.is_moe]
    autocast = runtime.device.type == "cuda" and config.parallel.bf16_autocast
    sources_count = len(stream.source_names)
    losses: list[float] = []
    log.info("run %s: %s total / %s active parameters, %.3g FLOPs/token, steps %d..%d of %d, world %d, peak %.3g (%s)",
             run, f"{params.total:,}", f"{params.active:,}", per_token, start, stop, horizon, runtime.world, peak,
             peak_source)
    report_every = max(1, (stop - start) // 10)
    began = time.perf_counter()
    bar = _progress(progress and runtime.rank == 0, start, stop, run)
    model.train()
    try:
        batches = stream.iterate(start_step=start, end_step=stop)
        for step in range(start, stop):
            t0 = time.perf_counter()
            batch = next(batches)
            waited = time.perf_counter() - t0
            data = to_device(batch, runtime.device)
            lr = learning_rate(step, horizon, config.optimizer, config.schedule)
            for group in optimizer.param_groups:
                group["lr"] = lr
            global_tokens = float(data["labels"].numel() * runtime.world)
            acc = StepAccumulator(len(cell_names), sources_count, runtime.device)
            for chunk in range(micro):
                rows = slice(chunk * local_batch // micro, (chunk + 1) * local_batch // micro)
                with torch.autocast(runtime.device.type, dtype=torch.bfloat16, enabled=autocast):
                    logits, aux = model(data["input_ids"][rows], data["positions"][rows], data["segment_ids"][rows])
                token_losses = F.cross_entropy(
                    logits.float().flatten(0, 1), data["labels"][rows].flatten(), reduction="none"
                ).view(logits.shape[0], logits.shape[1])
                objective = token_losses.sum() / global_tokens + aux / (runtime.world * micro)
                objective.backward()
                acc.add(token_losses, data["cell_ids"][rows], data["sources"][rows] if "sources" in data else None)
            grad_norm = clip_gradients(model, config.optimizer.grad_clip, runtime)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            loads = balance_step(moe_layers, config.moe.bias_update_rate)
            acc.reduce(runtime)
            cells_tokens = torch.bincount(data["cell_ids"], minlength=len(cell_names)).double() * stream.seq_len
            runtime.all_reduce(cells_tokens)
            for name, tokens in zip(cell_names, cells_tokens.tolist()):
                trainer_state["realised_tokens_per_cell"][name] += int(tokens)
            trainer_state["tokens"] += int(global_tokens)
            trainer_state["step"] = step + 1
            loss = float(acc.loss[0] / acc.loss[1])
            losses.append(loss)
            elapsed = time.perf_counter() - t0
            log_now = (step + 1) % config.metrics.log_every == 0 or step + 1 == stop
            if log_now:
                param_squared = squared_norm(list(model.parameters()), runtime)
            if log_now and writer is not None:
                bias_stats, bias_squared = router_bias_stats(model)
                tokens_per_second = global_tokens / elapsed
                writer.write({
                    "step": step + 1,
                    "time": time.time(),
                    "phase": batch.phase,
                    "loss": loss,
                    "lr": lr,
                    "tokens": trainer_state["tokens"],
                    "tokens_per_second": tokens_per_second,
                    "mfu": per_token * tokens_per_second / (peak * runtime.world),
                    "data_wait_fraction": waited / elapsed,
                    "grad_norm": grad_norm,
                    "param_norm": math.sqrt(param_squared),
                    "param_norm_with_router_bias": math.sqrt(param_squared + bias_squared),
                    "router_bias": bias_stats,
                    "expert_load": [load.as_dict() for load in loads],
                    "loss_per_cell": _means(cell_names, acc.cells),
                    "loss_per_source": _means(stream.source_names, acc.sources),
                    "realised_tokens_per_cell": dict(trainer_state["realised_tokens_per_cell"]),
                })
            if bar is not None:
                bar[0].update(bar[1], advance=1, description=f"{run} loss {loss:.3f}")
            elif runtime.rank == 0 and (step + 1 - start) % report_every == 0:
                log.info("step %d/%d loss %.4f lr %.3g grad norm %.3f", step + 1, stop, loss, lr, grad_norm)
            is_last = step + 1 == stop
            if (every and (step + 1) % every == 0) or (is_last and config.checkpoint.at_end):
                ckpt.save(checkpoints, step + 1, model, optimizer, dict(trainer_state),
                          {"loader": stream.state_dict()}, config.checkpoint.keep)
    except BaseException:
        if runtime.rank == 0:
            _set_status(run_dir, "failed")
        raise
    finally:
        if bar is not None:
            bar[0].stop()
        if writer is not None:
            writer.close()
    if runtime.rank == 0:
        _set_status(run_dir, "completed" if stop == horizon else "stopped")
    return RunResult(run=run, run_dir=run_dir, start_step=start, end_step=stop, losses=losses,
                     seconds=time.perf_counter() - began)


def _means(names: list[str], sums: torch.Tensor) -> dict[str, float]:
    return {name: float(sums[0, i] / sums[1, i]) for i, name in enumerate(names) if i < sums.shape[1] and sums[1, i] > 0}


def _set_status(run_dir: Path, status: str) -> None:
    try:
        body = read_run(run_dir)
    except ArtifactError:
        return
    payload = {k: v for k, v in body.items() if k not in ("kind", "schema_version", "content_hash")}
    payload["status"] = status
    write_run(run_dir, payload)


def _progress(enabled: bool, start: int, stop: int, run: str):
    if not enabled:
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=Console(stderr=True))
    task = bar.add_task(run, total=stop, completed=start)
    bar.start()
    return bar, task
