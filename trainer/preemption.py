"""SIGTERM (a Slurm time limit, a preemption): every rank agrees to stop after the same step, checkpoints,
records `interrupted`, and says the command that continues the run."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from millrace.errors import Terminated
from millrace.signals import StopRequest
from trainer import checkpoint as ckpt
from trainer.distributed import Runtime
from trainer.run_record import set_status

if TYPE_CHECKING:
    from trainer.loop import RunPlan, Training


def stop_agreed(stop: StopRequest, runtime: Runtime) -> bool:
    """Whether any rank got SIGTERM: every rank stops after the same step, so they checkpoint together."""
    if not runtime.distributed:
        return stop.requested
    flag = torch.tensor(float(stop.requested), device=runtime.device)
    return bool(runtime.all_reduce(flag).item())


def preempted(training: Training, written: ckpt.Place | None) -> Terminated:
    """SIGTERM (a Slurm time limit or preemption): a checkpoint at this step, status `interrupted`, and
    the command that continues the run; the process then exits 143."""
    plan, step = training.plan, training.state.step
    if written is None:
        ckpt.save(plan.checkpoints, step, training.parts, plan.config.checkpoint.keep)
    if plan.runtime.rank == 0:
        set_status(plan.run_dir, "interrupted")
    training.push_records()  # the run's way out closes the uploader: these records go up before the exit
    return Terminated(
        f"run {plan.run} stopped by SIGTERM after step {step}, checkpoint step {step} written; "
        f"continue it with: {resume_command(plan)}"
    )


def resume_command(plan: RunPlan) -> str:
    """The command that continues this run from its latest checkpoint."""
    branch = f" --from-run {plan.from_run}" if plan.from_run else ""
    return (
        f"millrace train {plan.config_path} --mixture {plan.mixture} --revision {plan.revision} "
        f"--run {plan.run} --resume{branch}"
    )


def kept_checkpoint(plan: RunPlan) -> str:
    latest = ckpt.latest_checkpoint(plan.checkpoints)
    return f"its latest checkpoint is step {latest[0]}" if latest else "it has no checkpoint yet"
