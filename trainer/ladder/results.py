"""What a ladder leaves behind: `ladders/<ladder>/ladder.json`, and each rung's held-out evaluation.

`ladder.json` (kind "millrace.ladder", schema 1, written atomically with a content hash):

    {"ladder", "file", "metric", "plan": {"rungs": [...], "target": {...}},
     "results": [{"rung", "revision", "seed", "run", "status", "flops", "tokens", "steps", "seconds",
                  "final": <the last eval.jsonl line>, "final_digest": <its sha256>,
                  "curve": [{"step", "tokens", "loss", "bpb"}]}],
     "fits": {<revision>: <fit report, as `ladder fit --json`>},
     "comparison": <as `ladder compare --json`, or null>}

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

from millrace.artifacts import validated, write_artifact
from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from millrace.writer_lock import WriterLock
from trainer.records import (
    EVAL_FILE,
    LADDER_FILE,
    LADDER_KIND,
    LADDER_SCHEMA_VERSION,
    LOCK_FILE,
    LadderRecord,
    read_eval,
    read_ladder_file,
)


def ladder_path(home: Home, ladder: str) -> Path:
    return home.ladder(ladder) / LADDER_FILE


def read_ladder(home: Home, ladder: str) -> dict[str, Any]:
    """ladder.json's payload (envelope checked and stripped), checked against `LadderRecord`."""
    return read_ladder_file(ladder_path(home, ladder))


def read_ladder_or_empty(home: Home, ladder: str) -> dict[str, Any]:
    path = ladder_path(home, ladder)
    return read_ladder_file(path) if path.exists() else {}


def ladder_writer(home: Home, ladder: str) -> WriterLock:
    """The ladder's one-writer lock: `ladder run`, `fit` and `compare` read, change and rewrite ladder.json
    under it, so a fit during a long run is refused instead of dropping a rung result written meanwhile."""
    return WriterLock(home.ladder(ladder) / LOCK_FILE, f"ladder {ladder!r}")


def write_ladder(home: Home, ladder: str, payload: dict[str, Any]) -> Path:
    path = ladder_path(home, ladder)
    record = validated(LadderRecord, payload, str(path))
    write_artifact(path, LADDER_KIND, LADDER_SCHEMA_VERSION, record.dump())
    return path


def metric_value(record: dict[str, Any], metric: str, where: str) -> float:
    """`loss.macro`, `bpb.micro`, `loss.set.NAME`, `loss.cell.c00q0` ... from one evaluation line."""
    value: Any = record
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


def final_eval(run_dir: Path) -> dict[str, Any]:
    evals = read_eval(run_dir)
    if not evals:
        raise ArtifactError(
            f"{run_dir / EVAL_FILE}: no held-out evaluation; a ladder fits held-out loss, never "
            "training loss (train the rung with evaluation on)"
        )
    return evals[-1]


def record_digest(record: dict[str, Any]) -> str:
    """sha256 of one evaluation line as canonical JSON (NaN allowed: a diverged rung's line is still a line)."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def recorded_final_eval(result: dict[str, Any], runs_root: Path, ladder: str) -> dict[str, Any]:
    """The rung's last evaluation line, checked against the digest its ladder.json result recorded when the
    rung finished (`final_digest`; older ladders: the recorded `final` line itself). An eval.jsonl edited
    afterwards is refused in one line naming it: an edited loss moved a prediction from 5.36 to 1.59."""
    run_dir = runs_root / result["run"]
    final = final_eval(run_dir)
    expected = result.get("final_digest") or (record_digest(result["final"]) if result.get("final") else None)
    if expected is not None and record_digest(final) != expected:
        raise ArtifactError(
            f"{run_dir / EVAL_FILE}: its last evaluation differs from the one ladder {ladder!r} "
            f"recorded for rung {result.get('rung')!r} seed {result.get('seed')} (edited after the "
            "rung finished?); refusing to fit it; rerun `millrace ladder run` to record it again"
        )
    return final


def curve(evals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The held-out curve for the page: macro loss and bits per byte at each evaluation (of `read_eval`)."""
    return [
        {
            "step": r.get("step"),
            "tokens": r.get("tokens"),
            "loss": (r.get("loss") or {}).get("macro"),
            "bpb": (r.get("bpb") or {}).get("macro"),
        }
        for r in evals
    ]
