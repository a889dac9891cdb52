"""Ladder files for the tests: the tiny base config and one mixture revision, then the test's own tables."""

from pathlib import Path

TINY = Path(__file__).parents[2] / "trainer" / "configs" / "tiny.toml"


def write_ladder(path: Path, name: str, revision: str, tables: str) -> Path:
    """Write ladder `name` over revision `revision` of mixture `default` on the tiny config, then `tables`."""
    path.write_text(f"""
ladder = "{name}"
[base]
config = "{TINY}"
[mixture]
mixture = "default"
revision = "{revision}"
""" + tables)
    return path
