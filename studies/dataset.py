"""The shipped measured-runs dataset (``studies/data/measured_runs.toml``) and its reader (the strict reader
itself is :func:`sim.measured_runs.load_runs`, which reads only the path it is given).

>>> runs = load_runs()
>>> len(runs), runs[0].id, runs[1].baseline
(28, 'titan-dsv3-b200-bf16', 'titan-dsv3-b200-bf16')
"""

from __future__ import annotations

from pathlib import Path

from sim.measured_runs import MeasuredRun, resolve_run
from sim.measured_runs import load_runs as _load_runs

__all__ = ["MEASURED_RUNS", "MeasuredRun", "load_runs", "default_dataset_path", "resolve_run"]

#: The shipped dataset: every measured run the joint calibration is fitted to and validated on.
MEASURED_RUNS = Path(__file__).resolve().parent / "data" / "measured_runs.toml"


def default_dataset_path() -> Path:
    """The shipped dataset (``studies/data/measured_runs.toml``)."""
    return MEASURED_RUNS


def load_runs(path: str | Path | None = None) -> list[MeasuredRun]:
    """Every run of the dataset at ``path`` (default: the shipped one), checked as a whole."""
    return _load_runs(MEASURED_RUNS if path is None else path)
