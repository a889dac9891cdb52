"""Size the rungs of a ladder: shape, parameters, tokens, batch, steps, lr, FLOPs, time here.

Pure given the ladder file, its base config, the revision and its store; nothing is trained
or written. When the revision's store is built here, every rung's scaled revision is resolved
against it exactly as `ladder run` will build it: a rung too small to give each phase one
sequence per weighted cell is raised to the smallest budget that can (`rules.small_rungs =
"raise"`, shown in the plan) or the plan is refused with the smallest tokens per parameter that
builds every rung ("refuse"). Without the store (a plan on paper) the rungs are not checked.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from millrace.errors import ConfigError
from millrace.home import Home
from mixtures.catalog import load_named
from mixtures.resolve import open_store
from trainer.config import TrainConfig, load_train_config, with_vocab
from trainer.flops import count_params, flops_per_token
from trainer.ladder.rung_revision import BaseRevision, base_if_stored, built_steps, feasible_tokens, rung_revision_name
from trainer.ladder.spec import LadderSpec, Rules, load_ladder, resolve_path
from trainer.records import LadderPlanRecord, PlannedRung, RungParams


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
    raised_from: int | None = None  # the rule's tokens, when too few for the store's cells
    raised_because: str | None = None

    def record(self) -> PlannedRung:
        """The rung as ladder.json's plan keeps it."""
        return PlannedRung(
            name=self.name,
            d_model=self.d_model,
            layers=self.layers,
            params=RungParams(total=self.total_params, active=self.active_params),
            tokens=self.tokens,
            steps=self.steps,
            batch=self.batch,
            lr=self.lr,
            flops=self.flops,
            seconds_here=self.seconds_here,
            raised_from=self.raised_from,
        )


@dataclass(frozen=True)
class LadderPlan:
    spec: LadderSpec
    path: Path
    seq_len: int
    rungs: list[RungPlan]
    target: RungPlan | None
    seconds_per_flop_here: float
    store: str | None = None  # "name/version" the rungs were checked against; None: not built here

    def rung(self, name: str) -> RungPlan:
        for rung in self.rungs:
            if rung.name == name:
                return rung
        raise ConfigError(f"{self.path}: no rung {name!r} (rungs: {', '.join(r.name for r in self.rungs)})")

    def record(self) -> LadderPlanRecord:
        """The plan as ladder.json keeps it (and `ladder plan --json` prints it)."""
        return LadderPlanRecord(
            ladder=self.spec.ladder,
            file=str(self.path),
            mixture=self.spec.mixture.mixture,
            revision=self.spec.mixture.revision,
            seq_len=self.seq_len,
            store=self.store,
            rungs=[r.record() for r in self.rungs],
            target=self.target.record() if self.target else None,
        )


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
    model = m.model_copy(
        update={
            "d_model": d_model,
            "n_layers": layers,
            "n_heads": heads,
            "n_kv_heads": kv,
            "head_dim": head_dim,
            "dense_ffn_dim": max(1, round(d_model * dense_ratio)),
            "n_dense_layers": min(m.n_dense_layers, layers),
        }
    )
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
    if rule is None:
        raise ConfigError("rules.batch: neither a number, a list per rung nor a rule")
    raw = rule.coefficient * tokens**rule.exponent
    return int(min(rule.maximum, max(rule.minimum, round(raw / rule.multiple) * rule.multiple)))


def rung_lr(spec: LadderSpec, config: TrainConfig, batch: int, seq_len: int, steps: int) -> float:
    rule = spec.rules.lr
    if rule is None:
        return config.optimizer.lr
    lr: float = (
        rule.base
        * (config.model.d_model / rule.d_model_ref) ** rule.width_exponent
        * (batch * seq_len / rule.batch_tokens_ref) ** rule.batch_exponent
        * (steps / rule.steps_ref) ** rule.steps_exponent
    )
    return lr


@dataclass(frozen=True)
class Sizing:
    """What is fixed before the rules size a rung (None: the rules decide): its tokens, its batch, and its
    steps (the built revision's, whose phases round to whole batches each; default tokens / batch)."""

    tokens: float | None = None
    batch: int | None = None
    steps: int | None = None


def size_rung(
    spec: LadderSpec,
    name: str,
    config: TrainConfig,
    index: int | None,
    seq_len: int,
    seconds_per_flop: float,
    given: Sizing | None = None,
) -> RungPlan:
    """Rung `name` (the rules' `index`-th width; None: the widest's batch rule) sized by the rules, except
    what `given` fixes."""
    given = given or Sizing()
    active = active_params(config)
    tokens = round(given.tokens if given.tokens is not None else spec.rules.tokens_per_active_param * active)
    batch = given.batch
    if batch is None:
        batch = rung_batch(spec.rules, index if index is not None else len(spec.rules.widths) - 1, tokens)
    steps = given.steps or max(1, round(tokens / (batch * seq_len)))
    lr = rung_lr(spec, config, batch, seq_len, steps)
    flops = flops_per_token(config, seq_len) * tokens
    warmup = spec.rules.warmup_fraction
    schedule = (
        config.schedule.model_copy(update={"warmup_steps": max(1, round(warmup * steps))})
        if warmup
        else config.schedule
    )
    update = {
        "optimizer": config.optimizer.model_copy(update={"lr": lr}),
        "schedule": schedule,
        "plan": config.plan.model_copy(update={"tokens": float(tokens), "seq_len": seq_len, "global_batch": batch}),
    }
    return RungPlan(
        name=name,
        d_model=config.model.d_model,
        layers=config.model.n_layers,
        total_params=count_params(config).total,
        active_params=active,
        tokens=tokens,
        steps=steps,
        batch=batch,
        seq_len=seq_len,
        lr=lr,
        flops=flops,
        seconds_here=flops * seconds_per_flop,
        config=config.model_copy(update=update),
    )


def rung_layers(rules: Rules, index: int, d_model: int) -> int:
    if rules.layers is not None:
        return rules.layers[index]
    if rules.layers_per_width is None:
        raise ConfigError("rules: neither layers nor layers_per_width")
    return max(1, round(d_model * rules.layers_per_width))


def family_layers(rules: Rules, d_model: int) -> int:
    """Depth for a width outside the list: the rule, else the depth/width ratio of the widest rung."""
    if rules.layers_per_width is not None:
        return max(1, round(d_model * rules.layers_per_width))
    if rules.layers is None:
        raise ConfigError("rules: neither layers nor layers_per_width")
    return max(1, round(rules.layers[-1] * d_model / rules.widths[-1]))


def plan_target(
    spec: LadderSpec, path: Path, base: TrainConfig, seq_len: int, seconds_per_flop: float, vocab: int
) -> RungPlan | None:
    target = spec.target
    if target is None:
        return None
    if target.config is not None:
        config = with_vocab(load_train_config(resolve_path(target.config, path)), vocab)
        tokens = target.tokens or config.plan.tokens or None
        batch: int | None = target.batch or config.plan.global_batch
    else:
        if target.d_model is None:
            raise ConfigError(f"target {target.name}: needs d_model (or a config)")
        layers = target.layers or family_layers(spec.rules, target.d_model)
        config = scaled_config(base, spec.rules, target.d_model, layers)
        tokens, batch = target.tokens, target.batch
    return size_rung(spec, target.name, config, None, seq_len, seconds_per_flop, Sizing(tokens, batch))


def revision_seq_len(spec: LadderSpec, home: Home) -> int:

    revision, _ = load_named(home, spec.mixture.mixture, spec.mixture.revision)
    return revision.seq_len


def store_vocab(spec: LadderSpec, home: Home, path: Path) -> int:
    """The vocabulary of the store the revision targets (for a base config with vocab_size 0)."""
    revision, source = load_named(home, spec.mixture.mixture, spec.mixture.revision)
    store = open_store(home, revision.store, f"{source}: revision {revision.key}")
    if store.manifest.tokenizer is None:
        raise ConfigError(f"{path}: base config has vocab_size 0 and store {store.name} names no tokenizer")
    return store.manifest.tokenizer.vocab_size


def seconds_per_flop(spec: LadderSpec) -> float:
    peak = spec.here.peak_flops
    if not peak:
        import torch  # lazy: heavy (torch)

        from trainer.peak import measure_matmul_flops  # lazy: heavy (torch)

        peak = measure_matmul_flops(torch.device("cpu"))
    return 1.0 / (peak * spec.here.mfu)


def plan_rungs(
    spec: LadderSpec, path: Path, base: TrainConfig, seq_len: int, per_flop: float, vocab: int
) -> tuple[list[RungPlan], RungPlan | None]:
    """The rungs and the target as the rules size them."""
    rungs = []
    for index, (name, width) in enumerate(zip(spec.rung_names(), spec.rules.widths)):
        config = scaled_config(base, spec.rules, width, rung_layers(spec.rules, index, width))
        rungs.append(size_rung(spec, name, config, index, seq_len, per_flop))
    return rungs, plan_target(spec, path, base, seq_len, per_flop, vocab)


def needed_tokens(spec: LadderSpec, rung: RungPlan, bases: list[BaseRevision]) -> tuple[int, str | None]:
    """The fewest tokens at the rung's batch whose scaled revision builds, for every revision planned."""
    needed, because = rung.tokens, None
    for base in bases:
        name = rung_revision_name(base.revision.revision, spec.ladder, rung.name)
        tokens, problem = feasible_tokens(base, name, rung.tokens, rung.batch)
        if tokens > needed:
            needed, because = tokens, problem
    return needed, because


def fitted_to_store(spec: LadderSpec, rung: RungPlan, bases: list[BaseRevision], per_flop: float) -> RungPlan:
    """The rung as `ladder run` builds it: its tokens raised (same batch) when too few for the store's
    cells, its steps those of the built revision's phases."""
    tokens, because = needed_tokens(spec, rung, bases)
    steps = built_steps(bases[0], tokens, rung.batch)
    sizing = Sizing(tokens, rung.batch, steps)
    fitted = size_rung(spec, rung.name, rung.config, None, rung.seq_len, per_flop, sizing)
    if tokens == rung.tokens:
        return fitted
    return dataclasses.replace(fitted, raised_from=rung.tokens, raised_because=because)


def refuse_small_rungs(
    spec: LadderSpec,
    path: Path,
    rungs: list[RungPlan],
    bases: list[BaseRevision],
    rebuild: Callable[[float], list[RungPlan]],
) -> None:
    """Raise a one-line error naming the first rung too small and the smallest tokens_per_active_param
    that builds every rung (found by re-planning, since the batch rule may follow the tokens)."""
    first: tuple[str, str | None] | None = None
    candidate = spec.rules.tokens_per_active_param
    short: list[tuple[RungPlan, int]] = []
    for _ in range(8):
        found = [(rung, *needed_tokens(spec, rung, bases)) for rung in rungs]
        short = [(rung, tokens) for rung, tokens, _ in found if tokens > rung.tokens]
        if not short:
            break
        first = first or next((rung.name, why) for rung, tokens, why in found if tokens > rung.tokens)
        candidate = max(candidate, *(math.ceil(1000 * tokens / rung.active_params) / 1000 for rung, tokens in short))
        rungs = rebuild(candidate)
    if first is None:
        return
    fix = (
        f"set rules.tokens_per_active_param = {candidate:g} (the smallest that builds every rung)"
        if not short
        else f"rung {short[0][0].name} needs {short[0][1]:,} tokens whatever the rule: set its tokens"
    )
    raise ConfigError(
        f'{path}: rung {first[0]} is too small for the store (rules.small_rungs = "refuse"): '
        f'{first[1]}; {fix} or rules.small_rungs = "raise"'
    )


def plan_ladder(
    path: Path | str, home: Home | None = None, spec: LadderSpec | None = None, revisions: list[str] | None = None
) -> LadderPlan:
    """The ladder's rungs, checked against the store for each of `revisions` (default: the ladder's own)."""
    path = Path(path)
    home = home or Home.resolve()
    spec = spec or load_ladder(path)
    base = load_train_config(resolve_path(spec.base.config, path))
    vocab = base.model.vocab_size or store_vocab(spec, home, path)
    base = with_vocab(base, vocab)
    seq_len = revision_seq_len(spec, home)
    per_flop = seconds_per_flop(spec)
    rungs, target = plan_rungs(spec, path, base, seq_len, per_flop, vocab)
    bases = [
        b
        for b in (
            base_if_stored(home, spec.mixture.mixture, r) for r in dict.fromkeys(revisions or [spec.mixture.revision])
        )
        if b is not None
    ]
    if bases:
        if spec.rules.small_rungs == "refuse":

            def rebuild(tpp: float) -> list[RungPlan]:
                bigger = spec.model_copy(
                    update={"rules": spec.rules.model_copy(update={"tokens_per_active_param": tpp})}
                )
                more, more_target = plan_rungs(bigger, path, base, seq_len, per_flop, vocab)
                return more + ([more_target] if more_target else [])

            refuse_small_rungs(spec, path, rungs + ([target] if target else []), bases, rebuild)
        rungs = [fitted_to_store(spec, rung, bases, per_flop) for rung in rungs]
        target = fitted_to_store(spec, target, bases, per_flop) if target else None
    store = f"{bases[0].store.name}/{bases[0].store.version}" if bases else None
    return LadderPlan(
        spec=spec, path=path, seq_len=seq_len, rungs=rungs, target=target, seconds_per_flop_here=per_flop, store=store
    )


__all__ = ["LadderPlan", "RungPlan", "active_params", "plan_ladder", "scaled_config"]
