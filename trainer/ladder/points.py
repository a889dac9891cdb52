"""Fit points from a ladder's rung results (their final held-out metric) or from a `--points` file."""

from __future__ import annotations

import json
from pathlib import Path

from millrace.errors import ConfigError
from millrace.home import Home
from trainer.ladder.results import metric_value, recorded_final_eval
from trainer.ladder.scaling_law import Point
from trainer.records import EVAL_FILE, LadderRecord


def ladder_points(body: LadderRecord, metric: str, revision: str, home: Home) -> list[Point]:
    """One point per rung and seed of `revision`: (the rung's planned FLOPs, the `metric` of the last line
    of its run's eval.jsonl, the held-out evaluation; a rung without one is an error naming the file)."""
    points = []
    planned = {r.name for r in body.plan.rungs}
    for result in body.results:
        if result.revision != revision or result.rung not in planned:
            continue
        where = str(home.run(result.run) / EVAL_FILE)
        final = recorded_final_eval(result, home, body.ladder)
        if result.flops is None:
            raise ConfigError(f"ladder {body.ladder!r}: rung {result.rung!r} seed {result.seed} has no FLOPs recorded")
        points.append(
            Point(flops=result.flops, loss=metric_value(final, metric, where), rung=result.rung, seed=result.seed)
        )
    if not points:
        raise ConfigError(
            f"ladder {body.ladder!r}: no trained rung of revision {revision!r} yet (run `millrace ladder run` first)"
        )
    return points


def file_points(path: Path | str) -> list[Point]:
    """A JSON list of {"flops": ..., "loss": ...} (optional "rung", "seed")."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: points file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a JSON list of points ({exc})") from None
    if not isinstance(data, list) or not data:
        raise ConfigError(f'{path}: expected a non-empty JSON list of {{"flops": ..., "loss": ...}}')
    points = []
    for index, item in enumerate(data):
        if not isinstance(item, dict) or not {"flops", "loss"} <= set(item):
            raise ConfigError(f"{path}: point #{index + 1}: expected an object with 'flops' and 'loss'")
        try:
            flops, loss = float(item["flops"]), float(item["loss"])
        except (TypeError, ValueError):
            raise ConfigError(f"{path}: point #{index + 1}: 'flops' and 'loss' must be numbers") from None
        seed = item.get("seed")
        points.append(
            Point(flops=flops, loss=loss, rung=item.get("rung"), seed=seed if isinstance(seed, int) else None)
        )
    return points
