"""moesim's calibrator: profiled runs and real training traces in, simulator costs out.

- :mod:`calibrate.traces`: read Kineto / Chrome traces (validated), per-op statistics by shared op name;
- :mod:`calibrate.rules`: a real job's kernels -> ops, phases and shapes by kernel-name rules (DeepEP,
  DeepSeek's FP8 GEMMs, FlashAttention, casts, runtime events);
- :mod:`calibrate.fit`: efficiency curves, comm rates, SM-sharing slowdown, residuals;
- :mod:`calibrate.document`: ``moesim calibrate fit`` (a :mod:`sim.calibration` file with provenance);
- :mod:`calibrate.compare`: measured vs simulated per op and window (:class:`sim.engine.Engine`);
- :mod:`calibrate.microbench` + :mod:`reference.bench`: ``calibrate profile`` / ``run`` on a machine we have;
- :mod:`calibrate.layer_model`: the simulator's time of one reference-layer step (``validate-reference``);
- :mod:`calibrate.synthetic`: traces with known parameters, for the fitting's tests.
"""

from calibrate.traces import OpStats, load_trace, op_durations

__all__ = ["OpStats", "load_trace", "op_durations"]
