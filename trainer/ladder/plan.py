"""Size the rungs of a ladder on paper: shape, parameters, tokens, batch, steps, lr, FLOPs, time here.

Pure given the ladder file, its base config and the revision's sequence length (and the
store's vocabulary when the base config leaves it at 0); nothing is trained or built.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from millrace.errors import ConfigError
from millrace.home import Home
from trainer.config import TrainConfig, load_train_config, with_vocab
from trainer.flops import count_params, flops_per_token
from trainer.ladder.spec import LadderSpec, Rules, load_ladder, resolve_path


@dataclass(frozen=True)
class RungPlan:
    name: str
    d_model: int
    layers: int
    total_params: int
    active_params: int  # without embedding and output layers
    tokens: int
    steps: int
    batch: int
    seq_len: int
    lr: float
    flops: float
    seconds_here: float
    config: TrainConfig

    def as_dict(self) -> dict:
        return {"name": self.name, "d_model": self.d_model, "layers": self.layers,
                "params": {"total": self.total_params, "active": self.active_params}, "tokens": self.tokens,
                "steps": self.steps, "batch": self.batch, "lr": self.lr, "flops": self.flops,
                "seconds_here": self.seconds_here}


@dataclass(frozen=True)
class LadderPlan:
    spec: LadderSpec
    path: Path
    seq_len: int
    rungs: list[RungPlan]
    target: RungPlan | None
    seconds_per_flop_here: float

    def rung(self, name: str) -> RungPlan:
        for rung in self.rungs:
            if rung.name == name:
                return rung
        raise ConfigError(f"{self.path}: no rung {name!r} (rungs: {', '.join(r.name for r in self.rungs)})")

    def as_dict(self) -> dict:
        return {"ladder": self.spec.ladder, "file": str(self.path), "mixture": self.spec.mixture.mixture,
                "revision": self.spec.mixture.revision, "seq_len": self.seq_len,
                "rungs": [r.as_dict() for r in self.rungs],
                "target": self.target.as_dict() if self.target else None}


def active_params(config: TrainConfig) -> int:
    """Active parameters per token without the embedding and output layers (the tokens-per-parameter base)."""
    params = count_params(config)
    return params.active - params.embedding - params.output


def scaled_config(base: TrainConfig, rules: Rules, d_model: int, layers: int) -> TrainConfig:
    """The base config at another width and depth; width-bound dimensions keep their ratio to d_model."""
    m, moe = base.model, base.moe
    head_dim = rules.head_dim or m.resolved_head_dim
    kv = rules.n_kv_heads or m.n_kv_heads
    heads_ratio = rules.heads_per_width or m.n_heads / m.d_model
    heads = max(kv, round(d_model * heads_ratio / kv) * kv)
    expert_ratio = rules.expert_ffn_per_width or moe.expert_ffn_dim / m.d_model
    dense_ratio = rules.dense_ffn_per_width or m.dense_ffn_dim / m.d_model
    model = m.model_copy(update={
        "d_model": d_model, "n_layers": layers, "n_heads": heads, "n_kv_heads": kv, "head_dim": head_dim,
        "dense_ffn_dim": max(1, round(d_model * dense_ratio)), "n_dense_layers": min(m.n_dense_layers, layers),
    })
    moe = moe.model_copy(update={"expert_ffn_dim": max(1, round(d_model * expert_ratio))})
    data = base.model_dump()
    data["model"], data["moe"] = model.model_dump(), moe.model_dump()
    return TrainConfig.model_validate(data)


def rung_batch(rules: Rules, index: int, tokens: float) -> int:
    if isinstance(rules.batch, list):
        return rules.batch[index]
    if isinstance(rules.batch, int):
        return rules.batch
    rule = rules.batch_rule
    raw = rule.coefficient * tokens ** rule.exponent
    return int(min(rule.maximum, max(rule.minimum, round(raw / rule.multiple) * rule.multiple)))


def rung_lr(spec: LadderSpec, config: TrainConfig, batch: int, seq_len: int, steps: int) -> float:
    rule = spec.rules.lr
    if rule is None:
        return config.optimizer.lr
    return (rule.base * (config.model.d_model / rule.d_model_ref) ** rule.width_exponent
            * (batch * seq_len / rule.batch_tokens_ref) ** rule.batch_exponent
            * (steps / rule.steps_ref) ** rule.steps_exponent)


def size_rung(spec: LadderSpec, name: str, config: TrainConfig, index: int | None, seq_len: int,
              seconds_per_flop: float, tokens: float | None = None, batch: int | None = None) -> RungPlan:
    active = active_params(config)
    tokens = int(round(tokens if tokens is not None else spec.rules.tokens_per_active_param * active))
    if batch is None:
        batch = rung_batch(spec.rules, index if index is not None else len(spec.rules.widths) - 1, tokens)
    steps = max(1, round(tokens / (batch * seq_len)))
    lr = rung_lr(spec, config, batch, seq_len, steps)
    flops = flops_per_token(config, seq_len) * tokens
    warmup = spec.rules.warmup_fraction
    schedule = config.schedule.model_copy(update={"warmup_steps": max(1, round(warmup * steps))}) if warmup \
        else config.schedule
    update = {"optimizer": config.optimizer.model_copy(update={"lr": lr}), "schedule": schedule,
              "plan": config.plan.model_copy(update={"tokens": float(tokens), "seq_len": seq_len,
                                                    "global_batch": batch})}
    return RungPlan(name=name, d_model=config.model.d_model, layers=config.model.n_layers,
                    total_params=count_params(config).total, active_params=active, tokens=tokens, steps=steps,
                    batch=batch, seq_len=seq_len, lr=lr, flops=flops, seconds_here=flops * seconds_per_flop,
                    config=config.model_copy(update=update))


def rung_layers(rules: Rules, index: int, d_model: int) -> int:
    if rules.layers is not None:
        return rules.layers[index]
    return max(1, round(d_model * rules.layers_per_width))


def family_layers(rules: Rules, d_model: int) -> int:
    """Depth for a width outside the list: the rule, else the depth/width ratio of the widest rung."""
    if rules.layers_per_width is not None:
        return max(1, round(d_model * rules.layers_per_width))
    return max(1, round(rules.layers[-1] * d_model / rules.widths[-1]))


def plan_target(spec: LadderSpec, path: Path, base: TrainConfig, seq_len: int, seconds_per_flop: float,
                vocab: int) -> RungPlan | None:
    target = spec.target
    if target is None:
        return None
    if target.config is not None:
        config = with_vocab(load_train_config(resolve_path(target.config, path)), vocab)
        tokens = target.tokens or config.plan.tokens or None
        batch = target.batch or config.plan.global_batch
    else:
        layers = target.layers or family_layers(spec.rules, target.d_model)
        config = scaled_config(base, spec.rules, target.d_model, layers)
        tokens, batch = target.tokens, target.batch
    return size_rung(spec, target.name, config, None, seq_len, seconds_per_flop, tokens, batch)


def revision_seq_len(spec: LadderSpec, home: Home) -> int:
    from mixtures.catalog import load_named

    revision, _ = load_named(home, spec.mixture.mixture, spec.mixture.revision)
    return revision.seq_len


def store_vocab(spec: LadderSpec, home: Home, path: Path) -> int:
    """The vocabulary of the store the revision targets (for a base config with vocab_size 0)."""
    from mixtures.catalog import load_named
    from mixtures.resolve import open_store

    revision, source = load_named(home, spec.mixture.mixture, spec.mixture.revision)
    store = open_store(home, revision.store, f"{source}: revision {revision.key}")
    if store.manifest.tokenizer is None:
        raise ConfigError(f"{path}: base config has vocab_size 0 and store {store.name} names no tokenizer")
    return store.manifest.tokenizer.vocab_size


def seconds_per_flop(spec: LadderSpec) -> float:
    peak = spec.here.peak_flops
    if not peak:
        import torch

        from trainer.peak import measure_matmul_flops

        peak = measure_matmul_flops(torch.device("cpu"))
    return 1.0 / (peak * spec.here.mfu)


def plan_ladder(path: Path | str, home: Home | None = None, spec: LadderSpec | None = None) -> LadderPlan:
    path = Path(path)
    home = home or Home.resolve()
    spec = spec or load_ladder(path)
    base = load_train_config(resolve_path(spec.base.config, path))
    vocab = base.model.vocab_size or store_vocab(spec, home, path)
    base = with_vocab(base, vocab)
    seq_len = revision_seq_len(spec, home)
    per_flop = seconds_per_flop(spec)
    rungs = []
    for index, (name, width) in enumerate(zip(spec.rung_names(), spec.rules.widths)):
        config = scaled_config(base, spec.rules, width, rung_layers(spec.rules, index, width))
        rungs.append(size_rung(spec, name, config, index, seq_len, per_flop))
    target = plan_target(spec, path, base, seq_len, per_flop, vocab)
    return LadderPlan(spec=spec, path=path, seq_len=seq_len, rungs=rungs, target=target,
                      seconds_per_flop_here=per_flop)


__all__ = ["LadderPlan", "RungPlan", "plan_ladder", "scaled_config", "active_params"]
