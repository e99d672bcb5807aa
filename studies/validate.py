"""Validation: every measured variant of every scenario, predicted vs measured, with its source.

A variant marked ``fitted`` is the one the software-stack profile was fitted to (its error is ~0 by
construction); the others are held out: predicted, never fitted. ``within`` compares the error with a
tolerance (10%, the seed protocol's bound).

>>> rows = validate_scenarios(["dsv3-671b-b200"])
>>> [(r.variant, r.fitted) for r in rows][:2]
[('bf16 (standard EP)', True), ('bf16 + DeepEP', False)]
>>> all(r.within for r in rows)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sim.scenarios import load_scenario, run_scenario, scenario_names

__all__ = ["ValidationRow", "validate_scenarios", "DEFAULT_TOLERANCE"]

DEFAULT_TOLERANCE = 0.10


@dataclass(frozen=True)
class ValidationRow:
    """One measured variant: predicted and measured tokens/s per GPU, and speedups over the scenario's first."""

    scenario: str
    variant: str
    fitted: bool
    predicted_tokens_per_s_per_gpu: float
    measured_tokens_per_s_per_gpu: float
    predicted_speedup: float
    measured_speedup: float
    tolerance: float
    source: str

    @property
    def error(self) -> float:
        """Relative error of the prediction (positive: predicted too fast)."""
        return self.predicted_tokens_per_s_per_gpu / self.measured_tokens_per_s_per_gpu - 1

    @property
    def within(self) -> bool:
        return abs(self.error) <= self.tolerance

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error": self.error, "within": self.within}


def validate_scenarios(names: Sequence[str] | None = None, tolerance: float = DEFAULT_TOLERANCE) -> list[ValidationRow]:
    """Predict every variant with a measured number in the scenarios ``names`` (default: all built in)."""
    rows: list[ValidationRow] = []
    for name in names if names is not None else scenario_names():
        scenario = load_scenario(name)
        measured = [v for v in scenario.variants if v.measured_tokens_per_s_per_gpu is not None]
        if not measured:
            continue
        predictions = {p.name: p for p in run_scenario(scenario)}
        reference = measured[0]
        reference_predicted = predictions[reference.name].tokens_per_s_per_gpu
        assert reference.measured_tokens_per_s_per_gpu is not None
        for variant in measured:
            assert variant.measured_tokens_per_s_per_gpu is not None
            predicted = predictions[variant.name].tokens_per_s_per_gpu
            rows.append(ValidationRow(
                scenario=scenario.name,
                variant=variant.name,
                fitted=variant.fitted,
                predicted_tokens_per_s_per_gpu=predicted,
                measured_tokens_per_s_per_gpu=variant.measured_tokens_per_s_per_gpu,
                predicted_speedup=predicted / reference_predicted,
                measured_speedup=variant.measured_tokens_per_s_per_gpu / reference.measured_tokens_per_s_per_gpu,
                tolerance=tolerance,
                source=variant.source,
            ))
    return rows


def format_rows(rows: Sequence[ValidationRow]) -> str:
    """A plain-text table of ``rows``."""
    header = f"{'scenario':<16}{'variant':<28}{'role':<9}{'predicted':>10}{'measured':>10}{'error':>8}" \
             f"{'pred. x':>9}{'meas. x':>9}  ok"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r.scenario:<16}{r.variant:<28}{'fitted' if r.fitted else 'holdout':<9}"
                     f"{r.predicted_tokens_per_s_per_gpu:>10.1f}{r.measured_tokens_per_s_per_gpu:>10.1f}"
                     f"{r.error:>+8.1%}{r.predicted_speedup:>9.3f}{r.measured_speedup:>9.3f}  "
                     f"{'yes' if r.within else 'NO'}")
    lines.append("")
    lines.extend(f"source [{r.variant}]: {r.source}" for r in rows)
    return "\n".join(lines)
