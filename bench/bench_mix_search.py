"""The mixture search (`millrace mix search`), in three parts, each a requirement in words:

- the swarm: a 64-proxy swarm at the micro scale (the demo's tiny MoE, batches of 16 x 256 tokens, 16 proxy
  steps each, branched from one shared checkpoint) on this machine: proxies per hour, against the same
  proxies' training steps alone (no start-up, checkpoint restore or evaluation); the ratio is the share of the
  swarm's time spent in training steps, and the time not in training steps should be small;
- fit plus propose at 200 cells and 1,000 rows must take seconds: 5-fold out-of-fold quality, the fit on every
  row and a two-phase proposal under the constraints (8-epoch cap over 15T + 3.75T planned tokens, shares,
  closeness to the prior), against a 10 s CPU budget, for the log-linear default and LightGBM, at 250 and 1,000
  rows (two sizes); the rows are RegMix draws around the natural shares of the reference store's 200 cells,
  scored by a known log-linear law with 1% noise, and the proposal is checked against every constraint; beside
  it, the log-linear fit with BLAS held to one thread (as the search runs it) against numpy's default threads;
- how well LightGBM ranks those rows out of fold (5-fold Spearman) with the search's settings, against the
  settings it had before (15 leaves on the raw target, 200 rounds) and RegMix's own (31 leaves, learning rate
  0.01, 1,000 rounds), and the log-linear default against it, at 250 and 1,000 rows;
- a proxy's training throughput on CPU against a plain dense PyTorch model of the same FLOPs per token on the
  same batches (at least 0.5x): a swarm on a small machine is bounded by it; and one branched proxy's time
  outside its training steps, named step by step (`bench/proxy_throughput.py`).

`MILLRACE_BENCH_PROXIES` sets the swarm's size (default 64) for a shorter run on a busy machine.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tomli_w

from bench.result import Result
from millrace.home import Home
from trainer.search.propose import Constraints, max_weights, propose, violations
from trainer.search.sampling import sample_mixtures
from trainer.search.surrogate import (
    TREES,
    Kind,
    Observations,
    TreeSettings,
    _fit_log_linear,
    cross_validate,
    fit_surrogate,
)

PROXIES = int(os.environ.get("MILLRACE_BENCH_PROXIES", "64"))
SEQ_LEN, GLOBAL_BATCH, PROXY_STEPS, BRANCH_STEP = 256, 16, 16, 4
TINY = Path(__file__).parents[1] / "trainer" / "configs" / "tiny.toml"
STATS = Path(__file__).parents[1] / "mixtures" / "examples" / "reference" / "available_tokens.json"
PHASE_TOKENS = np.array([15e12, 3.75e12])  # the reference revision's two phases
BUDGET_S = 10.0


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
    """Proxies per hour of the whole swarm against its training steps alone (the shared checkpoint's and the
    proxies'): the ratio is the share of the swarm's time spent in training steps."""
    from trainer.search.plan import shared_run
    from trainer.search.run import train_seconds
    from trainer.search.steps import plan_step, run_step

    with tempfile.TemporaryDirectory() as tmp:
        home, path = _swarm_home(Path(tmp), PROXIES)
        plan_step(path, home)
        began = time.perf_counter()
        search, _, rows = run_step(path, home)
        wall = time.perf_counter() - began
        shared = train_seconds(home, shared_run(search, 0), 0)  # the branch's steps are training steps too
    training = shared + sum(r.train_seconds or 0.0 for r in rows)
    done = len([r for r in rows if r.status == "done"])
    return [
        Result(
            name=f"{done}-proxy swarm at the micro scale (tiny MoE, {PROXY_STEPS} steps of {GLOBAL_BATCH}x{SEQ_LEN})",
            ours=done * 3600 / wall,
            baseline=done * 3600 / training if training else float("inf"),
            baseline_name="its training steps alone (ratio: share of the swarm's time in training steps)",
            unit="proxies/hour",
        )
    ]


def reference_problem(rows: int, seed: int = 0) -> tuple[Constraints, Observations]:
    """The reference store's 200 cells, natural shares as the prior, and `rows` scored swarm mixtures."""
    available = json.loads(STATS.read_text())["available_tokens"]
    names, tokens = tuple(available), np.array(list(available.values()), dtype=float)
    prior = np.tile(tokens / tokens.sum(), (len(PHASE_TOKENS), 1))
    constraints = Constraints(PHASE_TOKENS, tokens, epoch_cap=8.0, max_share=0.05, prior=prior, max_distance=0.5)
    rng = np.random.default_rng(seed)
    weights = sample_mixtures(prior, rows, seed, max_weight=max_weights(constraints))
    slopes = rng.normal(0.0, 1.0, prior.shape)
    targets = np.exp(0.1 + np.einsum("npc,pc->n", weights, slopes) + rng.normal(0.0, 0.01, rows))
    return constraints, Observations(names, weights, targets)


def fit_and_propose(constraints: Constraints, obs: Observations, kind: Kind) -> float:
    """CPU seconds of cross-validation, the full fit and the proposal (from the 3 best rows and the prior)."""
    start = time.process_time()
    quality = cross_validate(obs, kind, folds=5)
    surrogate = fit_surrogate(obs, kind)
    proposal = propose(surrogate, constraints, quality, starts=obs.weights[np.argsort(obs.targets)[:3]])
    spent = time.process_time() - start
    broken = violations(proposal.weights, constraints)
    if broken:
        raise RuntimeError(f"the proposal breaks its constraints: {broken[:3]}")
    return spent


def fit_propose_results() -> list[Result]:
    """Fit plus propose at 200 cells, 250 and 1,000 rows, each kind, against the 10 s budget."""
    results = []
    for rows in (250, 1000):
        constraints, obs = reference_problem(rows)
        for kind in ("log-linear", "lightgbm"):
            spent = min(fit_and_propose(constraints, obs, kind) for _ in range(2))
            results.append(
                Result(
                    f"fit + propose, {kind}, 200 cells x {rows} rows (CPU)",
                    spent,
                    BUDGET_S,
                    "budget",
                    "s",
                    higher_is_better=False,
                    target=1.0,
                )
            )
    return results


BEFORE = TreeSettings(
    {"learning_rate": 0.05, "num_leaves": 15, "min_data_in_leaf": 20, "feature_fraction": 0.5, "max_bin": 63}
    | {"bagging_fraction": 0.8, "bagging_freq": 1},
    rounds=200,
    log_target=False,
)
REGMIX = TreeSettings({"learning_rate": 0.01}, rounds=1000, log_target=False)  # LightGBM's defaults otherwise


def ranking_results() -> list[Result]:
    """Out-of-fold Spearman of LightGBM (the search's settings against the earlier ones and RegMix's) and of the
    log-linear default, on the same rows, at 250 and 1,000 rows of 200 cells."""
    results = []
    for rows in (250, 1000):
        _, obs = reference_problem(rows)
        ours = cross_validate(obs, "lightgbm", trees=TREES).spearman
        where = f"200 cells x {rows} rows, 5-fold out-of-fold Spearman"
        for name, settings in (
            ("the earlier settings (15 leaves, raw target)", BEFORE),
            ("RegMix's settings", REGMIX),
        ):
            before = cross_validate(obs, "lightgbm", trees=settings).spearman
            results.append(Result(f"LightGBM ranking, {where}", ours, before, name, "Spearman"))
        linear = cross_validate(obs, "log-linear").spearman
        results.append(
            Result(f"log-linear ranking, {where}", linear, ours, "LightGBM (the search's settings)", "Spearman")
        )
    return results


def blas_threads_result() -> Result:
    """The log-linear fit at 1,000 rows as `fit_surrogate` runs it (BLAS held to one thread) against the same fit
    under numpy's default BLAS threads: on a busy machine the threads spin more than they compute."""
    _, obs = reference_problem(1000)

    def cpu(fit: Callable[[], object]) -> float:
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            fit()
            best = min(best, time.process_time() - start)
        return best

    default = cpu(lambda: _fit_log_linear(obs))
    ours = cpu(lambda: fit_surrogate(obs, "log-linear"))
    return Result(
        "log-linear fit, 200 cells x 1000 rows, BLAS held to one thread (CPU)",
        ours,
        default,
        "numpy's default BLAS threads",
        "s",
        higher_is_better=False,
    )


def proxy_throughput_results() -> list[Result]:
    """The proxy against a plain dense PyTorch model of the same FLOPs/token, and its overheads
    (`bench/proxy_throughput.py`)."""
    from bench import proxy_throughput

    return proxy_throughput.main()


PARTS: list[Callable[[], list[Result]]] = [
    swarm,
    fit_propose_results,
    ranking_results,
    lambda: [blas_threads_result()],
    proxy_throughput_results,
]


def main() -> list[Result]:
    return [result for part in PARTS for result in part()]
