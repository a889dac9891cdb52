"""The mixture search (`millrace mix search`), in three parts, each a requirement in words:

- the swarm: a 64-proxy swarm at the micro scale (the demo's tiny MoE, batches of 16 x 256 tokens, 16 proxy
  steps each, branched from one shared checkpoint) on this machine: proxies per hour, against the same
  proxies' training steps alone (no start-up, checkpoint restore or evaluation); the ratio is the share of the
  swarm's time spent in training steps, and the time not in training steps should be small;
- fit plus propose at 200 cells and 1,000 rows must take seconds;
- a proxy's training throughput on CPU against a plain dense PyTorch model of the same FLOPs per token on the
  same batches (at least 0.5x): a swarm on a small machine is bounded by it.

`MILLRACE_BENCH_PROXIES` sets the swarm's size (default 64) for a shorter run on a busy machine.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import tomli_w

from bench.result import Result
from millrace.home import Home

PROXIES = int(os.environ.get("MILLRACE_BENCH_PROXIES", "64"))
SEQ_LEN, GLOBAL_BATCH, PROXY_STEPS, BRANCH_STEP = 256, 16, 16, 4
TINY = Path(__file__).parents[1] / "trainer" / "configs" / "tiny.toml"


def _swarm_home(root: Path, proxies: int) -> tuple[Home, Path]:
    """A store of distinguishable cells, a natural baseline long enough for the branch and the proxies, and the
    micro search file over the tiny MoE."""
    from mixtures.build import build
    from testkit.stores import DISTINCT, make_store

    home = Home.resolve(root / "home")
    cells = {f"c{d:02d}q{q}": 40_000 + 5_000 * d for d in range(4) for q in range(2)}
    make_store(home, cells, DISTINCT, held_out=3, vocab=512)
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
    }
    path = root / "bench.toml"
    path.write_text(tomli_w.dumps(spec))
    return home, path


def swarm() -> list[Result]:
    """Proxies per hour of the whole swarm against its proxies' training steps alone."""
    from trainer.search.steps import plan_step, run_step

    with tempfile.TemporaryDirectory() as tmp:
        home, path = _swarm_home(Path(tmp), PROXIES)
        plan_step(path, home)
        began = time.perf_counter()
        _, _, rows = run_step(path, home)
        wall = time.perf_counter() - began
    training = sum(r.train_seconds or 0.0 for r in rows)
    done = len([r for r in rows if r.status == "done"])
    return [
        Result(
            name=f"{done}-proxy swarm at the micro scale (tiny MoE, {PROXY_STEPS} steps of {GLOBAL_BATCH}x{SEQ_LEN})",
            ours=done * 3600 / wall,
            baseline=done * 3600 / training if training else float("inf"),
            baseline_name="the same proxies' training steps alone (ratio: share of time in training steps)",
            unit="proxies/hour",
        )
    ]


PARTS: list[Callable[[], list[Result]]] = [swarm]


def main() -> list[Result]:
    return [result for part in PARTS for result in part()]
