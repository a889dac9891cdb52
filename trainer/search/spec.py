"""A search file resolved against the home: its spec, the train config it names, the baseline revision built
in memory against its store, and the arithmetic every step shares (branch step, proxy steps, horizon).

Every proxy, the shared checkpoint and every validation run train with one learning-rate horizon (the config's
`steps`): the branch step plus the proxy's steps. The shared checkpoint stops at the branch step; a proxy
restores it and trains its own steps to the horizon, so all of them see the same schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from millrace.config import validate
from millrace.errors import ConfigError
from millrace.home import Home
from trainer.config import TrainConfig, load_train_config, with_vocab
from trainer.fleet.config import FleetConfig
from trainer.ladder.rung_revision import BaseRevision, resolve_base
from trainer.ladder.spec import resolve_path
from trainer.search.records import SearchSpec, load_search_spec


@dataclass(frozen=True)
class Search:
    spec: SearchSpec
    path: Path
    config_path: Path
    config: TrainConfig  # vocabulary filled from the store
    base: BaseRevision
    branch_step: int
    phase_steps: list[int]  # each proxy phase's steps
    directory: Path
    fleet: FleetConfig

    @property
    def name(self) -> str:
        return self.spec.search

    @property
    def proxy_steps(self) -> int:
        return sum(self.phase_steps)

    @property
    def horizon(self) -> int:
        return self.branch_step + self.proxy_steps

    @property
    def step_tokens(self) -> int:
        return self.base.manifest.seq_len * self.base.manifest.global_batch

    @property
    def phase_names(self) -> list[str]:
        return self.spec.phases.names[: self.spec.phases.count]


def split_steps(steps: int, count: int, switch: float) -> list[int]:
    """A budget of `steps` over one phase, or two split at `switch` (each at least one step)."""
    if count == 1:
        return [steps]
    first = min(steps - 1, max(1, round(steps * switch)))
    return [first, steps - first]


def load_search(path: Path | str, home: Home) -> Search:
    """The search file resolved; a budget that does not fit the baseline is one line naming the field."""
    path = Path(path)
    spec = load_search_spec(path)
    config_path = resolve_path(spec.base.config, path)
    base = resolve_base(home, spec.mixture.mixture, spec.mixture.revision)
    vocab = base.store.manifest.tokenizer.vocab_size if base.store.manifest.tokenizer else 0
    config = with_vocab(load_train_config(config_path), vocab)
    total = base.manifest.total_steps
    branch = spec.branch.at_step or max(1, round(spec.branch.fraction * total))
    step_tokens = base.manifest.seq_len * base.manifest.global_batch
    steps = max(spec.phases.count, round(spec.proxies.tokens / step_tokens))
    if branch + steps > total:
        raise ConfigError(
            f"{path}: field 'proxies.tokens': the branch at step {branch} plus {steps} proxy steps passes the "
            f"{total} steps of {spec.mixture.mixture}/{spec.mixture.revision}; lower proxies.tokens or the branch"
        )
    return Search(
        spec=spec,
        path=path,
        config_path=config_path,
        config=config,
        base=base,
        branch_step=branch,
        phase_steps=split_steps(steps, spec.phases.count, spec.phases.switch),
        directory=home.search(spec.search),
        fleet=validate(FleetConfig, spec.fleet, f"{path}: [fleet]"),
    )
