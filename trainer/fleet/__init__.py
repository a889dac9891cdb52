"""Many small trainings at once -- in this process, as local processes, under torchrun, on Ray or on
Slurm -- resumable and killable (`trainer.fleet.run`); the ladder's rungs and the search's proxies."""

from trainer.fleet.config import FleetConfig, JobOutcome, SlurmFleet, TrainingJob
from trainer.fleet.run import check_outcomes, run_jobs

__all__ = ["FleetConfig", "JobOutcome", "SlurmFleet", "TrainingJob", "check_outcomes", "run_jobs"]
