"""The `in-process` executor: each job trained here, one after another, its log lines to its log file."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from millrace.errors import Interrupted, MillraceError
from millrace.home import Home
from trainer.fleet.config import JobOutcome, TrainingJob
from trainer.train_request import TrainRequest


def run_in_process(home: Home, job: TrainingJob, threads: int, log_path: Path) -> JobOutcome:
    """Train `job` in this process at `threads` torch threads. A refusal or crash is the job's failure (its
    traceback in the log); Ctrl-C and SIGTERM stop the fleet (`Interrupted`, `Terminated`)."""
    from trainer.loop import train  # lazy: heavy (torch)

    log_path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"))
    root = logging.getLogger()
    root.addHandler(handler)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    began = time.perf_counter()
    try:
        train(job.config, home, TrainRequest(steps=job.steps, run=job.run, resume=True, from_run=job.start_from))
    except Interrupted:
        raise
    except MillraceError as exc:
        logging.getLogger(__name__).error("error: %s", exc)
        return JobOutcome(job.run, "failed", log_path, time.perf_counter() - began, str(exc))
    except Exception as exc:  # a crash fails this job only; its traceback is in its log
        logging.getLogger(__name__).exception("run %s crashed", job.run)
        return JobOutcome(job.run, "failed", log_path, time.perf_counter() - began, f"{type(exc).__name__}: {exc}")
    finally:
        torch.set_num_threads(previous)
        root.removeHandler(handler)
        handler.close()
    return JobOutcome(job.run, "completed", log_path, time.perf_counter() - began)
