"""Everything that watches a run besides its training loss, as the training loop sees it.

`RunObservers` gathers the held-out evaluation (`trainer.evaluation`), the completions of
fixed prompts (`trainer.samples`) and the health rules (`trainer.health`) behind four calls:
`skip(...)` says whether a step's update must be dropped (non-finite loss or gradient),
`record_extras(...)` adds what the step's metrics record carries for them (aux losses,
memory, skip counts, alert events), `after_step(...)` runs the evaluation and the samples
due at that step, and `close()`. Every rank makes the same calls: evaluation and sampling
run the model, whose sharded layers need all ranks; rank 0 writes the files.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

from loader.held_out import ValidationSequences
from trainer.balance import LayerLoad
from trainer.config import TrainConfig
from trainer.distributed import Runtime, reshard
from trainer.evaluation import Evaluator, EvalWriter, eval_steps, token_byte_lengths
from trainer.health import HealthMonitor
from trainer.model import Transformer
from trainer.records import MetricsRecord, read_metrics
from trainer.samples import SampleWriter, TokenText, auto_prompts, file_prompts, prompts_path

log = logging.getLogger(__name__)


def with_memory(record: MetricsRecord, device: torch.device) -> MetricsRecord:
    """The record with the resident set of this process, and CUDA allocated/reserved bytes on a GPU."""
    update = {"memory_rss_bytes": psutil.Process().memory_info().rss}
    if device.type == "cuda":
        update["cuda_allocated_bytes"] = torch.cuda.memory_allocated(device)
        update["cuda_reserved_bytes"] = torch.cuda.memory_reserved(device)
    return record.model_copy(update=update)


def aux_terms(model: Transformer) -> torch.Tensor | None:
    """(sequence balance loss, z-loss) summed over the MoE layers for the last forward, as added to the objective."""
    terms = [layer.router.aux_terms for layer in model.moe_layers() if layer.router.aux_terms is not None]
    return torch.stack(terms).sum(0).double() if terms else None


def active_before(run_dir: Path, start: int) -> list[str]:
    """Alerts active at the checkpoint a resumed run starts from (so that their end is recorded)."""
    kept = [r for r in read_metrics(run_dir) if r.step <= start]
    return list(kept[-1].alerts.active) if kept and kept[-1].alerts is not None else []


@dataclass(frozen=True)
class ObservedRun:
    """What the observers need to know of the run they watch: its config and files, and its steps."""

    config: TrainConfig
    config_path: Path
    manifest_path: Path
    home: Path  # $MILLRACE_HOME: a prompts file may lie under it
    run_dir: Path
    start: int
    stop: int
    horizon: int
    checkpoint_every: int
    source_names: list[str]
    tokenizer_store: Path | None  # the store directory whose tokenizer decodes (MixtureStream.tokenizer_store)


class RunObservers:
    """Health, held-out evaluation and samples around the training steps of one run."""

    def __init__(self, run: ObservedRun, runtime: Runtime, autocast: bool, published_peak: bool = False):
        config = run.config
        self.config, self.runtime = config, runtime
        writes = runtime.rank == 0
        self.health = HealthMonitor(
            config.health, active_before(run.run_dir, run.start) if writes else [], published_peak
        )
        self.evaluator: Evaluator | None = None
        self.eval_writer: EvalWriter | None = None
        self.eval_at: set[int] = set()
        self.sampler: SampleWriter | None = None
        self.sample_at: set[int] = set()
        sequences = None
        if config.eval.enabled or config.samples.enabled:
            sequences = ValidationSequences(run.manifest_path, config.eval.max_sequences)
            if not sequences.entries:
                log.warning("%s pins no held-out data: no evaluation, no automatic prompts", run.manifest_path)
        if config.eval.enabled and sequences is not None and sequences.entries:
            lengths = token_byte_lengths(run.tokenizer_store, config.model.vocab_size)
            self.evaluator = Evaluator(
                sequences, runtime, config.eval.batch_sequences, run.source_names, lengths, autocast
            )
            self.eval_at = eval_steps(config.eval.every, run.start, run.stop, run.horizon)
            self.eval_writer = EvalWriter(run.run_dir, run.start) if writes else None
        if config.samples.enabled:
            self._sampling(run, sequences, writes)
        self.aux = torch.zeros(2, dtype=torch.float64, device=runtime.device)
        self.forwards = 0

    def _sampling(self, run: ObservedRun, sequences: ValidationSequences | None, writes: bool) -> None:
        """Completions of fixed prompts (automatic ones from the held-out data, or a file's) on a cadence."""
        cfg, text = run.config.samples, TokenText(run.tokenizer_store)
        if cfg.prompts == "auto":
            prompts = auto_prompts(sequences, text, cfg.prompt_tokens) if sequences else []
        else:
            prompts = file_prompts(prompts_path(cfg.prompts, run.config_path, run.home), text)
        if prompts:
            eos = sequences.eos_id if sequences is not None else None
            writes_to = run.run_dir if writes else None
            self.sampler = SampleWriter(writes_to, run.start, cfg, prompts, text, self.runtime.device, eos)
            cadence = cfg.every or run.checkpoint_every
            self.sample_at = {s for s in range(run.start + 1, run.stop + 1) if cadence and s % cadence == 0} | {
                run.stop
            }

    def forwarded(self, model: Transformer) -> None:
        """After each training forward: gather the aux terms it added."""
        terms = aux_terms(model)
        if terms is not None:
            self.aux += terms.to(self.aux.device)
        self.forwards += 1

    def skip(self, step: int, loss: float, grad_norm: float) -> bool:
        """True when this step's update must be dropped; raises after too many in a row."""
        if math.isfinite(loss) and math.isfinite(grad_norm):
            self.health.stepped()
            return False
        what = "loss" if not math.isfinite(loss) else "gradient norm"
        log.warning("step %d: non-finite %s (loss %s, grad norm %s): update skipped", step, what, loss, grad_norm)
        self.health.skipped(step, time.time(), f"non-finite {what}")
        return True

    def loaded(self, step: int, loads: list[LayerLoad]) -> None:
        """Every step's expert loads, logged or not: the health rules' load window counts steps."""
        self.health.loaded(step, {load.layer: load.load for load in loads})

    def aux_losses(self) -> tuple[float, float]:
        """The step's (balance loss, z-loss) averaged over its forwards; call on every rank (it all-reduces)."""
        aux = self.runtime.all_reduce(self.aux.clone()) / max(self.forwards * self.runtime.world, 1)
        self.aux.zero_()
        self.forwards = 0
        aux_loss, z_loss = aux.tolist()
        return aux_loss, z_loss

    def with_alerts(self, record: MetricsRecord) -> MetricsRecord:
        """The step's record with the health alerts that start and end at it, and each layer's load entropy
        over the alert's window of steps (what it watches, charted on the page)."""
        alerts = self.health.check(record, time.time())
        windowed = self.health.window_entropy
        loads = [
            load.model_copy(update={"window_entropy": windowed[load.layer]}) if load.layer in windowed else load
            for load in record.expert_load
        ]
        return record.model_copy(update={"alerts": alerts, "expert_load": loads})

    def after_step(self, model: Transformer, step: int, tokens: int) -> None:
        """Evaluate and sample if due after `step` steps; then every weight is back to its shard."""
        if self.evaluator is not None and step in self.eval_at:
            result = self.evaluator.evaluate(model, step, tokens)
            self.health.evaluated(result)
            if self.eval_writer is not None:
                self.eval_writer.write(result)
            log.info(
                "step %d: held-out loss macro %.4f micro %.4f, bits/byte macro %.4f (%.1fs)",
                step,
                result.loss.macro,
                result.loss.micro,
                result.bpb.macro,
                result.seconds,
            )
        if self.sampler is not None and step in self.sample_at:
            self.sampler.sample(model, step)
        if self.runtime.distributed:
            reshard(model)

    def close(self) -> None:
        if self.eval_writer is not None:
            self.eval_writer.close()
        if self.sampler is not None:
            self.sampler.close()
