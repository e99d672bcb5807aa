"""moesim studies: validation against measured runs, and (next) what-if capacity planning.

Studies call :mod:`sim` and read calibration files; they never import the reference.
"""

from studies.validate import ValidationRow, validate_scenarios

__all__ = ["ValidationRow", "validate_scenarios"]
