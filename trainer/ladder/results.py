"""What a ladder leaves behind: `ladders/<ladder>/ladder.json`, and each rung's held-out evaluation.

`ladder.json` (kind "millrace.ladder", schema 1, written atomically with a content hash):

    {"ladder", "file", "metric", "plan": {"rungs": [...], "target": {...}},
     "results": [{"rung", "revision", "seed", "run", "status", "flops", "tokens", "steps", "seconds",
                  "final": <the last eval.jsonl line>, "curve": [{"step", "tokens", "loss", "bpb"}]}],
     "fits": {<revision>: <fit report, as `ladder fit --json`>},
     "comparison": <as `ladder compare --json`, or null>}

A rung's metric is always its held-out evaluation (`runs/<run>/eval.jsonl`, written by the
trainer's evaluation), never its training loss: a rung without one is an error naming the file.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from millrace.artifacts import read_artifact, write_artifact
from millrace.errors import ArtifactError, ConfigError
from millrace.home import Home
from trainer.eval_records import EVAL_FILE, read_eval

LADDER_KIND = "millrace.ladder"
LADDER_SCHEMA_VERSION = 1
LADDER_FILE = "ladder.json"


def ladder_path(home: Home, ladder: str) -> Path:
    return home.ladder(ladder) / LADDER_FILE


def read_ladder(home: Home, ladder: str) -> dict[str, Any]:
    return read_artifact(ladder_path(home, ladder), LADDER_KIND, (LADDER_SCHEMA_VERSION,))


def read_ladder_or_empty(home: Home, ladder: str) -> dict[str, Any]:
    path = ladder_path(home, ladder)
    if not path.exists():
        return {}
    body = read_artifact(path, LADDER_KIND, (LADDER_SCHEMA_VERSION,))
    return {k: v for k, v in body.items() if k not in ("kind", "schema_version", "content_hash")}


def write_ladder(home: Home, ladder: str, payload: dict[str, Any]) -> Path:
    path = ladder_path(home, ladder)
    write_artifact(path, LADDER_KIND, LADDER_SCHEMA_VERSION, payload)
    return path


def metric_value(record: dict[str, Any], metric: str, where: str) -> float:
    """`loss.macro`, `bpb.micro`, `loss.set.NAME`, `loss.cell.c00q0` ... from one evaluation line."""
    value: Any = record
    for part in metric.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ConfigError(f"{where}: metric {metric!r}: no {part!r} in the evaluation "
                              f"(has {', '.join(sorted(value)) if isinstance(value, dict) else type(value).__name__})")
        value = value[part]
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ConfigError(f"{where}: metric {metric!r} is {value!r}, not a finite number")
    return float(value)


def final_eval(run_dir: Path) -> dict[str, Any]:
    evals = read_eval(run_dir)
    if not evals:
        raise ArtifactError(f"{run_dir / EVAL_FILE}: no held-out evaluation; a ladder fits held-out loss, never "
                            "training loss (train the rung with evaluation on)")
    return evals[-1]


def curve(evals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The held-out curve for the page: macro loss and bits per byte at each evaluation (of `read_eval`)."""
    return [{"step": r.get("step"), "tokens": r.get("tokens"),
             "loss": (r.get("loss") or {}).get("macro"), "bpb": (r.get("bpb") or {}).get("macro")}
            for r in evals]
