"""CPU training throughput of the tiny MoE against a dense model with the same active parameters.

Both train through the real path (loader → model → AdamW → bias rule → metrics) on
the same built mixture of a synthetic store; tokens/s is the median over steps after
a warm-up. The dense baseline replaces each MoE layer by one SwiGLU whose width is
(top_k + shared) x expert width, so a token meets the same number of FFN weights;
the ratio is the price of routing (router, sort, gather/scatter, grouped matmuls)
at this tiny size, where it is not amortised as it is at scale.
"""

from __future__ import annotations

import statistics
import tempfile
import tomllib
from pathlib import Path

import tomli_w

from bench.result import Result

STEPS, WARMUP, ROUNDS = 40, 8, 3
SEQ_LEN, GLOBAL_BATCH = 128, 16
TINY = Path(__file__).parents[1] / "trainer" / "configs" / "tiny.toml"


def _config(directory: Path, name: str, dense: bool) -> Path:
    data = tomllib.loads(TINY.read_text())
    data["metrics"].update({"tensorboard": False, "peak_flops_per_device": 1e11})
    data["checkpoint"].update({"at_end": False})
    if dense:
        moe = data["moe"]
        data["model"]["dense_ffn_dim"] = (moe["top_k"] + moe["n_shared_experts"]) * moe["expert_ffn_dim"]
        moe["n_routed_experts"] = 0
    path = directory / f"{name}.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def _tokens_per_second(config: Path, home, run: str) -> tuple[float, int]:
    from trainer.config import load_train_config, with_vocab
    from trainer.flops import count_params
    from trainer.loop import train
    from trainer.records import read_metrics
    from trainer.train_request import TrainRequest

    result = train(config, home, TrainRequest(steps=STEPS, run=run))
    rates = [r.tokens_per_second or 0.0 for r in read_metrics(result.run_dir)[WARMUP:]]
    active = count_params(with_vocab(load_train_config(config), 256)).active
    return statistics.median(rates), active


def main() -> list[Result]:
    from millrace.home import Home
    from testkit.stores import build_mixture, make_store

    with tempfile.TemporaryDirectory() as tmp:
        home = Home.resolve(Path(tmp) / "home")
        make_store(home, {"c00q0": 120_000, "c01q1": 80_000})
        build_mixture(home, tokens=SEQ_LEN * GLOBAL_BATCH * (STEPS + 4), seq_len=SEQ_LEN, global_batch=GLOBAL_BATCH)
        configs = {"moe": _config(Path(tmp), "moe", dense=False), "dense": _config(Path(tmp), "dense", dense=True)}
        rates: dict[str, list[float]] = {"moe": [], "dense": []}
        active: dict[str, int] = {}
        for round_ in range(ROUNDS):  # alternate, keep the best: the machine is shared and its load drifts
            for name, config in configs.items():
                rate, active[name] = _tokens_per_second(config, home, f"{name}-{round_}")
                rates[name].append(rate)
        moe, dense = max(rates["moe"]), max(rates["dense"])
        moe_active, dense_active = active["moe"], active["dense"]
    return [
        Result(
            name=f"tiny MoE training tokens/s (CPU; active params {moe_active:,} vs dense {dense_active:,})",
            ours=moe,
            baseline=dense,
            baseline_name="dense model, same active parameters",
            unit="tokens/s",
        )
    ]
