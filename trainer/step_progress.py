"""What a person sees while a run trains: a progress bar on a terminal, steady lines elsewhere."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from millrace.progress import SteadyLines, format_duration, on_terminal

if TYPE_CHECKING:
    from trainer.loop import StepResult, Training


class StepReporter:
    """A progress bar on a terminal (rank 0); without one (nohup, Slurm, CI) a steady line every
    MILLRACE_PROGRESS_SECONDS: step, tokens/s, loss and ETA."""

    def __init__(self, training: Training, enabled: bool):

        plan = training.plan
        self.plan, self.rank = plan, plan.runtime.rank
        self.start = training.start
        self.began = time.perf_counter()
        self.tokens = 0
        self.lines = SteadyLines()
        shown = enabled and self.rank == 0 and on_terminal()
        self.bar = ProgressBar(training.start, plan.stop, plan.run) if shown else None

    def step(self, result: StepResult) -> None:
        self.tokens += result.global_tokens
        if self.bar is not None:
            self.bar.advance(f"{self.plan.run} loss {result.loss:.3f}")
        elif self.rank == 0:
            self.lines.emit(self.line(result), force=result.step == self.plan.stop)

    def line(self, result: StepResult) -> str:

        elapsed = time.perf_counter() - self.began
        done = result.step - self.start
        eta = elapsed / done * (self.plan.stop - result.step) if done else 0.0
        return (
            f"train {self.plan.run}: step {result.step}/{self.plan.stop}, {self.tokens / elapsed:,.0f} tokens/s, "
            f"loss {result.loss:.4f}, ETA {format_duration(eta)}"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


class ProgressBar:
    """rich's bar for one run's steps, on stderr."""

    def __init__(self, start: int, stop: int, run: str):
        # lazy: heavy (rich): only when a table or bar is drawn
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self.task = self.progress.add_task(run, total=stop, completed=start)
        self.progress.start()

    def advance(self, description: str) -> None:
        self.progress.update(self.task, advance=1, description=description)

    def stop(self) -> None:
        self.progress.stop()
