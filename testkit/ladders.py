"""Ladder files for the tests: the tiny base config and one mixture revision, then the test's own tables (a
ladder finished, with its record, is `testkit.ladder_records`)."""

from pathlib import Path

TINY = Path(__file__).parents[1] / "trainer" / "configs" / "tiny.toml"
# the tables after [rules] of a small ladder that is run and fitted: two cheap evaluations, the loss floor fixed
# (a fit of two or three rungs cannot find it), a fixed peak (no matmul measured)
FITTED = """[eval]
evaluations = 2
max_sequences = 4
[fit]
asymptote = 1.0
[here]
peak_flops = 1e10
"""


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


def e2e_ladder(tmp_path: Path) -> Path:
    """Ladder `e2e` over revision `natural`: three rungs (widths 8, 12, 16) with an lr rule, a fit with a fixed
    asymptote and a one-layer d24 target, small enough to run, fit, predict and train the next rung in a test."""
    return write_ladder(
        tmp_path / "e2e.toml",
        "e2e",
        "natural",
        """[rules]
widths = [8, 12, 16]
layers = [1, 1, 1]
tokens_per_active_param = 3
batch = 4
warmup_fraction = 0.1
[rules.lr]
base = 1e-2
d_model_ref = 8
batch_exponent = 0.0
[target]
name = "d24"
d_model = 24
layers = 1
"""
        + FITTED,
    )


def demo_micro_ladder(
    tmp_path: Path, mixture: str, revision: str, small_rungs: str = "raise", tpa: float = 12
) -> Path:
    """The demo's micro-ladder (trainer/configs/micro-ladder.toml) over `mixture`/`revision`, with a vocabulary
    (a stats-only store names no tokenizer) and a fixed peak (no matmul measured): the shape whose smallest rung
    a store of many cells may not build (`small_rungs` says what the plan does then)."""
    base = tmp_path / "tiny-256.toml"
    base.write_text(TINY.read_text().replace("vocab_size = 0", "vocab_size = 256"))
    path = tmp_path / f"{mixture}-{revision}.toml"
    path.write_text(f"""ladder = "micro"
[base]
config = "{base}"
[mixture]
mixture = "{mixture}"
revision = "{revision}"
[rules]
widths = [8, 12, 16, 24]
layers = [1, 1, 1, 2]
tokens_per_active_param = {tpa}
small_rungs = "{small_rungs}"
[rules.batch_rule]
coefficient = 0.03
minimum = 4
maximum = 16
[target]
name = "d32"
d_model = 32
layers = 2
[here]
peak_flops = 1e10
""")
    return path
