"""What a ladder leaves behind: `ladders/<ladder>/ladder.json`, and each rung's held-out evaluation.

`ladder.json` (kind "millrace.ladder", schema 1, written atomically with a content hash) is a
`trainer.records.LadderRecord`: the plan, one `RungResult` per rung and seed (with the final evaluation line,
its digest and the held-out curve), the fits per revision (as `ladder fit --json`) and the last comparison.

A rung's metric is always its held-out evaluation (`runs/<run>/eval.jsonl`, written by the
trainer's evaluation), never its training loss: a rung without one is an error naming the file, and one
whose last line no longer matches `final_digest` (edited after the rung finished) is refused.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from millrace.writer_lock import WriterLock
from trainer.records import (
    EVAL_FILE,
    LADDER_FILE,
    LOCK_FILE,
    CurvePoint,
    EvalRecord,
    LadderRecord,
    RungResult,
    read_eval,
    read_ladder_file,
    write_ladder_file,
)


def ladder_path(home: Home, ladder: str) -> Path:
    return home.ladder(ladder) / LADDER_FILE


def read_ladder(home: Home, ladder: str) -> LadderRecord:
    """ladder.json (envelope checked and stripped) as its `LadderRecord`."""
    return read_ladder_file(ladder_path(home, ladder))


def read_ladder_or_none(home: Home, ladder: str) -> LadderRecord | None:
    path = ladder_path(home, ladder)
    return read_ladder_file(path) if path.exists() else None


def ladder_writer(home: Home, ladder: str) -> WriterLock:
    """The ladder's one-writer lock: `ladder run`, `fit` and `compare` read, change and rewrite ladder.json
    under it, so a fit during a long run is refused instead of dropping a rung result written meanwhile."""
    return WriterLock(home.ladder(ladder) / LOCK_FILE, f"ladder {ladder!r}")


def write_ladder(home: Home, record: LadderRecord) -> Path:
    path = ladder_path(home, record.ladder)
    write_ladder_file(path, record)
    return path


def metric_value(record: EvalRecord, metric: str, where: str) -> float:
    """`loss.macro`, `bpb.micro`, `loss.set.NAME`, `loss.cell.c00q0` ... from one evaluation line (a path that
    a person writes in the ladder's TOML, walked over the line as written)."""
    value: Any = record.dump()
    for part in metric.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ConfigError(
                f"{where}: metric {metric!r}: no {part!r} in the evaluation "
                f"(has {', '.join(sorted(value)) if isinstance(value, dict) else type(value).__name__})"
            )
        value = value[part]
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ConfigError(f"{where}: metric {metric!r} is {value!r}, not a finite number")
    return float(value)


def final_eval(run_dir: Path) -> EvalRecord:
    evals = read_eval(run_dir)
    if not evals:
        raise ArtifactError(
            f"{run_dir / EVAL_FILE}: no held-out evaluation; a ladder fits held-out loss, never "
            "training loss (train the rung with evaluation on)"
        )
    return evals[-1]


def record_digest(record: EvalRecord) -> str:
    """sha256 of one evaluation line as canonical JSON (the fields it was written with)."""
    text = json.dumps(record.dump(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def recorded_final_eval(result: RungResult, home: Home, ladder: str) -> EvalRecord:
    """The rung's last evaluation line, checked against the digest its ladder.json result recorded when the
    rung finished (`final_digest`; older ladders: the recorded `final` line itself). An eval.jsonl edited
    afterwards is refused in one line naming it: an edited loss moved a prediction from 5.36 to 1.59."""
    run_dir = home.run(result.run)
    final = final_eval(run_dir)
    expected = result.final_digest or (record_digest(result.final) if result.final is not None else None)
    if expected is not None and record_digest(final) != expected:
        raise ArtifactError(
            f"{run_dir / EVAL_FILE}: its last evaluation differs from the one ladder {ladder!r} "
            f"recorded for rung {result.rung!r} seed {result.seed} (edited after the "
            "rung finished?); refusing to fit it; rerun `millrace ladder run` to record it again"
        )
    return final


def curve(evals: list[EvalRecord]) -> list[CurvePoint]:
    """The held-out curve for the page: macro loss and bits per byte at each evaluation (of `read_eval`)."""
    return [CurvePoint(step=r.step, tokens=r.tokens, loss=r.loss.macro, bpb=r.bpb.macro) for r in evals]
