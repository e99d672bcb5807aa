"""Collective communication costs over the topology: MoE all-to-all backends and ring collectives.

One interface, one backend per module: :mod:`sim.comm.alltoall` (:func:`moe_alltoall`) hands each request
to :mod:`sim.comm.nccl`, :mod:`sim.comm.deepep` (DeepEP and UCCL-EP), :mod:`sim.comm.deepep_ll` or
:mod:`sim.comm.hybridep`; :mod:`sim.comm.transport` says what the fabric's transport (InfiniBand, EFA) adds;
:mod:`sim.comm.costs` holds every constant (:class:`CommCosts`), :mod:`sim.comm.fabric` the topology
and flows, :mod:`sim.comm.collectives` rings and p2p.

Every cost parameter lives in :class:`CommCosts` with its source (``published.md`` section numbers of
``shared/data/published.md``; ASSUMED where no public figure exists, for the calibration to fit).

- :func:`alltoall_times`: a generic all-to-all of an (n x n) byte matrix as concurrent flows over the
  topology (max-min fair, event driven; :func:`sim.topology.transfer_times_ids`).
- :func:`moe_alltoall`: one MoE dispatch or combine for the ``nccl``, ``deepep``, ``deepep-ll``,
  ``hybridep`` and ``uccl-ep`` backends (published.md sections 1, 5, 6), over InfiniBand or EFA
  (:mod:`sim.comm.transport`).
- :func:`allgather_time`, :func:`reduce_scatter_time`, :func:`allreduce_time`: rings over the group's
  bottleneck link; :func:`p2p_time`: one transfer.

Topologies are built only over the ranks involved (:func:`sim.topology.build_topology` with ``gpus``),
after shifting the rank set to the first leaf group (the fabric is translation invariant), and results
are memoised, so a repeated call costs a dictionary look-up.

Shape letters: T tokens per rank, D model dim, E routed experts, K top-k, P ranks in the EP group.

>>> from sim.catalog import load_cluster, load_model
>>> cluster, model = load_cluster("hgx-b200", n_gpus=256), load_model("deepseek-v3-671b")
>>> r = moe_alltoall(cluster, range(32), 8192, model, "nccl", "dispatch", CommCosts.default(),
...                  bytes_per_elem=2.0)
>>> round(float(r.time_s.max()) * 1e3, 1), int(r.sent_bytes[0] // 2**20)
(14.6, 868)
"""

from __future__ import annotations

from sim.comm.alltoall import BACKENDS, clear_caches, moe_alltoall
from sim.comm.collectives import (
    allgather_time,
    allreduce_time,
    p2p_cost,
    p2p_time,
    reduce_scatter_time,
    ring_cost,
    ring_nic_ranks,
)
from sim.comm.costs import (
    BOUND_BY,
    DEEPEP_API_BACKENDS,
    FP8_WITH_SCALES_BYTES_PER_ELEM,
    LINKS,
    MOE_BACKENDS,
    PHASES,
    AllToAllResult,
    CommCost,
    CommCosts,
)
from sim.comm.deepep import deepep_nvlink_bw, in_training_cost, in_training_s
from sim.comm.fabric import alltoall_times

__all__ = [
    "BACKENDS",
    "BOUND_BY",
    "DEEPEP_API_BACKENDS",
    "FP8_WITH_SCALES_BYTES_PER_ELEM",
    "LINKS",
    "MOE_BACKENDS",
    "PHASES",
    "AllToAllResult",
    "CommCost",
    "CommCosts",
    "allgather_time",
    "allreduce_time",
    "alltoall_times",
    "clear_caches",
    "deepep_nvlink_bw",
    "in_training_cost",
    "in_training_s",
    "moe_alltoall",
    "p2p_cost",
    "p2p_time",
    "reduce_scatter_time",
    "ring_nic_ranks",
    "ring_cost",
]
