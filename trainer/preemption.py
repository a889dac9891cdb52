"""SIGTERM (a Slurm time limit, a preemption): every rank agrees to stop after the same step, checkpoints,
records `interrupted`, and says the command that continues the run. A lost node (its ranks gone mid-collective)
stops the others with one line that says the same."""

from __future__ import annotations

import re
import socket
from typing import TYPE_CHECKING

import torch

from millrace.errors import MillraceError, Terminated
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


class LostPeer(MillraceError):
    """A rank of the run went away mid-collective (a node lost): this rank cannot go on; the run resumes from its
    latest checkpoint once every node is up."""


GLOO_TRANSPORT = "gloo/transport"  # where gloo's lost-connection errors come from (plain RuntimeErrors)
PEER = re.compile(r"\[([0-9A-Fa-f.:]+)\]:(\d+)")


def lost_peer(exc: BaseException) -> str | None:
    """What a collective's failure says about the peer it lost, in a few words (`connection reset by peer
    127.0.0.1:33182`), or None where `exc` is not a lost peer. gloo raises a bare RuntimeError from its TCP
    transport; NCCL and the store raise torch.distributed's own errors."""
    message = str(exc)
    distributed = isinstance(exc, torch.distributed.DistError)
    if not distributed and not (isinstance(exc, RuntimeError) and GLOO_TRANSPORT in message):
        return None
    what = message.split("] ", 1)[-1].split(". ", 1)[0]  # gloo: "[file:line] Read error [peer]:port: reason"
    reason = what.rsplit(": ", 1)[-1].strip().rstrip(".") if ": " in what else what.strip()
    peer = PEER.search(message)
    return reason.lower() + (f" ({peer.group(1)}:{peer.group(2)})" if peer else "")


def lost_peer_error(plan: RunPlan, step: int, peer: str) -> LostPeer:
    """The one line a surviving rank prints: which rank on which node, what it lost, and how to continue."""
    return LostPeer(
        f"rank {plan.runtime.rank} on {socket.gethostname()}: a peer of the run is gone, {peer}; run {plan.run} "
        f"stopped after step {step} ({kept_checkpoint(plan)}); once every node is up, continue it with: "
        f"{resume_command(plan)}"
    )
