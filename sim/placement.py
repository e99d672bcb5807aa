"""EP groups by placement: one representative group per distinct way a group sits on the hardware.

Ranks fill nodes and NVLink domains in order, so on a cluster whose NVLink domain does not divide into
the EP groups (72-GPU racks and EP64) some groups straddle two domains and cross the scale-out network
while others stay inside one. The step waits for the slowest: :func:`distinct_ep_groups` returns one
group per placement signature (how many of its ranks sit in each node and each domain, in order), so the
caller simulates each kind once and takes the slowest.

>>> from sim.catalog import load_cluster
>>> from sim.layout import Layout
>>> from sim.specs import ParallelPlan
>>> plan = ParallelPlan(pp=4, vpp=4, pp_schedule="interleaved-1f1b", ep=64, dp_shard=64, global_batch=4096)
>>> rack72 = load_cluster("gb200-nvl72", n_gpus=256)
>>> [g[0] for g in distinct_ep_groups(Layout(plan), rack72)]
[0, 64, 128, 192]
>>> import dataclasses
>>> rack64 = dataclasses.replace(rack72, nvlink_domain_gpus=64)
>>> [g[0] for g in distinct_ep_groups(Layout(plan), rack64)]
[0]
"""

from __future__ import annotations

from sim.layout import Layout
from sim.specs import ClusterSpec

__all__ = ["placement_signature", "distinct_ep_groups"]


def placement_signature(group: list[int], cluster: ClusterSpec) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(ranks per NVLink domain, ranks per node) of ``group``, in the order the group visits them."""

    def runs(unit: int) -> tuple[int, ...]:
        counts: dict[int, int] = {}
        for r in group:
            counts[r // unit] = counts.get(r // unit, 0) + 1
        return tuple(counts[k] for k in sorted(counts))

    return runs(cluster.nvlink_domain_gpus), runs(cluster.gpus_per_node)


def distinct_ep_groups(layout: Layout, cluster: ClusterSpec) -> list[list[int]]:
    """One EP group per placement signature, in rank order of their first member (rank 0's group first).
    Memoised by what the groups depend on: the mesh shape, EP and expert TP, the NVLink domain and node sizes."""
    p = layout.plan
    key = (layout.shape, p.ep, p.etp, cluster.nvlink_domain_gpus, cluster.gpus_per_node)
    groups = _DISTINCT.get(key)
    if groups is None:
        if len(_DISTINCT) >= 4096:
            _DISTINCT.clear()
        groups = _DISTINCT[key] = tuple(tuple(g) for g in _distinct_ep_groups(layout, cluster))
    return [list(g) for g in groups]


_DISTINCT: dict[tuple[object, ...], tuple[tuple[int, ...], ...]] = {}


def _distinct_ep_groups(layout: Layout, cluster: ClusterSpec) -> list[list[int]]:
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    out: list[list[int]] = []
    covered: set[int] = set()
    for r in range(layout.world_size):
        if r in covered:
            continue
        group = layout.ep_group(r)
        covered.update(group)
        sig = placement_signature(group, cluster)
        if sig not in seen:
            seen.add(sig)
            out.append(group)
    return out
