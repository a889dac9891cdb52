"""Health alerts: the right quantities (expert load entropy, skipped steps in their window) and timing
(warm-up, hysteresis), so a flicker is no alert and a problem is one alert with its start."""

import json

import pytest
import torch

from millrace.cli import main as millrace
from millrace.errors import ConfigError
from millrace.home import Home
from testkit.stores import build_mixture, make_store
from trainer.balance import load_stats
from trainer.config import HealthConfig, load_train_config
from trainer.health import HealthMonitor
from trainer.loop import train
from trainer.records import MetricsRecord, read_metrics
from trainer.train_request import TrainRequest


def layer_record(step: int, counts: list[float], router_entropy: float) -> dict:
    load = load_stats(0, torch.tensor(counts)).record().model_dump() | {"router_entropy": router_entropy}
    return {"step": step, "loss": 3.0, "grad_norm": 0.5, "expert_load": [load]}


def test_routing_balance_alerts_on_the_expert_load_entropy_not_the_router_score_entropy():
    config = HealthConfig(load_window_steps=1, timing={"load_entropy": {"warmup_steps": 0, "start_after": 1}})
    monitor = HealthMonitor(config)
    # confident routers (per-token score entropy 0.2 of log E) spreading tokens evenly: healthy
    assert (
        monitor.check(
            MetricsRecord.model_validate(layer_record(1, [1000, 1010, 990, 1005, 995, 1000, 1000, 1000], 0.2)), 0.0
        ).active
        == []
    )
    # uncertain routers, but the load collapsed on two of eight experts: entropy 0.35 of log E
    events = monitor.check(MetricsRecord.model_validate(layer_record(2, [4000, 4000, 0, 0, 0, 0, 0, 0], 0.999)), 0.0)
    assert events.active == ["load_entropy/layer0"]  # dead experts: still in their warm-up
    alert = events.started[0]
    assert alert.value == pytest.approx(1 / 3) and alert.threshold == 0.995
    # the reference's 5.92 nats with 384 experts is 0.995 of log E: 0.99 of it alerts, 0.999 does not
    assert HealthConfig().load_entropy_min == pytest.approx(5.92 / torch.log(torch.tensor(384.0)).item(), abs=6e-4)


SWING = [[0.15, 0.10] * 4, [0.10, 0.15] * 4]
COLLAPSE = [0.0, 0.0] + [1 / 6] * 6


def step_load(step: int) -> list[float]:
    """Loads that swing by 20% of the mean from step to step but are even over two (the tiny demo's steps
    look like this once balanced); two dead experts from step 40."""
    return COLLAPSE if step >= 40 else SWING[step % 2]


def window_events(window: int, log_every: int) -> tuple[list[tuple[int, str, int]], dict[int, float]]:
    """Feed every step's load as the training loop does and a record every `log_every` steps: the alerts
    started and the windowed entropy the load-entropy rule saw at each logged step."""
    config = HealthConfig(
        load_window_steps=window,
        dead_experts_max=8,
        timing={"load_entropy": {"warmup_steps": 0, "start_after": 5}},
    )
    monitor, started, seen = HealthMonitor(config), [], {}
    for step in range(1, 81):
        monitor.loaded(step, {0: step_load(step)})
        if step % log_every:
            continue
        entropy = load_stats(0, torch.tensor(step_load(step))).entropy
        load = [{"layer": 0, "load": step_load(step), "entropy": entropy}]
        record = MetricsRecord.model_validate({"step": step, "loss": 3.0, "grad_norm": 0.5, "expert_load": load})
        seen[step] = monitor.windowed_entropy(record)[0][0]
        started += [(step, a.name, a.held_since) for a in monitor.check(record, 0.0).started]
    return started, seen


@pytest.mark.parametrize("log_every", [1, 10, 16])
def test_the_load_window_counts_steps_whatever_the_logging_rate(log_every):
    """The window is the mean load of the last 16 steps at every `log_every`: the swing (each step alone
    below the floor, 0.990) never alerts, the collapse (0.952 of log E in each step) does, and every logged
    step sees the entropy of the same 16-step mean (at 10 steps a window built from records held 2 steps)."""
    started, seen = window_events(16, log_every)
    for step, entropy in seen.items():
        window = [step_load(s) for s in range(max(step - 15, 1), step + 1)]
        mean = torch.tensor(window, dtype=torch.float64).mean(0)
        assert entropy == pytest.approx(load_stats(0, mean).entropy, abs=1e-6), step
    assert all(seen[s] > 0.995 for s in seen if 16 <= s < 40)
    assert all(seen[s] < 0.995 for s in seen if s >= 47)
    # alerts start after 5 logged steps under the floor: the 16-step mean crosses it at step 43
    first_below = min(s for s in seen if s >= 40 and seen[s] < 0.995)
    assert [(name, since) for _, name, since in started] == [("load_entropy/layer0", first_below)]


def test_a_one_step_window_alerts_on_the_swing():
    assert load_stats(0, torch.tensor(SWING[0])).entropy < 0.995
    assert window_events(1, 1)[0] == [(5, "load_entropy/layer0", 1)]


def test_skipped_steps_alert_only_at_three_within_fifteen_minutes():
    monitor = HealthMonitor(HealthConfig())
    active = []
    for step, minute in enumerate((0, 2, 16, 17, 40), 1):  # the first ages out of the window at minute 16
        monitor.skipped(step, minute * 60.0, "non-finite loss")
        monitor.stepped()
        active.append(
            monitor.check(
                MetricsRecord.model_validate({"step": step, "skipped": True, "loss": None}), minute * 60.0
            ).active
        )
    assert active == [[], [], [], ["skipped_steps"], []]  # minutes 2, 16, 17: three within 15 minutes


def dead_record(step: int, dead: bool) -> dict:
    return {
        "step": step,
        "loss": 3.0,
        "grad_norm": 0.5,
        "expert_load": [{"layer": 0, "load": [], "entropy": 0.999, "dead_experts": int(dead)}],
    }


def replay(monitor: HealthMonitor, conditions: dict[int, bool], steps: int) -> list[tuple[int, str, str]]:
    events = []
    for step in range(1, steps + 1):
        out = monitor.check(MetricsRecord.model_validate(dead_record(step, conditions.get(step, False))), 0.0)
        events += [(step, "start", a.name, a.held_since) for a in out.started]
        events += [(step, "end", name, None) for name in out.ended]
    return events


def test_one_problem_is_one_alert_after_the_warmup_and_a_flicker_is_none():
    """Defaults for dead experts: warm-up 50 steps, held 5 steps to start, clear 20 steps to end."""
    conditions = dict.fromkeys(range(1, 41), True)  # the warm-up: the bias rule still settling
    conditions |= {step: step % 2 == 0 for step in range(60, 100)}  # a flicker: never held for 5 steps
    conditions |= {step: step not in (130, 131, 140) for step in range(120, 160)}  # a problem with gaps
    events = replay(HealthMonitor(HealthConfig()), conditions, 200)
    assert events == [(124, "start", "dead_experts/layer0", 120), (179, "end", "dead_experts/layer0", None)]
    tuned = HealthConfig(timing={"dead_experts": {"warmup_steps": 0, "start_after": 1, "end_after": 1}})
    assert len(replay(HealthMonitor(tuned), conditions, 200)) == 2 * (1 + 20 + 3)  # without: a flicker


def test_timing_is_set_per_rule_in_the_health_table(tiny_config):
    config = load_train_config(tiny_config(health={"timing": {"dead_experts": {"start_after": 2}}}))
    timing = config.health.timing
    assert (timing["dead_experts"].start_after, timing["dead_experts"].warmup_steps) == (2, 50)  # the rest kept
    assert timing["grad_norm"] == HealthConfig().timing["grad_norm"]
    with pytest.raises(ConfigError, match=r"health\.timing\.dead_expert"):
        load_train_config(tiny_config("typo", health={"timing": {"dead_expert": {"start_after": 2}}}))
    with pytest.raises(ConfigError, match="start_after"):
        load_train_config(tiny_config("zero", health={"timing": {"grad_norm": {"start_after": 0}}}))


SEQ_LEN, BATCH, STEPS, BROKEN_AT = 32, 8, 14, 8


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = Home.resolve(tmp_path_factory.mktemp("health-home"))
    make_store(home, {"c00q0": 3000, "c01q0": 2000})
    build_mixture(home, tokens=SEQ_LEN * BATCH * STEPS, seq_len=SEQ_LEN, global_batch=BATCH)
    return home


@pytest.mark.slow
def test_an_injected_routing_collapse_is_one_alert_per_rule_with_its_start(home, tiny_config, monkeypatch, capsys):
    """Four of layer 0's experts switched off by their bias from step 8 (a routing collapse): one alert per
    rule, started once held for 5 steps, none before. Warm-ups shortened to 4 steps to keep the run short;
    the load entropy floor at 0.9 because this run routes only 512 slots a step over 8 experts, whose
    sampling noise alone costs about 0.004 of log E (the shipped tiny run routes 8,192)."""
    import trainer.loop

    original, calls = trainer.loop.balance_step, {"n": 0}

    def collapse_after(layers, rate):
        loads = original(layers, rate)
        calls["n"] += 1
        if calls["n"] >= BROKEN_AT - 1:  # before step 8's forward: experts 0-3 never win a top-2 slot
            layers[0][1].router.expert_bias[:4] = -50.0
        return loads

    monkeypatch.setattr(trainer.loop, "balance_step", collapse_after)
    warmup = {"warmup_steps": 4}
    config = tiny_config(
        eval={"enabled": False},
        samples={"enabled": False},
        health={
            "load_entropy_min": 0.9,
            "load_window_steps": 1,  # per step
            "timing": {"dead_experts": warmup, "load_entropy": warmup},
        },
    )
    records = read_metrics(train(config, home, TrainRequest(steps=STEPS, run="collapse")).run_dir)
    assert [r.expert_load[0].dead_experts for r in records[BROKEN_AT - 1 :]] == [4] * (STEPS - BROKEN_AT + 1)
    starts = [(r.step, a.name, a.held_since) for r in records if r.alerts for a in r.alerts.started]
    assert [s for s in starts if s[1].endswith("layer0")] == [
        (12, "dead_experts/layer0", 8),
        (12, "load_entropy/layer0", 8),
    ]
    # nothing before the collapse; layer 1, fed by the broken layer, may follow, but once per rule
    assert all(since >= BROKEN_AT for _, _, since in starts) and len({s[1] for s in starts}) == len(starts)
    assert all(r.alerts is not None and r.alerts.ended == [] for r in records)
    capsys.readouterr()
    assert millrace(["train", "status", "collapse", "--home", str(home.root), "--json"]) == 3
    status = {a["name"]: a["since_step"] for a in json.loads(capsys.readouterr().out)["alerts"]}
    assert status["dead_experts/layer0"] == status["load_entropy/layer0"] == 12
