"""moesim studies: validation against measured runs, the seed study, capacity sweeps and plan search.

Studies call :mod:`sim` (through the one adapter :mod:`studies._sim`) and read calibration files; they
never import the reference. The ``moesim`` command (``validate``, ``study seed``, ``study capacity``,
``plan``) is a thin layer over these modules.
"""

from studies.dataset import MeasuredRun, load_runs
from studies.validate import ValidationResult, ValidationRow, validate_runs

__all__ = ["MeasuredRun", "load_runs", "ValidationResult", "ValidationRow", "validate_runs"]
