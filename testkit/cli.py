"""The `millrace` command in a child process, as a user or a scheduler starts it, for the drills that kill it,
fill its disk or start two at once: the same argv and environment everywhere (this checkout on PYTHONPATH)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with this checkout importable, plus `extra`."""
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def millrace_argv(home: Path, *args: str) -> list[str]:
    """`python -m millrace --home HOME ARGS…`."""
    return [sys.executable, "-m", "millrace", "--home", str(home), *args]


def run_millrace(home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the command to its end; its exit status and text output."""
    return subprocess.run(millrace_argv(home, *args), capture_output=True, text=True, timeout=timeout, env=child_env())


def start_millrace(home: Path, *args: str) -> subprocess.Popen[str]:
    """Start the command in a session of its own (a signal to its group reaches its workers), its output piped."""
    return subprocess.Popen(
        millrace_argv(home, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=child_env(),
    )
