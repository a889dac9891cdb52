"""One log format: datatrove's loguru lines go through millrace's logging; dedup rounds are named."""

from __future__ import annotations

import logging
import sys

import pytest
from datatrove.pipeline.base import PipelineStep

from pipeline.runner import _quiet_parent_logger, _run_executor


@pytest.fixture
def loguru_restored():
    from loguru import logger

    yield logger
    logger.remove()
    logger.add(sys.stderr)


def test_datatrove_warnings_come_out_in_millraces_log_format(loguru_restored, caplog):
    _quiet_parent_logger()
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
            _run_executor("dedup", "local", [Nothing()], 1, 1, tmp_path / "logs", part="components-001")
    assert "dedup components-001: all 1 tasks already complete" in caplog.text
