"""The measured-runs dataset (its strict reader lives in :mod:`sim.measured_runs`, where the prediction
intervals of :mod:`sim.uncertainty` read it too).

>>> runs = load_runs()
>>> len(runs), runs[0].id
(28, 'titan-dsv3-b200-bf16')
"""

from __future__ import annotations

from sim.measured_runs import (
    MEASURED_RUNS,
    MeasuredRun,
    default_dataset_path,
    load_runs,
    resolve_run,
)

__all__ = ["MEASURED_RUNS", "MeasuredRun", "load_runs", "default_dataset_path", "resolve_run"]
