"""Learning rate as a pure function of the step: warmup, then cosine or warmup-stable-decay.

A pure function needs no scheduler state in the checkpoint: a resumed run asks for
the same step and gets the same rate.
"""

from __future__ import annotations

import math

from trainer.config import OptimizerConfig, ScheduleConfig


def learning_rate(step: int, total_steps: int, optimizer: OptimizerConfig, schedule: ScheduleConfig) -> float:
    """The rate for optimizer step `step` (0-based) of `total_steps`."""
    peak, floor = optimizer.lr, optimizer.lr * optimizer.min_lr_ratio
    warmup = min(schedule.warmup_steps, max(total_steps - 1, 0))
    if step < warmup:
        return peak * (step + 1) / warmup
    if schedule.kind == "cosine":
        span = max(total_steps - warmup, 1)
        progress = min((step - warmup) / span, 1.0)
        return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    decay_steps = max(round(total_steps * schedule.decay_fraction), 1)
    decay_start = max(total_steps - decay_steps, warmup)
    if step < decay_start:
        return peak
    progress = min((step - decay_start) / max(total_steps - decay_start, 1), 1.0)
    return peak - (peak - floor) * progress
