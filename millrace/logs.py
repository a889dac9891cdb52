"""One log format for every line millrace prints, datatrove's included.

millrace logs through the standard `logging` module (`configure`, called by the `millrace` command); datatrove
logs through loguru, which has its own format. `loguru_to_logging` is a loguru sink that hands each loguru
record to `logging` (logger `datatrove`), so its lines come out in millrace's format, above a live progress
bar like every other line.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from loguru import Message

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%H:%M:%S"


class CurrentStderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever `sys.stderr` is at the time: while a rich bar is live it is rich's proxy,
    which prints the log line above the bar instead of on top of it."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def configure(verbose: bool = False) -> None:
    """millrace's format on stderr (INFO and up; DEBUG with `verbose`)."""
    handler = CurrentStderrHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt=DATE_FORMAT))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])


def loguru_to_logging(message: Message, prefix: str = "") -> None:
    """A loguru sink: the record to `logging`'s `datatrove` logger at its level (`prefix` before its text).
    A process whose `logging` is not configured yet (a datatrove worker) gets millrace's format first."""
    if not logging.getLogger().handlers:
        configure()
    record = message.record
    logging.getLogger("datatrove").log(record["level"].no, "%s%s", prefix, record["message"])
