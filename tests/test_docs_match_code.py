"""The docs name only what exists: every `millrace COMMAND ... --flag` written on one line in README.md,
ARCHITECTURE.md, CONTRIBUTING.md and docs/ is a command with that flag, and every path they put in backticks
from the repository's root (its first folder one of the repository's) is a file of the repository."""

import re
from pathlib import Path

import click
import pytest

from millrace.cli import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])
COMMAND = re.compile(r"millrace((?:[ \t]+[a-z][a-z-]*(?![\w./]))+)((?:[ \t]+[^\s`|;&]+)*)")
PATH = re.compile(r"`((?:[\w-]+/)+[\w.-]+\.(?:py|md|toml|json|js|j2|sh))`")
TOP = {path.name for path in ROOT.iterdir() if path.is_dir() and not path.name.startswith(".")}


def _command(words: list[str]) -> tuple[click.Command, list[str]]:
    """The deepest command `words` name, and the words that named it."""
    ctx = click.Context(cli)
    command: click.Command = cli
    path: list[str] = []
    for word in words:
        sub = command.get_command(ctx, word) if isinstance(command, click.Group) else None
        if sub is None:
            break
        command, path = sub, [*path, word]
    return command, path


def _flags(command: click.Command) -> set[str]:
    return {"--help"} | {name for p in command.params for name in [*p.opts, *p.secondary_opts]}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_each_command_and_flag_the_docs_name_exists(doc):
    wrong = []
    for match in COMMAND.finditer(doc.read_text(encoding="utf-8")):
        command, path = _command(match.group(1).split())
        if not path or isinstance(command, click.Group):
            continue  # prose ("millrace turns raw ..."), or a group named without its command
        rest = [*match.group(1).split()[len(path) :], *match.group(2).split()]
        flags = [token.split("=")[0] for token in rest if token.startswith("--")]
        wrong += [f"millrace {' '.join(path)} {flag}" for flag in flags if flag not in _flags(command)]
    assert not wrong, f"{doc.name} names flags that do not exist: {wrong}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_each_repository_path_the_docs_name_exists(doc):
    written = [path for path in PATH.findall(doc.read_text(encoding="utf-8")) if path.split("/")[0] in TOP]
    missing = [path for path in written if not (ROOT / path).exists()]
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


def test_the_check_sees_a_flag_that_does_not_exist():
    match = COMMAND.search("run `millrace pipeline run pipeline.toml --dry-runs --json` to see")
    assert match is not None
    command, path = _command(match.group(1).split())
    assert path == ["pipeline", "run"] and match.group(2).split() == ["pipeline.toml", "--dry-runs", "--json"]
    assert {"--dry-run", "--json"} <= _flags(command) and "--dry-runs" not in _flags(command)
