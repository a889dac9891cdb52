"""One benchmark figure: ours against a named baseline measured in the same run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Result:
    name: str
    ours: float
    baseline: float
    baseline_name: str
    unit: str
    higher_is_better: bool = True
    target: float | None = None  # the ratio the issue asks for, if any

    @property
    def ratio(self) -> float:
        if self.higher_is_better:
            return self.ours / self.baseline if self.baseline else float("inf")
        return self.baseline / self.ours if self.ours else float("inf")

    def line(self) -> str:
        target = "" if self.target is None else f"  (target ≥ {self.target:g}: {'met' if self.ratio >= self.target else 'NOT met'})"
        return (
            f"{self.name}: {self.ours:,.4g} {self.unit} vs {self.baseline_name} {self.baseline:,.4g} {self.unit}"
            f" -> ratio {self.ratio:.2f}{target}"
        )
