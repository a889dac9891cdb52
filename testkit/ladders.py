"""Ladder files for the tests: the tiny base config and one mixture revision, then the test's own tables."""

from pathlib import Path

TINY = Path(__file__).parents[1] / "trainer" / "configs" / "tiny.toml"


def write_ladder(path: Path, name: str, revision: str, tables: str) -> Path:
    """Write ladder `name` over revision `revision` of mixture `default` on the tiny config, then `tables`."""
    path.write_text(
        f"""
ladder = "{name}"
[base]
config = "{TINY}"
[mixture]
mixture = "default"
revision = "{revision}"
"""
        + tables
    )
    return path


def micro_ladder(
    tmp_path: Path,
    widths: tuple[int, ...] = (8, 16),
    layers: tuple[int, ...] = (1, 1),
    tpa: float = 4.0,
    batch: int = 4,
) -> Path:
    """Ladder `micro` over revision `two-phase` (the `ladder_home` fixture builds it): rungs of `widths` x `layers`."""
    return write_ladder(
        tmp_path / "micro.toml",
        "micro",
        "two-phase",
        f"""[rules]
widths = {list(widths)}
layers = {list(layers)}
tokens_per_active_param = {tpa}
batch = {batch}
[eval]
evaluations = 2
max_sequences = 8
[here]
peak_flops = 1e10
""",
    )
