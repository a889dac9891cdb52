"""Which input files each filter task reads, dealt once by the driver: one small file per task.

The driver lists each source once (`discovery.listed_once`), deals the files to the tasks
(`readers.source_shares`: round-robin by file ordinal) and writes task r's share to `<directory>/<r>.json`;
task r's `ReadStep` reads only that file. No task lists a source: the listing costs O(files) once a run, not
O(files) in every task, and a task's inputs file grows with its own files only.
"""

from __future__ import annotations

import json
from pathlib import Path

from millrace.artifacts import atomic_write_text
from pipeline.config import PipelineConfig
from pipeline.steps.read.readers import Share, inputs_file, source_shares


def task_inputs(config: PipelineConfig, tasks: int) -> list[dict[str, list[Share]]]:
    """Per task: {source name: its shares}, every source in order."""
    found: list[dict[str, list[Share]]] = [{} for _ in range(tasks)]
    offset = 0
    for source in config.sources:
        shares, offset = source_shares(source, offset, tasks)
        for rank, share in enumerate(shares):
            found[rank][source.name] = share
    return found


def write_task_inputs(config: PipelineConfig, directory: Path, tasks: int) -> None:
    """Each task's inputs file, rewritten only where it differs (a resumed run finds them written)."""
    for rank, inputs in enumerate(task_inputs(config, tasks)):
        path, text = inputs_file(directory, rank), json.dumps(inputs, sort_keys=True) + "\n"
        if not path.exists() or path.read_text() != text:
            atomic_write_text(path, text)
