"""Barriers over a group of ranks: a rank leaves when the slowest peer has arrived.

A collective kernel (DeepEP's ``notify_dispatch`` / ``cached_notify``, which exchange token counts and end
in a barrier over the EP group) lasts, on the rank that arrived first, until the last of its ``n`` peers
arrives. Ranks arrive apart because the work before the barrier does not take the same time everywhere:
with each rank's arrival time normal around the mean with standard deviation ``sigma`` (kernel-time
jitter of the compute since the previous barrier, ``cv * work_s``), a rank waits on average
``sigma * E[max of n standard normals]`` (its own arrival is the mean). :func:`sampled_waits` draws the
spread of those waits, seeded, for reports and for comparing with a trace's notify kernels.

>>> round(expected_max_std_normal(2), 4)  # 1/sqrt(pi)
0.5642
>>> round(expected_max_std_normal(64), 3)
2.344
>>> barrier_wait_s(1, 1e-3)
0.0
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

__all__ = ["expected_max_std_normal", "barrier_wait_s", "sampled_waits"]


@cache
def expected_max_std_normal(n: int) -> float:
    """E[max of ``n`` independent standard normals] (numerical integration of n x phi(x) Phi(x)^(n-1) x)."""
    if n <= 1:
        return 0.0
    x = np.linspace(-9.0, 9.0, 7201)
    phi = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    integrand = x * n * phi * cdf ** (n - 1)
    return float(np.sum((integrand[1:] + integrand[:-1]) * 0.5 * (x[1] - x[0])))


def barrier_wait_s(n_peers: int, sigma_s: float) -> float:
    """Mean seconds a rank waits at a barrier of ``n_peers`` ranks whose arrivals spread by ``sigma_s``."""
    if n_peers <= 1 or sigma_s <= 0:
        return 0.0
    return sigma_s * expected_max_std_normal(n_peers)


def sampled_waits(n_peers: int, sigmas_s: list[float], seed: int = 0) -> list[float]:
    """One wait per barrier (``sigmas_s``: each barrier's arrival spread): the last of ``n_peers`` normal
    arrivals minus this rank's own, seeded (``numpy.random.default_rng(seed)``), never negative."""
    rng = np.random.default_rng(seed)
    out = []
    for sigma in sigmas_s:
        if n_peers <= 1 or sigma <= 0:
            out.append(0.0)
            continue
        arrivals = rng.normal(0.0, sigma, size=n_peers)
        out.append(float(arrivals.max() - arrivals[0]))
    return out
