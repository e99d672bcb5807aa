"""moesim's calibrator: profiled runs in, simulator costs out.

This package reads Kineto / Chrome traces (from ``reference.run --profile`` or from a real training
job) and measures each op of the shared vocabulary (:mod:`sim.ops`). Fitting cost curves from those
measurements into a ``calibration.json`` builds on :func:`calibrate.traces.op_durations`.
"""

from calibrate.traces import OpStats, load_trace, op_durations

__all__ = ["OpStats", "load_trace", "op_durations"]
