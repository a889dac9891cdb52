"""The mixture search's swarm at the micro scale, and where its time goes.

Requirement (the mixture search's bench): a 64-proxy swarm at the micro scale on this 2-core machine --
proxies per hour, and the share of time not spent in training steps (start-up, checkpoint restore,
evaluation), which should be small. The micro scale: the demo's tiny MoE (vocabulary 512 here), batches of
16 x 256 tokens, a shared checkpoint of 4 steps and 16 steps a proxy, on the default fleet (`local`, two
jobs at once, one thread each), each proxy evaluated once at its end on 4 held-out windows a cell.

Ours: the `local` executor's long-lived workers (`trainer.fleet.pool`), each importing the trainer once.
The baseline, measured in the same run: the same swarm with a fresh `millrace train` process per proxy
(`reuse_processes = false`, the fleet before the workers), at 8 proxies (or fewer), compared per proxy.

Time is counted in slot-seconds (the swarm's wall time x its two slots). Training steps are the proxies'
and the shared checkpoint's `step_seconds` (metrics.jsonl). Outside them, per proxy, from the run's own
clock against the fleet's: start-up is the time from the job's start to its first step (the interpreter
and imports of a fresh process, run preparation, model build, run records) less the restore; the restore
is the time the run's log names for checking and loading the shared checkpoint (from disk in a fresh process;
in a worker from disk once, then from its copy); the evaluation is
eval.jsonl's `seconds`; other is the rest (per-step metrics lines, each run's end, the mixture builds, the
shared checkpoint's own start, slots left idle, the fleet's polling).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import tomli_w

from bench.result import Result
from millrace.home import Home

SEQ_LEN, GLOBAL_BATCH, PROXY_STEPS, BRANCH_STEP, CONCURRENCY = 256, 16, 16, 4, 2
BASELINE_PROXIES = 8
TINY = Path(__file__).parents[1] / "trainer" / "configs" / "tiny.toml"
PARTS = ("start-up", "restore", "evaluation", "other")


def swarm_home(root: Path, proxies: int, reuse: bool) -> tuple[Home, Path]:
    """A store of distinguishable cells, a natural baseline long enough for the branch and the proxies, and the
    micro search file over the tiny MoE."""

    from mixtures.build import build
    from testkit.stores import DISTINCT, make_store

    home = Home.resolve(root / "home")
    cells = {f"c{d:02d}q{q}": 40_000 + 5_000 * d for d in range(4) for q in range(2)}
    make_store(home, cells, replace(DISTINCT, vocab=512), held_out=3)
    steps = BRANCH_STEP + PROXY_STEPS
    revision = home.revisions / "default" / "natural.toml"
    revision.parent.mkdir(parents=True)
    revision.write_text(
        f'mixture = "default"\nrevision = "natural"\nseed = 1\nseq_len = {SEQ_LEN}\nglobal_batch = {GLOBAL_BATCH}\n'
        f'epoch_cap = 8\n[store]\nname = "t"\n[[phases]]\nname = "main"\ntokens = {steps * SEQ_LEN * GLOBAL_BATCH}\n'
        'strategy = "natural"\n'
    )
    build(home, "default", "natural")
    spec = {
        "search": "bench",
        "base": {"config": str(TINY)},
        "mixture": {"mixture": "default", "revision": "natural"},
        "branch": {"at_step": BRANCH_STEP},
        "proxies": {"tokens": PROXY_STEPS * SEQ_LEN * GLOBAL_BATCH, "count": proxies},
        "eval": {"max_sequences": 4},
        "fleet": {"executor": "local", "concurrency": CONCURRENCY, "reuse_processes": reuse},
    }
    path = root / "bench.toml"
    path.write_text(tomli_w.dumps(spec))
    return home, path


@dataclass
class Swarm:
    """One swarm's time: its wall, its training steps, and each part outside them (slot-seconds)."""

    proxies: int
    wall: float
    training: float = 0.0
    parts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))

    @property
    def slots(self) -> float:
        return self.wall * CONCURRENCY

    @property
    def per_hour(self) -> float:
        return self.proxies * 3600 / self.wall

    def share(self, part: str | None = None) -> float:
        """The share of slot-seconds outside training steps (in `part` only, when named)."""
        return (self.parts[part] if part else self.slots - self.training) / self.slots


def steps_and_start(home: Home, run: str, after: int) -> tuple[float, float]:
    """(seconds in training steps after step `after`, wall clock at the first one's start)."""
    from trainer.records import read_metrics

    lines = [line for line in read_metrics(home.run(run)) if line.step > after]
    steps = sum(float(line.step_seconds or 0.0) for line in lines)
    return steps, float(lines[0].time or 0.0) - float(lines[0].step_seconds or 0.0)


def eval_seconds(home: Home, run: str, after: int) -> float:
    from trainer.records import read_eval

    return sum(float(line.seconds or 0.0) for line in read_eval(home.run(run)) if line.step > after)


RESUMED = re.compile(r"resumed run (\S+) at step \d+ from .* in ([0-9.]+) s")


def restore_seconds(home: Home, run: str) -> float:
    """The restore the run's own log names (`trainer.loop.restore`: digests checked, the checkpoint loaded)."""
    found = RESUMED.findall((home.run(run) / "train.log").read_text(errors="replace"))
    return sum(float(seconds) for name, seconds in found if name == run)


def run_swarm(proxies: int, reuse: bool) -> Swarm:
    """Plan and run the swarm in a fresh home; its time split into training steps and the parts outside."""
    from trainer.search.plan import shared_run
    from trainer.search.steps import plan_step, run_step

    ends: dict[str, tuple[float, float]] = {}  # run -> (job start, job end), wall clock
    with tempfile.TemporaryDirectory() as tmp:
        home, path = swarm_home(Path(tmp), proxies, reuse)
        plan_step(path, home)
        began = time.perf_counter()
        search, _, rows = run_step(
            path, home, on_row=lambda row: ends.__setitem__(row.run, (time.time() - (row.seconds or 0), time.time()))
        )
        swarm = Swarm(len([r for r in rows if r.status == "done"]), time.perf_counter() - began)
        base = shared_run(search, 0)
        swarm.training = steps_and_start(home, base, 0)[0]  # the branch's steps are training steps too
        before = 0.0
        for row in rows:
            steps, first = steps_and_start(home, row.run, search.branch_step)
            swarm.training += steps
            before += first - ends[row.run][0]
            swarm.parts["evaluation"] += eval_seconds(home, row.run, search.branch_step)
            swarm.parts["restore"] += restore_seconds(home, row.run)
        swarm.parts["start-up"] = max(0.0, before - swarm.parts["restore"])
        swarm.parts["other"] = swarm.slots - swarm.training - sum(swarm.parts.values())
    return swarm


def results(ours: Swarm, fresh: Swarm) -> list[Result]:
    name = f"tiny MoE, {PROXY_STEPS} steps of {GLOBAL_BATCH}x{SEQ_LEN}, {CONCURRENCY} at once"
    baseline = f"a fresh process per proxy ({fresh.proxies} proxies)"
    lines = [
        Result(
            f"{ours.proxies}-proxy swarm ({name}), long-lived workers",
            ours.per_hour,
            fresh.per_hour,
            baseline,
            "proxies/hour",
        ),
        Result(
            "its share of slot time outside training steps",
            100 * ours.share(),
            100 * fresh.share(),
            baseline,
            "%",
            higher_is_better=False,
        ),
    ]
    for part in PARTS:
        lines.append(
            Result(
                f"  outside training steps, per proxy: {part} ({100 * ours.share(part):.1f}% of slot time; "
                f"baseline {100 * fresh.share(part):.1f}%)",
                ours.parts[part] / ours.proxies,
                fresh.parts[part] / fresh.proxies,
                baseline,
                "s",
                higher_is_better=False,
            )
        )
    return lines


def main(proxies: int | None = None) -> list[Result]:
    proxies = proxies or int(os.environ.get("MILLRACE_BENCH_PROXIES", "64"))
    fresh = run_swarm(min(BASELINE_PROXIES, proxies), reuse=False)
    ours = run_swarm(proxies, reuse=True)
    return results(ours, fresh)
