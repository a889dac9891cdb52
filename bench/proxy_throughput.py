"""The mixture search's proxy on CPU: its training throughput against a plain dense PyTorch model of the same
FLOPs per token on the same batches, and what a proxy spends outside its training steps.

Requirement (the mixture search's bench): a swarm on a small machine is bounded by how fast one proxy trains,
so the proxy -- the tiny MoE through millrace's whole training step (loader, model, AdamW, the bias rule,
per-step metrics, the run's files) -- must train at least half as many tokens per second as the plain dense
decoder a user would write (embedding, pre-norm causal attention with torch's SDPA, SwiGLU, untied output,
AdamW, gradient clipping) whose width is chosen so its 6 x matmul parameters + attention FLOPs per token
(`trainer.flops`) equal the proxy's. Both run in this process at the same threads and dtype (fp32), on the
batches of one built mixture (the demo's shape: vocabulary 8,192, 256 x 16 tokens a step), alternated, best of
`ROUNDS`; tokens/s over the steps after `WARMUP`, wall time (everything each step does).

The overheads are one branched proxy's (`train --from-run`, as the swarm trains them): process start-up (a
fresh `python -m millrace train --help`), run preparation (config, loader, store), restoring the shared
checkpoint, the held-out evaluation, and the run's end (checkpoint, step explanations), each timed in-process
around the trainer's own named steps.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import tomli_w

from bench.result import Result

STEPS, WARMUP, ROUNDS = 24, 4, 3
SEQ_LEN, GLOBAL_BATCH, VOCAB = 256, 16, 8192
TINY = Path(__file__).parents[1] / "trainer" / "configs" / "tiny.toml"


def proxy_config(directory: Path, evaluate: bool = False) -> Path:
    data = tomllib.loads(TINY.read_text())
    data["metrics"].update({"tensorboard": False, "peak_flops_per_device": 1e11})
    data["checkpoint"].update({"at_end": True})
    data["samples"] = {**data.get("samples", {}), "enabled": False}
    data["eval"] = {**data.get("eval", {}), "enabled": evaluate, "every": 0}
    path = directory / f"proxy{'-eval' if evaluate else ''}.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def dense_model(config, ffn: int):
    """The plain dense decoder: the proxy's widths, heads, vocabulary and depth, a SwiGLU of width `ffn`."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    m = config.model
    head_dim = m.resolved_head_dim
    q_dim, kv_dim = m.n_heads * head_dim, m.n_kv_heads * head_dim

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.RMSNorm(m.d_model), nn.RMSNorm(m.d_model)
            self.qkv = nn.Linear(m.d_model, q_dim + 2 * kv_dim, bias=False)
            self.out = nn.Linear(q_dim, m.d_model, bias=False)
            self.up = nn.Linear(m.d_model, 2 * ffn, bias=False)
            self.down = nn.Linear(ffn, m.d_model, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).split([q_dim, kv_dim, kv_dim], dim=-1)
            q = q.view(b, t, m.n_heads, head_dim).transpose(1, 2)
            k, v = (z.view(b, t, m.n_kv_heads, head_dim).transpose(1, 2) for z in (k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + self.out(a.transpose(1, 2).reshape(b, t, q_dim))
            gate, up = self.up(self.norm2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    class Dense(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(m.vocab_size, m.d_model)
            self.blocks = nn.ModuleList(Block() for _ in range(m.n_layers))
            self.norm = nn.RMSNorm(m.d_model)
            self.head = nn.Linear(m.d_model, m.vocab_size, bias=False)

        def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x)
            logits = self.head(self.norm(x))
            return F.cross_entropy(logits.flatten(0, 1), labels.flatten())

    return Dense()


def matched_ffn(config) -> tuple[int, float, float]:
    """The dense SwiGLU width whose FLOPs per token equal the proxy's; (width, proxy's, dense's FLOPs/token)."""
    from trainer.flops import attention_flops_per_token, count_params, flops_per_token

    target = flops_per_token(config, SEQ_LEN)
    params = count_params(config)
    fixed = params.attention + params.output + 0  # matmuls the two models share
    per_width = 3 * config.model.d_model * config.model.n_layers
    ffn = max(1, round((target / 6 - attention_flops_per_token(config, SEQ_LEN) / 6 - fixed) / per_width))
    dense = 6 * (fixed + per_width * ffn) + attention_flops_per_token(config, SEQ_LEN)
    return ffn, target, dense


def dense_tokens_per_second(config, manifest: Path) -> float:
    """The dense baseline trained on the mixture's batches: tokens/s after the warm-up, wall time."""
    import torch

    from loader import MixtureStream

    ffn, _, _ = matched_ffn(config)
    torch.manual_seed(0)
    model = dense_model(config, ffn)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, foreach=True)
    stream = MixtureStream(manifest)
    tokens, began = 0, 0.0
    for step, batch in enumerate(stream.iterate(start_step=0, end_step=STEPS)):
        if step == WARMUP:
            tokens, began = 0, time.perf_counter()
        ids = torch.from_numpy(batch.tokens)
        loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()  # the loss a user logs every step
        tokens += ids[:, 1:].numel()
    stream.close() if hasattr(stream, "close") else None
    return tokens / (time.perf_counter() - began)


def proxy_tokens_per_second(config_path: Path, home, run: str) -> float:
    """millrace's training loop on the same batches: tokens/s from its metrics lines' clock after the warm-up."""
    from trainer.loop import train
    from trainer.records import read_metrics
    from trainer.train_request import TrainRequest

    train(config_path, home, TrainRequest(steps=STEPS, run=run))
    lines = read_metrics(home.run(run))
    start, end = lines[WARMUP - 1], lines[-1]
    assert None not in (start.tokens, end.tokens, start.time, end.time), "the trainer writes tokens and time"
    return (float(end.tokens or 0) - float(start.tokens or 0)) / (float(end.time or 0) - float(start.time or 0))


def throughput(home, directory: Path, manifest: Path) -> list[Result]:
    from trainer.config import load_train_config, with_vocab

    config_path = proxy_config(directory)
    config = with_vocab(load_train_config(config_path), VOCAB)
    ffn, proxy_flops, dense_flops = matched_ffn(config)
    rates: dict[str, list[float]] = {"proxy": [], "dense": []}
    for round_ in range(ROUNDS):  # alternated, best kept: the machine is shared and its load drifts
        rates["proxy"].append(proxy_tokens_per_second(config_path, home, f"proxy-{round_}"))
        rates["dense"].append(dense_tokens_per_second(config, manifest))
    name = f"proxy (tiny MoE, {proxy_flops:,.0f} FLOPs/token) training tokens/s on CPU"
    dense = f"plain dense PyTorch decoder, {dense_flops:,.0f} FLOPs/token (SwiGLU width {ffn}), same batches"
    return [Result(name, max(rates["proxy"]), max(rates["dense"]), dense, "tokens/s", target=0.5)]


@contextlib.contextmanager
def timed(module, names: list[str], into: dict[str, float]) -> Iterator[None]:
    """Wrap `module`'s functions `names` to add their wall time to `into` (the bench's stopwatch)."""
    originals = {name: getattr(module, name) for name in names}

    def wrap(name, function):
        def inner(*args, **kwargs):
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                into[name] = into.get(name, 0.0) + time.perf_counter() - began

        return inner

    for name, function in originals.items():
        setattr(module, name, wrap(name, function))
    try:
        yield
    finally:
        for name, function in originals.items():
            setattr(module, name, function)


def start_up_seconds() -> float:
    """A fresh interpreter importing the trainer (what every local proxy process pays first)."""
    best = math.inf
    for _ in range(3):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import trainer.loop, trainer.cli"], check=True)
        best = min(best, time.perf_counter() - began)
    return best


def overheads(home, directory: Path, proxy_steps: int = 16) -> list[Result]:
    """One branched proxy, its time split: the training steps against each named step outside them."""
    import trainer.loop as loop
    from trainer.observers import RunObservers
    from trainer.train_request import TrainRequest

    config = proxy_config(directory, evaluate=True)
    loop.train(config, home, TrainRequest(steps=4, run="shared", checkpoint_every=4))
    spent: dict[str, float] = {}
    began = time.perf_counter()
    with (
        timed(
            loop,
            [
                "prepare_run",
                "build_training",
                "restore",
                "train_step",
                "log_metrics",
                "maybe_checkpoint",
                "write_step_explanations",
            ],
            spent,
        ),
        timed(RunObservers, ["after_step", "close"], spent),
    ):
        loop.train(config, home, TrainRequest(steps=4 + proxy_steps, run="proxy", from_run="shared"))
    total = time.perf_counter() - began
    start = start_up_seconds()
    steps = spent["train_step"]
    results = [
        Result(
            f"proxy wall time, {proxy_steps} steps in process (+ start-up {start:.2f}s in a fresh process)",
            total + start,
            steps,
            "its training steps alone",
            "s",
            higher_is_better=False,
        )
    ]
    for name, seconds in [("process start-up", start), *sorted(spent.items())]:
        if name != "train_step":
            results.append(
                Result(
                    f"proxy overhead: {name}",
                    seconds,
                    steps,
                    "the proxy's training steps",
                    "s",
                    higher_is_better=False,
                )
            )
    return results


def main() -> list[Result]:

    from millrace.home import Home
    from testkit.stores import LEARNABLE, build_mixture, make_store

    with tempfile.TemporaryDirectory() as tmp:
        home = Home.resolve(Path(tmp) / "home")
        make_store(
            home, {"c00q0": 300_000, "c01q1": 200_000, "c02q0": 150_000}, replace(LEARNABLE, vocab=VOCAB), held_out=4
        )
        manifest = build_mixture(
            home, tokens=SEQ_LEN * GLOBAL_BATCH * (STEPS + 8), seq_len=SEQ_LEN, global_batch=GLOBAL_BATCH
        )
        return [*throughput(home, Path(tmp), Path(manifest)), *overheads(home, Path(tmp))]
