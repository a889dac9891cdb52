"""A mixture search with a known optimum, small enough for a test or a bench: a store whose cells hold
distinguishable content (`testkit.stores.DISTINCT`), an external evaluation set drawn from a known mix of two of
them, a natural baseline revision, a very small MoE config and the search file over them.

The two target cells are the smallest, so the natural baseline gives them little weight and uniform more; a
search that finds the set's mix must put most of its weight on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import tomli_w

from millrace.home import Home
from testkit.stores import DISTINCT, make_store
from trainer.records import EvalFigures
from trainer.search.records import PROXIES_FILE, ProxyResults, ProxyRow, ProxyTable, SwarmPlan, write_search_record
from trainer.search.revisions import weights_array

CELLS = {"c00q0": 9000, "c01q0": 3000, "c02q0": 9000, "c03q0": 3000}
TARGET_CELLS = ("c01q0", "c03q0")
TARGET_SET = "target"
TARGET_MIX = {"c01q0": 600, "c03q0": 300}  # the set: two parts c01q0 to one part c03q0
MIXTURE = "default"
BASELINE = "natural"
SEQ_LEN = 32
GLOBAL_BATCH = 8
BASELINE_STEPS = 40
MAX_SHARE = 0.6  # no cell above 60%: the proxies are sampled, and the proposal made, inside this bound

MODEL = {
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "head_dim": 8, "dense_ffn_dim": 32},
    "moe": {"n_routed_experts": 2, "n_shared_experts": 0, "top_k": 1, "expert_ffn_dim": 16},
    "optimizer": {"lr": 0.02, "min_lr_ratio": 0.5, "weight_decay": 0.0},
    "schedule": {"kind": "cosine", "warmup_steps": 1},
    "metrics": {"tensorboard": False, "peak_flops_per_device": 1e11, "log_every": 1},
    "samples": {"enabled": False},
    "plan": {"seq_len": SEQ_LEN, "global_batch": GLOBAL_BATCH},
}


def known_optimum_home(root: Path) -> Home:
    """The store (held-out documents per cell, the target set) and the natural baseline revision, built."""
    return search_home(root, CELLS, eval_sets={TARGET_SET: TARGET_MIX})


def search_home(
    root: Path,
    cells: Mapping[str, int],
    *,
    held_out: int | Mapping[str, int] = 3,
    eval_sets: Mapping[str, Mapping[str, int]] = {},
    steps: int = BASELINE_STEPS,
) -> Home:
    """A `DISTINCT` store of `cells` (tokens each; `held_out` documents per cell, a mapping leaves a cell it
    omits without held-out data) and its natural baseline revision of `steps` steps, built: the shapes a search
    meets (1 cell, 200 cells, cells of very different sizes)."""
    from mixtures.build import build

    home = Home.resolve(root)
    make_store(home, cells, DISTINCT, held_out=held_out, eval_sets=eval_sets)
    path = home.revisions / MIXTURE / f"{BASELINE}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'mixture = "{MIXTURE}"\nrevision = "{BASELINE}"\nseed = 3\nseq_len = {SEQ_LEN}\n'
        f'global_batch = {GLOBAL_BATCH}\nepoch_cap = 8\n[store]\nname = "{DISTINCT.name}"\n\n[[phases]]\n'
        f'name = "main"\ntokens = {steps * SEQ_LEN * GLOBAL_BATCH}\nstrategy = "natural"\n'
    )
    build(home, MIXTURE, BASELINE)
    return home


def write_search(
    directory: Path, name: str = "known", proxies: int | None = 16, proxy_steps: int = 16, **tables: dict[str, object]
) -> Path:
    """The search file (and its model config beside it); `tables` replace or add whole tables; `proxies=None`
    leaves the swarm's size to the default (per component)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.toml").write_text(tomli_w.dumps(MODEL))
    spec: dict[str, object] = {
        "search": name,
        "base": {"config": "model.toml"},
        "mixture": {"mixture": MIXTURE, "revision": BASELINE},
        "branch": {"fraction": 0.1},
        "proxies": {"tokens": proxy_steps * SEQ_LEN * GLOBAL_BATCH, **({"count": proxies} if proxies else {})},
        "sampling": {"prior": "uniform", "seed": 0},
        "target": {"kind": "set", "set": TARGET_SET},
        "constraints": {"max_share": MAX_SHARE},
        "validation": {"seeds": [1, 2, 3], "baselines": ["natural", "uniform"]},
        "eval": {"max_sequences": 4},
        "fleet": {"executor": "in-process"},
        **tables,
    }
    path = directory / f"{name}.toml"
    path.write_text(tomli_w.dumps(spec))
    return path


def scored_rows(home: Home, plan: SwarmPlan, slopes: np.ndarray, seed: int = 0, noise: float = 0.01) -> list[ProxyRow]:
    """Every planned proxy as a finished row scored by a known log-linear law of its weights, with no training:
    macro held-out BPB = exp(0.1 + sum_p,c w[p, c] slopes[p, c]) times lognormal `noise`, written as the swarm's
    proxies.jsonl (a fit and a proposal at 200 cells in a second)."""
    rng = np.random.default_rng(seed)
    rows = []
    for proxy in plan.proxies:
        weights = weights_array(proxy.phases, plan.components)
        macro = float(np.exp(0.1 + np.sum(weights * slopes) + rng.normal(0.0, noise)))
        rows.append(
            ProxyRow(
                proxy=proxy.proxy,
                run=proxy.run,
                revision=proxy.revision,
                phases=proxy.phases,
                status="done",
                results=ProxyResults(step=1, bpb=EvalFigures(macro=macro)),
            )
        )
    table = ProxyTable(search=plan.search, components=plan.components, rows=rows)
    write_search_record(home.search(plan.search), PROXIES_FILE, table)
    return rows
