"""Options shared by every command: --home and --json, plus JSON output."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import TypeVar

import click

from millrace.home import Home
from millrace.names import PLAIN_NAME

R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., object])  # a command's function, before click makes it a command


def home_option(func: Callable[..., R]) -> Callable[..., R]:
    """Adds `--home DIR` and passes the resolved `home: Home` to the command."""

    @click.option(
        "--home",
        "home_dir",
        type=click.Path(file_okay=False),
        default=None,
        help="Artifact root (default: $MILLRACE_HOME, else ./millrace-data).",
    )
    @functools.wraps(func)
    def wrapper(*args: object, home_dir: str | None, **kwargs: object) -> R:
        parent = click.get_current_context().find_root().params.get("home_dir")
        return func(*args, home=Home.resolve(home_dir or parent), **kwargs)

    return wrapper


json_option = click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of text.")


def print_json(payload: object) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")


def run_option(help: str, default: str | None = None, required: bool = False) -> Callable[[F], F]:
    """`--run NAME`, the one spelling of a training run's name; `--run-name` too, because under torchrun
    (`torchrun ... -m millrace train ... --run X`) torchrun's own parser takes `--run` for its `--run-path`."""
    return click.option(
        "--run", "--run-name", "run_name", type=PLAIN_NAME, help=help, default=default, required=required
    )


def revision_option(
    help: str = "Mixture revision name.", default: str | None = None, required: bool = False
) -> Callable[[F], F]:
    """`--revision NAME`, the one spelling of a mixture revision."""
    return click.option("--revision", "revision", type=PLAIN_NAME, help=help, default=default, required=required)
