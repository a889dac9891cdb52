"""The mixture search (`millrace mix search`), in three parts, each a requirement in words:

- the swarm (`swarm`): a 64-proxy swarm at the micro scale (the demo's tiny MoE, batches of 16 x 256 tokens,
  16 proxy steps each, branched from one shared checkpoint) on this machine: proxies per hour, and the share of
  its time outside training steps (start-up, checkpoint restore, evaluation, other), which should be small,
  against a fresh process per proxy measured in the same run (`bench/proxy_swarm.py`);
- fit plus propose (`fit`) at 200 cells and 1,000 rows must take seconds: 5-fold out-of-fold quality, the fit on every
  row and a two-phase proposal under the constraints (8-epoch cap over 15T + 3.75T planned tokens, shares,
  closeness to the prior), against a 10 s CPU budget, for the log-linear default and LightGBM, at 250 and 1,000
  rows (two sizes); the rows are RegMix draws around the natural shares of the reference store's 200 cells,
  scored by a known log-linear law with 1% noise, and the proposal is checked against every constraint;
  beside it (`blas`), the log-linear fit with BLAS held to one thread (as the search runs it) against numpy's
  default threads;
- how well LightGBM ranks those rows out of fold (`ranking`, 5-fold Spearman) with the search's settings,
  against the settings it had before (15 leaves on the raw target, 200 rounds) and RegMix's own (31 leaves,
  learning rate 0.01, 1,000 rounds), and the log-linear default against it, at 250 and 1,000 rows;
- a proxy's training throughput (`throughput`) on CPU against a plain dense PyTorch model of the same FLOPs
  per token on the same batches (at least 0.5x): a swarm on a small machine is bounded by it; and one
  branched proxy's time outside its training steps, named step by step (`bench/proxy_throughput.py`);
- the search's records (`records`) at 200 cells, 100 and 800 two-phase proxies: bytes on disk, bytes written over
  the swarm and CPU seconds writing and reading, components written once and rows appended against the previous
  layout (every weight named, the table rewritten after each proxy) in the same run (`bench/search_records.py`).

`python -m bench mix_search --proxies N` (`MILLRACE_BENCH_PROXIES`) sets the swarm's size (default 64) for a shorter
run on a busy machine; `--part swarm` (`MILLRACE_BENCH_PARTS`, comma-separated) runs only the parts named.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.result import Result
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

STATS = Path(__file__).parents[1] / "mixtures" / "examples" / "reference" / "available_tokens.json"
PHASE_TOKENS = np.array([15e12, 3.75e12])  # the reference revision's two phases
BUDGET_S = 10.0


def swarm() -> list[Result]:
    """Proxies per hour of the micro swarm on long-lived workers against a fresh process per proxy, and the
    share of its time outside training steps, part by part (`bench/proxy_swarm.py`)."""
    from bench import proxy_swarm

    return proxy_swarm.main()


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


def records_results() -> list[Result]:
    """The search's plan and rows at 200 cells, 100 and 800 proxies: bytes on disk, bytes written over the swarm
    and CPU, against the previous layout (`bench/search_records.py`)."""
    from bench import search_records

    return search_records.main()


PARTS: dict[str, Callable[[], list[Result]]] = {
    "swarm": swarm,
    "fit": fit_propose_results,
    "ranking": ranking_results,
    "blas": lambda: [blas_threads_result()],
    "throughput": proxy_throughput_results,
    "records": records_results,
}


def main() -> list[Result]:
    named = [name for name in os.environ.get("MILLRACE_BENCH_PARTS", "").split(",") if name]
    unknown = sorted(set(named) - set(PARTS))
    if unknown:
        raise SystemExit(f"mix_search: no part {unknown[0]!r} (parts: {', '.join(PARTS)})")
    return [result for name, part in PARTS.items() if not named or name in named for result in part()]
