"""The fit's self-checks: what a trace cannot tell, and fitted values that cannot be right, named as such.

- :func:`usable_samples`: zero-duration compute and communication kernels (a timer's resolution) carry
  no rate; they are left out of the rate fits, with a note saying how many.
- :func:`check_clock`: timestamps so large (``1e300`` us) that their float spacing exceeds the typical
  kernel's duration cannot order or overlap kernels; refused, naming the spacing and the durations.
- :func:`check_document`: a fitted value outside what the simulator accepts is reported as a finding
  about the fit and its traces (e.g. a negative SM-sharing slowdown: overlapped kernels ran faster than
  alone; a negative DeepEP slowdown: faster than DeepEP's benchmark), never as a fault of the output file.

>>> usable_samples([Sample("attn.q_proj", "fwd", "gemm", "fp8", 1e9, 1e9, 0.0)])[1]
'1 zero-duration kernel (gemm 1) carries no rate: left out of the rate fits'
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from calibrate.fit import COMPUTE_KINDS, Sample
from sim.calibration import parse_calibration
from sim.errors import ConfigError

__all__ = ["check_clock", "check_document", "usable_samples"]

_RATE_KINDS = (*COMPUTE_KINDS, "comm")
_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def usable_samples(samples: Sequence[Sample]) -> tuple[list[Sample], str]:
    """The samples a rate can be fitted from, and a note on those left out ("" when none)."""
    zero = Counter(s.kind for s in samples if s.kind in _RATE_KINDS and not s.seconds > 0)
    if not zero:
        return list(samples), ""
    kept = [s for s in samples if not (s.kind in _RATE_KINDS and not s.seconds > 0)]
    n = sum(zero.values())
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(zero.items()))
    return kept, (f"{n} zero-duration kernel{'s' if n > 1 else ''} ({kinds}) carr{'y' if n > 1 else 'ies'} no rate: "
                  "left out of the rate fits")


def check_clock(events: Sequence[Mapping[str, Any]], source: str) -> None:
    """Raise :class:`ConfigError` when the trace's timestamps cannot resolve its kernels' durations."""
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in _DEVICE_CATS]
    durations = [float(e["dur"]) for e in kernels if float(e["dur"]) > 0]
    if not durations:
        return
    largest = max(abs(float(e["ts"])) for e in kernels)
    spacing = math.ulp(largest)
    typical = statistics.median(durations)
    if spacing > typical:
        raise ConfigError(f"{source}: timestamps near {largest:.3g} us are {spacing:.3g} us apart as numbers, "
                          f"more than the median kernel's duration ({typical:.3g} us): the trace cannot order "
                          "or overlap its kernels; subtract the first timestamp from every ts")


def check_document(doc: Mapping[str, Any], source: str) -> None:
    """Raise :class:`ConfigError` naming what went wrong in the fit of ``source`` (see the module docstring)."""
    fit = f"the fit of {source}"
    sharing = doc.get("sm_sharing", {})
    slow = sharing.get("fitted_slowdown")
    if isinstance(slow, int | float) and slow < 0:
        raise ConfigError(f"{fit}: the fitted SM-sharing slowdown {slow:g} is negative: the trace's overlapped "
                          f"kernels ran faster than alone ({sharing.get('samples', 0):.0f} repeated kernels); it "
                          "cannot calibrate SM sharing (are steps or correlation ids mixed up?)")
    comm = doc.get("comm", {}).get("overlap_kernel_slowdown")
    if isinstance(comm, int | float) and comm < 0:
        raise ConfigError(f"{fit}: the fitted DeepEP in-training slowdown {comm:g} is negative: the trace's DeepEP "
                          "kernels moved their bytes faster than DeepEP's own EP64 benchmark; the run's shapes "
                          "(tokens per rank, EP degree: calibrate.rules.RunShapes) are not this trace's")
    for key, what in (("mem_bw_eff", "memory-bound kernels (norms, activations, permutes)"),
                      ("quantize_bw_eff", "cast/quantize kernels")):
        value = doc.get(key)
        if isinstance(value, int | float) and not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{fit}: the fitted {key} is {value:g}: the trace's {what} took far longer than their "
                              "bytes need at HBM bandwidth (durations in the wrong unit?)")
    try:
        text = json.dumps(doc, allow_nan=False)
    except ValueError:
        raise ConfigError(f"{fit}: a fitted value is not finite (the trace's durations or timestamps overflow "
                          "the fit)") from None
    parse_calibration(text, fit)  # any other value outside the schema: named, with the fit as its origin
