"""`TrainRequest`: what one `train` invocation asks for beyond its config file (the `train run` options).

Imports no torch, so that the command builds and checks it before the trainer loads."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.records import RunLabels


@dataclass(frozen=True)
class TrainRequest:
    """One invocation of `trainer.loop.train`.

    `mixture`/`revision`: the built mixture to train on (None: the config's `[data]`). `steps`: where this
    invocation stops (None: the learning-rate horizon); `--steps 20` then `resume` with `--steps 40` is one
    40-step run. `run`: the run's name (None: config-mixture-revision). `checkpoint_every` overrides the
    config's. `resume` continues a run that has checkpoints (refused without it). `allow_config_change`:
    resume although optimiser, schedule or other training settings differ from the checkpoint's (recorded in
    run.json; a shape change is always refused). `from_run`: start from that run's checkpoint under this
    run's name (`trainer.branch`). `trust_unverified`: load a checkpoint that has no digests.json. `labels`:
    tags and notes for run.json. `progress`: draw the progress bar."""

    mixture: str | None = None
    revision: str | None = None
    steps: int | None = None
    run: str | None = None
    checkpoint_every: int | None = None
    resume: bool = False
    progress: bool = False
    allow_config_change: bool = False
    from_run: str | None = None
    trust_unverified: bool = False
    labels: RunLabels = field(default_factory=RunLabels)
