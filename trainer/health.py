"""Run health: threshold rules over the logged metrics that become alerts, and the non-finite step guard.

Each rule looks at one step's record (or an evaluation) and says whether its condition holds.
A condition becomes an alert by the rule's timing (`[health.timing.<rule>]`): never at or
before `warmup_steps`; it starts once the condition has held for `start_after` steps (at every
logged step) and ends once it has stayed clear for `end_after` steps, so one problem is one
alert, not a flicker of starts and ends. Both events go into that step's `metrics.jsonl`
record under `alerts` (`started`, each with `held_since`, the first step of the streak;
`ended`; the `active` names after the step, and `values`, each firing active alert's value at
this step), so a reader replays nothing: the last record says what is active and where it stands.
`millrace train status` exits 3 while any alert is active.

Thresholds are the reference run's alert rules where they do not depend on its scale:
gradient norm above 2.0; the loss more than 1.0 above its floor over the last 100 steps;
the entropy of a layer's expert load (the share of routed tokens each expert received) below
0.995 of log E (5.92 nats of 5.951 with 384 experts); |router bias| above 400; any
dead expert; three or more skipped steps within 15 minutes; any evaluation worse than the
previous one; MFU below 15%, but only on a GPU against a published peak (a configured one or
the device table): on a CPU, or against a timed matmul, it means nothing. Its 2M tokens/s floor
belongs to its scale: here it is off (0) until a config sets one. Its dropped-token rule has
nothing to watch: this MoE routes every token.

The reference took the load over one step of 46M tokens. A step of a few sequences measures what
those sequences are about more than the router (the tiny demo's 16 sequences: each expert's share
moves by about 18% of itself from step to step while its mean over 16 steps stays within 1%), so
the load is the mean over the last `load_window_steps` steps (16). The window is counted in steps
and fed every step (`loaded`), not from the logged records: a record every `log_every` steps
carries only its own step's load, and a window built from records would cover other steps at
every logging rate.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import cast

from millrace.errors import MillraceError
from trainer.config import AlertRule, AlertTiming, HealthConfig
from trainer.records import AlertEvent, Alerts, EvalRecord, MetricsRecord


class TooManySkippedSteps(MillraceError):
    """The loss or gradient stayed non-finite for too many steps in a row."""


@dataclass(frozen=True)
class Alert:
    name: str
    value: float
    threshold: float
    message: str

    def event(self, held_since: int) -> AlertEvent:
        """The alert as its start is recorded, with the first step of its streak."""
        return AlertEvent(
            name=self.name, value=self.value, threshold=self.threshold, message=self.message, held_since=held_since
        )


class HealthMonitor:
    """Turns step records and evaluations into alert start/end events; counts skipped steps."""

    def __init__(self, config: HealthConfig, active: list[str] | None = None, published_peak: bool = False):
        self.config = config
        self.published_peak = published_peak
        self.active: dict[str, Alert] = {
            name: Alert(name, math.nan, math.nan, "active before resume") for name in active or []
        }
        self.firing_since: dict[str, int] = {}  # first step of each condition's current streak
        self.clear_since: dict[str, int] = {}  # first step an active alert's condition has been clear
        self.losses: collections.deque[float] = collections.deque(maxlen=config.loss_floor_steps)
        self.skip_times: collections.deque[float] = collections.deque()
        self.consecutive_skips = 0
        self.skipped_total = 0
        self.eval_alert: Alert | None = None
        self.last_eval: float | None = None
        self.window_entropy: dict[int, float] = {}  # per layer, what the load-entropy rule saw at the last check
        self.loads: collections.deque[tuple[int, dict[int, list[float]]]] = collections.deque(
            maxlen=max(config.load_window_steps, 1)
        )

    def timing(self, name: str) -> AlertTiming:
        """The timing of the rule an alert name belongs to (`dead_experts/layer3` -> `dead_experts`); an alert
        restored from an older run's record under a retired name ends on its first clear step."""
        return self.config.timing.get(cast(AlertRule, name.split("/")[0]), AlertTiming())  # retired: absent

    def skipped(self, step: int, now: float, reason: str) -> None:
        """A step whose loss or gradient was not finite; raises after too many in a row."""
        self.consecutive_skips += 1
        self.skipped_total += 1
        self.skip_times.append(now)
        limit = self.config.max_consecutive_skips
        if self.consecutive_skips >= limit:
            raise TooManySkippedSteps(
                f"step {step}: {limit} consecutive steps skipped ({reason}); stopping the run "
                f"(health.max_consecutive_skips = {limit})"
            )

    def stepped(self) -> None:
        self.consecutive_skips = 0

    def evaluated(self, record: EvalRecord) -> None:
        """An evaluation: worse macro loss than the previous one alerts until the next evaluation."""
        loss = record.loss.macro
        if loss is None:
            return
        previous, self.last_eval = self.last_eval, loss
        self.eval_alert = None
        if self.config.eval_regression and previous is not None and loss > previous:
            self.eval_alert = Alert(
                "eval_regression",
                loss,
                previous,
                f"held-out macro loss {loss:.4f} is worse than the previous {previous:.4f}",
            )

    def check(self, record: MetricsRecord, now: float) -> Alerts:
        """The alerts that start and end with this step's record, and those active after it."""
        step = record.step
        firing = {
            alert.name: alert for alert in self.rules(record, now) if step > self.timing(alert.name).warmup_steps
        }
        started: list[AlertEvent] = []
        for name in sorted(firing):
            self.clear_since.pop(name, None)
            since = self.firing_since.setdefault(name, step)
            if name in self.active:
                self.active[name] = firing[name]
            elif step - since + 1 >= self.timing(name).start_after:
                self.active[name] = firing[name]
                started.append(firing[name].event(since))
        for name in [name for name in self.firing_since if name not in firing]:
            del self.firing_since[name]
        ended = []
        for name in sorted(name for name in self.active if name not in firing):
            clear = self.clear_since.setdefault(name, step)
            if step - clear + 1 >= self.timing(name).end_after:
                ended.append(name)
                del self.active[name], self.clear_since[name]
        values: dict[str, float | None] = {n: self.active[n].value for n in sorted(self.active) if n in firing}
        return Alerts(started=started, ended=ended, active=sorted(self.active), values=values)

    def loaded(self, step: int, loads: dict[int, list[float]]) -> None:
        """Every step's per-layer expert load (logged or not): the load-entropy window's input."""
        if self.loads and self.loads[-1][0] >= step:
            self.loads.clear()  # a resumed or replayed run: the window restarts
        self.loads.append((step, loads))

    def windowed_entropy(self, record: MetricsRecord) -> tuple[dict[int, float], int]:
        """Per layer, the entropy (fraction of log E) of the mean load over the last `load_window_steps`
        steps up to this record's (fewer after a start or resume, until the window fills), and the steps.
        A record whose step was not fed by `loaded` feeds its own load."""
        step = record.step
        if not self.loads or self.loads[-1][0] != step:
            loads = {
                layer.layer: [math.nan if share is None else share for share in layer.load]
                for layer in record.expert_load
                if layer.load
            }
            self.loaded(step, loads)
        entropies = {}
        for layer, load in self.loads[-1][1].items():
            window = [loads[layer] for _, loads in self.loads if len(loads.get(layer, ())) == len(load)]
            mean = [sum(column) / len(window) for column in zip(*window)]
            entropies[layer] = (
                -sum(p * math.log(p) for p in mean if p > 0) / math.log(len(mean)) if len(mean) > 1 else 1.0
            )
        return entropies, len(self.loads)

    def rules(self, record: MetricsRecord, now: float) -> list[Alert]:
        """Every rule's alerts for this record, in a fixed order (the loss, the gradient, the experts, the
        router, throughput, skipped steps, then the last evaluation's)."""
        alerts = [
            *self.loss_rule(record),
            *self.grad_rule(record),
            *self.expert_rules(record),
            *self.router_rules(record),
            *self.throughput_rules(record),
            *self.skipped_rule(now),
        ]
        if self.eval_alert is not None:
            alerts.append(self.eval_alert)
        return alerts

    def loss_rule(self, record: MetricsRecord) -> list[Alert]:
        """A loss that jumped `loss_jump_max` above its recent floor (the window of finite losses)."""
        loss, jump = record.loss, self.config.loss_jump_max
        if not isinstance(loss, float) or not math.isfinite(loss):
            return []
        floor = min(self.losses) if self.losses else None
        self.losses.append(loss)
        if not jump or floor is None or loss - floor <= jump:
            return []
        message = f"loss {loss:.4f} is {loss - floor:.3f} above its recent floor {floor:.4f}"
        return [Alert("loss_jump", loss, floor + jump, message)]

    def grad_rule(self, record: MetricsRecord) -> list[Alert]:
        """A finite gradient norm over `grad_norm_max`."""
        grad, most = record.grad_norm, self.config.grad_norm_max
        if most and isinstance(grad, float) and math.isfinite(grad) and grad > most:
            return [Alert("grad_norm", grad, most, f"gradient norm {grad:.3f} > {most}")]
        return []

    def expert_rules(self, record: MetricsRecord) -> list[Alert]:
        """Per layer: a windowed expert-load entropy under `load_entropy_min`, more than `dead_experts_max`
        dead experts."""
        cfg, alerts = self.config, []
        windowed, steps = self.windowed_entropy(record)
        self.window_entropy = windowed
        for layer in record.expert_load:
            entropy = windowed.get(layer.layer, layer.entropy)
            if cfg.load_entropy_min and isinstance(entropy, float) and entropy < cfg.load_entropy_min:
                alerts.append(
                    Alert(
                        f"load_entropy/layer{layer.layer}",
                        entropy,
                        cfg.load_entropy_min,
                        f"layer {layer.layer} expert load entropy {entropy:.4f} of log E "
                        f"over {steps} step{'s' if steps != 1 else ''}",
                    )
                )
            if (layer.dead_experts or 0) > cfg.dead_experts_max:
                alerts.append(
                    Alert(
                        f"dead_experts/layer{layer.layer}",
                        layer.dead_experts or 0,
                        cfg.dead_experts_max,
                        f"layer {layer.layer}: {layer.dead_experts} dead experts",
                    )
                )
        return alerts

    def router_rules(self, record: MetricsRecord) -> list[Alert]:
        """Per layer, a router bias whose largest magnitude is over `router_bias_max`."""
        most = self.config.router_bias_max
        return [
            Alert(
                f"router_bias/layer{bias.layer}",
                bias.max_abs,
                most,
                f"layer {bias.layer} max |router bias| {bias.max_abs:.1f}",
            )
            for bias in record.router_bias
            if most and bias.max_abs is not None and bias.max_abs > most
        ]

    def throughput_rules(self, record: MetricsRecord) -> list[Alert]:
        """Tokens per second under its floor; MFU under its floor, judged only against a published peak."""
        mfu_floor = self.config.mfu_min if self.published_peak else 0.0
        alerts = []
        for name, value, floor in (
            ("tokens_per_second", record.tokens_per_second, self.config.tokens_per_second_min),
            ("mfu", record.mfu, mfu_floor),
        ):
            if floor and isinstance(value, float) and value < floor:
                alerts.append(Alert(name, value, floor, f"{name} {value:.4g} below {floor:.4g}"))
        return alerts

    def skipped_rule(self, now: float) -> list[Alert]:
        """`skipped_steps_max` or more steps skipped within the last `skipped_window_seconds`."""
        cfg = self.config
        while self.skip_times and now - self.skip_times[0] > cfg.skipped_window_seconds:
            self.skip_times.popleft()
        if len(self.skip_times) < cfg.skipped_steps_max:
            return []
        message = (
            f"{len(self.skip_times)} steps skipped (non-finite loss or gradient) within "
            f"{cfg.skipped_window_seconds:g} s"
        )
        return [Alert("skipped_steps", len(self.skip_times), cfg.skipped_steps_max, message)]
