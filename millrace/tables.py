"""Rich tables printed whole: a terminal's width on a terminal, and off one (a pipe, a file, CI) wide enough
that no cell is cut or wrapped, so a URL or a path stays whole and copy-pasteable."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import RenderableType

OFF_TERMINAL_WIDTH = 100_000  # a table is never wider than its content; this only stops rich's 80 columns


def print_table(table: RenderableType) -> None:
    """Print a rich table (rich is imported only here: `--json` runs start faster)."""
    from rich.console import Console  # lazy: heavy (rich): only when a table or bar is drawn

    Console(width=None if sys.stdout.isatty() else OFF_TERMINAL_WIDTH).print(table)
