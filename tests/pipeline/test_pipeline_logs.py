"""One log format: datatrove's loguru lines go through millrace's logging; dedup rounds are named."""

from __future__ import annotations

import logging
import sys

import pytest
from datatrove.pipeline.base import PipelineStep

from pipeline.runner import Executors, _route_datatrove_logs


@pytest.fixture
def loguru_restored():
    from loguru import logger

    yield logger
    logger.remove()
    logger.add(sys.stderr)


def test_datatrove_warnings_come_out_in_millraces_log_format(loguru_restored, caplog):
    _route_datatrove_logs()
    with caplog.at_level(logging.INFO):
        loguru_restored.warning("a task was slow")
        loguru_restored.info("merged stats table")  # below the console's level: only in the task files
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("datatrove", "WARNING", "a task was slow")
    ]


class Nothing(PipelineStep):
    name = "nothing"

    def run(self, data=None, rank: int = 0, world_size: int = 1):
        yield from data or ()


def test_each_dedup_round_is_named_in_its_lines(loguru_restored, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="pipeline.runner"):
        for _ in range(2):
            Executors("local", 1).run("dedup", [Nothing()], 1, tmp_path / "logs", part="components-001")
    assert "dedup components-001: all 1 tasks already complete" in caplog.text


def test_after_a_task_datatrove_lines_still_come_out_in_millraces_format(loguru_restored, tmp_path, capfd, caplog):
    """datatrove puts its own console sink back when a task ends; in the process that ran it (a pool worker, here
    this one), what it logs next must still go through logging."""
    Executors("local", 1).run("filter", [Nothing()], 1, tmp_path / "logs")
    capfd.readouterr()
    with caplog.at_level(logging.INFO):
        loguru_restored.warning("after the task")
    assert " | WARNING " not in capfd.readouterr().err
    assert ("datatrove", "after the task") in [(r.name, r.getMessage()) for r in caplog.records]
