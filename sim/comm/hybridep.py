"""The ``hybridep`` backend: NVIDIA's TMA-based DeepEP branch, modelled as DeepEP v1's normal kernels with
``hybridep_sm_scale`` times the per-SM throughput (ASSUMED: no published per-SM table), same link fractions.
"""

from __future__ import annotations

from sim.comm.case import Case
from sim.comm.costs import AllToAllResult
from sim.comm.deepep import deepep_alltoall

__all__ = ["hybridep_alltoall"]


def hybridep_alltoall(c: Case) -> AllToAllResult:
    """One HybridEP dispatch or combine."""
    return deepep_alltoall(c, sm_scale=c.costs.hybridep_sm_scale)
