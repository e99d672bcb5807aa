"""Plan search: the fastest parallel plan that fits in memory, every valid plan predicted or pruned.

A :class:`PlanSpace` lists the choices (TP, PP with schedule and VPP, EP, recompute, micro-batch) at a
fixed precision, EP backend, sequence length and global batch. :func:`search` enumerates the space,
drops plans that cannot run (:func:`sim.predict.validate_plan`) or do not fit in memory, orders the rest
by a proven lower bound (:mod:`studies.bounds`) and predicts in that order; once a plan's bound is at or
above the step time of the ``keep``-th best plan predicted so far, it cannot enter the top ``keep``, so
it (and every plan after it in bound order) is pruned. The result is exact: the same best plan and
runner-ups as predicting everything.

>>> from sim.catalog import load_model, load_cluster
>>> space = PlanSpace(tp=(1, 2), pp=(1, 2), schedules=("1f1b",), vpp=(1,), ep=(2, 4), ac=("full",),
...                   micro_batch=(1,), seq_len=512, global_batch=32)
>>> r = search(load_model("debug"), load_cluster("hgx-b200", n_gpus=8), space)
>>> r.best is not None and r.counts["evaluated"] + r.counts["pruned"] == r.counts["fits"]
True
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sim.accounting import memory_per_gpu
from sim.errors import ConfigError, MoesimError
from sim.layout import Layout
from sim.placement import distinct_ep_groups
from sim.predict import (
    PIPELINE_FIELDS,
    Prediction,
    SimMemo,
    layer_sim_key,
    plan_items,
    validate_plan,
)
from sim.specs import (
    AC_MODES,
    EP_BACKENDS,
    PP_SCHEDULES,
    PRECISIONS,
    ClusterSpec,
    ModelSpec,
    ParallelPlan,
)
from sim.stacks import CAPABILITIES
from studies._sim import memory_fits, predict_run, stack_profile
from studies.bounds import (
    LayerTimes,
    compute_only_times,
    layer_times,
    peak_bound_s,
    pipeline_compute_bound_s,
    rate_bound_tokens_per_s_per_gpu,
    schedule_bound_s,
)
from studies.workers import WorkerPool

__all__ = ["PlanSpace", "Candidate", "SearchResult", "search", "enumerate_plans", "check_space", "compute_times",
           "max_rate_per_gpu"]


@dataclass(frozen=True)
class PlanSpace:
    """The plans to search. ``ep`` empty: every power of two that divides the expert count."""

    tp: tuple[int, ...] = (1, 2, 4, 8)
    pp: tuple[int, ...] = (1, 2, 4, 8, 16)
    schedules: tuple[str, ...] = ("1f1b", "interleaved-1f1b", "dualpipev", "dualpipe")
    vpp: tuple[int, ...] = (2, 4)
    ep: tuple[int, ...] = ()
    ac: tuple[str, ...] = ("none", "selective", "full")
    micro_batch: tuple[int, ...] = (1, 2, 4)
    seq_len: int = 4096
    global_batch: int = 4096
    precision: str = "mxfp8"
    ep_backend: str = "deepep"
    #: GiB of HBM a plan must leave free (allocator fragmentation, other processes): it fits only if its
    #: peak memory is at most capacity - headroom
    headroom_gib: float = 0.0
    #: the caching allocator's overhead above the predicted tensors, as a fraction of them: a plan fits only
    #: if its peak x (1 + this) is at most capacity - ``headroom_gib`` (``moesim plan``: the measured
    #: :data:`studies.plan.ALLOCATOR_OVERHEAD`)
    headroom_fraction: float = 0.0

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "vpp", "ep", "micro_batch"):
            values = getattr(self, name)
            if any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in values):
                raise ConfigError(f"plan space: {name} must be positive integers, got {list(values)}")
            if name != "ep" and not values:
                raise ConfigError(f"plan space: {name} must list at least one value")
        for name, choices in (("schedules", PP_SCHEDULES), ("ac", AC_MODES)):
            bad = [v for v in getattr(self, name) if v not in choices]
            if bad or not getattr(self, name):
                raise ConfigError(f"plan space: {name} must be among {', '.join(choices)}; got {list(getattr(self, name))}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"plan space: precision must be one of {', '.join(PRECISIONS)}; got {self.precision!r}")
        if self.ep_backend not in EP_BACKENDS:
            raise ConfigError(f"plan space: ep_backend must be one of {', '.join(EP_BACKENDS)}; got {self.ep_backend!r}")
        for name in ("headroom_gib", "headroom_fraction"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < float("inf"):
                raise ConfigError(f"plan space: {name} must be a finite number >= 0, got {v!r}")
        for name in ("seq_len", "global_batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ConfigError(f"plan space: {name} must be a positive integer, got {v!r}")


@dataclass(frozen=True)
class Candidate:
    """A predicted plan of a search."""

    plan: ParallelPlan
    prediction: Prediction
    bound_s: float


@dataclass
class SearchResult:
    """The best plan (None when nothing fits), runner-ups, and what happened to every plan."""

    best: Candidate | None
    runner_ups: list[Candidate]
    counts: dict[str, int]
    elapsed_s: float
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def plans_per_s(self) -> float:
        return self.counts["enumerated"] / self.elapsed_s if self.elapsed_s else 0.0


def _ep_options(model: ModelSpec, space: PlanSpace) -> tuple[int, ...]:
    if space.ep:
        return space.ep
    out, e = [], 1
    while e <= model.n_routed_experts:
        if model.n_routed_experts % e == 0:
            out.append(e)
        e *= 2
    return tuple(out)


def enumerate_plans(model: ModelSpec, cluster: ClusterSpec, space: PlanSpace,
                    reasons: dict[str, int] | None = None, stack: str | None = None,
                    skip: Callable[[int, int, str, int], bool] | None = None,
                    skipped: list[int] | None = None) -> Iterator[ParallelPlan]:
    """Every plan of ``space`` that can run ``model`` on ``cluster`` (invalid ones counted in ``reasons``
    by the first words of their error); with ``stack``, only the pipeline schedules that stack can run
    (:attr:`sim.stacks.StackProfile.pp_schedules`: a search never proposes what the framework lacks).
    ``skip(tp, ep, ac, micro_batch)`` True leaves out every plan of that layer shape unbuilt (counted in
    ``skipped[0]``): a search's shapes that cannot reach its target."""
    n = cluster.n_gpus
    schedules = space.schedules
    if stack is not None:
        runs = stack_profile(stack).pp_schedules
        schedules = tuple(s for s in schedules if s in runs)
    for tp in space.tp:
        for pp in space.pp:
            if n % (tp * pp):
                _count(reasons, "tp * pp does not divide the GPU count")
                continue
            dp = n // (tp * pp)
            layouts = [("1f1b", 1)] if pp == 1 else [
                (s, v) for s in schedules for v in ((1,) if s != "interleaved-1f1b" else space.vpp)]
            for schedule, vpp in layouts:
                for ep in _ep_options(model, space):
                    if (dp * tp) % ep:  # EP borrows from dp_shard * tp (ParallelPlan.check_fits), before building
                        for _ in range(len(space.ac) * len(space.micro_batch)):
                            _count(reasons, f"plan: ep ({ep})")
                        continue
                    for ac in space.ac:
                        for mb in space.micro_batch:
                            if skip is not None and skip(tp, ep, ac, mb):
                                if skipped is not None:
                                    skipped[0] += 1
                                continue
                            try:
                                plan = ParallelPlan(tp=tp, pp=pp, pp_schedule=schedule, vpp=vpp, ep=ep,
                                                    dp_shard=dp, seq_len=space.seq_len,
                                                    global_batch=space.global_batch, micro_batch=mb, ac=ac,
                                                    precision=space.precision, ep_backend=space.ep_backend)
                                validate_plan(model, cluster, plan)
                            except MoesimError as err:
                                _count(reasons, " ".join(str(err).split()[:3]))
                                continue
                            yield plan


def check_space(space: PlanSpace, stack: str) -> None:
    """Raise :class:`ConfigError` (one line: the stack, the field, the value, what it runs) when ``stack``
    cannot run the space's precision or EP backend; schedules it cannot run are left out, not refused."""
    profile = stack_profile(stack)
    for capability, value in (("precisions", space.precision), ("ep_backends", space.ep_backend)):
        if value not in getattr(profile, capability):
            raise ConfigError(f"stack {profile.name} cannot run {CAPABILITIES[capability][0]} {value!r}; it runs "
                              f"{', '.join(profile.can_run(capability))}")


def max_rate_per_gpu(model: ModelSpec, cluster: ClusterSpec, space: PlanSpace, stack: str) -> float:
    """Tokens/s per GPU that no plan of ``space`` exceeds on ``cluster``'s GPU at any GPU count: the largest
    :func:`studies.bounds.rate_bound_tokens_per_s_per_gpu` over the space's layer shapes (TP, EP, recompute,
    micro-batch), from compute-only layer times (cached for the searches that follow)."""
    best = 0.0
    table = _compute_table(model, cluster, stack)
    for tp in space.tp:
        for ep in _ep_options(model, space):
            for ac in space.ac:
                for mb in space.micro_batch:
                    try:
                        plan = ParallelPlan(tp=tp, ep=ep, dp_shard=ep, seq_len=space.seq_len, micro_batch=mb,
                                            global_batch=mb * ep, ac=ac, precision=space.precision,
                                            ep_backend=space.ep_backend)
                    except MoesimError:
                        continue
                    times = compute_times(model, cluster, plan, stack, table)
                    best = max(best, rate_bound_tokens_per_s_per_gpu(model, plan, times))
    return best


def compute_times(model: ModelSpec, cluster: ClusterSpec, plan: ParallelPlan, stack: str,
                  table: dict[tuple[Any, ...], LayerTimes] | None = None) -> LayerTimes:
    """Compute-only layer times of ``plan`` (:func:`studies.bounds.compute_only_times`), cached by what they
    read: the model, the GPU, the stack and the plan's layer fields (shared by searches at every GPU count;
    ``table``: :func:`_compute_table`'s for this model, GPU and stack, looked up once by the caller)."""
    if table is None:
        table = _compute_table(model, cluster, stack)
    key = _compute_key(plan)
    times = table.get(key)
    if times is None:
        times = table[key] = compute_only_times(model, cluster, plan, stack)
    return times


def _compute_table(model: ModelSpec, cluster: ClusterSpec, stack: str) -> dict[tuple[Any, ...], LayerTimes]:
    scope = (model, cluster.gpu, stack)
    table = _COMPUTE_TIMES.get(scope)
    if table is None:
        if len(_COMPUTE_TIMES) >= 64:
            _COMPUTE_TIMES.clear()
        table = _COMPUTE_TIMES[scope] = {}
    return table


def _shape(plan: ParallelPlan) -> tuple[Any, ...]:
    return (plan.tp, plan.pp, plan.pp_schedule, plan.vpp, plan.ep, plan.ac, plan.micro_batch)


def _count(reasons: dict[str, int] | None, key: str) -> None:
    if reasons is not None:
        reasons[key] = reasons.get(key, 0) + 1


def _compute_key(plan: ParallelPlan) -> tuple[Any, ...]:
    """The plan fields one layer's compute reads: all but the pipeline layout and data-parallel widths
    (:data:`sim.predict.memo.PIPELINE_FIELDS`; compute alone holds no FSDP traffic)."""
    return plan_items(plan, PIPELINE_FIELDS)


#: This process's layer and pair simulations, shared by the plans it predicts for one search (a memo holds
#: one scope's results: a search of another model, cluster or stack replaces them, :meth:`SimMemo.bind`).
_MEMO = SimMemo()
#: Compute-only layer times by (model, GPU, stack), then :func:`_compute_key`.
_COMPUTE_TIMES: dict[tuple[Any, ...], dict[tuple[Any, ...], LayerTimes]] = {}


def _predict_one(args: tuple[ModelSpec, ClusterSpec, ParallelPlan, str]) -> Prediction:
    model, cluster, plan, stack = args
    pred = predict_run(model, cluster, plan, stack, memo=_MEMO)
    pred.trace_data = None  # not needed by searches; keeps results small across processes
    return pred


def search(model: ModelSpec, cluster: ClusterSpec, space: PlanSpace, stack: str = "torchtitan", *,
           keep: int = 4, workers: int = 1, prune: bool = True, max_step_s: float | None = None,
           progress: Callable[[int, int], None] | None = None, first_fit: bool = False,
           guess: ParallelPlan | None = None) -> SearchResult:
    """The fastest plan of ``space`` that fits (and the next ``keep - 1``), see the module docstring.

    ``workers`` > 1 predicts in that many processes; ``prune=False`` predicts every fitting plan (for
    checking that pruning is exact). ``max_step_s``: only plans at least that fast matter (a target): plans
    whose bound is above it are pruned too, and ``best`` is None when no fitting plan reaches it.
    ``first_fit`` (with ``max_step_s``): a feasibility probe that stops at the first fitting plan that reaches
    the target (``best`` is that plan, not necessarily the fastest), trying first the plan of ``guess``'s shape
    (its TP, PP, schedule, VPP, EP, recompute and micro-batch: e.g. what met the target at another GPU count),
    else the plan of lowest cheap bound."""
    t0 = time.perf_counter()
    check_space(space, stack)
    reasons: dict[str, int] = {}
    table = _compute_table(model, cluster, stack)
    target = float("inf") if max_step_s is None else max_step_s
    shape_rates: dict[tuple[int, int, str, int], float] = {}

    def shape_misses(tp: int, ep: int, ac: str, mb: int) -> bool:
        """Whether every plan of this layer shape misses the target (:func:`rate_bound_tokens_per_s_per_gpu`)."""
        key = (tp, ep, ac, mb)
        if key not in shape_rates:
            try:
                shape = ParallelPlan(tp=tp, ep=ep, dp_shard=ep, seq_len=space.seq_len, micro_batch=mb,
                                     global_batch=mb * ep, ac=ac, precision=space.precision,
                                     ep_backend=space.ep_backend)
            except MoesimError:
                shape_rates[key] = float("inf")  # the plans themselves will say why
            else:
                shape_rates[key] = rate_bound_tokens_per_s_per_gpu(
                    model, shape, compute_times(model, cluster, shape, stack, table))
        tokens = space.global_batch * space.seq_len
        return tokens / (cluster.n_gpus * shape_rates[key]) >= target * (1 + 1e-12)

    unbuilt = [0]
    plans = list(enumerate_plans(model, cluster, space, reasons, stack,
                                 skip=shape_misses if prune and max_step_s is not None else None, skipped=unbuilt))
    enumerated = len(plans) + sum(reasons.values()) + unbuilt[0]
    headroom = space.headroom_gib * 2**30
    scale = 1.0 + space.headroom_fraction

    def fits(p: ParallelPlan) -> bool:
        if scale == 1.0:
            return memory_fits(model, cluster, p, stack, headroom)
        mem = memory_per_gpu(model, p, cluster.gpu, stack_profile(stack))
        return bool(mem.fits) and mem.total_bytes * scale <= mem.capacity_bytes - headroom

    tight: dict[tuple[Any, ...], LayerTimes] = {}
    placed = stack_profile(stack).place(cluster)

    def cheap_times(p: ParallelPlan) -> LayerTimes:
        # compute alone reads only the GPU of the cluster: shared by searches of other cluster sizes
        return compute_times(model, cluster, p, stack, table)

    def tight_times(p: ParallelPlan) -> LayerTimes:
        # what the layer simulation reads (sim.predict.memo), the same key the predictions' memo uses
        key = layer_sim_key(p, distinct_ep_groups(Layout(p), placed))
        if key not in tight:
            tight[key] = layer_times(model, cluster, p, stack, memo=_MEMO)
        return tight[key]

    # Best first on a lazily tightened bound: every plan starts at its cheap bound (peak rates, compute-only
    # layer times); the one with the lowest bound is tightened (level 1: simulated layer times, shared by
    # every plan of the same layer key; level 2: its own schedule on them, pairs at their compute) and
    # re-queued, and predicted once its fully tightened bound is still the lowest. A plan whose bound (at any
    # level) reaches the cutoff cannot enter the top ``keep``: it and every plan behind it are pruned.
    def cheap_bound(p: ParallelPlan) -> float:
        return max(peak_bound_s(model, cluster, p), pipeline_compute_bound_s(model, cluster, p, stack, cheap_times(p)))

    def quick_bound(p: ParallelPlan) -> float:
        """The step time the plan's layer shape allows at best (:func:`rate_bound_tokens_per_s_per_gpu`), which
        the pipeline bound never undercuts: a target it misses needs no pipeline bound."""
        rate = rate_bound_tokens_per_s_per_gpu(model, p, cheap_times(p))
        quick = max(peak_bound_s(model, cluster, p), p.tokens_per_step / (cluster.n_gpus * rate))
        return quick if quick >= target * (1 + 1e-12) else cheap_bound(p)

    # With a target, a plan whose cheap bound already misses it is pruned before its memory is checked.
    over_target: list[ParallelPlan] = []
    if prune and max_step_s is not None:
        bounded = [(quick_bound(p), p) for p in plans]
        over_target = [p for b, p in bounded if b >= target * (1 + 1e-12)]
        ranked = [(b, p) for b, p in bounded if b < target * (1 + 1e-12) and fits(p)]
    else:
        ranked = [(cheap_bound(p), p) for p in plans if fits(p)]
    heap: list[tuple[float, int, int, ParallelPlan]] = [(b, 0, i, p) for i, (b, p) in enumerate(ranked)]
    fitting = [p for _b, p in ranked]
    heapq.heapify(heap)
    done: list[Candidate] = []
    no_fit_after = 0

    def cutoff() -> float:
        if not prune:
            return float("inf")
        steps = sorted(c.prediction.step_time_s for c in done)
        return min(target * (1 + 1e-12), steps[keep - 1] if len(steps) >= keep else float("inf"))

    violations = 0

    def accept(pred: Prediction, plan: ParallelPlan, bound: float) -> None:
        nonlocal no_fit_after, violations
        if bound > pred.step_time_s * (1 + 1e-9):
            violations += 1  # the bound is not a bound for this build of sim: pruning is off (below)
        if not pred.fits_in_memory or pred.peak_memory_bytes * scale > pred.memory_capacity_bytes - headroom:
            no_fit_after += 1
            return
        done.append(Candidate(plan, pred, bound))

    guessed = False
    wanted = _shape(guess) if guess is not None else None

    def next_plan() -> tuple[float, ParallelPlan] | None:
        """The next plan to predict, or None when the rest are pruned (or none is left)."""
        nonlocal guessed
        if first_fit and any(c.prediction.step_time_s <= target for c in done):
            return None
        if wanted is not None and not guessed and heap and heap[0][0] < cutoff():
            guessed = True  # a probe first predicts the guess's shape, untightened, when its cheap bound allows
            pick = next((j for j, item in enumerate(heap) if item[0] < cutoff() and _shape(item[3]) == wanted), None)
            if pick is not None:
                bound, _level, _i, plan = heap[pick]
                heap[pick] = heap[-1]
                heap.pop()
                heapq.heapify(heap)
                return bound, plan
        if first_fit and prune:
            # Depth first: any plan that reaches the target will do, so each plan in cheap-bound order is
            # tightened at once and predicted if its bound still allows (pruning stays exact: only plans whose
            # bound reaches the cutoff are dropped).
            while heap and heap[0][0] < cutoff():
                bound, _level, _i, plan = heapq.heappop(heap)
                bound = max(bound, pipeline_compute_bound_s(model, cluster, plan, stack, tight_times(plan)))
                if bound < cutoff():
                    bound = max(bound, schedule_bound_s(model, cluster, plan, stack, memo=_MEMO))
                    if bound < cutoff():
                        return bound, plan
            return None
        while heap:
            bound, tightened, i, plan = heap[0]
            if bound >= cutoff():
                return None
            heapq.heappop(heap)
            if tightened == 2 or not prune:
                return bound, plan
            if tightened == 0:
                tb = max(bound, pipeline_compute_bound_s(model, cluster, plan, stack, tight_times(plan)))
            else:
                tb = max(bound, schedule_bound_s(model, cluster, plan, stack, memo=_MEMO))
            heapq.heappush(heap, (tb, tightened + 1, i, plan))
        return None

    evaluated = 0
    if workers <= 1:
        while (item := next_plan()) is not None:
            bound, plan = item
            accept(_predict_one((model, cluster, plan, stack)), plan, bound)
            evaluated += 1
            if progress:
                progress(evaluated, len(fitting))
    else:
        with WorkerPool(_predict_one, workers) as pool:  # ended on any exception: Ctrl-C leaves no worker
            stop = False
            while True:
                while not stop and pool.idle:
                    item = next_plan()
                    if item is None:
                        stop = True
                        break
                    pool.submit(item, (model, cluster, item[1], stack))
                if not pool.busy:
                    break
                for (bound, plan), pred in pool.collect():
                    accept(pred, plan, bound)
                    evaluated += 1
                    if progress:
                        progress(evaluated, len(fitting))
                stop = False  # a better cutoff may prune the rest, or a slot may take the next plan
    if violations and prune:
        # A lower bound above a prediction means sim changed under the bounds: answer exactly, unpruned.
        full = search(model, cluster, space, stack, keep=keep, workers=workers, prune=False, max_step_s=max_step_s,
                      progress=progress)
        full.counts["bound_violations"] = violations
        return full
    done.sort(key=lambda c: (c.prediction.step_time_s, sorted(dataclasses.asdict(c.plan).items())))
    if max_step_s is not None:
        done = [c for c in done if c.prediction.step_time_s <= max_step_s]
    counts = {"enumerated": enumerated, "invalid": sum(reasons.values()), "valid": len(plans),
              "over_target": len(over_target) + unbuilt[0],
              "no_fit": len(plans) - len(over_target) - len(fitting),
              "fits": len(fitting), "evaluated": evaluated,
              "pruned": len(fitting) - evaluated, "no_fit_predicted": no_fit_after, "bound_violations": violations,
              "layer_keys_simulated": len(tight)}
    return SearchResult(done[0] if done else None, done[1:keep], counts, time.perf_counter() - t0, reasons)
