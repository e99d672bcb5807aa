"""Layer and pair simulations shared by the predictions of one search.

A plan search predicts dozens of plans of one model on one cluster under one stack and cost model, and
most of them differ only in their pipeline layout (PP, schedule, VPP, global batch). One layer's
simulation for one microbatch does not read the pipeline layout: with PP the outermost mesh dimension, the
representative rank's TP group is the same, and the EP groups it takes the slowest of are keyed here by
their ranks. So a :class:`SimMemo` passed to :func:`sim.predict.predict` for every plan of a search runs
each distinct layer (and overlapped pair) once.

What a layer simulation reads of a plan: every field except :data:`PIPELINE_FIELDS`, and with PP 1 (FSDP2
gathers each layer inside it over the data-parallel group) every field. What it reads of the rest of the
prediction (model, placed cluster, cost model, stack): fixed for a memo by :meth:`SimMemo.bind`.
``tests/sim/test_memo.py`` checks, on random searches, that predictions with a memo equal those without
it bit for bit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from sim.costs import CostModel
from sim.specs import ClusterSpec, ModelSpec, ParallelPlan
from sim.stacks import StackProfile

__all__ = ["PIPELINE_FIELDS", "SimMemo", "layer_sim_key", "plan_items"]

T = TypeVar("T")

#: Plan fields only the pipeline level reads (when ``pp > 1``): chunking, schedule, microbatch count. The
#: data-parallel widths move the EP groups' ranks, which the key holds instead.
PIPELINE_FIELDS = frozenset({"pp", "pp_schedule", "vpp", "pp_layout", "global_batch", "dp_shard", "dp_replicate"})


_PLAN_FIELDS = tuple(sorted(f.name for f in dataclasses.fields(ParallelPlan)))


def plan_items(plan: ParallelPlan, leave_out: frozenset[str] = frozenset()) -> tuple[tuple[str, Any], ...]:
    """``plan``'s (field, value) pairs sorted by field name, but those in ``leave_out`` (a hashable key)."""
    return tuple((name, getattr(plan, name)) for name in _PLAN_FIELDS if name not in leave_out)


def layer_sim_key(plan: ParallelPlan, ep_groups: list[list[int]]) -> tuple[Any, ...]:
    """What a layer or pair simulation of ``plan`` depends on beyond the memo's scope: the plan's fields
    (all of them with ``pp == 1``, else all but :data:`PIPELINE_FIELDS`) and the ranks of the distinct EP
    groups whose slowest all-to-all the layer waits for."""
    fields = plan_items(plan, PIPELINE_FIELDS if plan.pp > 1 else frozenset())
    return (plan.pp == 1, fields, tuple(tuple(g) for g in ep_groups))


class SimMemo:
    """Simulation results shared by predictions of one (model, cluster, cost model, stack).

    >>> memo = SimMemo()
    >>> memo.get(("k",), lambda: 1.5), memo.get(("k",), lambda: 2.0), memo.hits
    (1.5, 1.5, 1)
    """

    def __init__(self) -> None:
        self._scope: tuple[ModelSpec, ClusterSpec, CostModel, StackProfile] | None = None
        self._results: dict[Hashable, Any] = {}
        self.hits = 0
        self.misses = 0

    def bind(self, model: ModelSpec, cluster: ClusterSpec, costs: CostModel, stack: StackProfile) -> None:
        """Serve a prediction of (``model``, ``cluster``, ``costs``, ``stack``): when that is not the scope of
        the results held (all four equal), they are dropped and this becomes the scope. So a memo never
        answers for another scope, and a process can keep one for all its searches."""
        if self._scope is not None and self._scope == (model, cluster, costs, stack):
            return
        self._scope = (model, cluster, costs, stack)
        self._results.clear()

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        """The result stored under ``key``, made by ``make()`` on first request."""
        if key in self._results:
            self.hits += 1
            return self._results[key]  # type: ignore[no-any-return]
        self.misses += 1
        out = self._results[key] = make()
        return out
