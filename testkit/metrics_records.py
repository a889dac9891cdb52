"""Metrics records with the content a report test checks for, and a run directory written from them (run.json
and metrics.jsonl as the trainer writes them), for the pages' exports and charts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trainer.records import (
    METRICS_FILE,
    AlertEvent,
    Alerts,
    ExpertLoad,
    MetricsRecord,
    RouterBias,
    RunRecord,
    RunStatus,
    write_run,
)


def write_recorded_run(run_dir: Path, records: Sequence[MetricsRecord], status: RunStatus = "completed") -> Path:
    """A run directory holding `records` as its whole metrics stream, its run.json saying `status`."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run(run_dir, RunRecord(run=run_dir.name, total_steps=len(records), status=status))
    (run_dir / METRICS_FILE).write_text("".join(record.line() + "\n" for record in records))
    return run_dir


def every_field_record(step: int) -> MetricsRecord:
    """A record with every field a metrics record can carry set (each plain number to `2 + step`), so that an
    export missing a field is seen."""
    started = AlertEvent(name="loss_jump", value=9.0, threshold=3.0, message="jump", held_since=step)
    numbers = {
        name: 2 + step
        for name, info in MetricsRecord.model_fields.items()
        if info.annotation in (float | None, int | None)
    }
    return MetricsRecord.model_validate(
        numbers
        | dict(
            step=step,
            time=1.7e9 + step,
            phase="main",
            tokens=1000 * (step + 1),
            param_norm_per_group={"experts": 3.0},
            router_bias=[RouterBias(layer=layer, norm=0.1, max_abs=0.2) for layer in range(2)],
            expert_load=[
                ExpertLoad(
                    layer=layer,
                    load=[0.125 + 0.01 * expert * layer for expert in range(8)],
                    max_violation=0.5,
                    entropy=0.9,
                    dead_experts=1,
                    router_entropy=0.8,
                    window_entropy=0.97,
                )
                for layer in range(2)
            ],
            loss_per_cell={"c00q0": 2.5},
            loss_per_source={"wiki": 2.6},
            realised_tokens_per_cell={"c00q0": 4096},
            skipped=step == 1,
            skipped_steps=step,
            alerts=Alerts(started=[started], ended=["dead_expert"], active=["loss_jump"], values={"loss_jump": 9.5}),
        )
    )


def drifting_loads_record(step: int, layers: int, experts: int = 4) -> MetricsRecord:
    """A record whose per-expert loads differ by step, layer and expert (a swapped axis shows), and whose
    loss_jump alert starts at step 7 ("loss 9 jumped") and ends at step 8."""
    alerts = None
    if step == 7:
        alerts = Alerts(started=[AlertEvent(name="loss_jump", value=9.0, threshold=3.0, message="loss 9 jumped")])
    elif step == 8:
        alerts = Alerts(ended=["loss_jump"])
    return MetricsRecord(
        step=step,
        loss=3.0 - 0.01 * step,
        tokens=100 * (step + 1),
        expert_load=[
            ExpertLoad(
                layer=layer,
                load=[0.25 + 0.001 * (step - 20) * (expert - 1.5) * (layer + 1) for expert in range(experts)],
            )
            for layer in range(layers)
        ],
        alerts=alerts,
    )
